//! `sim cluster`'s text report: one row per run in 100 columns (every column with `--wide`), a
//! key under it, each replica's row for a single run, and a line per run with what the table
//! leaves out (the router's decisions, the KV link, the host tier).

use crate::cli::latency_unit::latency_unit;
use crate::cli::sim_engine_args::{describe_limits, model_lines, workload_line, BoxError};
use crate::report::Table;
use crate::sim::cluster::ClusterOutcome;
use crate::sim::engine::TimeUnit;
use crate::sim::engine::{Distribution, EngineReport};
use crate::sim::run_spec::ResolvedRun;
use crate::workload::serving::ServingRequest;

fn p50_p90_p99(d: Option<Distribution>, scale: f64) -> String {
    d.map_or("-".into(), |d| {
        format!(
            "{:.0}/{:.0}/{:.0}",
            d.p50 * scale,
            d.p90 * scale,
            d.p99 * scale
        )
    })
}

fn p50_p99(d: Option<Distribution>, scale: f64, digits: usize) -> String {
    d.map_or("-".into(), |d| {
        format!("{:.digits$}/{:.digits$}", d.p50 * scale, d.p99 * scale)
    })
}

/// Two decimals below 100, none above.
fn rate(x: f64) -> String {
    if x.abs() < 100.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.0}")
    }
}

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |h| format!("{:.1}", 100.0 * h))
}

/// "4" colocated, "2P+2D" disaggregated.
pub fn layout(o: &ClusterOutcome) -> String {
    match &o.disagg {
        Some(d) => format!("{}P+{}D", d.prefill_replicas, d.decode_replicas),
        None => o.replicas.to_string(),
    }
}

/// A column: its header, its line in the key, whether the default table shows it, its cell.
struct Column<'a> {
    head: String,
    key: String,
    default: bool,
    cell: Box<dyn Fn(&ClusterOutcome) -> String + 'a>,
}

fn col<'a>(
    head: String,
    key: &str,
    default: bool,
    cell: Box<dyn Fn(&ClusterOutcome) -> String + 'a>,
) -> Column<'a> {
    Column {
        head,
        key: key.to_string(),
        default,
        cell,
    }
}

/// The table's columns: every run's, then the host tier's, disaggregation's and the KV pool's
/// when some run has them.
fn columns<'a>(
    unit: TimeUnit,
    lat: &str,
    scale: f64,
    tier: bool,
    pd: bool,
    pool: bool,
) -> Vec<Column<'a>> {
    let mut c = run_columns(unit, lat, scale);
    if tier {
        c.push(tier_column());
    }
    if pd {
        c.extend(disaggregation_columns());
    }
    if pool {
        c.extend(pool_columns());
    }
    c
}

/// What every run has: its layout and router, rates, latencies, prefix cache, preemptions and
/// the router's spread.
fn run_columns<'a>(unit: TimeUnit, lat: &str, scale: f64) -> Vec<Column<'a>> {
    vec![
        col(
            "layout".into(),
            "replicas, or P prefill + D decode instances",
            true,
            Box::new(layout),
        ),
        col(
            "router".into(),
            "which replica (prefill instance) a request goes to",
            true,
            Box::new(|o| o.router.to_string()),
        ),
        col(
            format!("req/{unit}"),
            "requests finished per unit of time over the makespan",
            true,
            Box::new(|o| rate(o.total.throughput.requests_per_time)),
        ),
        col(
            format!("out tok/{unit}"),
            "output tokens per unit of time",
            false,
            Box::new(|o| rate(o.total.throughput.output_tokens_per_time)),
        ),
        col(
            format!("TTFT p50/p99 {lat}"),
            "arrival to first token, median and 99th percentile",
            true,
            Box::new(move |o| p50_p99(o.total.latency.ttft, scale, 0)),
        ),
        col(
            format!("TTFT p90 {lat}"),
            "its 90th percentile",
            false,
            Box::new(move |o| {
                o.total
                    .latency
                    .ttft
                    .map_or("-".into(), |d| format!("{:.0}", d.p90 * scale))
            }),
        ),
        col(
            format!("TPOT p50/p99 {lat}"),
            "first token to the last, per later token (a KV move counts in it)",
            true,
            Box::new(move |o| p50_p99(o.total.latency.tpot, scale, 1)),
        ),
        col(
            "GPU hit %".into(),
            "prompt tokens found in the GPU prefix caches at admission",
            true,
            Box::new(|o| pct(o.total.prefix_cache.prefix_cache_hit_ratio)),
        ),
        col(
            "preempt".into(),
            "preemptions",
            false,
            Box::new(|o| o.total.preemption.preemptions.to_string()),
        ),
        col(
            "per replica min/max".into(),
            "requests the router sent each replica (prefill instance)",
            false,
            Box::new(|o| {
                let per = &o.router_stats.per_replica;
                format!(
                    "{}/{}",
                    per.iter().min().unwrap_or(&0),
                    per.iter().max().unwrap_or(&0)
                )
            }),
        ),
    ]
}

