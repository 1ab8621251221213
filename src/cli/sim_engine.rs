//! `pagedkv sim engine`: one vLLM V1 engine replica simulated step by step (scheduler, KV block
//! manager, prefix caching) on a trace, a generated workload or a scenario file, with step times
//! from a roofline fed by this harness's attention efficiency; one block size or several.

use crate::cli::latency_unit::latency_unit;
use crate::cli::llmd_report::{self, ReportFormat};
use crate::cli::sim_engine_args::{
    describe_limits, model_lines, settings, slo_clause, workload, workload_line, EngineArgs,
    WorkloadArgs,
};
use crate::cli::{count, CmdResult};
use crate::kv::BlockSize;
use crate::progress::Bar;
use crate::report::llmd::benchmark_report;
use crate::report::Table;
use crate::sim::engine::config::Preemption;
use crate::sim::engine::output;
use crate::sim::engine::TimeUnit;
use crate::sim::engine::{EngineReport, Outcome, ResolvedSlo};
use crate::sim::run_spec::{ReportHeader, ResolvedRun};
use crate::workload::serving::ServingRequest;
use serde::Serialize;
use std::path::PathBuf;

const DEFAULT_TRACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/azure_llm_2023_conv.csv");

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    workload: WorkloadArgs,
    #[command(flatten)]
    clients: crate::cli::sim_client_args::ClientArgs,
    #[command(flatten)]
    engine: EngineArgs,
    /// Several block sizes, run in parallel (comma-separated; any size, not only powers of two).
    #[arg(long, value_delimiter = ',', conflicts_with = "block_size", value_parser = count(0..))]
    block_sizes: Option<Vec<usize>>,
    /// Write one JSON line per step (one block size only).
    #[arg(long)]
    step_log: Option<PathBuf>,
    #[arg(long)]
    json: bool,
    /// llmd: print llm-d's benchmark report (schema v0.2.1) of the run (one block size).
    #[arg(long, value_enum, default_value_t, conflicts_with = "json")]
    report_format: ReportFormat,
    /// Write engine.json and SVG plots (KV utilisation and batch over time; per block size).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    #[serde(flatten)]
    header: ReportHeader<'a>,
    /// The SLOs (preset, values, source, overrides), when any.
    #[serde(skip_serializing_if = "Option::is_none")]
    slo: Option<&'a ResolvedSlo>,
    /// Closed-loop clients (`--max-concurrency`); each run's `clients` says what they saw.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_concurrency: Option<usize>,
    runs: &'a [Outcome],
    /// With a host tier: the same runs without it.
    #[serde(skip_serializing_if = "<[Outcome]>::is_empty")]
    without_tier: &'a [Outcome],
}

