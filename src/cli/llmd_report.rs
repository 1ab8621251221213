//! `--report-format llmd`: a `sim engine` or `sim cluster` run as llm-d's benchmark report
//! (schema v0.2.1, [`crate::report::llmd`]), from the run's [`EngineReport`], its settings and
//! its workload.

use crate::cli::sim_engine_args::WorkloadArgs;
use crate::kv::BlockSize;
use crate::report::llmd::{EngineStack, ReplicaState, Run, Summary, Workload};
use crate::sim::engine::metrics::Distribution;
use crate::sim::engine::{EngineReport, RunSettings, TimeUnit};
use crate::sim::run_spec::ResolvedRun;
use crate::workload::serving::ServingRequest;
use serde_json::{json, Map, Value};

/// How a run's report is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// This harness's own: the table, or its JSON with --json.
    #[default]
    Text,
    /// llm-d's benchmark report, schema v0.2.1 (JSON).
    Llmd,
}

/// The vLLM release the engine simulator follows.
const VLLM_VERSION: &str = "0.33.0";

/// A random run id in the UUID form.
pub fn uid() -> String {
    let x: u128 = rand::random();
    let h = format!("{x:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// The workload as the report describes it: its lengths, its offered rate.
pub fn workload(args: &WorkloadArgs, name: &str, requests: &[ServingRequest]) -> Workload {
    let lens =
        |f: &dyn Fn(&ServingRequest) -> f64| -> Vec<f64> { requests.iter().map(f).collect() };
    let first = requests
        .iter()
        .map(|r| r.arrival)
        .fold(f64::INFINITY, f64::min);
    let last = requests.iter().map(|r| r.arrival).fold(0.0, f64::max);
    let generated = args.poisson.is_some() || args.multiturn.is_some();
    Workload {
        description: name.to_string(),
        tool: "pagedkv".into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        source: if generated { "random" } else { "sampled" },
        input_len: Summary::of(&lens(&|r| r.prompt.len() as f64)).unwrap_or(Summary {
            mean: 0.0,
            stddev: None,
            min: None,
            percentiles: Vec::new(),
            max: 0.0,
        }),
        output_len: Summary::of(&lens(&|r| f64::from(r.output_len))),
        rate_qps: (requests.len() > 1 && last > first)
            .then(|| (requests.len() - 1) as f64 / (last - first)),
        native: json!({
            "workload": name,
            "requests": requests.len(),
            "rate_scale": args.rate_scale,
            "seed": args.seed,
        }),
    }
}

/// The engine as the report's stack describes it.
pub fn engine_stack(resolved: &ResolvedRun, block_size: BlockSize, replicas: usize) -> EngineStack {
    let s: &RunSettings = &resolved.settings;
    EngineStack {
        tool: "vllm".into(),
        tool_version: VLLM_VERSION.into(),
        model: s.model.name.to_string(),
        accelerator: s.gpu.name.to_string(),
        tp: s.tp,
        replicas,
        native: json!({
            "preset": resolved.preset_name,
            "block_size": block_size,
            "engine": s.engine,
        }),
    }
}

fn summary(d: &Option<Distribution>) -> Option<Summary> {
    d.as_ref()
        .map(|d| Summary::known(d.mean, d.p50, d.p90, d.p99, d.max))
}

/// One engine's (or the cluster's) state over the run.
pub fn replica_state(label: String, r: &EngineReport) -> ReplicaState {
    ReplicaState {
        label,
        kv_cache_usage: Some((
            r.occupancy.mean_kv_utilization,
            r.occupancy.peak_kv_utilization,
        )),
        cache_hit_rate: r.prefix_cache.prefix_cache_hit_ratio,
        running_mean: Some(r.occupancy.mean_running),
        waiting_mean: Some(r.occupancy.mean_waiting),
    }
}

/// What the schema has no field for, named.
fn extra(r: &EngineReport) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("simulated".into(), json!(true));
    m.insert("slo".into(), json!(r.objectives.slo));
    m.insert("slo_attainment".into(), json!(r.objectives.slo_attainment));
    m.insert(
        "slo_attainment_each".into(),
        json!(r.objectives.slo_attainment_each),
    );
    m.insert("goodput_requests_per_s".into(), json!(r.objectives.goodput));
    m.insert("rejected_requests".into(), json!(r.refused.rejected));
    m.insert("shortened_requests".into(), json!(r.refused.shortened));
    m.insert(
        "prefix_cache_hit_tokens".into(),
        json!(r.prefix_cache.prefix_cache_hit_tokens),
    );
    m.insert(
        "offload_hit_tokens".into(),
        json!(r.offload.offload_hit_tokens),
    );
    m.insert("preemptions".into(), json!(r.preemption.preemptions));
    m.insert(
        "recomputed_tokens".into(),
        json!(r.preemption.recomputed_tokens),
    );
    m.insert("tbt_s".into(), json!(r.latency.tbt));
    m.insert("engine_report".into(), json!(r));
    m
}

/// A run of `total` (one engine, or the cluster's total) as a report; `replicas` its
/// engines' states; `router` the router in front, if any.
pub fn run(
    description: String,
    stack: EngineStack,
    router: Option<(String, String, Value)>,
    load: Workload,
    total: &EngineReport,
    replicas: Vec<ReplicaState>,
) -> Result<Run, String> {
    if total.time_unit != TimeUnit::Seconds {
        return Err("--report-format llmd needs times in seconds: drop --clock steps".to_string());
    }
    let t = total;
    Ok(Run {
        uid: uid(),
        description,
        engine: stack,
        router,
        load,
        total: t.requests + t.refused.rejected,
        failures: t.refused.rejected,
        incomplete: t.requests - t.completed.min(t.requests),
        ttft: summary(&t.latency.ttft),
        tpot: summary(&t.latency.tpot),
        itl: None,
        e2e: summary(&t.latency.e2e),
        input_tokens_per_s: t.throughput.total_tokens_per_time
            - t.throughput.output_tokens_per_time,
        output_tokens_per_s: t.throughput.output_tokens_per_time,
        requests_per_s: t.throughput.requests_per_time,
        replicas,
        extra: extra(t),
    })
}
