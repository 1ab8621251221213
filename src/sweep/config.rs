//! What a sweep is asked for, in plain values (the CLI fills one from its flags), and how each
//! value becomes the sweep's inputs: the model shape (a preset with overrides), the KV pool (given,
//! or what the GPUs leave after the weights), the workload (a trace or synthetic sizes), and the
//! probes' sizes, whose defaults depend on the device. Every check names the CLI flag it concerns.

use super::{
    model, AttentionBatch, DurationModel, MemoryConfig, ModelShape, ProbeOptions, SweepError,
};
use crate::device::DeviceChoice;
use crate::kv::Dtype;
use crate::sim::engine::{ResolvedSlo, SloFlags, SloPreset};
use crate::sim::goodput::SearchLimits;
use crate::sim::latency::{choose, Choice, StepProfile, StepTimes};
use crate::workload::azure::{with_rate, Request};
use crate::workload::synthetic::{synthetic_requests, SizeDist};
use crate::workload::trace::TraceFormat;
use std::path::PathBuf;

/// The Azure LLM inference trace 2023 (conversation), shipped with the crate.
pub const DEFAULT_TRACE: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/data/azure_llm_2023_conv.csv");

/// Synthetic requests when no count is given.
const DEFAULT_SYNTHETIC_REQUESTS: usize = 10_000;
/// Most requests a workload may hold.
const MAX_REQUESTS: usize = 10_000_000;
/// Timed repetitions per measurement (after a warm-up) and passes over every block size.
const DEFAULT_REPS: usize = 2;
const DEFAULT_ROUNDS: usize = 3;
/// Tokens per sequence of the gathers' block table.
const PROBE_SEQ_TOKENS: usize = 1024;

/// A model preset ([`model::preset_names`]) and the fields that override it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelChoice {
    pub preset: String,
    pub layers: Option<usize>,
    /// Query heads (attention's shape).
    pub num_heads: Option<usize>,
    pub kv_heads: Option<usize>,
    pub head_dim: Option<usize>,
    pub dtype: Option<Dtype>,
    /// Parameters in billions (weights take 2 bytes each).
    pub params_billion: Option<f64>,
    /// How the weights are stored (`None`: as the model's config says).
    pub weights: Option<model::Weights>,
}

/// Where the requests come from.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkloadChoice {
    /// A trace CSV with prompt and output token columns; `None`: [`DEFAULT_TRACE`].
    Trace(Option<PathBuf>),
    /// Sizes drawn from two distributions (seeded by [`SweepConfig::seed`]).
    Synthetic { prompt: SizeDist, output: SizeDist },
}

/// Everything a sweep is asked for; `None` fields take the defaults documented on them.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepConfig {
    /// The device whose bandwidth is measured.
    pub device: DeviceChoice,
    pub model: ModelChoice,
    /// KV pool in GiB (all layers); `None`: what `gpus` GPUs of `gpu_mib` MiB leave after the
    /// weights at utilization `gpu_util`.
    pub pool_gib: Option<f64>,
    pub gpu_mib: u64,
    pub gpu_util: f64,
    /// GPUs the model and pool are spread over (also the end-to-end runs' tensor parallelism).
    pub gpus: usize,
    pub workload: WorkloadChoice,
    /// Synthetic: number of requests (default 10,000); trace: its first N requests.
    pub requests: Option<usize>,
    /// Arrivals spaced evenly at this many requests per second (replacing the trace's).
    pub rate: Option<f64>,
    /// Seed of synthetic sizes and of the probes' block tables.
    pub seed: u64,
    /// Turns per conversation of the multi-turn workload (prefix sharing).
    pub turns: usize,
    /// System-prompt tokens every request of the multi-turn workload shares.
    pub system_prompt_tokens: u64,
    /// Replay: decode time per output token, and prefill time per prompt token (milliseconds).
    pub decode_ms: f64,
    pub prefill_ms_per_token: f64,
    /// A smaller probe pool and decode batch, a coarser capacity search, and only the
    /// measurements the answer reads ([`ProbeOptions::answer_only`]).
    pub quick: bool,
    /// Probe pool in MiB, K and V together (default: see [`SweepConfig::probe_options`]).
    pub probe_mib: Option<usize>,
    /// Timed repetitions per measurement (default 2) and passes over every block size (default 3).
    pub reps: Option<usize>,
    pub rounds: Option<usize>,
    /// Measure bandwidth; attention (besides the gathers); run the end-to-end engine simulation.
    pub bandwidth: bool,
    pub attention: bool,
    pub end_to_end: bool,
    /// Attention's decode batch: sequences and tokens per sequence (the cap with
    /// `attention_trace_context`); defaults in [`SweepConfig::attention_batch`].
    pub attention_batch: Option<usize>,
    pub attention_context: Option<usize>,
    /// Attention's contexts from the workload's first requests (a ragged batch).
    pub attention_trace_context: bool,
    /// The SLO flags the end-to-end capacity is searched against: a preset (else the one that
    /// fits the workload, [`SweepConfig::slo`]) and the values that override it.
    pub slo: SloFlags,
    /// Requests the capacity search replays (the workload's first); `None`: see
    /// [`SweepConfig::capacity_requests`].
    pub capacity_requests: Option<usize>,
    /// The end-to-end runs' step-time model, and tables of the user's own
    /// ([`crate::sim::latency::choose`]).
    pub step_times: StepTimes,
    pub step_profile: Option<PathBuf>,
}