pub fn run(args: Args) -> CmdResult {
    let (requests, name, fields) = workload(&args.workload, DEFAULT_TRACE)?;
    let mut resolved = settings(&args.engine, fields.as_ref(), args.workload.seed)?;
    resolved.settings.clients = args.clients.clients();
    let s = &resolved.settings;
    // Checked before any runs: a size the engine refuses would end the others' runs too.
    let sizes = match &args.block_sizes {
        Some(v) if !v.is_empty() => v
            .iter()
            .map(|&b| BlockSize::new(b as u64))
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err("--block-sizes needs at least one size".into()),
        None => vec![resolved.block_size],
    };
    if args.step_log.is_some() && sizes.len() > 1 {
        return Err("--step-log needs a single block size".into());
    }
    let tier = s.engine.cpu_offload.is_some();
    let runs = sizes.len() * if tier { 2 } else { 1 };
    let bar = Bar::new(
        "sim engine: requests finished",
        (requests.len() * runs) as u64,
    );
    let outcomes = if sizes.len() == 1 {
        let mut file = match &args.step_log {
            Some(p) => Some(std::io::BufWriter::new(
                std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?,
            )),
            None => None,
        };
        let log = file.as_mut().map(|f| f as &mut dyn std::io::Write);
        let o = s.run(sizes[0], &requests, args.out.is_some(), log, |done, _| {
            bar.set_position(done as u64)
        })?;
        if let Some(mut f) = file {
            std::io::Write::flush(&mut f)?;
        }
        vec![o]
    } else {
        s.run_all(&sizes, &requests, &|n| bar.inc(n as u64))?
    };
    // The same runs without the tier, for its effect on TTFT.
    let without_tier = if tier {
        let plain = s.without_host_tier();
        plain.run_all(&sizes, &requests, &|n| bar.inc(n as u64))?
    } else {
        Vec::new()
    };
    drop(bar);
    let json = JsonReport {
        header: resolved.header(&name),
        slo: resolved.slo.as_ref(),
        max_concurrency: args.clients.max_concurrency,
        runs: &outcomes,
        without_tier: &without_tier,
    };
    if let Some(dir) = &args.out {
        output::write_all(dir, &json, &outcomes)?;
    }
    if args.report_format == ReportFormat::Llmd {
        let [o] = &outcomes[..] else {
            return Err("--report-format llmd reports one run: give one block size".into());
        };
        let state = llmd_report::replica_state("0".into(), &o.report);
        let run = llmd_report::run(
            format!("pagedkv sim engine: {name}"),
            llmd_report::engine_stack(&resolved, o.block_size, 1),
            None,
            llmd_report::workload(&args.workload, &name, &requests),
            &o.report,
            vec![state],
        )?;
        outln!("{}", serde_json::to_string_pretty(&benchmark_report(&run))?)?;
    } else if args.json {
        outln!("{}", serde_json::to_string_pretty(&json)?)?;
    } else {
        print_text(&resolved, &name, &requests, &outcomes, &without_tier)?;
        if let Some(dir) = &args.out {
            outln!("wrote {}", dir.join("engine.json and SVG plots").display())?;
        }
    }
    Ok(())
}

fn dist(d: Option<crate::sim::engine::Distribution>, scale: f64) -> [String; 3] {
    d.map_or_else(
        || ["-".into(), "-".into(), "-".into()],
        |d| [d.p50, d.p90, d.p99].map(|x| format!("{:.2}", x * scale)),
    )
}

fn print_text(
    resolved: &ResolvedRun,
    name: &str,
    requests: &[ServingRequest],
    outcomes: &[Outcome],
    without_tier: &[Outcome],
) -> Result<(), crate::cli::stdout::StdoutFailed> {
    print_setting(resolved, name, requests)?;
    let s = &resolved.settings;
    let unit = outcomes[0].report.time_unit;
    out!("{}", table(resolved, outcomes, unit))?;
    for o in outcomes {
        let r = &o.report;
        outln!("{}", run_line(resolved, o, unit))?;
        if let Some(plain) = without_tier.iter().find(|p| p.block_size == o.block_size) {
            outln!(
                "  {}",
                crate::cli::sim_tier_args::tier_line(
                    r,
                    o.tier.map(|t| t.stats).unwrap_or_default(),
                    s.block_bytes(o.block_size),
                    &plain.report
                )
            )?;
        }
    }
    Ok(())
}

/// The lines above the table: the engine, the model, the limits, the workload, the clients and
/// the SLOs.
fn print_setting(
    resolved: &ResolvedRun,
    name: &str,
    requests: &[ServingRequest],
) -> Result<(), crate::cli::stdout::StdoutFailed> {
    let s = &resolved.settings;
    let preset_name = &resolved.preset_name;
    let e = &s.engine;
    outln!(
        "engine: vLLM 0.33 V1 scheduler, preset {preset_name}: max_num_seqs {}, max_num_batched_tokens {}, prefix caching {}, chunked prefill {}, policy {}, {} scheduling{}",
        e.max_num_seqs,
        e.max_num_batched_tokens,
        if e.enable_prefix_caching { "on" } else { "off" },
        if e.enable_chunked_prefill { "on" } else { "off" },
        e.scheduling_policy,
        if e.async_scheduling { "async" } else { "synchronous" },
        if matches!(e.preemption, Preemption::Swap { .. }) { ", swap preemption" } else { "" },
    )?;
    for line in model_lines(resolved, "") {
        outln!("{line}")?;
    }
    for line in describe_limits(resolved) {
        outln!("{line}")?;
    }
    outln!("{}", workload_line(name, requests))?;
    if let Some(line) = crate::cli::sim_client_args::describe(s.clients) {
        outln!("{line}")?;
    }
    if let Some(slo) = &resolved.slo {
        outln!("{}", slo.describe())?;
    }
    Ok(())
}

