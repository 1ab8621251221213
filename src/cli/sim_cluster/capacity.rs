//! `sim cluster --search-capacity`: DistServe's goodput per GPU of each layout
//! ([`crate::sim::cluster::capacity`]), the answer first, one row per layout in 100 columns
//! (every column with `--wide`), a key, and what the table leaves out.

use super::Args;
use crate::cli::latency_unit::latency_unit;
use crate::cli::sim_engine_args::{describe_limits, settings, workload, workload_line, BoxError};
use crate::cli::CmdResult;
use crate::progress::Bar;
use crate::report::Table;
use crate::sim::cluster::capacity::{self, CapacityReport, Layout, LayoutCapacity};
use crate::sim::cluster::ClusterSpec;
use crate::sim::engine::ResolvedSlo;
use crate::sim::engine::TimeUnit;
use crate::sim::goodput::SearchLimits;
use crate::sim::run_spec::{ReportHeader, ResolvedRun};
use crate::sweep::config::fitting_preset;
use serde::Serialize;

#[derive(Serialize)]
struct JsonReport<'a> {
    #[serde(flatten)]
    header: ReportHeader<'a>,
    slo_source: &'a ResolvedSlo,
    #[serde(flatten)]
    capacity: &'a CapacityReport,
}

/// The flags a search cannot take, each with why.
fn refuse(args: &Args) -> Result<(), String> {
    let why = [
        (
            args.workload.rate_scale != 1.0,
            "--rate-scale: --search-capacity searches the rate scale itself",
        ),
        (
            args.step_log.is_some() || args.request_log.is_some(),
            "--step-log and --request-log log one run, and a search makes many",
        ),
        (
            args.out.is_some(),
            "--out plots one run per layout; with --search-capacity use --json",
        ),
        (
            args.clients.max_concurrency.is_some(),
            crate::sim::engine::clients::NO_RATE_SEARCH,
        ),
    ];
    match why.iter().find(|(set, _)| *set) {
        Some((_, msg)) => Err((*msg).into()),
        None => Ok(()),
    }
}

/// The SLOs given, else the preset that fits the workload, as the sweep chooses it.
fn slos(args: &Args, resolved: &mut ResolvedRun, default_trace: &str) -> Result<(), BoxError> {
    if resolved.slo.is_some() {
        return Ok(());
    }
    let w = &args.workload;
    let format = if w.scenario.is_some() || w.poisson.is_some() || w.multiturn.is_some() {
        None
    } else {
        let path = w.trace.clone().unwrap_or_else(|| default_trace.into());
        Some(crate::workload::trace::detect(&path)?)
    };
    let (preset, why) = fitting_preset(format);
    let slo = args.engine.slo.flags().resolve(
        (preset, &why),
        resolved.settings.model.params_billion,
        true,
    )?;
    resolved.settings.slo = slo.targets.slo();
    resolved.slo = Some(slo);
    Ok(())
}

/// The layouts × routers to search: `--layouts`, else `--replicas`' counts or the split of
/// `--prefill-replicas` and `--decode-replicas`.
fn specs(args: &Args, seed: u64) -> Result<Vec<ClusterSpec>, BoxError> {
    let router_cfg = args.routers.config(seed)?;
    let layouts: Vec<Layout> = if !args.layouts.is_empty() {
        args.layouts.clone()
    } else if let Some(d) = args.pd.disagg()? {
        vec![Layout::Split {
            prefill: d.prefill_replicas,
            decode: d.decode_replicas,
        }]
    } else {
        args.replicas
            .iter()
            .map(|&n| Layout::Colocated(n))
            .collect()
    };
    if !layouts.iter().any(|l| matches!(l, Layout::Split { .. })) {
        // A flag of the split without one is refused as it is without --search-capacity.
        args.pd.disagg()?;
    }
    let dedup = |mut v: Vec<_>| {
        v.dedup();
        v
    };
    let colocated_routers = dedup(args.router.clone());
    let split_routers = match args.pd.prefill_routers() {
        [] => colocated_routers.clone(),
        given => dedup(given.to_vec()),
    };
    let mut out = Vec::new();
    for layout in layouts {
        match layout {
            Layout::Colocated(n) => {
                for &router in &colocated_routers {
                    out.push(ClusterSpec::colocated(n, router, router_cfg)?);
                }
            }
            Layout::Split { prefill, decode } => {
                let d = args.pd.split(prefill, decode)?;
                out.extend(
                    (split_routers.iter()).map(|&r| ClusterSpec::disaggregated(d, r, router_cfg)),
                );
            }
        }
    }
    Ok(out)
}

