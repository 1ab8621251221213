//! `pagedkv sim engine`: one vLLM V1 engine replica simulated step by step (scheduler, KV block
//! manager, prefix caching) on a trace, a generated workload or a scenario file, with step times
//! from a roofline fed by this harness's attention efficiency; one block size or several.

use crate::{count, count_u64, CmdResult};
use pagedkv::kv::model::{self, ModelShape};
use pagedkv::kv::Dtype;
use pagedkv::progress::Bar;
use pagedkv::report::Table;
use pagedkv::sim::engine::config::{preset, preset_names, Policy, Prediction, Preemption};
use pagedkv::sim::engine::output;
use pagedkv::sim::engine::step_time::gpu;
use pagedkv::sim::engine::{
    load_profile, EngineConfig, EngineReport, Outcome, Profile, RunSettings, Slo,
};
use pagedkv::sim::radix::workload::{multiturn, MultiTurnConfig};
use pagedkv::workload::azure::read_azure_csv;
use pagedkv::workload::scenario::read_scenario;
use pagedkv::workload::serving::{from_prompts, from_trace, scale_rate, ServingRequest};
use pagedkv::workload::synthetic::{SizeDist, SyntheticRequests};
use serde::Serialize;
use std::path::PathBuf;

const DEFAULT_TRACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/azure_llm_2023_conv.csv");

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ClockArg {
    /// Seconds from the step-time model; arrivals in seconds.
    Seconds,
    /// Every step one unit; arrivals are step indices (exact comparisons).
    Steps,
}

#[derive(clap::Args)]
pub struct Args {
    /// Trace CSV with prompt and output token columns and timestamps [default: the Azure 2023
    /// conversation trace].
    #[arg(long, group = "workload")]
    trace: Option<PathBuf>,
    /// Scenario file (JSON: requests with token ids or lengths, optional engine settings).
    #[arg(long, group = "workload")]
    scenario: Option<PathBuf>,
    /// Poisson arrivals at this many requests per second (log-normal prompts, exponential outputs).
    #[arg(long, group = "workload")]
    poisson: Option<f64>,
    /// Multi-turn conversations with shared prefixes (as `sim radix` makes), Poisson arrivals at
    /// this many requests per second.
    #[arg(long, group = "workload")]
    multiturn: Option<f64>,
    /// Requests: a trace's first N; generated workloads' count [default 2000].
    #[arg(long, value_parser = count(1..))]
    requests: Option<usize>,
    /// Replay arrivals this many times faster (2: twice the rate).
    #[arg(long, default_value_t = 1.0)]
    rate_scale: f64,
    /// Poisson: mean prompt tokens.
    #[arg(long, default_value_t = 1000.0)]
    prompt_mean: f64,
    /// Poisson: standard deviation of ln(prompt length).
    #[arg(long, default_value_t = 1.0)]
    prompt_sigma: f64,
    /// Poisson: mean output tokens.
    #[arg(long, default_value_t = 200.0)]
    output_mean: f64,
    /// Multiturn: output lengths (fixed:N, uniform:LO,HI or lognormal:MEAN,SD).
    #[arg(long, default_value = "uniform:64,192")]
    output: SizeDist,
    /// Seed of generated workloads and of predicted lengths.
    #[arg(long, default_value_t = 1, value_parser = count_u64(0..))]
    seed: u64,

