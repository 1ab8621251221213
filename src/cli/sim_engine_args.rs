//! The flags `sim engine` and `sim cluster` share: where the requests come from, and the engine
//! every replica runs (vLLM's settings, the model and GPU, the host tier).

use crate::cli::{count, count_u64};
use crate::kv::Dtype;
use crate::sim::engine::config::{Policy, UNLIMITED_MODEL_LEN};
use crate::sim::engine::{EngineReport, Judged, ResolvedSlo, SloFlags, SloPreset};
use crate::sim::latency::StepTimes;
use crate::sim::radix::workload::{multiturn, MultiTurnConfig};
use crate::sim::run_spec::{self, Clock, Quantization, ResolvedRun, RunSpec, SpecError};
use crate::workload::scenario::{read_scenario, EngineFields};
use crate::workload::serving::{all_at_once, from_prompts, from_trace, scale_rate, ServingRequest};
use crate::workload::synthetic::{SizeDist, SyntheticRequests};
use crate::workload::trace::read_trace;
use std::path::PathBuf;

pub type BoxError = Box<dyn std::error::Error>;

#[derive(clap::Args)]
pub struct WorkloadArgs {
    /// Trace: a CSV with prompt and output token columns and timestamps (Azure's), or Mooncake's
    /// JSON lines with prefix hash ids, told apart by their first character.
    #[arg(long, group = "workload")]
    pub trace: Option<PathBuf>,
    /// Scenario file (JSON: requests with token ids or lengths, optional engine settings).
    #[arg(long, group = "workload")]
    pub scenario: Option<PathBuf>,
    /// Poisson arrivals at this many requests per second (log-normal prompts, exponential outputs).
    #[arg(long, group = "workload")]
    pub poisson: Option<f64>,
    /// Multi-turn conversations with shared prefixes (as `sim radix` makes), Poisson arrivals at
    /// this many requests per second.
    #[arg(long, group = "workload")]
    pub multiturn: Option<f64>,
    /// Requests: a trace's first N; generated workloads' count [default 2000].
    #[arg(long, value_parser = count(1..))]
    pub requests: Option<usize>,
    /// Replay arrivals this many times faster (2: twice the rate; inf: every request at time 0,
    /// in arrival order, as vLLM's --request-rate inf).
    #[arg(long, default_value_t = 1.0)]
    pub rate_scale: f64,
    /// Poisson: mean prompt tokens.
    #[arg(long, default_value_t = 1000.0)]
    pub prompt_mean: f64,
    /// Poisson: standard deviation of ln(prompt length).
    #[arg(long, default_value_t = 1.0)]
    pub prompt_sigma: f64,
    /// Poisson: mean output tokens.
    #[arg(long, default_value_t = 200.0)]
    pub output_mean: f64,
    /// Multiturn: output lengths (fixed:N, uniform:LO,HI or lognormal:MEAN,SD).
    #[arg(long, default_value = "uniform:64,192")]
    pub output: SizeDist,
    /// Seed of generated workloads and of predicted lengths.
    #[arg(long, default_value_t = 1, value_parser = count_u64(0..))]
    pub seed: u64,
}

/// The engine's flags: a preset, then what overrides it, by concern (clap lists them in this
/// order).
#[derive(clap::Args)]
pub struct EngineArgs {
    /// vLLM's defaults for a GPU and usage.
    #[arg(long, default_value_t = RunSpec::default().preset)]
    pub preset: String,
    #[command(flatten)]
    pub vllm: VllmArgs,
    #[command(flatten)]
    pub beyond: BeyondVllmArgs,
    #[command(flatten)]
    pub tier: crate::cli::sim_tier_args::TierArgs,
    #[command(flatten)]
    pub hardware: HardwareArgs,
    #[command(flatten)]
    pub timing: StepTimeArgs,
    #[command(flatten)]
    pub slo: SloArgs,
}