/// The share of prompt tokens the host KV tier gave.
fn tier_column<'a>() -> Column<'a> {
    col(
        "host hit %".into(),
        "prompt tokens loaded from the host KV tier",
        true,
        Box::new(|o| format!("{:.1}", 100.0 * o.total.offload.offload_prompt_hit_ratio)),
    )
}

/// Prefill/decode disaggregation: the KV moved, its delay, waits for decode room, local prefills.
fn disaggregation_columns<'a>() -> Vec<Column<'a>> {
    vec![
        col(
            "KV GB".into(),
            "KV bytes moved from prefill to decode instances, GB",
            true,
            Box::new(|o| {
                o.disagg.as_ref().map_or("-".into(), |d| {
                    format!("{:.1}", d.stats.kv_bytes_moved as f64 / 1e9)
                })
            }),
        ),
        col(
            "xfer p50/p99 ms".into(),
            "prefill end to KV arrival: what the move adds",
            false,
            Box::new(|o| {
                o.disagg
                    .as_ref()
                    .map_or("-".into(), |d| p50_p99(d.transfer_delay_seconds, 1e3, 1))
            }),
        ),
        col(
            "D wait".into(),
            "requests whose KV waited for room in a decode pool",
            false,
            Box::new(|o| {
                o.disagg
                    .as_ref()
                    .map_or("-".into(), |d| d.stats.waited_for_decode.to_string())
            }),
        ),
        col(
            "local".into(),
            "requests prefilled on their decode instance (conditional disaggregation)",
            false,
            Box::new(|o| {
                o.disagg
                    .as_ref()
                    .map_or("-".into(), |d| d.stats.local_prefills.to_string())
            }),
        ),
    ]
}

/// The KV pool across prefill nodes' host tiers: its hits and the bytes its fetches moved.
fn pool_columns<'a>() -> Vec<Column<'a>> {
    let hits = |o: &ClusterOutcome| o.disagg.as_ref().map(|d| d.tier_hits);
    vec![
        col(
            "pool hit %".into(),
            "prompt tokens fetched from other prefill nodes' host tiers (the KV pool)",
            false,
            Box::new(move |o| pct(hits(o).and_then(|h| h.remote_ratio()))),
        ),
        col(
            "pool GB".into(),
            "bytes the pool's fetches moved over the link, GB (apart from the KV to decode)",
            false,
            Box::new(move |o| {
                hits(o).map_or("-".into(), |h| {
                    format!("{:.1}", h.pool_bytes_moved as f64 / 1e9)
                })
            }),
        ),
    ]
}