    /// vLLM's defaults for a GPU and usage.
    #[arg(long, default_value = "h200")]
    preset: String,
    /// vLLM's --block-size.
    #[arg(long, conflicts_with = "block_sizes", value_parser = count(0..))]
    block_size: Option<usize>,
    /// Several block sizes, run in parallel (comma-separated; any size, not only powers of two).
    #[arg(long, value_delimiter = ',', value_parser = count(0..))]
    block_sizes: Option<Vec<usize>>,
    /// vLLM's --num-gpu-blocks-override: blocks in the pool (null block included) at every block
    /// size [default: what the GPU's memory leaves after the weights].
    #[arg(long, value_parser = count(0..))]
    num_gpu_blocks_override: Option<usize>,
    #[arg(long)]
    gpu_memory_utilization: Option<f64>,
    #[arg(long, value_parser = count(0..))]
    max_num_seqs: Option<usize>,
    #[arg(long, value_parser = count(0..))]
    max_num_batched_tokens: Option<usize>,
    #[arg(long, overrides_with = "no_enable_prefix_caching")]
    enable_prefix_caching: bool,
    #[arg(long)]
    no_enable_prefix_caching: bool,
    #[arg(long, overrides_with = "no_enable_chunked_prefill")]
    enable_chunked_prefill: bool,
    #[arg(long)]
    no_enable_chunked_prefill: bool,
    #[arg(long, value_parser = count(0..))]
    long_prefill_token_threshold: Option<usize>,
    /// fcfs, priority (vLLM's); sjf, srpt, aging (beyond vLLM).
    #[arg(long, value_enum, ignore_case = true)]
    scheduling_policy: Option<Policy>,
    #[arg(long, value_parser = count(0..))]
    max_model_len: Option<usize>,
    /// Fraction of the pool admissions keep free while requests run (vLLM's default 0).
    #[arg(long)]
    watermark: Option<f64>,
    /// Schedule each step before the previous one's output is processed (vLLM 0.33 serves this
    /// way); the synchronous loop otherwise.
    #[arg(long)]
    async_scheduling: bool,
    /// Tensor parallelism: weights and KV heads split over this many GPUs, the pool per GPU.
    #[arg(long, default_value_t = 1, value_parser = count(1..=64))]
    tp: usize,

    /// Beyond vLLM: preempt by swapping KV to host memory and back instead of recomputing.
    #[arg(long)]
    swap_preemption: bool,
    /// Host link bandwidth for swaps, GB/s per GPU (an assumption unless measured with
    /// `pagedkv swap`).
    #[arg(long, default_value_t = 25.0)]
    swap_gbps: f64,
    /// Host memory for swapped KV, GiB per GPU (vLLM's old --swap-space default).
    #[arg(long, default_value_t = 4.0)]
    swap_space_gib: f64,
    /// sjf/srpt: rank by predicted output lengths, true × e^N(0, sigma²) (0: true lengths).
    #[arg(long, default_value_t = 0.0)]
    predict_sigma: f64,
    /// aging: seconds (steps) per priority level.
    #[arg(long, default_value_t = 10.0)]
    aging_delay: f64,

    /// Model preset.
    #[arg(long, default_value = "llama-3-8b")]
    model: String,
    /// How the KV cache stores K and V (vLLM's --kv-cache-dtype): f16/bf16 ("auto"), or
    /// fp8_e4m3 / fp8_e5m2 at one byte per element: twice the tokens in the same pool, half the
    /// KV bytes a step reads.
    #[arg(long, value_enum, default_value_t = Dtype::F16)]
    kv_cache_dtype: Dtype,
    /// h200, h100, a100 [default: the preset's].
    #[arg(long)]
    gpu: Option<String>,
    /// Attention efficiency per block size: a profile (`sweep --out` writes one), `sweep --json`
    /// output or `attention --json` reports [default: the built-in H200 assumption].
    #[arg(long)]
    profile: Option<PathBuf>,
    /// CPU time per step (scheduling, output processing), milliseconds; hidden under async
    /// scheduling while the GPU is busier.
    #[arg(long, default_value_t = 0.5)]
    step_overhead_ms: f64,
    #[arg(long, value_enum, default_value_t = ClockArg::Seconds)]
    clock: ClockArg,

    /// Goodput: time to first token objective (seconds, or steps).
    #[arg(long)]
    slo_ttft: Option<f64>,
    /// Goodput: time per output token objective.
    #[arg(long)]
    slo_tpot: Option<f64>,
    /// Write one JSON line per step (one block size only).
    #[arg(long)]
    step_log: Option<PathBuf>,
    #[arg(long)]
    json: bool,
    /// Write engine.json and SVG plots (KV utilisation and batch over time; per block size).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn positive(name: &str, x: f64) -> Result<f64, String> {
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(format!("--{name} must be a positive number, got {x}"))
    }
}

type BoxError = Box<dyn std::error::Error>;

/// The requests and a name for them; a scenario also brings engine settings.
fn workload(
    args: &Args,
) -> Result<
    (
        Vec<ServingRequest>,
        String,
        Option<pagedkv::workload::scenario::EngineFields>,
    ),
    BoxError,
