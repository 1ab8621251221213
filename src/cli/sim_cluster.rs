//! `pagedkv sim cluster`: replicas of the vLLM engine simulator behind a router, on a trace (by
//! default Mooncake's conversation trace, whose prompts share real prefixes): routers and replica
//! counts compared in one run, with an optional KV tier in host memory; or, with
//! `--search-capacity`, each layout's capacity per GPU.

mod capacity;
mod pd_args;
mod text;

use crate::cli::count;
use crate::cli::llmd_report::{self, ReportFormat};
use crate::cli::router_args::RouterArgs;
use crate::cli::sim_engine_args::{settings, workload, BoxError, EngineArgs, WorkloadArgs};
use crate::cli::CmdResult;
use crate::kv::BlockSize;
use crate::progress::Bar;
use crate::sim::cluster::pd::Disagg;
use crate::sim::cluster::request_line::write_request_log;
use crate::sim::cluster::{output, ClusterOutcome, ClusterSpec, RouterConfig, RouterKind};
use crate::sim::engine::RunSettings;
use crate::sim::run_spec::ReportHeader;
use crate::sim::run_spec::ResolvedRun;
use crate::workload::serving::ServingRequest;
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
    clients: crate::cli::sim_client_args::ClientArgs,
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
    #[command(flatten)]
    pd: pd_args::PdArgs,
    /// DistServe's goodput: for each layout (--layouts, else --replicas' counts or the P:D
    /// split), the highest request rate per GPU at which the SLO attainment target holds, found
    /// by searching the trace's rate scale as the sweep does; one row per layout and router.
    /// SLOs: the --slo flags, else the preset the sweep would take for the workload.
    #[arg(long)]
    search_capacity: bool,
    /// The layouts --search-capacity compares (comma-separated): N colocated replicas or P:D
    /// prefill:decode instances, e.g. 4,3:1,2:2,1:3 (the same GPU count compares goodput per GPU
    /// directly; different counts are allowed, compared per GPU).
    #[arg(
        long,
        value_delimiter = ',',
        requires = "search_capacity",
        conflicts_with_all = ["replicas", "prefill_replicas", "decode_replicas"]
    )]
    layouts: Vec<crate::sim::cluster::capacity::Layout>,
    /// Print every column (the default table keeps those that carry the answer, in 100
    /// columns; a key follows it).
    #[arg(long)]
    wide: bool,
    /// Write every replica's steps as JSON lines, each with its `replica` (one run only).
    #[arg(long)]
    step_log: Option<PathBuf>,
    /// Write one JSON line per request: id, replica, route (why the router chose it), arrival,
    /// first_token, finish, prompt_len, output_len, prefix_hit_tokens, offload_hit_tokens,
    /// preemptions; disaggregated, also prefill_replica, decode_replica, transfer_start,
    /// transfer_end, kv_bytes_moved, rejected; with --max-concurrency, scheduled_arrival (the
    /// workload's; `arrival` is the send) (one run only).
    #[arg(long)]
    request_log: Option<PathBuf>,
    /// Print the report as JSON (one object, every router's run) instead of the table.
    #[arg(long)]
    json: bool,
    /// llmd: print llm-d's benchmark report (schema v0.2.1) of the run (one router, one
    /// replica count).
    #[arg(long, value_enum, default_value_t, conflicts_with = "json")]
    report_format: ReportFormat,
    /// Write cluster.json and SVG plots (load per replica over time, hit ratio per router).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    #[serde(flatten)]
    header: ReportHeader<'a>,
    /// Closed-loop clients (`--max-concurrency`), one pool over every replica; each run's
    /// `clients` says what they saw.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_concurrency: Option<usize>,
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

/// The clusters to run: one per prefill router under P/D, else one per replica count and router.
fn cluster_specs(
    args: &Args,
    disagg: Option<Disagg>,
    router_cfg: RouterConfig,
) -> Result<Vec<ClusterSpec>, BoxError> {
    let mut routers = match disagg {
        Some(_) if !args.pd.prefill_routers().is_empty() => args.pd.prefill_routers().to_vec(),
        _ => args.router.clone(),
    };
    routers.dedup();
    Ok(match disagg {
        Some(d) => (routers.iter())
            .map(|&router| ClusterSpec::disaggregated(d, router, router_cfg))
            .collect(),
        None => (args.replicas.iter())
            .flat_map(|&n| routers.iter().map(move |&r| (n, r)))
            .map(|(n, router)| ClusterSpec::colocated(n, router, router_cfg))
            .collect::<Result<_, _>>()?,
    })
}