/// vLLM's own engine flags, as vLLM names them.
#[derive(clap::Args)]
pub struct VllmArgs {
    /// vLLM's --block-size.
    #[arg(long, value_parser = count(0..))]
    pub block_size: Option<usize>,
    /// vLLM's --num-gpu-blocks-override: blocks in the pool (null block included) at every block
    /// size [default: what the GPU's memory leaves after the weights].
    #[arg(long, value_parser = count(0..))]
    pub num_gpu_blocks_override: Option<usize>,
    /// vLLM's --gpu-memory-utilization: the GPU memory's share for weights, activations and the
    /// KV pool [default: the preset's].
    #[arg(long)]
    pub gpu_memory_utilization: Option<f64>,
    /// vLLM's --max-num-seqs: requests running at once [default: the preset's].
    #[arg(long, value_parser = count(0..))]
    pub max_num_seqs: Option<usize>,
    /// vLLM's --max-num-batched-tokens: tokens scheduled in one step [default: the preset's].
    #[arg(long, value_parser = count(0..))]
    pub max_num_batched_tokens: Option<usize>,
    /// vLLM's --enable-prefix-caching [default: the preset's, on in vLLM 0.33].
    #[arg(long, overrides_with = "no_enable_prefix_caching")]
    pub enable_prefix_caching: bool,
    /// vLLM's --no-enable-prefix-caching.
    #[arg(long)]
    pub no_enable_prefix_caching: bool,
    /// vLLM's --enable-chunked-prefill [default: the preset's, on in vLLM 0.33].
    #[arg(long, overrides_with = "no_enable_chunked_prefill")]
    pub enable_chunked_prefill: bool,
    /// vLLM's --no-enable-chunked-prefill.
    #[arg(long)]
    pub no_enable_chunked_prefill: bool,
    /// vLLM's --long-prefill-token-threshold: the most prompt tokens one request is scheduled in
    /// a step (0: no limit) [default: the preset's].
    #[arg(long, value_parser = count(0..))]
    pub long_prefill_token_threshold: Option<usize>,
    /// fcfs, priority (vLLM's); sjf, srpt, aging (beyond vLLM).
    #[arg(long, value_enum, ignore_case = true)]
    pub scheduling_policy: Option<Policy>,
    /// Longest prompt + output served; longer requests are refused as vLLM's server refuses them
    /// (counted) [default: the model's context length].
    #[arg(long, value_parser = count(0..))]
    pub max_model_len: Option<usize>,
    /// Fraction of the pool admissions keep free while requests run (vLLM's default 0).
    #[arg(long)]
    pub watermark: Option<f64>,
    /// Schedule each step before the previous one's output is processed (vLLM 0.33 serves this
    /// way); the synchronous loop otherwise.
    #[arg(long)]
    pub async_scheduling: bool,
    /// Tensor parallelism: weights and KV heads split over this many GPUs, the pool per GPU.
    #[arg(long, default_value_t = RunSpec::default().tp, value_parser = count(1..=64))]
    pub tp: usize,
}

/// Scheduling beyond vLLM's: preemption by swapping, and the predicted lengths and aging of the
/// sjf, srpt and aging policies.
#[derive(clap::Args)]
pub struct BeyondVllmArgs {
    /// Beyond vLLM: preempt by swapping KV to host memory and back instead of recomputing.
    #[arg(long)]
    pub swap_preemption: bool,
    /// Host link bandwidth for swaps, GB/s per GPU (an assumption unless measured with
    /// `pagedkv swap`).
    #[arg(long, default_value_t = RunSpec::default().swap_gbps)]
    pub swap_gbps: f64,
    /// Host memory for swapped KV, GiB per GPU (vLLM's old --swap-space default).
    #[arg(long, default_value_t = RunSpec::default().swap_space_gib)]
    pub swap_space_gib: f64,
    /// sjf/srpt: rank by predicted output lengths, true × e^N(0, sigma²) (0: true lengths).
    #[arg(long, default_value_t = RunSpec::default().predict_sigma)]
    pub predict_sigma: f64,
    /// aging: seconds (steps) per priority level.
    #[arg(long, default_value_t = RunSpec::default().aging_delay)]
    pub aging_delay: f64,
}

