//! A run as plain values: what `sim engine`, `sim cluster` and `serve` ask of the engine, named
//! as their flags (`--max-num-seqs` is `max_num_seqs`), each `None` or `false` where the preset,
//! the scenario or the model decides. [`RunSpec::default`] is the CLI's defaults; a JSON object
//! with any of the fields reads as one (choices spelled as on the command line).

use super::choices::{Backend, Clock, Quantization};
use crate::kv::Dtype;
use crate::sim::cache::Policy as CachePolicy;
use crate::sim::engine::config::Policy;
use crate::sim::engine::host_tier::OffloadMode;
use crate::sim::engine::{OffloadScope, SloFlags};
use crate::sim::latency::StepTimes;
use serde::Deserialize;
use std::path::PathBuf;

/// The engine every replica runs: vLLM's settings over a preset, the model and GPU, the host
/// tier, the step times and the SLOs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunSpec {
    /// vLLM's defaults for a GPU and usage ([`crate::sim::engine::config::preset`]).
    pub preset: String,
    pub block_size: Option<usize>,
    pub num_gpu_blocks_override: Option<usize>,
    pub gpu_memory_utilization: Option<f64>,
    pub max_num_seqs: Option<usize>,
    pub max_num_batched_tokens: Option<usize>,
    /// Prefix caching and chunked prefill: on, off, or the preset's.
    pub enable_prefix_caching: Option<bool>,
    pub enable_chunked_prefill: Option<bool>,
    pub long_prefill_token_threshold: Option<usize>,
    #[serde(deserialize_with = "crate::value_names::from_maybe_name")]
    pub scheduling_policy: Option<Policy>,
    pub max_model_len: Option<usize>,
    pub watermark: Option<f64>,
    pub async_scheduling: bool,
    pub tp: usize,
    /// Beyond vLLM: preempt by swapping KV to host memory at `swap_gbps` GB/s per GPU, into
    /// `swap_space_gib` GiB per GPU.
    pub swap_preemption: bool,
    pub swap_gbps: f64,
    pub swap_space_gib: f64,
    /// sjf/srpt: predicted output lengths are true × e^N(0, sigma²).
    pub predict_sigma: f64,
    /// aging: seconds (steps) per priority level.
    pub aging_delay: f64,
    pub tier: TierSpec,
    /// A model preset (data/models/) or a Hugging Face config.json.
    pub model: String,
    #[serde(deserialize_with = "crate::value_names::from_maybe_name")]
    pub quantization: Option<Quantization>,
    #[serde(deserialize_with = "crate::value_names::from_name")]
    pub kv_cache_dtype: Dtype,
    /// A GPU name; the preset's when `None`.
    pub gpu: Option<String>,
    #[serde(deserialize_with = "crate::value_names::from_name")]
    pub step_times: StepTimes,
    /// Measured kernel tables of the user's own.
    pub step_profile: Option<PathBuf>,
    /// Attention efficiency per block size; the built-in H200 assumption when `None`.
    pub profile: Option<PathBuf>,
    pub step_overhead_ms: f64,
    #[serde(deserialize_with = "crate::value_names::from_name")]
    pub clock: Clock,
    /// The SLOs: none when empty.
    pub slo: SloFlags,
}

impl Default for RunSpec {
    fn default() -> Self {
        RunSpec {
            preset: "h200".into(),
            block_size: None,
            num_gpu_blocks_override: None,
            gpu_memory_utilization: None,
            max_num_seqs: None,
            max_num_batched_tokens: None,
            enable_prefix_caching: None,
            enable_chunked_prefill: None,
            long_prefill_token_threshold: None,
            scheduling_policy: None,
            max_model_len: None,
            watermark: None,
            async_scheduling: false,
            tp: 1,
            swap_preemption: false,
            swap_gbps: 25.0,
            swap_space_gib: 4.0,
            predict_sigma: 0.0,
            aging_delay: 10.0,
            tier: TierSpec::default(),
            model: "llama-3.1-8b".into(),
            quantization: None,
            kv_cache_dtype: Dtype::F16,
            gpu: None,
            step_times: StepTimes::Auto,
            step_profile: None,
            profile: None,
            step_overhead_ms: 0.5,
            clock: Clock::Seconds,
            slo: SloFlags::default(),
        }
    }
}

/// The host tier (vLLM 0.33's `--kv-offloading-*` and the connector's extra config, and the
/// simulator's `--cpu-offload-*`): none without a size.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TierSpec {
    /// GiB in total over the tensor-parallel GPUs.
    pub kv_offloading_size: Option<f64>,
    #[serde(deserialize_with = "crate::value_names::from_maybe_name")]
    pub kv_offloading_backend: Option<Backend>,
    /// Blocks of the run's block size.
    pub cpu_offload_blocks: Option<usize>,
    /// GiB per GPU.
    pub cpu_offload_gib: Option<f64>,
    #[serde(deserialize_with = "crate::value_names::from_name")]
    pub cpu_offload_mode: OffloadMode,
    #[serde(deserialize_with = "crate::value_names::from_name")]
    pub cpu_offload_policy: CachePolicy,
    pub offload_blocks_per_chunk: Option<usize>,
    pub offload_block_size: Option<usize>,
    pub offload_prompt_only: bool,
    /// GB/s per GPU, or a `pagedkv swap --json` file; PCIe 5.0 ×16 when `None`.
    pub offload_bandwidth: Option<String>,
    #[serde(deserialize_with = "crate::value_names::from_name")]
    pub cpu_offload_scope: OffloadScope,
}

impl Default for TierSpec {
    fn default() -> Self {
        TierSpec {
            kv_offloading_size: None,
            kv_offloading_backend: None,
            cpu_offload_blocks: None,
            cpu_offload_gib: None,
            cpu_offload_mode: OffloadMode::Native,
            cpu_offload_policy: CachePolicy::Lru,
            offload_blocks_per_chunk: None,
            offload_block_size: None,
            offload_prompt_only: true,
            offload_bandwidth: None,
            cpu_offload_scope: OffloadScope::Local,
        }
    }
}
