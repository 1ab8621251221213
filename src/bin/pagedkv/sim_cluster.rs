//! `pagedkv sim cluster`: replicas of the vLLM engine simulator behind a router, on a trace (by
//! default Mooncake's conversation trace, whose prompts share real prefixes): routers and replica
//! counts compared in one run, with an optional KV tier in host memory.

use crate::count;
use crate::router_args::RouterArgs;
use crate::sim_engine_args::{
    describe_limits, latency_unit, settings, workload, workload_line, BoxError, EngineArgs,
    Resolved, WorkloadArgs,
};
use crate::CmdResult;
use pagedkv::kv::model::ModelShape;
use pagedkv::progress::Bar;
use pagedkv::report::Table;
use pagedkv::sim::cluster::run::write_request_log;
use pagedkv::sim::cluster::{output, ClusterOutcome, ClusterSpec, RouterKind};
use pagedkv::sim::engine::{EngineConfig, EngineReport};
use pagedkv::workload::serving::ServingRequest;
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;

const DEFAULT_TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/mooncake/conversation_trace.jsonl"
);

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    workload: WorkloadArgs,
    #[command(flatten)]
    engine: EngineArgs,
    /// Replica counts to run (comma-separated: 1,2,4,8,16 sweeps them).
    #[arg(long, value_delimiter = ',', default_value = "4", value_parser = count(1..=1024))]
    replicas: Vec<usize>,
    /// Routers to compare (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "round-robin,least-loaded,prefix-aware,kv-aware"
    )]
    router: Vec<RouterKind>,
    #[command(flatten)]
    routers: RouterArgs,
    /// Write every replica's steps as JSON lines, each with its `replica` (one run only).
    #[arg(long)]
    step_log: Option<PathBuf>,
    /// Write one JSON line per request: id, replica, route (why the router chose it), arrival,
    /// first_token, finish, prompt_len, output_len, prefix_hit_tokens, offload_hit_tokens,
    /// preemptions (one run only).
    #[arg(long)]
    request_log: Option<PathBuf>,
    /// Print the report as JSON (one object, every router's run) instead of the table.
    #[arg(long)]
    json: bool,
    /// Write cluster.json and SVG plots (load per replica over time, hit ratio per router).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    workload: &'a str,
    preset: &'a str,
    model: &'a ModelShape,
    gpu: &'a str,
    tp: usize,
    profile_source: String,
    profile_measured: bool,
    max_model_len_source: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    offload_bandwidth_source: Option<&'a str>,
    engine: &'a EngineConfig,
    block_size: usize,
    runs: &'a [ClusterOutcome],
    /// With a host tier: the same runs without it.
    #[serde(skip_serializing_if = "<[ClusterOutcome]>::is_empty")]
    without_tier: &'a [ClusterOutcome],
}

fn create(path: &PathBuf) -> Result<std::io::BufWriter<std::fs::File>, String> {
    std::fs::File::create(path)
        .map(std::io::BufWriter::new)
        .map_err(|e| format!("{}: {e}", path.display()))
}

pub fn run(args: Args) -> CmdResult {
    let (requests, name, fields) = workload(&args.workload, DEFAULT_TRACE)?;
    let resolved = settings(&args.engine, fields.as_ref(), args.workload.seed)?;
    let router_cfg = args.routers.config(args.workload.seed)?;
    let mut routers = args.router.clone();
    routers.dedup();
    let specs: Vec<ClusterSpec> = args
        .replicas
        .iter()
        .flat_map(|&replicas| {
            routers.iter().map(move |&router| ClusterSpec {
                replicas,
                router,
                router_cfg,
            })
        })
        .collect();
    let single = specs.len() == 1;
    if !single && (args.step_log.is_some() || args.request_log.is_some()) {
        return Err("--step-log and --request-log need one router and one replica count".into());
    }
    let s = &resolved.settings;
    let bs = resolved.block_size;
    let tier = s.engine.cpu_offload.is_some();
    let runs = specs.len() * if tier { 2 } else { 1 };
    let bar = Bar::new(
        "sim cluster: requests finished",
        (requests.len() * runs) as u64,
    );
    let timeline = args.out.is_some();
    let outcomes = if single {
        let mut file = args.step_log.as_ref().map(create).transpose()?;
        let log = file.as_mut().map(|f| f as &mut dyn Write);
        let o = pagedkv::sim::cluster::run(s, bs, &specs[0], &requests, timeline, log, |d, _| {
            bar.set_position(d as u64)
        })?;
        if let Some(mut f) = file {
            f.flush()?;
        }
        if let Some(path) = &args.request_log {
            let mut f = create(path)?;
            write_request_log(&mut f, &o.requests)
                .and_then(|()| f.flush())
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        vec![o]
    } else {
        pagedkv::sim::cluster::run_all(s, bs, &specs, &requests, timeline, &|n| bar.inc(n as u64))?
    };
    let without_tier = if tier {
        let plain = s.without_host_tier();
        pagedkv::sim::cluster::run_all(&plain, bs, &specs, &requests, false, &|n| {
            bar.inc(n as u64)
        })?
    } else {
        Vec::new()
    };
    drop(bar);
    let json = JsonReport {
        workload: &name,
        preset: &resolved.preset_name,
        model: &s.model,
        gpu: s.gpu.name,
        tp: s.tp,
        profile_source: format!("{}: {}", s.profile.device, s.profile.source),
        profile_measured: s.profile.measured,
        max_model_len_source: &resolved.max_model_len_source,
        offload_bandwidth_source: resolved.offload_source.as_deref(),
        engine: &s.engine,
        block_size: bs,
        runs: &outcomes,
        without_tier: &without_tier,
    };
    if let Some(dir) = &args.out {
        output::write_all(dir, &json, &outcomes)?;
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&json)?)?;
    } else {
        print_text(&resolved, &name, &requests, &outcomes, &without_tier)?;
        if let Some(dir) = &args.out {
            outln!("wrote {}", dir.join("cluster.json and SVG plots").display())?;
        }
    }
    Ok(())
}