/// The preset the sweep takes when none is given, and why: Mooncake's traces (JSON lines, by their
/// format) were judged by Mooncake against TTFT ≤ 30 s (their prompts average 12k tokens, which a
/// 2 s TTFT cannot fit at any rate); anything else keeps the sweep's default (`custom` at its
/// defaults, which in preset terms is `--slo mlperf --slo-attainment 0.9`).
pub fn fitting_preset(format: Option<TraceFormat>) -> (SloPreset, String) {
    match format {
        Some(TraceFormat::Mooncake) => (
            SloPreset::Mooncake,
            "chosen for the workload: a Mooncake trace, judged by Mooncake's own SLOs".into(),
        ),
        _ => (
            SloPreset::Custom,
            "the default for workloads other than Mooncake's traces: MLPerf's Llama-3.1-8B \
             targets at DistServe's 90%, i.e. --slo mlperf --slo-attainment 0.9"
                .into(),
        ),
    }
}

fn invalid(message: impl Into<String>) -> SweepError {
    SweepError::Invalid(message.into())
}

fn positive(name: &str, x: f64) -> Result<f64, SweepError> {
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(invalid(format!(
            "--{name} must be a positive number, got {x}"
        )))
    }
}

/// Milliseconds to seconds; negative or non-finite is an error.
fn seconds(name: &str, ms: f64) -> Result<f64, SweepError> {
    if ms.is_finite() && ms >= 0.0 {
        Ok(ms / 1e3)
    } else {
        Err(invalid(format!(
            "--{name} must be a non-negative number, got {ms}"
        )))
    }
}

impl ModelChoice {
    /// The preset with its overrides applied, checked.
    pub fn shape(&self) -> Result<ModelShape, SweepError> {
        let mut m = model::load(&self.preset).map_err(|e| invalid(e.to_string()))?;
        m.layers = self.layers.unwrap_or(m.layers);
        m.num_heads = self.num_heads.unwrap_or(m.num_heads);
        m.kv_heads = self.kv_heads.unwrap_or(m.kv_heads);
        m.head_dim = self.head_dim.unwrap_or(m.head_dim);
        m.dtype = self.dtype.unwrap_or(m.dtype);
        m.params_billion = self.params_billion.unwrap_or(m.params_billion);
        m.weights = self.weights.unwrap_or(m.weights);
        if !(1..=10_000).contains(&m.layers) {
            return Err(invalid(format!(
                "--layers must be 1 to 10000, got {}",
                m.layers
            )));
        }
        if !(1..=1024).contains(&m.kv_heads) {
            return Err(invalid(format!(
                "--kv-heads must be 1 to 1024, got {}",
                m.kv_heads
            )));
        }
        if m.num_heads == 0 || !m.num_heads.is_multiple_of(m.kv_heads) {
            return Err(invalid(format!(
                "{} query heads are not a whole multiple of {} KV heads (use --heads)",
                m.num_heads, m.kv_heads
            )));
        }
        if !(m.params_billion.is_finite() && m.params_billion >= 0.0) {
            return Err(invalid(format!(
                "--params-b must be non-negative, got {}",
                m.params_billion
            )));
        }
        Ok(m)
    }
}