pub fn run(args: Args, default_trace: &str) -> CmdResult {
    refuse(&args)?;
    let (requests, name, fields) = workload(&args.workload, default_trace)?;
    let mut resolved = settings(&args.engine, fields.as_ref(), args.workload.seed)?;
    slos(&args, &mut resolved, default_trace)?;
    let specs = specs(&args, args.workload.seed)?;
    let slo = resolved.slo.clone().expect("set above");
    let limits = SearchLimits::default();
    let bar = Bar::new(
        "sim cluster: capacity search, cluster runs (at most)",
        (specs.len() * limits.max_probes) as u64,
    );
    let s = &resolved.settings;
    let report = capacity::search(
        s,
        resolved.block_size,
        &specs,
        &requests,
        &slo.targets,
        &limits,
        &|| bar.inc(1),
    )?;
    drop(bar);
    if args.json {
        let json = JsonReport {
            header: resolved
                .header(&name)
                .without_sources()
                .at_block_size(resolved.block_size),
            slo_source: &slo,
            capacity: &report,
        };
        outln!("{}", serde_json::to_string_pretty(&json)?)?;
        return Ok(());
    }
    print(&resolved, &slo, &name, &requests, &report, args.wide)
}

/// A row's name: `colocated 4`, `P:D 2:2`, with its router when the rows have several
/// (`P:D 2:2 × kv-aware`).
fn label(l: &LayoutCapacity, routers: bool) -> String {
    let kind = match l.layout {
        Layout::Colocated(_) => "colocated",
        Layout::Split { .. } => "P:D",
    };
    if routers {
        format!("{kind} {} × {}", l.layout, l.router)
    } else {
        format!("{kind} {}", l.layout)
    }
}

/// Line 1: which layout serves the most per GPU, and by how much over the best of the other
/// kind (colocated against split).
fn answer(r: &CapacityReport, routers: bool) -> String {
    let Some(best) = r.best() else {
        return format!(
            "no layout meets the SLOs at any rate searched (down to 1/{:.0} of the trace's rate)",
            1.0 / r.search.min_scale
        );
    };
    let mut line = format!(
        "{} serves the most per GPU: {} requests/s per GPU",
        label(best, routers),
        rate(best.requests_per_s_per_gpu, best)
    );
    let searched = |split: bool| {
        r.layouts
            .iter()
            .any(|l| matches!(l.layout, Layout::Split { .. }) == split)
    };
    let (other, what, has_other) = match best.layout {
        Layout::Colocated(_) => (r.best_split(), "split", searched(true)),
        Layout::Split { .. } => (r.best_colocated(), "colocated", searched(false)),
    };
    match other {
        Some(o) => {
            let ratio = best.requests_per_s_per_gpu / o.requests_per_s_per_gpu;
            // A figure still within the SLOs at the highest scale searched is a lower bound.
            let times = match (lower_bound(best), lower_bound(o)) {
                (false, false) => format!("{ratio:.2}×"),
                (true, false) => format!("at least {ratio:.2}×"),
                (false, true) => format!("at most {ratio:.2}×"),
                (true, true) => "an unknown multiple of".into(),
            };
            line += &format!(
                ", {times} the best {what} layout, {} ({})",
                label(o, routers),
                rate(o.requests_per_s_per_gpu, o)
            );
            if lower_bound(best) || lower_bound(o) {
                line += " (≥: still within the SLOs at the highest rate searched)";
            } else if ratio <= 1.0 + r.search.resolution {
                line += &format!(
                    " — a tie within the search's {:.0}% resolution",
                    100.0 * r.search.resolution
                );
            }
        }
        None if has_other => {
            line += &format!("; no {what} layout meets the SLOs at any rate searched")
        }
        None => line += &format!(" (no {what} layout among those searched)"),
    }
    line
}