> {
    let n = args.requests;
    let generated = n.unwrap_or(2000);
    let (mut requests, name, fields) = if let Some(path) = &args.scenario {
        let s = read_scenario(path)?;
        let mut r = s.requests;
        r.truncate(n.unwrap_or(usize::MAX));
        let name = format!("{} ({})", path.display(), s.description);
        (r, name, Some(s.engine))
    } else if let Some(rate) = args.poisson {
        let w = SyntheticRequests {
            requests: generated,
            rate_per_s: positive("poisson", rate)?,
            prompt_mean: args.prompt_mean,
            prompt_sigma: args.prompt_sigma,
            output_mean: args.output_mean,
            seed: args.seed,
        };
        let (r, _) = from_trace(&w.generate()?);
        let name = format!(
            "Poisson {rate}/s, log-normal prompts (mean {}, sigma {}), exponential outputs (mean {})",
            args.prompt_mean, args.prompt_sigma, args.output_mean
        );
        (r, name, None)
    } else if let Some(rate) = args.multiturn {
        let prompts = multiturn(&MultiTurnConfig::default(), generated, args.seed)?;
        let r = from_prompts(
            prompts,
            positive("multiturn", rate)?,
            args.output,
            args.seed,
        );
        (
            r,
            format!("multi-turn conversations, Poisson {rate}/s"),
            None,
        )
    } else {
        let path = args.trace.clone().unwrap_or_else(|| DEFAULT_TRACE.into());
        let mut trace = read_azure_csv(&path)?;
        trace.truncate(n.unwrap_or(usize::MAX));
        let (r, fix) = from_trace(&trace);
        let mut name = path.file_name().map_or_else(
            || path.display().to_string(),
            |f| f.to_string_lossy().into(),
        );
        if fix.empty_prompts + fix.empty_outputs > 0 {
            name += &format!(
                " ({} empty prompts and {} empty outputs counted as 1 token)",
                fix.empty_prompts, fix.empty_outputs
            );
        }
        (r, name, None)
    };
    let scale = positive("rate-scale", args.rate_scale)?;
    if scale != 1.0 {
        scale_rate(&mut requests, scale);
    }
    Ok((requests, name, fields))
}

fn model_shape(name: &str) -> Result<ModelShape, String> {
    model::preset(name).ok_or_else(|| {
        format!(
            "unknown model {name:?} (presets: {})",
            model::preset_names().join(", ")
        )
    })
}