/// What runs: the model, its weights and KV dtype, the GPU.
#[derive(clap::Args)]
pub struct HardwareArgs {
    /// A model preset (data/models/), or a Hugging Face config.json (a file, or a folder holding
    /// one).
    #[arg(long, default_value_t = RunSpec::default().model)]
    pub model: String,
    /// vLLM's --quantization: fp8 stores the linear layers' weights in fp8 (1 byte each, FP8
    /// GEMMs) [default: what the model's config.json says, else its bf16/f16 weights].
    #[arg(long, value_enum)]
    pub quantization: Option<Quantization>,
    /// How the KV cache stores K and V (vLLM's --kv-cache-dtype): f16/bf16 ("auto"), or
    /// fp8_e4m3 / fp8_e5m2 at one byte per element: twice the tokens in the same pool, half the
    /// KV bytes a step reads.
    #[arg(long, value_enum, default_value_t = RunSpec::default().kv_cache_dtype)]
    pub kv_cache_dtype: Dtype,
    /// h200, h100, a100 [default: the preset's].
    #[arg(long)]
    pub gpu: Option<String>,
}

/// How long a step takes, and the clock the run keeps.
#[derive(clap::Args)]
pub struct StepTimeArgs {
    /// Where step times come from: measured kernel tables where they cover the model, GPU,
    /// dtypes and tensor parallelism, else the roofline (auto); or one of them.
    #[arg(long, value_enum, default_value_t = RunSpec::default().step_times)]
    pub step_times: StepTimes,
    /// Measured kernel tables of your own (a pagedkv step profile: docs/step-profiles.md)
    /// [default: the shipped ones, AIConfigurator 0.12.0's for H100 and H200].
    #[arg(long)]
    pub step_profile: Option<PathBuf>,
    /// Attention efficiency per block size: a profile (`sweep --out` writes one), `sweep --json`
    /// output or `attention --json` reports [default: the built-in H200 assumption].
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// CPU time per step (scheduling, output processing), milliseconds; hidden under async
    /// scheduling while the GPU is busier.
    #[arg(long, default_value_t = RunSpec::default().step_overhead_ms)]
    pub step_overhead_ms: f64,
    #[arg(long, value_enum, default_value_t = RunSpec::default().clock)]
    pub clock: Clock,
}

/// The SLO flags of `sim engine`, `sim cluster` and `sweep` ([`crate::sim::engine::slo`]).
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct SloArgs {
    /// SLOs from a published preset (values below; sources in the README and the JSON report);
    /// a --slo-* flag overrides the preset's value and the report names it. Default: sim engine
    /// and sim cluster none (only the --slo-* flags given); sweep the preset that fits the
    /// workload (mooncake for Mooncake's traces, else custom).
    #[arg(long, value_enum)]
    pub slo: Option<SloPreset>,
    /// Time to first token objective, seconds (steps under --clock steps); overrides the
    /// preset's.
    #[arg(long)]
    pub slo_ttft: Option<f64>,
    /// Time per output token objective (after the first); overrides the preset's.
    #[arg(long)]
    pub slo_tpot: Option<f64>,
    /// Mooncake's time-between-tokens objective: a request's mean of its longest 10% of token
    /// intervals (--slo mooncake --slo-tbt 0.1 is mooncake-100); overrides the preset's.
    #[arg(long)]
    pub slo_tbt: Option<f64>,
    /// Share of the requests that must be within every objective at once, in (0, 1]; replaces a
    /// preset's share and rule (MLPerf's percentile per objective) [custom: DistServe's].
    #[arg(long)]
    pub slo_attainment: Option<f64>,
}

impl SloArgs {
    pub fn flags(&self) -> SloFlags {
        SloFlags {
            preset: self.slo,
            ttft_s: self.slo_ttft,
            tpot_s: self.slo_tpot,
            tbt_s: self.slo_tbt,
            attainment: self.slo_attainment,
        }
    }
}

