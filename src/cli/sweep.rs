//! `pagedkv sweep`: which block size should an engine use? Fragmentation from a trace against
//! bandwidth measured on the device, every block size from 1 to 256, both put together end to end
//! by a simulated vLLM engine on the trace, next to vLLM's default of 16.

use crate::cli::{count, count_u64, CmdResult};
use crate::device::DeviceChoice;
use crate::kv::Dtype;
use crate::progress::StderrProgress;
use crate::sweep::{
    self, model, output, run_plan, run_sweep, text, ModelChoice, Phase, Progress, SweepConfig,
    SweepPlan, SweepReport, WorkloadChoice,
};
use crate::workload::synthetic::SizeDist;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Device whose bandwidth is measured.
    #[arg(long, value_enum, default_value_t = DeviceChoice::Auto)]
    device: DeviceChoice,
    /// A model preset (llama-3-8b, llama-3.1-8b, llama-3-70b, llama-3.1-70b, llama-2-7b,
    /// mistral-7b, qwen2.5-7b, qwen2-72b, qwen3-32b, ...), or a Hugging Face config.json (a file
    /// or a folder holding one).
    #[arg(long, default_value = "llama-3-8b")]
    model: String,
    /// vLLM's --quantization: fp8 weights (1 byte per linear-layer parameter, FP8 GEMMs).
    #[arg(long, value_enum)]
    quantization: Option<crate::sim::run_spec::Quantization>,
    /// The end-to-end runs' step times: measured kernel tables where they cover the run, else
    /// the roofline (auto); or one of them.
    #[arg(long, value_enum, default_value_t = crate::sim::latency::StepTimes::Auto)]
    step_times: crate::sim::latency::StepTimes,
    /// Measured kernel tables of your own for the end-to-end runs (docs/step-profiles.md).
    #[arg(long)]
    step_profile: Option<PathBuf>,
    /// Override the preset's number of layers.
    #[arg(long, value_parser = count(0..))]
    layers: Option<usize>,
    /// Override the preset's number of query heads (attention's shape).
    #[arg(long, value_parser = count(0..))]
    heads: Option<usize>,
    /// Override the preset's number of KV heads.
    #[arg(long, value_parser = count(0..))]
    kv_heads: Option<usize>,
    /// Override the preset's head dimension.
    #[arg(long, value_parser = count(0..))]
    head_dim: Option<usize>,
    /// KV cache element type.
    #[arg(long, value_enum, conflicts_with = "kv_dtype")]
    dtype: Option<Dtype>,
    /// Sweep once per KV cache dtype (e.g. f16,fp8_e4m3) and say whether the recommended block
    /// size moves: fp8 halves a token's bytes, so a block of 16 holds half as many contiguous
    /// bytes and the pool twice the tokens.
    #[arg(long, value_enum, value_delimiter = ',')]
    kv_dtype: Vec<Dtype>,
    /// Override the preset's parameter count, in billions (weights take 2 bytes each).
    #[arg(long)]
    params_b: Option<f64>,
    /// KV pool in GiB (all layers); default: what the GPUs leave after the weights.
    #[arg(long)]
    pool_gib: Option<f64>,
    /// GPU memory in MiB for the default pool (H200 as nvidia-smi reports it).
    #[arg(long, default_value_t = model::H200_MEMORY_MIB, value_parser = count_u64(0..))]
    gpu_mib: u64,
    /// vLLM's gpu_memory_utilization for the default pool.
    #[arg(long, default_value_t = model::VLLM_GPU_MEMORY_UTILIZATION)]
    gpu_util: f64,
    /// GPUs the model and pool are spread over (tensor parallel).
    #[arg(long, default_value_t = 1, value_parser = count(0..))]
    gpus: usize,
    /// Trace CSV with prompt and output token columns (default: the Azure 2023 conversation trace).
    #[arg(long, conflicts_with = "synthetic")]
    trace: Option<PathBuf>,
    /// Synthetic prompt sizes instead of a trace: fixed:N, uniform:LO,HI or lognormal:MEAN,SD.
    #[arg(long)]
    synthetic: Option<SizeDist>,
    /// Synthetic output sizes (same forms).
    #[arg(long, default_value = "fixed:0", requires = "synthetic")]
    synthetic_output: SizeDist,
    /// Synthetic: number of requests; trace: use only its first N requests.
    #[arg(long, value_parser = count(0..))]
    requests: Option<usize>,
    /// Space arrivals evenly at this many requests per second (replaces the trace's timestamps).
    #[arg(long)]
    rate: Option<f64>,
    /// Seed of synthetic sizes and of the probes' block tables.
    #[arg(long, default_value_t = 1, value_parser = count_u64(0..))]
    seed: u64,
    /// Turns per conversation of the multi-turn workload (prefix sharing).
    #[arg(long, default_value_t = 4, value_parser = count(0..))]
    turns: usize,
    /// System-prompt tokens shared by every request of the multi-turn workload.
    #[arg(long, default_value_t = 0, value_parser = count_u64(0..))]
    system_prompt: u64,
    /// Replay: decode time per output token, in milliseconds.
    #[arg(long, default_value_t = 20.0)]
    decode_ms: f64,
    /// Replay: prefill time per prompt token, in milliseconds (0: prefill is instant).
    #[arg(long, default_value_t = 0.0)]
    prefill_ms_per_token: f64,
    /// A smaller probe pool and decode batch, a coarser capacity search, and only what the answer
    /// reads: the first probe's attention beside its stream limit, not the 4 KiB-page probe, the
    /// gathers, the copy limit or the scalar conversion pass.
    #[arg(long)]
    quick: bool,
    /// Probe pool in MiB, K and V together (GPU default 2048, --quick 512; CPU default 128,
    /// --quick 64, at least 4x the last-level cache the run has, so that the gathers read DRAM as
    /// the stream limit does, and halved to fit half the memory available).
    #[arg(long, value_parser = count(0..))]
    probe_mib: Option<usize>,
    /// Timed repetitions per measurement, after a warm-up (default 2).
    #[arg(long, value_parser = count(0..))]
    reps: Option<usize>,
    /// Passes over every block size; each figure is the median over them, and their spread sets
    /// the recommendation's tie tolerance (default 3).
    #[arg(long, value_parser = count(0..))]
    rounds: Option<usize>,
    /// Skip the bandwidth side: fragmentation only.
    #[arg(long)]
    no_bandwidth: bool,
    /// Skip paged attention (the gathers are still measured).
    #[arg(long)]
    no_attention: bool,
    /// Skip the end-to-end engine simulation (the proxy then recommends).
    #[arg(long)]
    no_end_to_end: bool,
    #[command(flatten)]
    slo: crate::cli::sim_engine_args::SloArgs,
    /// Requests the SLO capacity search replays, the workload's first [default: 5000, --quick
    /// 2000].
    #[arg(long, value_parser = count(1..))]
    capacity_requests: Option<usize>,
    /// Refused: the SLO capacity is a search over the arrival rate, which closed-loop clients
    /// cap; compare block sizes at N clients with `sim engine --max-concurrency N --block-sizes
    /// 1,2,4,...` instead.
    #[arg(long, value_parser = count(1..))]
    max_concurrency: Option<usize>,
    /// Print every column (the default table keeps those that carry the answer, in 100 columns).
    #[arg(long)]
    wide: bool,
    /// Sequences in attention's decode batch (default: CPU 8, --quick 4; GPU 64, --quick 32).
    #[arg(long, value_parser = count(0..))]
    attention_batch: Option<usize>,
    /// Tokens per sequence of attention's batch; with --attention-trace-context, the cap
    /// (default: CPU 2048, --quick 1024; GPU 4096, --quick 2048).
    #[arg(long, value_parser = count(0..))]
    attention_context: Option<usize>,
    /// Attention's contexts from the workload: its first requests' prompt + output tokens, each
    /// capped at --attention-context (a ragged batch).
    #[arg(long)]
    attention_trace_context: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Write sweep.csv, sweep.json, SVG plots and index.html (the report to open in a browser)
    /// into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
}