/// Preset, then the scenario's engine settings, then the flags.
fn settings(
    args: &Args,
    fields: Option<&pagedkv::workload::scenario::EngineFields>,
) -> Result<(RunSettings, Vec<usize>, String), BoxError> {
    let p = preset(&args.preset).ok_or_else(|| {
        format!(
            "unknown preset {:?} (one of {})",
            args.preset,
            preset_names().join(", ")
        )
    })?;
    let mut e = EngineConfig {
        max_num_seqs: p.max_num_seqs,
        max_num_batched_tokens: p.max_num_batched_tokens,
        ..EngineConfig::default()
    };
    let mut override_blocks = None;
    if let Some(f) = fields {
        e.apply(f)?;
        if f.num_gpu_blocks.is_some() {
            override_blocks = Some(e.num_gpu_blocks);
        }
    }
    let fixed_block = fields.and_then(|f| f.block_size).map(|_| e.block_size);
    override_blocks = args.num_gpu_blocks_override.or(override_blocks);
    if let Some(v) = args.max_num_seqs {
        e.max_num_seqs = v;
    }
    if let Some(v) = args.max_num_batched_tokens {
        e.max_num_batched_tokens = v;
    }
    if args.enable_prefix_caching {
        e.enable_prefix_caching = true;
    }
    if args.no_enable_prefix_caching {
        e.enable_prefix_caching = false;
    }
    if args.enable_chunked_prefill {
        e.enable_chunked_prefill = true;
    }
    if args.no_enable_chunked_prefill {
        e.enable_chunked_prefill = false;
    }
    if let Some(v) = args.long_prefill_token_threshold {
        e.long_prefill_token_threshold = v;
    }
    if let Some(v) = args.scheduling_policy {
        e.scheduling_policy = v;
    }
    if let Some(v) = args.max_model_len {
        e.max_model_len = v;
    }
    if let Some(v) = args.watermark {
        e.watermark = v;
    }
    e.async_scheduling = args.async_scheduling;
    e.prediction = Prediction {
        sigma: args.predict_sigma,
        seed: args.seed,
    };
    e.aging_delay = args.aging_delay;
    if args.swap_preemption {
        let gib = args.swap_space_gib;
        if !(gib.is_finite() && gib >= 0.0) {
            return Err(format!("--swap-space-gib must be >= 0, got {gib}").into());
        }
        e.preemption = Preemption::Swap {
            gbps: args.swap_gbps,
            host_bytes: (gib * (1u64 << 30) as f64) as u64,
        };
    }
    e.validate()?;
    let util = args
        .gpu_memory_utilization
        .unwrap_or(p.gpu_memory_utilization);
    if !(util > 0.0 && util <= 1.0) {
        return Err(format!("--gpu-memory-utilization must be in (0, 1], got {util}").into());
    }
    let gpu_name = args.gpu.clone().unwrap_or_else(|| p.gpu.to_string());
    let g = gpu(&gpu_name).ok_or_else(|| format!("unknown GPU {gpu_name:?} (h200, h100, a100)"))?;
    let profile = match &args.profile {
        Some(path) => load_profile(path)?,
        None => Profile::h200_assumed(),
    };
    let overhead = args.step_overhead_ms;
    if !(overhead.is_finite() && overhead >= 0.0) {
        return Err(format!("--step-overhead-ms must be >= 0, got {overhead}").into());
    }
    for (name, v) in [("slo-ttft", args.slo_ttft), ("slo-tpot", args.slo_tpot)] {
        if let Some(v) = v {
            positive(name, v)?;
        }
    }
    let sizes = match (&args.block_sizes, args.block_size, fixed_block) {
        (Some(v), _, _) => v.clone(),
        (None, Some(b), _) => vec![b],
        (None, None, Some(b)) => vec![b],
        (None, None, None) => vec![p.block_size],
    };
    if sizes.is_empty() || sizes.contains(&0) {
        return Err("block sizes must be at least 1".into());
    }
    let s = RunSettings {
        engine: e,
        num_gpu_blocks_override: override_blocks,
        gpu_memory_utilization: util,
        model: ModelShape {
            dtype: args.kv_cache_dtype,
            ..model_shape(&args.model)?
        },
        gpu: g,
        tp: args.tp,
        profile,
        efficiency_scale: 1.0,
        cpu_overhead_s: overhead / 1e3,
        swap_gbps: args.swap_preemption.then_some(args.swap_gbps),
        clock_steps: args.clock == ClockArg::Steps,
        slo: Slo {
            ttft: args.slo_ttft,
            tpot: args.slo_tpot,
        },
    };
    Ok((s, sizes, p.name.to_string()))
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
    engine: &'a EngineConfig,
    runs: &'a [Outcome],
}

pub fn run(args: Args) -> CmdResult {
    let (requests, name, fields) = workload(&args)?;
    let (s, sizes, preset_name) = settings(&args, fields.as_ref())?;
    if args.step_log.is_some() && sizes.len() > 1 {
        return Err("--step-log needs a single block size".into());
    }
    let total = (requests.len() * sizes.len()) as u64;
    let bar = Bar::new("sim engine: requests finished", total);
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
    drop(bar);
    let json = JsonReport {
        workload: &name,
        preset: &preset_name,
        model: &s.model,
        gpu: s.gpu.name,
        tp: s.tp,
        profile_source: format!("{}: {}", s.profile.device, s.profile.source),
        profile_measured: s.profile.measured,
        engine: &s.engine,
        runs: &outcomes,
    };
    if let Some(dir) = &args.out {
        output::write_all(dir, &json, &outcomes)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print_text(&s, &name, &preset_name, &requests, &outcomes);
        if let Some(dir) = &args.out {
            println!("wrote {}", dir.join("engine.json and SVG plots").display());
        }
    }
    Ok(())
}

fn dist(d: Option<pagedkv::sim::engine::Distribution>, scale: f64) -> [String; 3] {
    d.map_or_else(
        || ["-".into(), "-".into(), "-".into()],
        |d| [d.p50, d.p90, d.p99].map(|x| format!("{:.2}", x * scale)),
    )
}