fn p50_p90_p99(d: Option<pagedkv::sim::engine::Distribution>, scale: f64) -> String {
    d.map_or("-".into(), |d| {
        format!(
            "{:.0}/{:.0}/{:.0}",
            d.p50 * scale,
            d.p90 * scale,
            d.p99 * scale
        )
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

fn print_text(
    resolved: &Resolved,
    name: &str,
    requests: &[ServingRequest],
    outcomes: &[ClusterOutcome],
    without_tier: &[ClusterOutcome],
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
    if s.clock_steps {
        outln!("clock: steps (every step one unit)")?;
    } else {
        outln!(
            "model: {} on {} × {} per replica; attention efficiency from {}{}",
            s.model.name,
            s.tp,
            s.gpu.name,
            s.profile.device,
            if s.profile.measured {
                ""
            } else {
                " (an assumption)"
            }
        )?;
    }
    for line in describe_limits(resolved) {
        outln!("{line}")?;
    }
    outln!("{}", workload_line(name, requests))?;
    if let Some(slo) = &resolved.slo {
        outln!("{}", slo.describe())?;
    }
    let unit = outcomes[0].total.time_unit;
    let (scale, lat) = latency_unit(unit);
    let mut t = Table::new([
        "replicas".to_string(),
        "router".into(),
        format!("req/{unit}"),
        format!("out tok/{unit}"),
        format!("TTFT p50/p90/p99 {lat}"),
        format!("TPOT p50/p99 {lat}"),
        "preempt".into(),
        "GPU hit %".into(),
        "host hit %".into(),
        "requests per replica min/max".into(),
    ]);
    for o in outcomes {
        let r = &o.total;
        let per = &o.router_stats.per_replica;
        t.row([
            o.replicas.to_string(),
            o.router.to_string(),
            rate(r.requests_per_time),
            rate(r.output_tokens_per_time),
            p50_p90_p99(r.ttft, scale),
            r.tpot.map_or("-".into(), |d| {
                format!("{:.1}/{:.1}", d.p50 * scale, d.p99 * scale)
            }),
            r.preemptions.to_string(),
            pct(r.prefix_cache_hit_ratio),
            if e.cpu_offload.is_some() {
                format!("{:.1}", 100.0 * r.offload_prompt_hit_ratio)
            } else {
                "-".into()
            },
            format!(
                "{}/{}",
                per.iter().min().unwrap_or(&0),
                per.iter().max().unwrap_or(&0)
            ),
        ]);
    }
    out!("{t}")?;
    if let [o] = outcomes {
        let mut t = Table::new([
            "replica".to_string(),
            "requests".into(),
            format!("TTFT p50/p90/p99 {lat}"),
            "GPU hit %".into(),
            "preempt".into(),
            "KV mean/peak %".into(),
            "busy %".into(),
        ]);
        for (i, r) in o.per_replica.iter().enumerate() {
            let rr: &EngineReport = r;
            t.row([
                i.to_string(),
                rr.requests.to_string(),
                p50_p90_p99(rr.ttft, scale),
                pct(rr.prefix_cache_hit_ratio),
                rr.preemptions.to_string(),
                format!(
                    "{:.1}/{:.1}",
                    100.0 * rr.mean_kv_utilization,
                    100.0 * rr.peak_kv_utilization
                ),
                format!("{:.0}", 100.0 * rr.busy_fraction),
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
    }
    for o in outcomes {
        let r = &o.total;
        let mut line = format!(
            "{} × {}: {} of {} requests in {:.1} {unit}",
            o.replicas, o.router, r.completed, r.requests, r.makespan
        );
        if r.rejected > 0 {
            line += &format!(
                ", {} refused (longer than max_model_len {})",
                r.rejected, e.max_model_len
            );
        }
        if let Some(slo) = &resolved.slo {
            line += &crate::sim_engine_args::slo_clause(r, slo, unit);
        }
        outln!("{line}")?;
        if !o.starved_replicas.is_empty() {
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
        }
        if let Some(plain) = without_tier
            .iter()
            .find(|p| p.router == o.router && p.replicas == o.replicas)
        {
            let mut stats = pagedkv::sim::engine::host_tier::TierStats {
                mode: o.tiers.first().map(|t| t.mode).unwrap_or_default(),
                ..Default::default()
            };
            for t in &o.tiers {
                stats.merge(t);
            }
            let bytes = resolved.settings.block_bytes(o.block_size);
            outln!(
                "  {}",
                crate::sim_tier_args::tier_line(r, stats, bytes, &plain.total)
            )?;
        }
    }
    Ok(())
}