/// A run's clause about its SLOs: goodput, the share within them, and whether the preset's
/// attainment holds (over all its requests).
pub fn slo_clause(r: &EngineReport, slo: &ResolvedSlo) -> String {
    let Some(g) = r.objectives.goodput else {
        return String::new();
    };
    let t = &slo.targets;
    let verdict = if t.sustained(r) { "met" } else { "missed" };
    let pct = |x: f64| format!("{:.1}%", 100.0 * x);
    let within = match (t.judged, r.objectives.slo_attainment_each) {
        (Judged::EachObjective, Some(e)) => {
            let each: Vec<String> = [("TTFT", e.ttft), ("TPOT", e.tpot), ("TBT", e.tbt)]
                .into_iter()
                .filter_map(|(n, x)| x.map(|x| format!("{n} {}", pct(x))))
                .collect();
            format!(
                "within each SLO: {}; each ≥ {} asked: {verdict}",
                each.join(", "),
                pct(t.attainment)
            )
        }
        _ => format!(
            "{} within the SLOs; ≥ {} asked: {verdict}",
            pct(r.objectives.slo_attainment.unwrap_or(0.0)),
            pct(t.attainment)
        ),
    };
    format!(", goodput {g:.2} req/{} ({within})", r.time_unit)
}

pub fn positive(name: &str, x: f64) -> Result<f64, String> {
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(format!("--{name} must be a positive number, got {x}"))
    }
}

/// The requests and a name for them; a scenario also brings engine settings. A trace defaults to
/// `default_trace`.
pub fn workload(
    args: &WorkloadArgs,
    default_trace: &str,
) -> Result<(Vec<ServingRequest>, String, Option<EngineFields>), BoxError> {
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
        let cfg = MultiTurnConfig::default();
        // Its prompts are token lists, built before anything runs (4 bytes a token).
        let need = cfg.least_tokens(generated).saturating_mul(4);
        let what = format!("--multiturn with {generated} requests");
        crate::host_memory::ensure_fits(need, &what)?;
        let prompts = multiturn(&cfg, generated, args.seed)?;
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
        let path = args.trace.clone().unwrap_or_else(|| default_trace.into());
        let mut trace = read_trace(&path)?;
        trace.truncate(n.unwrap_or(usize::MAX));
        let (r, fix) = trace.serving();
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
    if args.rate_scale == f64::INFINITY {
        all_at_once(&mut requests);
    } else {
        let scale = positive("rate-scale", args.rate_scale)?;
        if scale != 1.0 {
            scale_rate(&mut requests, scale);
        }
    }
    Ok((requests, name, fields))
}

impl EngineArgs {
    /// The run the flags ask for, as plain values.
    pub fn spec(&self) -> RunSpec {
        // The later of a flag and its `--no-` twin wins; clap keeps only the last given.
        let either = |on: bool, off: bool| match (on, off) {
            (_, true) => Some(false),
            (true, false) => Some(true),
            (false, false) => None,
        };
        RunSpec {
            preset: self.preset.clone(),
            block_size: self.vllm.block_size,
            num_gpu_blocks_override: self.vllm.num_gpu_blocks_override,
            gpu_memory_utilization: self.vllm.gpu_memory_utilization,
            max_num_seqs: self.vllm.max_num_seqs,
            max_num_batched_tokens: self.vllm.max_num_batched_tokens,
            enable_prefix_caching: either(
                self.vllm.enable_prefix_caching,
                self.vllm.no_enable_prefix_caching,
            ),
            enable_chunked_prefill: either(
                self.vllm.enable_chunked_prefill,
                self.vllm.no_enable_chunked_prefill,
            ),
            long_prefill_token_threshold: self.vllm.long_prefill_token_threshold,
            scheduling_policy: self.vllm.scheduling_policy,
            max_model_len: self.vllm.max_model_len,
            watermark: self.vllm.watermark,
            async_scheduling: self.vllm.async_scheduling,
            tp: self.vllm.tp,
            swap_preemption: self.beyond.swap_preemption,
            swap_gbps: self.beyond.swap_gbps,
            swap_space_gib: self.beyond.swap_space_gib,
            predict_sigma: self.beyond.predict_sigma,
            aging_delay: self.beyond.aging_delay,
            tier: self.tier.spec(),
            model: self.hardware.model.clone(),
            quantization: self.hardware.quantization,
            kv_cache_dtype: self.hardware.kv_cache_dtype,
            gpu: self.hardware.gpu.clone(),
            step_times: self.timing.step_times,
            step_profile: self.timing.step_profile.clone(),
            profile: self.timing.profile.clone(),
            step_overhead_ms: self.timing.step_overhead_ms,
            clock: self.timing.clock,
            slo: self.slo.flags(),
        }
    }
}