impl SweepConfig {
    /// The end-to-end runs' step-time model for `m` on the H200 they simulate over `gpus` GPUs.
    pub fn step_choice(&self, m: &ModelShape) -> Result<Choice, SweepError> {
        let own = match &self.step_profile {
            Some(path) => Some(std::sync::Arc::new(
                StepProfile::read(path).map_err(|e| invalid(e.to_string()))?,
            )),
            None => None,
        };
        choose(self.step_times, own, m, &crate::hw::H200, self.gpus.max(1))
            .map_err(|e| invalid(e.to_string()))
    }

    /// The KV pool in bytes, and how it was chosen (a sentence for the report).
    pub fn pool(&self, m: &ModelShape) -> Result<(u64, String), SweepError> {
        if let Some(gib) = self.pool_gib {
            let gib = positive("pool-gib", gib)?;
            return Ok((
                (gib * (1u64 << 30) as f64) as u64,
                format!("--pool-gib {gib}"),
            ));
        }
        let util = positive("gpu-util", self.gpu_util)?;
        if util > 1.0 || self.gpus == 0 || self.gpu_mib == 0 {
            return Err(invalid(
                "--gpu-util must be in (0, 1], --gpus and --gpu-mib at least 1",
            ));
        }
        let bytes = model::default_pool_bytes(m, self.gpu_mib, util, self.gpus).ok_or_else(|| {
            invalid(format!(
                "{}'s weights ({:.1} GiB) leave no KV pool on {} × {} MiB at utilization {util}; use --gpus or --pool-gib",
                m.name,
                m.weight_bytes() / (1u64 << 30) as f64,
                self.gpus,
                self.gpu_mib
            ))
        })?;
        let gib = |b: f64| b / (1u64 << 30) as f64;
        let gpu = crate::hw::by_memory(self.gpu_mib).map_or("GPU", |g| g.product);
        Ok((
            bytes,
            format!(
                "{} × {gpu} {:.2} GiB ({} MiB) × utilization {util} − {:.2} GiB weights ({} B params × 2 bytes)",
                self.gpus,
                gib(self.gpu_mib as f64 * (1u64 << 20) as f64),
                self.gpu_mib,
                gib(m.weight_bytes()),
                m.params_billion
            ),
        ))
    }

    /// The SLOs, checked: the preset given, else the one that fits the workload
    /// ([`fitting_preset`]), the flags over it; DistServe's row by `m`'s size.
    pub fn slo(&self, m: &ModelShape) -> Result<ResolvedSlo, SweepError> {
        let format = match &self.workload {
            WorkloadChoice::Trace(path) => Some(crate::workload::trace::detect(
                path.as_deref()
                    .unwrap_or_else(|| std::path::Path::new(DEFAULT_TRACE)),
            )?),
            WorkloadChoice::Synthetic { .. } => None,
        };
        let (preset, why) = fitting_preset(format);
        self.slo
            .resolve((preset, &why), m.params_billion, true)
            .map_err(|e| invalid(e.to_string()))
    }

    /// How the capacity search looks: 2% resolution in at most 12 engine runs per search; `quick`
    /// 5% in at most 8.
    pub fn search_limits(&self) -> SearchLimits {
        let full = SearchLimits::default();
        if self.quick {
            SearchLimits {
                resolution: 0.05,
                max_probes: 8,
                ..full
            }
        } else {
            full
        }
    }