/// Whether `l`'s search still held at its highest scale: its figure is a lower bound.
fn lower_bound(l: &LayoutCapacity) -> bool {
    l.failed_scale.is_infinite() && l.rate_scale > 0.0
}

/// A rate: `≥` when a lower bound; three decimals below 100, one above.
fn rate(x: f64, l: &LayoutCapacity) -> String {
    let at_least = if lower_bound(l) { "≥" } else { "" };
    let digits = if x < 100.0 { 3 } else { 1 };
    format!("{at_least}{x:.digits$}")
}

/// A column: its header, its line in the key, whether the default table shows it, its cell.
struct Column<'a> {
    head: String,
    key: String,
    default: bool,
    cell: Box<dyn Fn(&LayoutCapacity) -> String + 'a>,
}

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |h| format!("{:.1}", 100.0 * h))
}

fn col<'a>(
    head: &str,
    key: &str,
    default: bool,
    cell: Box<dyn Fn(&LayoutCapacity) -> String + 'a>,
) -> Column<'a> {
    Column {
        head: head.into(),
        key: key.into(),
        default,
        cell,
    }
}

fn columns<'a>(
    slo: &'a ResolvedSlo,
    routers: bool,
    tier: bool,
    split: bool,
    lat: &'a str,
    scale: f64,
) -> Vec<Column<'a>> {
    let mut c = layout_columns(routers);
    c.extend(latency_columns(slo, lat, scale));
    c.extend(cache_columns(tier));
    if split {
        c.extend(pd_columns());
    }
    c
}

/// The layout and the answer: its rate within the SLOs, and how the search found it.
fn layout_columns<'a>(routers: bool) -> Vec<Column<'a>> {
    // The rate cells: "≥" when the search still held at its highest scale.
    let mut c = vec![col(
        "layout",
        "N colocated replicas, or P:D prefill and decode instances",
        true,
        Box::new(|l| l.layout.to_string()),
    )];
    if routers {
        c.push(col(
            "router",
            "which replica (prefill instance) a request goes to",
            true,
            Box::new(|l| l.router.to_string()),
        ));
    }
    c.extend([
        col(
            "GPUs",
            "replicas × tensor parallelism (each side's for P:D)",
            false,
            Box::new(|l| l.gpus.to_string()),
        ),
        col(
            "req/s/GPU",
            "the answer: the highest arrival rate within the SLOs, per GPU (≥: held at the highest rate searched)",
            true,
            Box::new(|l| rate(l.requests_per_s_per_gpu, l)),
        ),
        col(
            "req/s",
            "that rate for the whole layout",
            true,
            Box::new(|l| rate(l.requests_per_s, l)),
        ),
        col(
            "scale",
            "the trace's rate scale at that rate",
            false,
            Box::new(|l| format!("{:.3}", l.rate_scale)),
        ),
        col(
            "fails at",
            "the lowest scale above it seen to fail (- none)",
            false,
            Box::new(|l| {
                if l.failed_scale.is_finite() {
                    format!("{:.3}", l.failed_scale)
                } else {
                    "-".into()
                }
            }),
        ),
        col(
            "runs",
            "cluster runs the search made",
            false,
            Box::new(|l| l.probes.to_string()),
        ),
    ]);
    c
}