/// The flags' run ([`run_spec::resolve`]): preset, then the scenario's engine settings, then the
/// flags. `seed` seeds predicted output lengths.
pub fn settings(
    args: &EngineArgs,
    fields: Option<&EngineFields>,
    seed: u64,
) -> Result<ResolvedRun, SpecError> {
    run_spec::resolve(&args.spec(), fields, seed)
}

/// The lines a simulator's text report opens with about its model: the model, its GPUs and step
/// overhead; which step times (measured tables beside the roofline, or the roofline and why);
/// where the attention efficiency per block size comes from.
pub fn model_lines(r: &ResolvedRun, per: &str) -> Vec<String> {
    let s = &r.settings;
    if s.clock_steps {
        return vec!["clock: steps (every step one unit)".into()];
    }
    let mut out = vec![
        format!(
            "model: {} ({} weights, KV cache {}) on {} × {}{per} ({} GB/s, {} TFLOP/s), step overhead {} ms",
            s.model.name,
            s.model.weights,
            s.model.dtype,
            s.tp,
            s.gpu.name,
            s.gpu.hbm_gbps,
            s.gpu.peak_tflops,
            s.cpu_overhead_s * 1e3,
        ),
        s.step_times.line.clone(),
    ];
    out.extend(s.beside_roofline(r.block_size));
    out.push(format!(
        "attention efficiency per block size from {} ({}){}",
        s.profile.device,
        s.profile.source,
        if s.profile.measured {
            ""
        } else {
            " — an assumption, not a measurement"
        }
    ));
    out
}

/// Lines that say where max_model_len and the host tier come from.
pub fn describe_limits(r: &ResolvedRun) -> Vec<String> {
    let e = &r.settings.engine;
    let mut out = vec![if e.max_model_len == UNLIMITED_MODEL_LEN {
        format!("max_model_len: {}", r.max_model_len_source)
    } else {
        format!(
                "max_model_len: {} ({}); as vLLM's server, a prompt of it or more and an output above it are refused, a longer request is shortened to end there",
                e.max_model_len, r.max_model_len_source
            )
    }];
    if let (Some(o), Some(src)) = (e.cpu_offload, &r.offload_source) {
        out.push(crate::cli::sim_tier_args::describe(&o, src, r.block_size));
    }
    out
}

/// The workload line both `sim engine` and `sim cluster` print: requests, how many carry
/// shared-prefix token ids (when any do), mean lengths, the last arrival.
pub fn workload_line(name: &str, requests: &[ServingRequest]) -> String {
    let n = requests.len() as f64;
    let mean = |f: &dyn Fn(&ServingRequest) -> f64| requests.iter().map(f).sum::<f64>() / n;
    let shared = requests.iter().filter(|r| r.prompt.has_tokens()).count();
    let with_ids = if shared > 0 {
        format!(" ({shared} with shared-prefix token ids)")
    } else {
        String::new()
    };
    format!(
        "workload: {name} — {} requests{with_ids}, mean prompt {:.0}, mean output {:.0} tokens, last arrival {:.1}",
        requests.len(),
        mean(&|r| r.prompt.len() as f64),
        mean(&|r| f64::from(r.output_len)),
        requests.iter().map(|r| r.arrival).fold(0.0, f64::max)
    )
}