    /// Requests the capacity search replays: the workload's first 5000 (`quick` 2000), about 15
    /// (6) minutes of the Azure conversation trace, so that a search of a dozen engine runs per
    /// block size and noise end stays within a minute or two on 2 cores.
    pub fn capacity_requests(&self) -> Result<usize, SweepError> {
        match self.capacity_requests {
            Some(0) => Err(invalid("--capacity-requests must be at least 1")),
            Some(n) => Ok(n),
            None => Ok(if self.quick { 2000 } else { 5000 }),
        }
    }

    /// The requests, and the workload's name for the report.
    pub fn workload(&self) -> Result<(Vec<Request>, String), SweepError> {
        let (mut requests, mut name) = match &self.workload {
            WorkloadChoice::Synthetic { prompt, output } => {
                let n = self
                    .requests
                    .unwrap_or(DEFAULT_SYNTHETIC_REQUESTS)
                    .min(MAX_REQUESTS + 1);
                let r = synthetic_requests(*prompt, *output, n, self.seed);
                (
                    r,
                    format!(
                        "synthetic prompt {prompt:?}, output {output:?}, seed {}",
                        self.seed
                    ),
                )
            }
            WorkloadChoice::Trace(path) => {
                let path = path.clone().unwrap_or_else(|| DEFAULT_TRACE.into());
                let mut r = crate::workload::trace::read_trace(&path)?.requests;
                if let Some(n) = self.requests {
                    r.truncate(n);
                }
                let file = path.file_name().map_or_else(
                    || path.display().to_string(),
                    |f| f.to_string_lossy().into(),
                );
                (r, file)
            }
        };
        if requests.is_empty() || self.requests.is_some_and(|n| n > MAX_REQUESTS) {
            return Err(invalid(format!("--requests must be 1 to {MAX_REQUESTS}")));
        }
        if let Some(rate) = self.rate {
            with_rate(&mut requests, positive("rate", rate)?);
            name += &format!(", arrivals at {rate}/s");
        }
        Ok((requests, name))
    }

    /// The memory side's inputs for model `m` and a pool of `pool_bytes`.
    pub fn memory_config(
        &self,
        m: &ModelShape,
        pool_bytes: u64,
    ) -> Result<MemoryConfig, SweepError> {
        if self.turns == 0 {
            return Err(invalid("--turns must be at least 1"));
        }
        Ok(MemoryConfig {
            model: m.clone(),
            pool_bytes,
            durations: DurationModel {
                prefill_s_per_token: seconds("prefill-ms-per-token", self.prefill_ms_per_token)?,
                decode_s_per_token: seconds("decode-ms", self.decode_ms)?,
            },
            turns: self.turns,
            system_prompt_tokens: self.system_prompt_tokens,
        })
    }

    /// The probes' sizes on a GPU (`gpu`) or the CPU. The pool must dwarf the last-level cache,
    /// so that gathers read memory as the limits do: default 2048 MiB on a GPU (512 with
    /// `quick`; its L2 holds 50 MB and more), on the CPU 128 MiB (64 with `quick`) but at least
    /// the CPU limits' buffer ([`crate::device::cpu::stream::limit_bytes`]: 4x the last-level
    /// cache the run has), then fitted to the memory available ([`Self::fit_probe`]).
    pub fn probe_options(
        &self,
        m: &ModelShape,
        requests: &[Request],
        gpu: bool,
    ) -> Result<ProbeOptions, SweepError> {
        let probe_mib = self
            .probe_mib
            .unwrap_or_else(|| self.default_probe_mib(gpu));
        let reps = self.reps.unwrap_or(DEFAULT_REPS);
        let rounds = self.rounds.unwrap_or(DEFAULT_ROUNDS);
        if probe_mib == 0 || probe_mib > 65_536 || reps == 0 || reps > 1000 {
            return Err(invalid(
                "--probe-mib must be 1 to 65536 and --reps 1 to 1000",
            ));
        }
        if rounds == 0 || rounds > 100 {
            return Err(invalid(format!("--rounds must be 1 to 100, got {rounds}")));
        }
        let token_bytes = m.kv_heads * m.head_dim * m.dtype.bytes();
        super::bandwidth::check_pool_size(probe_mib << 20, token_bytes)?;
        Ok(ProbeOptions {
            pool_bytes: probe_mib << 20,
            reps,
            rounds,
            seq_tokens: PROBE_SEQ_TOKENS,
            seed: self.seed,
            attention: self.attention_batch(m, requests, gpu)?,
            answer_only: self.quick,
        })
    }