fn print_text(
    s: &RunSettings,
    name: &str,
    preset_name: &str,
    requests: &[ServingRequest],
    outcomes: &[Outcome],
) {
    let e = &s.engine;
    let n = requests.len() as f64;
    let mean = |f: &dyn Fn(&ServingRequest) -> f64| requests.iter().map(f).sum::<f64>() / n;
    println!(
        "engine: vLLM 0.33 V1 scheduler, preset {preset_name}: max_num_seqs {}, max_num_batched_tokens {}, prefix caching {}, chunked prefill {}, policy {}, {} scheduling{}",
        e.max_num_seqs,
        e.max_num_batched_tokens,
        if e.enable_prefix_caching { "on" } else { "off" },
        if e.enable_chunked_prefill { "on" } else { "off" },
        e.scheduling_policy,
        if e.async_scheduling { "async" } else { "synchronous" },
        if matches!(e.preemption, Preemption::Swap { .. }) { ", swap preemption" } else { "" },
    );
    if s.clock_steps {
        println!("clock: steps (every step one unit)");
    } else {
        println!(
            "model: {} (KV cache {}) on {} × {} ({} GB/s, {} TFLOP/s), step overhead {} ms; attention efficiency from {} ({}){}",
            s.model.name,
            s.model.dtype,
            s.tp,
            s.gpu.name,
            s.gpu.hbm_gbps,
            s.gpu.peak_tflops,
            s.cpu_overhead_s * 1e3,
            s.profile.device,
            s.profile.source,
            if s.profile.measured { "" } else { " — an assumption, not a measurement" }
        );
    }
    println!(
        "workload: {name} — {} requests, mean prompt {:.0}, mean output {:.0} tokens, last arrival {:.1}",
        requests.len(),
        mean(&|r| r.prompt.len() as f64),
        mean(&|r| f64::from(r.output_len)),
        requests.iter().map(|r| r.arrival).fold(0.0, f64::max)
    );
    let unit = outcomes[0].report.time_unit;
    // Latencies in milliseconds when the clock counts seconds.
    let (scale, lat) = if unit == "s" {
        (1e3, "ms")
    } else {
        (1.0, "steps")
    };
    let mut t = Table::new([
        "block".to_string(),
        "GPU blocks".into(),
        "eff".into(),
        format!("req/{unit}"),
        format!("out tok/{unit}"),
        format!("TTFT p50/p90/p99 {lat}"),
        format!("TPOT p50/p90/p99 {lat}"),
        format!("E2E p50/p99 {}", if unit == "s" { "s" } else { "steps" }),
        "preempt".into(),
        "recomputed".into(),
        "hit %".into(),
        "KV mean/peak %".into(),
    ]);
    for o in outcomes {
        let r: &EngineReport = &o.report;
        let e2e = r
            .e2e
            .map_or("-".into(), |d| format!("{:.2}/{:.2}", d.p50, d.p99));
        t.row([
            o.block_size.to_string(),
            o.num_gpu_blocks.to_string(),
            format!("{:.2}", o.efficiency),
            format!("{:.2}", r.requests_per_time),
            format!("{:.0}", r.output_tokens_per_time),
            dist(r.ttft, scale).join("/"),
            dist(r.tpot, scale).join("/"),
            e2e,
            r.preemptions.to_string(),
            r.recomputed_tokens.to_string(),
            r.prefix_cache_hit_ratio
                .map_or("-".into(), |h| format!("{:.1}", 100.0 * h)),
            format!(
                "{:.1}/{:.1}",
                100.0 * r.mean_kv_utilization,
                100.0 * r.peak_kv_utilization
            ),
        ]);
    }
    print!("{t}");
    for o in outcomes {
        let r = &o.report;
        let mut line = format!(
            "block {}: {} of {} requests in {:.2} {unit} ({} steps, busy {:.0}%), mean running {:.1}, waiting {:.1}, in the engine {:.1}",
            o.block_size,
            r.completed,
            r.requests,
            r.makespan,
            r.steps,
            100.0 * r.busy_fraction,
            r.mean_running,
            r.mean_waiting,
            r.mean_in_system
        );
        if let Some(g) = r.goodput {
            line += &format!(
                ", goodput {g:.2} req/{unit} ({:.1}% within the SLOs)",
                100.0 * r.slo_attainment.unwrap_or(0.0)
            );
        }
        if r.swapped_out_tokens > 0 {
            line += &format!(
                ", swapped {} tokens out and {} back",
                r.swapped_out_tokens, r.swapped_in_tokens
            );
        }
        println!("{line}");
    }
}