impl Args {
    /// The library's settings, the flags' values as they are (the library checks them).
    fn config(&self) -> SweepConfig {
        SweepConfig {
            device: self.device,
            model: ModelChoice {
                preset: self.model.clone(),
                layers: self.layers,
                num_heads: self.heads,
                kv_heads: self.kv_heads,
                head_dim: self.head_dim,
                dtype: self.dtype,
                params_billion: self.params_b,
                weights: self
                    .quantization
                    .map(|crate::sim::run_spec::Quantization::Fp8| model::Weights::Fp8),
            },
            pool_gib: self.pool_gib,
            gpu_mib: self.gpu_mib,
            gpu_util: self.gpu_util,
            gpus: self.gpus,
            workload: match self.synthetic {
                Some(prompt) => WorkloadChoice::Synthetic {
                    prompt,
                    output: self.synthetic_output,
                },
                None => WorkloadChoice::Trace(self.trace.clone()),
            },
            requests: self.requests,
            rate: self.rate,
            seed: self.seed,
            turns: self.turns,
            system_prompt_tokens: self.system_prompt,
            decode_ms: self.decode_ms,
            prefill_ms_per_token: self.prefill_ms_per_token,
            quick: self.quick,
            probe_mib: self.probe_mib,
            reps: self.reps,
            rounds: self.rounds,
            bandwidth: !self.no_bandwidth,
            attention: !self.no_attention,
            end_to_end: !self.no_end_to_end,
            attention_batch: self.attention_batch,
            attention_context: self.attention_context,
            attention_trace_context: self.attention_trace_context,
            slo: self.slo.flags(),
            capacity_requests: self.capacity_requests,
            step_times: self.step_times,
            step_profile: self.step_profile.clone(),
        }
    }
}