/// One row per block size: pool, efficiency, rates, latencies, preemptions, hits and KV use.
fn table(resolved: &ResolvedRun, outcomes: &[Outcome], unit: TimeUnit) -> Table {
    let (scale, lat) = latency_unit(unit);
    // Mooncake's TBT when an SLO judges it (the JSON always has it).
    let tbt = resolved
        .slo
        .as_ref()
        .is_some_and(|s| s.targets.tbt_s.is_some());
    let mut header = vec![
        "block".to_string(),
        "GPU blocks".into(),
        "eff".into(),
        format!("req/{unit}"),
        format!("out tok/{unit}"),
        format!("TTFT p50/p90/p99 {lat}"),
        format!("TPOT p50/p90/p99 {lat}"),
    ];
    if tbt {
        header.push(format!("TBT p50/p90/p99 {lat}"));
    }
    header.extend([
        format!("E2E p50/p99 {unit}"),
        "preempt".into(),
        "recomputed".into(),
        "hit %".into(),
        "KV mean/peak %".into(),
    ]);
    let mut t = Table::new(header);
    for o in outcomes {
        let r: &EngineReport = &o.report;
        let e2e = r
            .latency
            .e2e
            .map_or("-".into(), |d| format!("{:.2}/{:.2}", d.p50, d.p99));
        let mut cells = vec![
            o.block_size.to_string(),
            o.num_gpu_blocks.to_string(),
            format!("{:.2}", o.efficiency),
            format!("{:.2}", r.throughput.requests_per_time),
            format!("{:.0}", r.throughput.output_tokens_per_time),
            dist(r.latency.ttft, scale).join("/"),
            dist(r.latency.tpot, scale).join("/"),
        ];
        if tbt {
            cells.push(dist(r.latency.tbt, scale).join("/"));
        }
        cells.extend([
            e2e,
            r.preemption.preemptions.to_string(),
            r.preemption.recomputed_tokens.to_string(),
            r.prefix_cache
                .prefix_cache_hit_ratio
                .map_or("-".into(), |h| format!("{:.1}", 100.0 * h)),
            format!(
                "{:.1}/{:.1}",
                100.0 * r.occupancy.mean_kv_utilization,
                100.0 * r.occupancy.peak_kv_utilization
            ),
        ]);
        t.row(cells);
    }
    t
}

/// A run's line under the table: counts, steps, occupancy, and what the table leaves out.
fn run_line(resolved: &ResolvedRun, o: &Outcome, unit: TimeUnit) -> String {
    let e = &resolved.settings.engine;
    let r = &o.report;
    let mut line = format!(
        "block {}: {} of {} requests in {:.2} {unit} ({} steps, busy {:.0}%), mean running {:.1}, waiting {:.1}, in the engine {:.1}",
        o.block_size,
        r.completed,
        r.requests,
        r.makespan,
        r.steps,
        100.0 * r.occupancy.busy_fraction,
        r.occupancy.mean_running,
        r.occupancy.mean_waiting,
        r.occupancy.mean_in_system
    );
    if let Some(slo) = &resolved.slo {
        line += &slo_clause(r, slo);
    }
    if let Some(c) = &o.clients {
        line += &crate::cli::sim_client_args::clause(c, unit);
    }
    if r.preemption.swapped_out_tokens > 0 {
        line += &format!(
            ", swapped {} tokens out and {} back",
            r.preemption.swapped_out_tokens, r.preemption.swapped_in_tokens
        );
    }
    if r.refused.rejected + r.refused.shortened > 0 {
        line += &format!(
            ", under max_model_len {}: {} requests refused, {} shortened",
            e.max_model_len, r.refused.rejected, r.refused.shortened
        );
    }
    if let Some(h) = r.prefix_cache.preempted_prefix_cache_hit_ratio {
        line += &format!(", re-admissions hit {:.1}% in the prefix cache", 100.0 * h);
    }
    line
}
