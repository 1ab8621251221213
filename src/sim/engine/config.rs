//! The engine's settings, named after vLLM's (`SchedulerConfig`, `CacheConfig`), and the presets
//! that carry vLLM 0.33's defaults per GPU and usage (`EngineArgs.get_batch_defaults`).

use crate::kv::BlockSize;
use crate::workload::scenario::EngineFields;
use serde::Serialize;

pub use super::config_error::ConfigError;
pub use super::host_tier::settings::{CpuOffload, OffloadScope};

/// Who waits in which order, and who is preempted. `fcfs` and `priority` are vLLM's; the others
/// order the waiting queue like `sim sched`'s policies and preempt the running request that ranks
/// last, as `priority` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Arrival order; preempt the most recently admitted running request.
    Fcfs,
    /// Lowest (priority, arrival) first; preempt the highest (priority, arrival).
    Priority,
    /// Shortest (predicted) output first.
    Sjf,
    /// Shortest (predicted) remaining output first.
    Srpt,
    /// Arrival + priority × aging delay first: a request of priority p ranks like one of priority
    /// 0 that arrived p delays later.
    Aging,
}

crate::value_names::display_as_value_name!(Policy);

impl Policy {
    /// Whether the waiting queue is a ranked heap (everything but FCFS's deque).
    pub fn ranked(self) -> bool {
        self != Policy::Fcfs
    }
}

/// What happens to a preempted request's KV.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "mode")]
pub enum Preemption {
    /// vLLM V1: the blocks are freed and the tokens computed again on readmission.
    Recompute,
    /// Beyond vLLM: the computed KV is copied to host memory at `gbps` and back on readmission
    /// (while host space lasts; recompute otherwise). The copies cost step time, not token budget;
    /// a readmission still needs blocks for its whole sequence.
    Swap { gbps: f64, host_bytes: u64 },
}

/// Output lengths the SJF and SRPT policies rank by.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Prediction {
    /// Predicted = true × e^N(0, sigma²); 0 ranks by the true lengths.
    pub sigma: f64,
    pub seed: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineConfig {
    pub block_size: BlockSize,
    /// Blocks in the pool, vLLM's null block included (so `num_gpu_blocks - 1` are usable).
    pub num_gpu_blocks: usize,
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
    pub enable_prefix_caching: bool,
    pub enable_chunked_prefill: bool,
    /// 0: no cap on a prefill chunk (the cap is also off while one request is in the engine).
    pub long_prefill_token_threshold: usize,
    pub scheduling_policy: Policy,
    pub max_model_len: usize,
    /// Fraction of the pool's blocks admissions must leave free while requests run.
    pub watermark: f64,
    /// Admit a request only if its whole sequence so far fits, not only its first chunk.
    pub scheduler_reserve_full_isl: bool,
    /// Schedule a step before the previous step's output is processed.
    pub async_scheduling: bool,
    pub preemption: Preemption,
    pub prediction: Prediction,
    /// Aging policy: seconds (or steps) per priority level.
    pub aging_delay: f64,
    /// A KV tier in host memory; none in vLLM.
    pub cpu_offload: Option<CpuOffload>,
}

/// vLLM 0.33's `max_model_len` comes from the model; the simulator has no limit unless told.
pub const UNLIMITED_MODEL_LEN: usize = 1 << 40;

pub use crate::kv::MAX_POOL_TOKENS;

impl Default for EngineConfig {
    /// vLLM's defaults on an H200 serving online, with a placeholder pool size.
    fn default() -> Self {
        let p = preset("h200").expect("built-in preset");
        EngineConfig {
            block_size: p.block_size,
            num_gpu_blocks: 1 << 16,
            max_num_seqs: p.max_num_seqs,
            max_num_batched_tokens: p.max_num_batched_tokens,
            enable_prefix_caching: true,
            enable_chunked_prefill: true,
            long_prefill_token_threshold: 0,
            scheduling_policy: Policy::Fcfs,
            max_model_len: UNLIMITED_MODEL_LEN,
            watermark: 0.0,
            scheduler_reserve_full_isl: true,
            async_scheduling: false,
            preemption: Preemption::Recompute,
            prediction: Prediction {
                sigma: 0.0,
                seed: 0,
            },
            aging_delay: 10.0,
            cpu_offload: None,
        }
    }
}

/// The numbers vLLM picks for a GPU and usage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Preset {
    pub name: &'static str,
    pub gpu: &'static str,
    pub usage: &'static str,
    pub block_size: BlockSize,
    pub gpu_memory_utilization: f64,
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
}

