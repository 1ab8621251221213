//! A tier of KV cache in host memory behind the GPU prefix cache, in one of two modes:
//!
//! - `native` (the default): vLLM 0.33's native CPU offloading (`--kv-offloading-size`,
//!   `--kv-offloading-backend native`: the `OffloadingConnector` with `CPUOffloadingManager`),
//!   step for step as far as the simulator's model goes. Write-through: the chunks of
//!   `blocks_per_chunk` blocks a request's scheduled tokens complete are stored in the step that
//!   schedules them (prompt chunks only, as vLLM's `offload_prompt_only` default), chunks held
//!   already skipped; a new request's prefix past its GPU hit is looked up and, when at least one
//!   chunk's worth of tokens hits, loaded asynchronously: the request holds its blocks and waits
//!   (no token budget, not running) until the load is reported, then computes the rest. Evicts by
//!   vLLM's `lru` or `arc`. The copies run on their own streams and take time over the host link
//!   ([`transfer`]). [`manager`] is vLLM's manager and policies ([`lru`], [`arc`]), shared by the
//!   engines a tier serves; [`connector`] its scheduler side, one per engine.
//! - `store-on-evict`: the simulator's earlier tier ([`store_on_evict`]): blocks go to host
//!   memory when the GPU evicts them, and come back synchronously at admission.
//!
//! Not modelled (beyond the lists in [`manager`] and [`connector`]): sync loads
//! (`sync_load_budget_bytes`), `max_load_tokens`/`max_offload_tokens`, `store_threshold`,
//! sliding-window, Mamba and EAGLE groups, partial tails, KV events, LMCache.
//!
//! The owner of a tier (the engine for `sim engine`, the cluster for `sim cluster`, one per replica
//! or one for all) lends it to the engine for each step.

pub mod arc;
pub mod connector;
pub mod keys;
pub mod lru;
pub mod manager;
pub mod settings;
pub mod store_on_evict;
pub mod transfer;

use super::config_error::ConfigError;
use super::hash::{BlockHash, PassThrough};
use serde::Serialize;
pub use settings::{CpuOffload, OffloadMode, OffloadScope, TierPolicy};
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;

pub use manager::Manager;
pub use store_on_evict::{evict_policy_names, EvictTier};

type HashMapOfKeys<V> = HashMap<u64, V, BuildHasherDefault<PassThrough>>;
type HashSetOfKeys = HashSet<u64, BuildHasherDefault<PassThrough>>;

/// Counts over a run. A chunk is `blocks_per_chunk` GPU blocks (one block in store-on-evict).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TierStats {
    /// Which mode these counts come from.
    pub mode: OffloadMode,
    pub stored_chunks: u64,
    pub stored_blocks: u64,
    /// Chunks loaded, and the GPU blocks written (a load skips the blocks the GPU hit covers).
    pub loaded_chunks: u64,
    pub loaded_blocks: u64,
    pub evicted_chunks: u64,
    /// Native: stores refused because every chunk was pinned or pending (vLLM's
    /// `ALLOCATION_FAILURE` counter).
    pub store_failures: u64,
}

impl TierStats {
    /// Adds another tier's counts.
    pub fn merge(&mut self, o: &TierStats) {
        self.stored_chunks += o.stored_chunks;
        self.stored_blocks += o.stored_blocks;
        self.loaded_chunks += o.loaded_chunks;
        self.loaded_blocks += o.loaded_blocks;
        self.evicted_chunks += o.evicted_chunks;
        self.store_failures += o.store_failures;
    }
}

/// A host tier, lent to an engine for each step.
#[derive(Debug)]
pub enum HostTier {
    Native(Box<Manager>),
    StoreOnEvict(EvictTier),
}

impl HostTier {
    /// The tier `o` describes; no bound on the blocks it may meet is needed.
    pub fn new(o: &CpuOffload) -> Result<HostTier, ConfigError> {
        Ok(match o.mode {
            OffloadMode::Native => {
                let policy = TierPolicy::of(o.policy).ok_or(ConfigError::NativePolicy(o.policy))?;
                if o.chunks == 0 {
                    return Err(ConfigError::NoChunk);
                }
                HostTier::Native(Box::new(Manager::new(o.chunks, policy)))
            }
            OffloadMode::StoreOnEvict => {
                HostTier::StoreOnEvict(EvictTier::new(o.policy, o.chunks)?)
            }
        })
    }

    pub fn mode(&self) -> OffloadMode {
        match self {
            HostTier::Native(_) => OffloadMode::Native,
            HostTier::StoreOnEvict(_) => OffloadMode::StoreOnEvict,
        }
    }

    pub fn stats(&self) -> TierStats {
        match self {
            HostTier::Native(m) => m.stats,
            HostTier::StoreOnEvict(t) => t.stats,
        }
    }

    /// How many of the blocks `hashes[from..]` (a prompt's full blocks, in order) the tier holds
    /// ready, consecutively from `from`: what a router credits as host-tier hits. A native chunk
    /// of `blocks_per_chunk` blocks counts when it is held and its store has completed (its key:
    /// its last block's hash, so a chunk past the prompt's full blocks is never found).
    pub fn held_blocks(&self, hashes: &[BlockHash], from: usize, blocks_per_chunk: usize) -> usize {
        let ready = |j: usize| match self {
            HostTier::Native(m) => {
                let bpc = blocks_per_chunk.max(1);
                let last = (j / bpc + 1) * bpc - 1;
                hashes
                    .get(last)
                    .is_some_and(|&h| m.lookup(h) == manager::Lookup::Hit)
            }
            HostTier::StoreOnEvict(t) => t.contains(hashes[j]),
        };
        (from..hashes.len()).take_while(|&j| ready(j)).count()
    }

    pub fn native(&mut self) -> Option<&mut Manager> {
        match self {
            HostTier::Native(m) => Some(&mut **m),
            HostTier::StoreOnEvict(_) => None,
        }
    }

    pub fn store_on_evict(&mut self) -> Option<&mut EvictTier> {
        match self {
            HostTier::StoreOnEvict(t) => Some(t),
            HostTier::Native(_) => None,
        }
    }
}

#[cfg(test)]
mod golden;
#[cfg(test)]
mod scenarios;
#[cfg(test)]
mod tests;