/// The sweep's phases on stderr through the shared progress helper: a bar on a terminal, plain
/// lines in a log.
#[derive(Default)]
struct Bars(StderrProgress);

impl Progress for Bars {
    fn begin(&self, phase: Phase, steps: u64) {
        let what = match phase {
            Phase::Bandwidth => "sweep: bandwidth probes",
            Phase::EndToEnd => "sweep: engine runs (at most)",
        };
        crate::progress::Progress::begin(&self.0, what, steps);
    }

    fn step(&self, _phase: Phase, label: &str) {
        if !label.is_empty() {
            self.0.set_message(label);
        }
        crate::progress::Progress::advance(&self.0, 1);
    }

    fn end(&self, _phase: Phase) {
        crate::progress::Progress::end(&self.0);
    }
}

pub fn run(args: Args) -> CmdResult {
    if args.max_concurrency.is_some() {
        return Err(crate::sim::engine::clients::NO_RATE_SEARCH.into());
    }
    if args.kv_dtype.len() > 1 {
        return run_per_kv_dtype(args);
    }
    let mut config = args.config();
    if let Some(&d) = args.kv_dtype.first() {
        config.model.dtype = Some(d);
    }
    let report = run_sweep(&config, &Bars::default())?;
    if let Some(dir) = &args.out {
        output::write_all(&report, dir)?;
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        print_text(&report, args.out.as_ref(), args.wide)?;
    }
    Ok(())
}

/// One sweep per --kv-dtype (the first is the reference), each report as usual (under
/// `--out DIR/<dtype>`), then whether the recommended block size moves.
fn run_per_kv_dtype(args: Args) -> CmdResult {
    for (i, d) in args.kv_dtype.iter().enumerate() {
        if args.kv_dtype[..i].contains(d) {
            return Err(format!("--kv-dtype names {d} twice").into());
        }
    }
    // Every sweep's settings are checked before the first one runs.
    let plans = args
        .kv_dtype
        .iter()
        .map(|&dtype| {
            let mut config = args.config();
            config.model.dtype = Some(dtype);
            SweepPlan::new(&config)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut reports = Vec::new();
    for (&dtype, plan) in args.kv_dtype.iter().zip(plans) {
        let report = run_plan(plan, &Bars::default())?;
        if let Some(dir) = &args.out {
            output::write_all(&report, &dir.join(dtype.name()))?;
        }
        if !args.json {
            outln!("=== KV cache {dtype}")?;
            print_text(&report, args.out.as_ref(), args.wide)?;
            outln!()?;
        }
        reports.push(report);
    }
    let summary = sweep::kv_dtype_summary(&reports);
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "kv_dtypes": reports,
                "summary": summary,
            }))?
        )?;
    } else {
        outln!("{}", summary.line)?;
    }
    Ok(())
}

fn print_text(
    report: &SweepReport,
    out: Option<&PathBuf>,
    wide: bool,
) -> Result<(), crate::cli::stdout::StdoutFailed> {
    outln!("{}", text::verdict(report))?;
    outln!()?;
    for l in text::setting(report) {
        for w in text::wrap(&l, text::WIDTH) {
            outln!("{w}")?;
        }
    }
    outln!()?;
    out!("{}", text::table(report, wide))?;
    for l in text::key(report, wide) {
        outln!("{l}")?;
    }
    for l in text::footer(report) {
        outln!("{l}")?;
    }
    if let Some(dir) = out {
        let line = format!(
            "wrote {} (open it in a browser; CSV, JSON and plots beside it)",
            dir.join(output::INDEX_HTML).display()
        );
        for l in text::wrap(&line, text::WIDTH) {
            outln!("{l}")?;
        }
    }
    Ok(())
}