/// (name, GPU, usage, max_num_seqs, max_num_batched_tokens): vLLM 0.33 `get_batch_defaults`
/// (H100/H200: >= 70 GiB and not A100; A100 the "other hardware" row); online is the OpenAI API
/// server, offline the `LLM` class.
const PRESETS: &[(&str, &str, &str, usize, usize)] = &[
    ("h200", "h200", "online", 1024, 8192),
    ("h200-offline", "h200", "offline", 1024, 16384),
    ("h100", "h100", "online", 1024, 8192),
    ("h100-offline", "h100", "offline", 1024, 16384),
    ("a100", "a100", "online", 256, 2048),
    ("a100-offline", "a100", "offline", 256, 8192),
];

/// vLLM's `CacheConfig.DEFAULT_BLOCK_SIZE`.
pub const VLLM_BLOCK_SIZE: BlockSize = BlockSize::of(16);

pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|p| p.0).collect()
}

pub fn preset(name: &str) -> Option<Preset> {
    let name = name.to_ascii_lowercase();
    PRESETS
        .iter()
        .find(|p| p.0 == name)
        .map(|&(name, gpu, usage, seqs, tokens)| Preset {
            name,
            gpu,
            usage,
            block_size: VLLM_BLOCK_SIZE,
            gpu_memory_utilization: crate::kv::model::VLLM_GPU_MEMORY_UTILIZATION,
            max_num_seqs: seqs,
            max_num_batched_tokens: tokens,
        })
}

fn at_least_one(name: &'static str, value: i64) -> Result<usize, ConfigError> {
    usize::try_from(value)
        .ok()
        .filter(|&x| x >= 1)
        .ok_or(ConfigError::BelowOne { name, value })
}

impl EngineConfig {
    /// Takes every field a scenario sets.
    pub fn apply(&mut self, f: &EngineFields) -> Result<(), ConfigError> {
        if let Some(v) = f.block_size {
            self.block_size = BlockSize::new(at_least_one("block_size", v)? as u64)?;
        }
        if let Some(v) = f.num_gpu_blocks {
            self.num_gpu_blocks = at_least_one("num_gpu_blocks", v)?;
        }
        if let Some(v) = f.max_num_seqs {
            self.max_num_seqs = at_least_one("max_num_seqs", v)?;
        }
        if let Some(v) = f.max_num_batched_tokens {
            self.max_num_batched_tokens = at_least_one("max_num_batched_tokens", v)?;
        }
        if let Some(v) = f.max_model_len {
            self.max_model_len = at_least_one("max_model_len", v)?;
        }
        if let Some(v) = f.long_prefill_token_threshold {
            self.long_prefill_token_threshold =
                usize::try_from(v).map_err(|_| ConfigError::NegativeThreshold(v))?;
        }
        if let Some(v) = f.enable_prefix_caching {
            self.enable_prefix_caching = v;
        }
        if let Some(v) = f.enable_chunked_prefill {
            self.enable_chunked_prefill = v;
        }
        if let Some(p) = &f.scheduling_policy {
            self.scheduling_policy = crate::value_names::parse(p, "scheduling policy")
                .map_err(ConfigError::UnknownValue)?;
        }
        if let Some(w) = f.watermark {
            self.watermark = w;
        }
        self.validate()
    }