/// Latencies and SLO attainment at the rate found.
fn latency_columns<'a>(slo: &'a ResolvedSlo, lat: &'a str, scale: f64) -> Vec<Column<'a>> {
    let tbt = slo.targets.tbt_s.is_some();
    let mut c = Vec::new();
    let ms = move |d: Option<crate::sim::engine::Distribution>, p99_only: bool| {
        d.map_or("-".into(), |d| {
            if p99_only {
                format!("{:.1}", d.p99 * scale)
            } else {
                format!("{:.0}/{:.0}", d.p50 * scale, d.p99 * scale)
            }
        })
    };
    c.extend([
        col(
            &format!("TTFT p50/p99 {lat}"),
            "arrival to first token at that rate, median and 99th percentile",
            true,
            Box::new(move |l| l.at.as_ref().map_or("-".into(), |o| ms(o.total.latency.ttft, false))),
        ),
        col(
            &format!("{} p99 {lat}", if tbt { "TBT" } else { "TPOT" }),
            if tbt {
                "99th percentile of Mooncake's TBT (a request's mean of its longest 10% of token intervals)"
            } else {
                "99th percentile of time per output token after the first"
            },
            true,
            Box::new(move |l| {
                l.at.as_ref().map_or("-".into(), |o| {
                    ms(if tbt { o.total.latency.tbt } else { o.total.latency.tpot }, true)
                })
            }),
        ),
        col(
            "within %",
            "share of all requests within the SLOs at that rate, by their rule",
            false,
            Box::new(move |l| {
                l.at.as_ref()
                    .map_or("-".into(), |o| pct(Some(slo.targets.met(&o.total))))
            }),
        ),
    ]);
    c
}

/// Prefix hits (GPU, and host with a tier) and preemptions at the rate found.
fn cache_columns<'a>(tier: bool) -> Vec<Column<'a>> {
    let mut c = Vec::new();
    // Hits per tier in one cell with a host tier, to keep the table in 100 columns.
    let gpu_hit = |l: &LayoutCapacity| {
        l.at.as_ref().map_or("-".into(), |o| {
            pct(o.total.prefix_cache.prefix_cache_hit_ratio)
        })
    };
    if tier {
        c.push(col(
            "hit % GPU/host",
            "prompt tokens found in the GPU prefix caches at admission / loaded from the host KV tier",
            true,
            Box::new(move |l| {
                l.at.as_ref().map_or("-".into(), |o| {
                    format!("{}/{}", gpu_hit(l), pct(Some(o.total.offload.offload_prompt_hit_ratio)))
                })
            }),
        ));
    } else {
        c.push(col(
            "GPU hit %",
            "prompt tokens found in the GPU prefix caches at admission",
            true,
            Box::new(gpu_hit),
        ));
    }
    c.push(col(
        "preempt",
        "preemptions at that rate",
        false,
        Box::new(|l| {
            l.at.as_ref()
                .map_or("-".into(), |o| o.total.preemption.preemptions.to_string())
        }),
    ));
    c
}

/// What only P/D has: KV moved between instances, the Conductor's early rejections.
fn pd_columns<'a>() -> Vec<Column<'a>> {
    let mut c = Vec::new();
    c.push(col(
        "KV GB",
        "KV bytes moved from prefill to decode instances at that rate, GB",
        true,
        Box::new(|l| {
            l.at.as_ref()
                .and_then(|o| o.disagg.as_ref())
                .map_or("-".into(), |d| {
                    format!("{:.1}", d.stats.kv_bytes_moved as f64 / 1e9)
                })
        }),
    ));
    c.push(col(
        "rejected",
        "requests the Conductor rejected early at that rate",
        false,
        Box::new(|l| {
            l.at.as_ref()
                .and_then(|o| o.disagg.as_ref())
                .map_or("-".into(), |d| d.stats.rejected().to_string())
        }),
    ));
    c
}

