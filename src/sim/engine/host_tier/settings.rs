//! The host tier's settings (`EngineConfig.cpu_offload`) and what they refuse.

use super::store_on_evict::evict_policy_names;
use crate::sim::engine::config_error::ConfigError;
use serde::Serialize;

/// How the tier moves KV.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum OffloadMode {
    /// vLLM 0.33's native offloading: write-through stores, asynchronous loads.
    #[default]
    Native,
    /// Beyond vLLM: blocks the GPU evicts are stored; loads are synchronous at admission.
    StoreOnEvict,
}

crate::value_names::display_as_value_name!(OffloadMode);

/// vLLM's eviction policies for the native tier (`eviction_policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierPolicy {
    Lru,
    Arc,
}

impl TierPolicy {
    /// The native tier's policy for a `sim cache` policy name, if vLLM has it.
    pub fn of(p: crate::sim::cache::Policy) -> Option<TierPolicy> {
        match p {
            crate::sim::cache::Policy::Lru => Some(TierPolicy::Lru),
            crate::sim::cache::Policy::Arc => Some(TierPolicy::Arc),
            _ => None,
        }
    }
}

/// Whose blocks a host tier holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum OffloadScope {
    /// One tier per replica.
    #[value(alias = "per-replica")]
    Local,
    /// One tier shared by every replica of a cluster (Mooncake's pool).
    Global,
}

crate::value_names::display_as_value_name!(OffloadScope);

/// A KV cache tier in host memory ([`super::HostTier`]): vLLM 0.33's native CPU offloading, or
/// the simulator's store-on-evict tier.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CpuOffload {
    pub mode: OffloadMode,
    /// Chunks the tier holds; a chunk is `blocks_per_chunk` blocks of the engine's block size.
    pub chunks: usize,
    /// vLLM's `blocks_per_chunk` (1 in store-on-evict mode).
    pub blocks_per_chunk: usize,
    /// lru or arc (vLLM's) in native mode; any `sim cache` policy but OPT in store-on-evict.
    pub policy: crate::sim::cache::Policy,
    /// Native: store prompt chunks only (vLLM's `offload_prompt_only`, on by default).
    pub prompt_only: bool,
    /// Host link, GB/s per GPU.
    pub gbps: f64,
    pub scope: OffloadScope,
}

impl CpuOffload {
    /// What the tier refuses; `swap_preemption`: the engine preempts by swapping to host memory.
    pub fn check(&self, swap_preemption: bool) -> Result<(), ConfigError> {
        if self.chunks == 0 || self.blocks_per_chunk == 0 {
            return Err(ConfigError::NoChunk);
        }
        if !(self.gbps.is_finite() && self.gbps > 0.0) {
            return Err(ConfigError::HostLink(self.gbps));
        }
        match self.mode {
            OffloadMode::Native => {
                if TierPolicy::of(self.policy).is_none() {
                    return Err(ConfigError::NativePolicy(self.policy));
                }
                if swap_preemption {
                    return Err(ConfigError::SwapWithNativeTier);
                }
            }
            OffloadMode::StoreOnEvict => {
                if self.policy == crate::sim::cache::Policy::Opt {
                    return Err(ConfigError::EvictByOpt(evict_policy_names()));
                }
                if self.blocks_per_chunk != 1 {
                    return Err(ConfigError::StoreOnEvictChunks);
                }
            }
        }
        Ok(())
    }
}