pub fn print(
    resolved: &ResolvedRun,
    name: &str,
    requests: &[ServingRequest],
    outcomes: &[ClusterOutcome],
    without_tier: &[ClusterOutcome],
    wide: bool,
) -> Result<(), BoxError> {
    let s = &resolved.settings;
    let e = &s.engine;
    outln!(
        "cluster: replicas of the vLLM 0.33 V1 engine (preset {}: max_num_seqs {}, max_num_batched_tokens {}, prefix caching {}, block size {}), each with its own pool",
        resolved.preset_name,
        e.max_num_seqs,
        e.max_num_batched_tokens,
        if e.enable_prefix_caching { "on" } else { "off" },
        resolved.block_size,
    )?;
    for line in model_lines(resolved, " per replica") {
        outln!("{line}")?;
    }
    for line in describe_limits(resolved) {
        outln!("{line}")?;
    }
    outln!("{}", workload_line(name, requests))?;
    if let Some(line) = crate::cli::sim_client_args::describe(s.clients) {
        outln!("{line} (one pool over every replica)")?;
    }
    if let Some(slo) = &resolved.slo {
        outln!("{}", slo.describe())?;
    }
    let unit = outcomes[0].total.time_unit;
    let (scale, lat) = latency_unit(unit);
    let pd = outcomes.iter().any(|o| o.disagg.is_some());
    let pool = outcomes
        .iter()
        .any(|o| o.disagg.as_ref().is_some_and(|d| d.pool.is_some()));
    let cols: Vec<Column> = columns(unit, lat, scale, e.cpu_offload.is_some(), pd, pool)
        .into_iter()
        .filter(|c| wide || c.default)
        .collect();
    let mut t = Table::new(cols.iter().map(|c| c.head.clone()));
    for o in outcomes {
        t.row(cols.iter().map(|c| (c.cell)(o)));
    }
    out!("{t}")?;
    for c in &cols {
        outln!("  {}: {}", c.head, c.key)?;
    }
    if !wide {
        outln!("  (--wide: every column)")?;
    }
    if let [o] = outcomes {
        per_replica(o, scale, lat)?;
    }
    for o in outcomes {
        run_lines(resolved, o, without_tier, unit)?;
    }
    Ok(())
}

/// One row per replica (prefill instances first, then decode ones), and the router's decisions.
fn per_replica(o: &ClusterOutcome, scale: f64, lat: &str) -> Result<(), BoxError> {
    let prefill = o.disagg.as_ref().map(|d| d.prefill_replicas);
    let mut t = Table::new([
        "replica".to_string(),
        "role".into(),
        "requests".into(),
        format!("TTFT p50/p90/p99 {lat}"),
        "GPU hit %".into(),
        "preempt".into(),
        "KV mean/peak %".into(),
        "busy %".into(),
    ]);
    for (i, rr) in o.per_replica.iter().enumerate() {
        let rr: &EngineReport = rr;
        let role = match prefill {
            None => "both",
            Some(p) if i < p => "prefill",
            Some(_) => "decode",
        };
        t.row([
            i.to_string(),
            role.into(),
            rr.requests.to_string(),
            p50_p90_p99(rr.latency.ttft, scale),
            pct(rr.prefix_cache.prefix_cache_hit_ratio),
            rr.preemption.preemptions.to_string(),
            format!(
                "{:.1}/{:.1}",
                100.0 * rr.occupancy.mean_kv_utilization,
                100.0 * rr.occupancy.peak_kv_utilization
            ),
            format!("{:.0}", 100.0 * rr.occupancy.busy_fraction),
        ]);
    }
    out!("{t}")?;
    let rs = &o.router_stats;
    let rules: Vec<String> = rs
        .by_rule
        .iter()
        .map(|(rule, n)| format!("{n} by {rule}"))
        .collect();
    outln!(
        "{} decisions: {}; {} drawn at random among equals",
        o.router,
        rules.join(", "),
        rs.random
    )?;
    Ok(())
}

/// What a run's row leaves out: its counts, the KV link, starved replicas, the host tier.
fn run_lines(
    resolved: &ResolvedRun,
    o: &ClusterOutcome,
    without_tier: &[ClusterOutcome],
    unit: TimeUnit,
) -> Result<(), BoxError> {
    let e = &resolved.settings.engine;
    let r = &o.total;
    let mut line = format!(
        "{} × {}: {} of {} requests in {:.1} {unit}",
        layout(o),
        o.router,
        r.completed,
        r.requests,
        r.makespan
    );
    if r.refused.rejected > 0 {
        line += &format!(
            ", {} refused (longer than max_model_len {})",
            r.refused.rejected, e.max_model_len
        );
    }
    if let Some(slo) = &resolved.slo {
        line += &crate::cli::sim_engine_args::slo_clause(r, slo);
    }
    if let Some(c) = &o.clients {
        line += &crate::cli::sim_client_args::clause(c, unit);
    }
    outln!("{line}")?;
    disaggregation_lines(resolved, o)?;
    starved_line(o)?;
    host_tier_line(resolved, o, without_tier)
}