    /// Fits a CPU probe's buffers (see [`super::cpu_probe::host_bytes`]) to the memory this host
    /// has available before anything runs ([`super::probe_memory::fit`]): a default pool halved
    /// with a note, a given one refused when beyond it; nothing to fit on a GPU or without
    /// bandwidth probes.
    pub fn fit_probe(
        &self,
        opts: &mut ProbeOptions,
        m: &ModelShape,
        gpu: bool,
    ) -> Result<Option<String>, SweepError> {
        if gpu || !self.bandwidth {
            return Ok(None);
        }
        super::probe_memory::fit(
            opts,
            self.probe_mib.is_some(),
            m.kv_heads * m.head_dim * m.dtype.bytes(),
            crate::host_memory::available_bytes(),
            super::cpu_probe::host_bytes,
        )
    }

    /// The probe pool without `--probe-mib` (MiB): see [`Self::probe_options`].
    pub fn default_probe_mib(&self, gpu: bool) -> usize {
        let cpu_floor_mib = || crate::device::cpu::stream::limit_bytes(1) >> 20;
        match (gpu, self.quick) {
            (false, true) => cpu_floor_mib().max(64),
            (false, false) => cpu_floor_mib().max(128),
            (true, true) => 512,
            (true, false) => 2048,
        }
    }