fn print(
    resolved: &ResolvedRun,
    slo: &ResolvedSlo,
    name: &str,
    requests: &[crate::workload::serving::ServingRequest],
    r: &CapacityReport,
    wide: bool,
) -> CmdResult {
    let routers = {
        let mut v: Vec<_> = r.layouts.iter().map(|l| l.router).collect();
        v.sort_by_key(|k| *k as u8);
        v.dedup();
        v
    };
    let several = routers.len() > 1;
    outln!("{}", answer(r, several))?;
    let s = &resolved.settings;
    let e = &s.engine;
    outln!(
        "capacity per GPU (DistServe's goodput): the highest arrival rate within the SLOs per GPU, by the sweep's search of the rate scale (×{} steps from ×{}, then bisection to {:.0}%, at most {} runs a layout)",
        r.search.step,
        r.search.start,
        100.0 * r.search.resolution,
        r.search.max_probes
    )?;
    outln!("{}", slo.describe())?;
    outln!(
        "rate scale 1: {:.3} requests/s, {}",
        r.base_rps,
        if r.spaced {
            "the requests had no arrival times, so they were spaced 1 s apart"
        } else {
            "the requests' own (their count over their arrival span)"
        }
    )?;
    outln!(
        "engine: vLLM 0.33 V1 (preset {}: max_num_seqs {}, max_num_batched_tokens {}, prefix caching {}, block size {}); {} on {} × {} per replica{}{}",
        resolved.preset_name,
        e.max_num_seqs,
        e.max_num_batched_tokens,
        if e.enable_prefix_caching { "on" } else { "off" },
        resolved.block_size,
        s.model.name,
        s.tp,
        s.gpu.name,
        if several {
            String::new()
        } else {
            format!("; router {}", routers[0])
        },
        if s.profile.measured {
            ""
        } else {
            "; attention efficiency assumed"
        }
    )?;
    outln!("{}", s.step_times.line)?;
    for line in describe_limits(resolved) {
        outln!("{line}")?;
    }
    outln!("{}", workload_line(name, requests))?;
    let (scale, lat) = latency_unit(
        r.layouts
            .iter()
            .find_map(|l| l.at.as_ref())
            .map_or(TimeUnit::Seconds, |o| o.total.time_unit),
    );
    let split = r
        .layouts
        .iter()
        .any(|l| matches!(l.layout, Layout::Split { .. }));
    let cols: Vec<Column> = columns(slo, several, e.cpu_offload.is_some(), split, lat, scale)
        .into_iter()
        .filter(|c| wide || c.default)
        .collect();
    let mut t = Table::new(cols.iter().map(|c| c.head.clone()));
    for l in &r.layouts {
        t.row(cols.iter().map(|c| (c.cell)(l)));
    }
    out!("{t}")?;
    for c in &cols {
        outln!("  {}: {}", c.head, c.key)?;
    }
    if !wide {
        outln!("  (--wide: every column)")?;
    }
    notes(r, several)
}

/// What the table leaves out: searches that did not close, different GPU counts.
fn notes(r: &CapacityReport, several: bool) -> CmdResult {
    for l in &r.layouts {
        let name = label(l, several);
        if l.rate_scale == 0.0 {
            outln!(
                "{name}: misses the SLOs at every rate searched, down to ×{} ({} runs)",
                r.search.min_scale,
                l.probes
            )?;
        } else if l.failed_scale.is_infinite() {
            outln!(
                "{name}: still within the SLOs at ×{:.3}, the highest scale searched ({} runs): its figure is a lower bound",
                l.rate_scale,
                l.probes
            )?;
        } else if !l.resolved {
            outln!(
                "{name}: the search ran out of runs ({}) with its bracket open: held at ×{:.3}, failed at ×{:.3}",
                l.probes,
                l.rate_scale,
                l.failed_scale
            )?;
        }
    }
    if r.mixed_gpus() {
        let mut counts: Vec<usize> = r.layouts.iter().map(|l| l.gpus).collect();
        counts.sort_unstable();
        counts.dedup();
        let counts: Vec<String> = counts.iter().map(ToString::to_string).collect();
        outln!(
            "the layouts take different numbers of GPUs ({}): compare them by req/s/GPU (--wide: each one's)",
            counts.join(", ")
        )?;
    } else if let Some(l) = r.layouts.first() {
        outln!("every layout takes {} GPUs", l.gpus)?;
    }
    Ok(())
}