/// One cluster run, its step log and request log written where asked.
fn run_logged(
    args: &Args,
    s: &RunSettings,
    bs: BlockSize,
    spec: &ClusterSpec,
    requests: &[ServingRequest],
    timeline: bool,
    bar: &Bar,
) -> Result<ClusterOutcome, BoxError> {
    let mut file = args.step_log.as_ref().map(create).transpose()?;
    let log = file.as_mut().map(|f| f as &mut dyn Write);
    let o = crate::sim::cluster::run(s, bs, spec, requests, timeline, log, |d, _| {
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
    Ok(o)
}

/// llm-d's benchmark report of the one run.
fn print_llmd(
    args: &Args,
    resolved: &ResolvedRun,
    name: &str,
    requests: &[ServingRequest],
    outcomes: &[ClusterOutcome],
) -> CmdResult {
    let bs = resolved.block_size;
    let [o] = outcomes else {
        return Err(
            "--report-format llmd reports one run: give one router and one replica count".into(),
        );
    };
    let replicas = (o.per_replica.iter().enumerate())
        .map(|(i, r)| llmd_report::replica_state(i.to_string(), r))
        .collect();
    let router = (
        "pagedkv-router".to_string(),
        env!("CARGO_PKG_VERSION").to_string(),
        serde_json::json!({"router": o.router, "stats": o.router_stats}),
    );
    let run = llmd_report::run(
        format!("pagedkv sim cluster: {name}"),
        llmd_report::engine_stack(resolved, bs, o.replicas),
        Some(router),
        llmd_report::workload(&args.workload, name, requests),
        &o.total,
        replicas,
    )?;
    outln!(
        "{}",
        serde_json::to_string_pretty(&crate::report::llmd::benchmark_report(&run))?
    )?;
    Ok(())
}

pub fn run(args: Args) -> CmdResult {
    if args.search_capacity {
        return capacity::run(args, DEFAULT_TRACE);
    }
    let (requests, name, fields) = workload(&args.workload, DEFAULT_TRACE)?;
    let mut resolved = settings(&args.engine, fields.as_ref(), args.workload.seed)?;
    resolved.settings.clients = args.clients.clients();
    let router_cfg = args.routers.config(args.workload.seed)?;
    let disagg = args.pd.disagg()?;
    let pooled = (resolved.settings.engine.cpu_offload)
        .is_some_and(|o| o.scope == crate::sim::engine::OffloadScope::Global);
    if disagg.is_some_and(|d| d.balancing_threshold.is_some()) && !pooled {
        return Err(crate::sim::engine::config::ConfigError::ThresholdWithoutPool.into());
    }
    let specs = cluster_specs(&args, disagg, router_cfg)?;
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
        vec![run_logged(
            &args, s, bs, &specs[0], &requests, timeline, &bar,
        )?]
    } else {
        crate::sim::cluster::run_all(s, bs, &specs, &requests, timeline, &|n| bar.inc(n as u64))?
    };
    let without_tier = if tier {
        let plain = s.without_host_tier();
        crate::sim::cluster::run_all(&plain, bs, &specs, &requests, false, &|n| bar.inc(n as u64))?
    } else {
        Vec::new()
    };
    drop(bar);
    let json = JsonReport {
        header: resolved.header(&name).at_block_size(bs),
        max_concurrency: args.clients.max_concurrency,
        runs: &outcomes,
        without_tier: &without_tier,
    };
    if let Some(dir) = &args.out {
        output::write_all(dir, &json, &outcomes)?;
    }
    if args.report_format == ReportFormat::Llmd {
        print_llmd(&args, &resolved, &name, &requests, &outcomes)?;
    } else if args.json {
        outln!("{}", serde_json::to_string_pretty(&json)?)?;
    } else {
        text::print(
            &resolved,
            &name,
            &requests,
            &outcomes,
            &without_tier,
            args.wide,
        )?;
        if let Some(dir) = &args.out {
            outln!("wrote {}", dir.join("cluster.json and SVG plots").display())?;
        }
    }
    Ok(())
}