    /// Checks what the engine relies on; a message names the setting as vLLM's config does (the
    /// scenario file's key; the command line's flag is the same name with dashes).
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, v) in [
            ("max_num_seqs", self.max_num_seqs),
            ("max_num_batched_tokens", self.max_num_batched_tokens),
            ("max_model_len", self.max_model_len),
        ] {
            if v == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        if self.num_gpu_blocks < 2 {
            return Err(ConfigError::PoolTooSmall(self.num_gpu_blocks));
        }
        if self.num_gpu_blocks >= u32::MAX as usize - 2 {
            return Err(ConfigError::TooManyBlocks(self.num_gpu_blocks));
        }
        let tokens = self.usable_blocks() as u64 * u64::from(self.block_size);
        if tokens > MAX_POOL_TOKENS {
            return Err(ConfigError::PoolTooLarge {
                blocks: self.usable_blocks(),
                block_size: self.block_size,
                tokens,
            });
        }
        if !(0.0..1.0).contains(&self.watermark) {
            return Err(ConfigError::Watermark(self.watermark));
        }
        if !(self.prediction.sigma.is_finite() && self.prediction.sigma >= 0.0) {
            return Err(ConfigError::PredictionSigma(self.prediction.sigma));
        }
        if !(self.aging_delay.is_finite() && self.aging_delay >= 0.0) {
            return Err(ConfigError::AgingDelay(self.aging_delay));
        }
        if let Preemption::Swap { gbps, .. } = self.preemption {
            if !(gbps.is_finite() && gbps > 0.0) {
                return Err(ConfigError::SwapBandwidth(gbps));
            }
        }
        if let Some(o) = &self.cpu_offload {
            o.check(matches!(self.preemption, Preemption::Swap { .. }))?;
        }
        Ok(())
    }

    /// What vLLM's `SchedulerConfig` refuses at start (`_verify_args`, 0.33), for settings a user
    /// gives; the simulator itself runs any of them (its property tests do). A `max_model_len`
    /// left unlimited is not checked.
    pub fn check_as_vllm(&self) -> Result<(), ConfigError> {
        if self.max_num_batched_tokens < self.max_num_seqs {
            return Err(ConfigError::BudgetBelowSeqs {
                tokens: self.max_num_batched_tokens,
                seqs: self.max_num_seqs,
            });
        }
        if self.max_model_len == UNLIMITED_MODEL_LEN {
            return Ok(());
        }
        if !self.enable_chunked_prefill && self.max_num_batched_tokens < self.max_model_len {
            return Err(ConfigError::BudgetBelowModelLen {
                tokens: self.max_num_batched_tokens,
                len: self.max_model_len,
            });
        }
        if self.long_prefill_token_threshold > self.max_model_len {
            return Err(ConfigError::ThresholdAboveModelLen {
                threshold: self.long_prefill_token_threshold,
                len: self.max_model_len,
            });
        }
        Ok(())
    }

    /// Usable blocks (the null block excluded).
    pub fn usable_blocks(&self) -> usize {
        self.num_gpu_blocks - 1
    }

    /// Blocks the admission watermark keeps free (vLLM: `int(watermark * num_blocks)`).
    pub fn watermark_blocks(&self) -> usize {
        (self.watermark * self.num_gpu_blocks as f64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_carry_vllm_defaults() {
        let p = preset("H200").unwrap();
        assert_eq!(
            (p.block_size.get(), p.max_num_seqs, p.max_num_batched_tokens),
            (16, 1024, 8192)
        );
        assert_eq!(p.gpu_memory_utilization, 0.92);
        assert_eq!(
            preset("h100-offline").unwrap().max_num_batched_tokens,
            16384
        );
        let a = preset("a100").unwrap();
        assert_eq!((a.max_num_seqs, a.max_num_batched_tokens), (256, 2048));
        assert!(preset("tpu").is_none());
        assert_eq!(preset_names().len(), 6);
    }

    #[test]
    fn scenario_fields_apply_and_bad_values_are_named() {
        let mut c = EngineConfig::default();
        let f = EngineFields {
            block_size: Some(4),
            num_gpu_blocks: Some(20),
            scheduling_policy: Some("Priority".into()),
            enable_prefix_caching: Some(false),
            ..Default::default()
        };
        c.apply(&f).unwrap();
        assert_eq!(
            (c.block_size.get(), c.num_gpu_blocks, c.usable_blocks()),
            (4, 20, 19)
        );
        assert_eq!(c.scheduling_policy, Policy::Priority);
        assert!(!c.enable_prefix_caching);
        for (f, want) in [
            (
                EngineFields {
                    max_num_batched_tokens: Some(0),
                    ..Default::default()
                },
                "max_num_batched_tokens must be at least 1",
            ),
            (
                EngineFields {
                    max_num_seqs: Some(0),
                    ..Default::default()
                },
                "max_num_seqs",
            ),
            (
                EngineFields {
                    scheduling_policy: Some("lifo".into()),
                    ..Default::default()
                },
                "unknown scheduling policy",
            ),
            (
                EngineFields {
                    num_gpu_blocks: Some(1),
                    ..Default::default()
                },
                "null block",
            ),
            (
                EngineFields {
                    long_prefill_token_threshold: Some(-1),
                    ..Default::default()
                },
                "long_prefill_token_threshold",
            ),
            (
                EngineFields {
                    watermark: Some(1.0),
                    ..Default::default()
                },
                "watermark",
            ),
        ] {
            let e = EngineConfig::default().apply(&f).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        let mut c = EngineConfig {
            num_gpu_blocks: 100,
            watermark: 0.05,
            ..Default::default()
        };
        assert_eq!(c.watermark_blocks(), 5);
        c.preemption = Preemption::Swap {
            gbps: 0.0,
            host_bytes: 1,
        };
        assert!(c.validate().is_err());
    }

    #[test]
    fn refuses_what_vllms_scheduler_config_refuses() {
        let ok = EngineConfig {
            max_model_len: 16384,
            ..Default::default()
        };
        ok.check_as_vllm().unwrap();
        for (c, want) in [
            (
                EngineConfig {
                    max_num_batched_tokens: 512,
                    ..ok.clone()
                },
                "below max_num_seqs",
            ),
            (
                EngineConfig {
                    enable_chunked_prefill: false,
                    ..ok.clone()
                },
                "without chunked prefill",
            ),
            (
                EngineConfig {
                    long_prefill_token_threshold: 16385,
                    ..ok.clone()
                },
                "long_prefill_token_threshold (16385)",
            ),
        ] {
            let e = c.check_as_vllm().unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        // Unlimited length: only the budget against the seats is checked.
        EngineConfig {
            enable_chunked_prefill: false,
            long_prefill_token_threshold: 1 << 20,
            ..Default::default()
        }
        .check_as_vllm()
        .unwrap();
    }
}