/// A disaggregated run's layout and link, the Conductor's rejections, where prompt tokens were
/// found, and the transfer times.
fn disaggregation_lines(resolved: &ResolvedRun, o: &ClusterOutcome) -> Result<(), BoxError> {
    let Some(d) = &o.disagg else {
        return Ok(());
    };
    let e = &resolved.settings.engine;
    outln!(
        "  prefill on {} × TP{} ({} blocks each), decode on {} × TP{} ({} blocks each); KV {} over {} GB/s: {} requests moved {:.2} GB ({} B a token), {} waited for a decode pool, {} prefilled locally",
        d.prefill_replicas,
        d.prefill_tp,
        d.prefill_gpu_blocks,
        d.decode_replicas,
        d.decode_tp,
        d.decode_gpu_blocks,
        d.transfer,
        d.link_gbps,
        d.stats.moved,
        d.stats.kv_bytes_moved as f64 / 1e9,
        d.kv_bytes_per_token,
        d.stats.waited_for_decode,
        d.stats.local_prefills,
    )?;
    if d.stats.rejected() > 0 {
        outln!(
            "  the Conductor rejected {} requests early ({} over the TTFT SLO by its estimate, {} over the TBT SLO); they count among the requests and against SLO attainment",
            d.stats.rejected(),
            d.stats.rejected_ttft,
            d.stats.rejected_tbt,
        )?;
    }
    let h = &d.tier_hits;
    if e.cpu_offload.is_some() {
        let pct = |x: Option<f64>| x.map_or("-".into(), |x| format!("{:.1}%", 100.0 * x));
        let mut line = format!(
            "  prompt tokens found: GPU {}, own host tier {}, remote pool {} (all {})",
            pct(h.gpu_ratio()),
            pct(h.local_host_ratio()),
            pct(h.remote_ratio()),
            pct(h.hit_ratio()),
        );
        if let (Some(p), Some(chunks)) = (d.pool, d.pool_node_chunks) {
            line += &format!(
                "; the pool: {} nodes × {chunks} chunks, balancing threshold {}: {} fetches moved {} tokens, {:.2} GB over the link (apart from the KV to decode){}",
                d.prefill_replicas,
                p.threshold,
                h.fetches,
                h.fetched_tokens,
                h.pool_bytes_moved as f64 / 1e9,
                if h.store_failures > 0 {
                    format!(", {} refused by a full tier", h.store_failures)
                } else {
                    String::new()
                }
            );
        }
        outln!("{line}")?;
    }
    if let (Some(x), Some(a)) = (d.transfer_seconds, d.transfer_delay_seconds) {
        outln!(
            "  transfer (reservation to arrival) p50/p99 {:.2}/{:.2} ms; after the prefill's end p50/p99 {:.2}/{:.2} ms",
            x.p50 * 1e3,
            x.p99 * 1e3,
            a.p50 * 1e3,
            a.p99 * 1e3
        )?;
    }
    Ok(())
}

/// The replicas the router left nearly idle, if any.
fn starved_line(o: &ClusterOutcome) -> Result<(), BoxError> {
    if o.starved_replicas.is_empty() {
        return Ok(());
    }
    let r = &o.total;
    let per = &o.router_stats.per_replica;
    let mean = r.requests as f64 / per.len() as f64;
    let got: Vec<String> = o
        .starved_replicas
        .iter()
        .map(|&i| format!("{i} ({})", per[i]))
        .collect();
    outln!(
        "  the router leaves replicas nearly idle: {} got under a quarter of the mean {mean:.0} requests",
        got.join(", ")
    )?;
    Ok(())
}

/// The host tier's line: what it did against the same run without it.
fn host_tier_line(
    resolved: &ResolvedRun,
    o: &ClusterOutcome,
    without_tier: &[ClusterOutcome],
) -> Result<(), BoxError> {
    let r = &o.total;
    if let Some(plain) = without_tier
        .iter()
        .find(|p| p.router == o.router && p.replicas == o.replicas)
    {
        let mut stats = crate::sim::engine::host_tier::TierStats {
            mode: o.tiers.first().map(|t| t.mode).unwrap_or_default(),
            ..Default::default()
        };
        for t in &o.tiers {
            stats.merge(t);
        }
        let bytes = resolved.settings.block_bytes(o.block_size);
        outln!(
            "  {}",
            crate::cli::sim_tier_args::tier_line(r, stats, bytes, &plain.total)
        )?;
    }
    Ok(())
}