    /// Attention's decode batch (`None` without attention): a fixed context, or the workload's
    /// first requests' contexts. Defaults: CPU 8 sequences × 2048 tokens (`quick` 4 × 1024), GPU
    /// 64 × 4096 (`quick` 32 × 2048).
    pub fn attention_batch(
        &self,
        m: &ModelShape,
        requests: &[Request],
        gpu: bool,
    ) -> Result<Option<AttentionBatch>, SweepError> {
        if !self.attention {
            return Ok(None);
        }
        let (batch, context) = match (gpu, self.quick) {
            // The CPU sizes keep `quick` under a minute and the default under five on 2 cores.
            (false, true) => (4, 1024),
            (false, false) => (8, 2048),
            (true, true) => (32, 2048),
            (true, false) => (64, 4096),
        };
        let batch = self.attention_batch.unwrap_or(batch);
        let context = self.attention_context.unwrap_or(context);
        if !(1..=65_536).contains(&batch) || !(1..=1 << 20).contains(&context) {
            return Err(invalid(
                "--attention-batch must be 1 to 65536 and --attention-context 1 to 1048576",
            ));
        }
        if !self.attention_trace_context {
            return Ok(Some(AttentionBatch::fixed(m.num_heads, batch, context)));
        }
        let lens: Vec<usize> = requests
            .iter()
            .take(batch)
            .map(|r| (r.peak_tokens() as usize).clamp(1, context))
            .collect();
        Ok(Some(AttentionBatch {
            num_heads: m.num_heads,
            source: format!(
                "the workload's first {} requests (prompt + output tokens, capped at {context})",
                lens.len()
            ),
            lens,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CLI's defaults.
    fn config() -> SweepConfig {
        SweepConfig {
            device: DeviceChoice::Cpu,
            model: ModelChoice {
                preset: "llama-3-8b".into(),
                layers: None,
                num_heads: None,
                kv_heads: None,
                head_dim: None,
                dtype: None,
                params_billion: None,
                weights: None,
            },
            pool_gib: None,
            gpu_mib: model::H200_MEMORY_MIB,
            gpu_util: model::VLLM_GPU_MEMORY_UTILIZATION,
            gpus: 1,
            workload: WorkloadChoice::Trace(None),
            requests: None,
            rate: None,
            seed: 1,
            turns: 4,
            system_prompt_tokens: 0,
            decode_ms: 20.0,
            prefill_ms_per_token: 0.0,
            quick: false,
            probe_mib: None,
            reps: None,
            rounds: None,
            bandwidth: true,
            attention: true,
            end_to_end: true,
            attention_batch: None,
            attention_context: None,
            attention_trace_context: false,
            slo: SloFlags::default(),
            capacity_requests: None,
            step_times: StepTimes::Auto,
            step_profile: None,
        }
    }

    fn message(e: SweepError) -> String {
        e.to_string()
    }

    #[test]
    fn the_pool_is_given_or_what_the_gpus_leave_after_the_weights() {
        let mut c = config();
        c.model.params_billion = Some(0.5);
        let m = c.model.shape().unwrap();
        c.pool_gib = Some(0.5);
        assert_eq!(c.pool(&m).unwrap(), (1 << 29, "--pool-gib 0.5".into()));
        c.pool_gib = None;
        (c.gpus, c.gpu_mib, c.gpu_util) = (2, 1000, 0.5);
        // 2 × 1000 MiB × 0.5 = 1,048,576,000 bytes, less 0.5e9 parameters × 2 bytes.
        let (bytes, source) = c.pool(&m).unwrap();
        assert_eq!(bytes, 48_576_000);
        assert_eq!(
            source,
            "2 × GPU 0.98 GiB (1000 MiB) × utilization 0.5 − 0.93 GiB weights (0.5 B params × 2 bytes)"
        );
        c.model.params_billion = Some(0.6);
        let m = c.model.shape().unwrap();
        assert!(message(c.pool(&m).unwrap_err()).contains("leave no KV pool"));
        for (util, gpus, pool_gib) in [(1.5, 1, None), (0.0, 1, None), (0.5, 0, None)] {
            (c.gpu_util, c.gpus, c.pool_gib) = (util, gpus, pool_gib);
            assert!(c.pool(&m).is_err(), "{util} {gpus}");
        }
        c.pool_gib = Some(-1.0);
        assert_eq!(
            message(c.pool(&m).unwrap_err()),
            "--pool-gib must be a positive number, got -1"
        );
    }

    #[test]
    fn overrides_apply_and_shapes_without_whole_groups_are_refused() {
        let mut c = config();
        c.model.layers = Some(3);
        c.model.dtype = Some(Dtype::F32);
        let m = c.model.shape().unwrap();
        assert_eq!((m.layers, m.kv_heads, m.num_heads), (3, 8, 32));
        assert_eq!(m.kv_bytes_per_token(), 3 * 8 * 128 * 4 * 2);
        c.model.num_heads = Some(30);
        assert!(message(c.model.shape().unwrap_err()).contains("30 query heads"));
        c.model.preset = "gpt-9".into();
        assert!(message(c.model.shape().unwrap_err()).starts_with("unknown model"));
    }

    #[test]
    fn probe_and_attention_defaults_follow_the_device() {
        let mut c = config();
        let m = c.model.shape().unwrap();
        let requests: Vec<Request> = [(100, 50), (3000, 10), (0, 0)]
            .iter()
            .map(|&(p, o)| Request {
                arrival_s: 0.0,
                prompt_tokens: p,
                output_tokens: o,
            })
            .collect();
        let gpu = c.probe_options(&m, &requests, true).unwrap();
        assert_eq!((gpu.pool_bytes, gpu.reps, gpu.rounds), (2048 << 20, 2, 3));
        assert!(!gpu.answer_only);
        let a = gpu.attention.unwrap();
        assert_eq!((a.num_heads, a.lens), (32, vec![4096; 64]));
        c.quick = true;
        let gpu = c.probe_options(&m, &requests, true).unwrap();
        assert_eq!(gpu.pool_bytes, 512 << 20);
        assert!(gpu.answer_only);
        assert_eq!(gpu.attention.unwrap().lens, vec![2048; 32]);
        // The CPU's defaults (not built: whether they fit depends on this machine's free memory).
        assert!(c.default_probe_mib(false) >= 64);
        let a = c.attention_batch(&m, &requests, false).unwrap().unwrap();
        assert_eq!(a.lens, vec![1024; 4]);
        // The workload's contexts, capped, at least one token each.
        c.attention_trace_context = true;
        c.attention_context = Some(1000);
        let a = c.attention_batch(&m, &requests, false).unwrap().unwrap();
        assert_eq!(a.lens, vec![150, 1000, 1]);
        c.probe_mib = Some(3);
        c.attention = false;
        let cpu = c.probe_options(&m, &requests, false).unwrap();
        assert_eq!((cpu.pool_bytes, cpu.attention), (3 << 20, None));
        c.rounds = Some(0);
        assert_eq!(
            message(c.probe_options(&m, &requests, false).unwrap_err()),
            "--rounds must be 1 to 100, got 0"
        );
    }

    #[test]
    fn workloads_from_the_trace_or_synthetic_sizes() {
        let mut c = config();
        c.requests = Some(3);
        let (r, name) = c.workload().unwrap();
        assert_eq!((r.len(), name.as_str()), (3, "azure_llm_2023_conv.csv"));
        c.workload = WorkloadChoice::Synthetic {
            prompt: "fixed:7".parse().unwrap(),
            output: "fixed:2".parse().unwrap(),
        };
        c.rate = Some(2.0);
        let (r, name) = c.workload().unwrap();
        assert_eq!(r.len(), 3);
        assert!(r
            .iter()
            .all(|r| (r.prompt_tokens, r.output_tokens) == (7, 2)));
        assert_eq!(r[2].arrival_s, 1.0);
        assert!(name.ends_with(", seed 1, arrivals at 2/s"), "{name}");
        c.requests = Some(0);
        assert!(c.workload().is_err());
        c.requests = Some(3);
        c.turns = 0;
        assert!(c.memory_config(&c.model.shape().unwrap(), 1 << 30).is_err());
        c.turns = 2;
        c.decode_ms = -1.0;
        assert!(c.memory_config(&c.model.shape().unwrap(), 1 << 30).is_err());
    }

    #[test]
    fn the_slo_preset_fits_the_trace_unless_given() {
        let mut c = config();
        let m = c.model.shape().unwrap();
        let azure = c.slo(&m).unwrap();
        assert_eq!(azure.preset, SloPreset::Custom);
        assert_eq!(azure.targets, crate::sim::engine::SloTargets::default());
        assert_eq!(
            azure.targets.describe(),
            "TTFT ≤ 2 s and TPOT ≤ 100 ms for ≥ 90% of requests"
        );
        let root = env!("CARGO_MANIFEST_DIR");
        for trace in ["conversation_trace.jsonl", "synthetic_trace.jsonl"] {
            c.workload =
                WorkloadChoice::Trace(Some(format!("{root}/data/mooncake/{trace}").into()));
            let r = c.slo(&m).unwrap();
            assert_eq!(r.preset, SloPreset::Mooncake, "{trace}");
            assert_eq!((r.targets.ttft_s, r.targets.tbt_s), (Some(30.0), Some(0.2)));
            assert!(r.why.contains("Mooncake trace"), "{}", r.why);
            // A preset given stands; a flag overrides the fitting one.
            c.slo.preset = Some(SloPreset::Mlperf);
            assert_eq!(c.slo(&m).unwrap().preset, SloPreset::Mlperf);
            c.slo = SloFlags {
                ttft_s: Some(10.0),
                ..SloFlags::default()
            };
            let r = c.slo(&m).unwrap();
            assert_eq!(
                (r.preset, r.overrides.clone()),
                (SloPreset::Mooncake, vec!["--slo-ttft"])
            );
            c.slo = SloFlags::default();
        }
        c.workload = WorkloadChoice::Synthetic {
            prompt: "fixed:7".parse().unwrap(),
            output: "fixed:2".parse().unwrap(),
        };
        assert_eq!(c.slo(&m).unwrap().preset, SloPreset::Custom);
        c.slo.attainment = Some(0.0);
        assert_eq!(
            message(c.slo(&m).unwrap_err()),
            "--slo-attainment must be in (0, 1], got 0"
        );
    }
}
