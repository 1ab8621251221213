//! A second tier of KV cache in host memory (beyond vLLM 0.33's engine, which has none without a
//! KV connector): full blocks that leave the GPU prefix cache, evicted from the free queue, are
//! copied to host memory under their block hash; an admission whose prefix continues past the GPU
//! hits into blocks the tier holds loads them back instead of recomputing them. The tier evicts by
//! one of `sim cache`'s policies ([`crate::sim::cache`]); one tier serves one replica, or, shared
//! ([`SharedTier`]), every replica of a cluster (Mooncake's pool).
//!
//! The policies index dense keys, so the tier numbers block hashes in the order it first stores
//! them, within a key space the caller bounds (the blocks its workload can ever fill).

use super::hash::{BlockHash, HashMapOfHashes};
use crate::sim::cache::{CachePolicy, Fifo, Lfu, Lru, Policy, S3Fifo, Sieve};
use serde::Serialize;
use std::sync::{Arc, Mutex};

/// Counts over a run, in blocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TierStats {
    /// Blocks copied in when the GPU evicted them.
    pub stored_blocks: u64,
    /// Blocks loaded back by admissions.
    pub loaded_blocks: u64,
}

pub struct HostTier {
    policy: Box<dyn CachePolicy + Send>,
    keys: HashMapOfHashes<u32>,
    key_space: usize,
    pub capacity_blocks: usize,
    pub stats: TierStats,
}

impl std::fmt::Debug for HostTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostTier")
            .field("capacity_blocks", &self.capacity_blocks)
            .field("held", &self.policy.len())
            .field("stats", &self.stats)
            .finish()
    }
}

/// One tier shared by the engines that hold it.
pub type SharedTier = Arc<Mutex<HostTier>>;

/// The `sim cache` policies a tier can use: every one but OPT, which needs the future.
pub fn tier_policy_names() -> &'static str {
    "fifo, lru, lfu, clock, arc, s3fifo, sieve"
}

/// Distinct blocks `requests` can ever fill at `block_size`: a bound on what a tier stores.
pub fn tier_key_space(
    requests: &[crate::workload::serving::ServingRequest],
    block_size: usize,
) -> usize {
    requests
        .iter()
        .map(|r| (r.prompt.len() + r.output_len as usize) / block_size.max(1))
        .sum::<usize>()
        + 1
}

impl HostTier {
    /// A tier of `capacity_blocks` (at least 1) evicting by `policy`, for at most `key_space`
    /// distinct blocks over the run.
    pub fn new(policy: Policy, capacity_blocks: usize, key_space: usize) -> Result<Self, String> {
        if capacity_blocks == 0 {
            return Err("--cpu-offload-blocks must be at least 1".into());
        }
        let ks = key_space.max(1);
        let policy: Box<dyn CachePolicy + Send> = match policy {
            Policy::Fifo => Box::new(Fifo::new(capacity_blocks, ks)),
            Policy::Lru => Box::new(Lru::new(capacity_blocks, ks)),
            Policy::Lfu => Box::new(Lfu::new(capacity_blocks, ks)),
            Policy::Clock => Box::new(crate::sim::cache::Clock::new(capacity_blocks, ks)),
            Policy::Arc => Box::new(crate::sim::cache::Arc::new(capacity_blocks, ks)),
            Policy::S3Fifo => Box::new(S3Fifo::new(capacity_blocks, ks)),
            Policy::Sieve => Box::new(Sieve::new(capacity_blocks, ks)),
            Policy::Opt => {
                return Err(format!(
                    "--cpu-offload-policy opt needs the future; use one of {}",
                    tier_policy_names()
                ))
            }
        };
        Ok(HostTier {
            policy,
            keys: HashMapOfHashes::default(),
            key_space: ks,
            capacity_blocks,
            stats: TierStats::default(),
        })
    }

    pub fn shared(self) -> SharedTier {
        Arc::new(Mutex::new(self))
    }

    /// Blocks held now.
    pub fn len(&self) -> usize {
        self.policy.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn contains(&self, h: BlockHash) -> bool {
        self.keys.get(&h).is_some_and(|&k| self.policy.contains(k))
    }

    /// Copies in a block the GPU evicted (a block already held counts as used again).
    pub fn store(&mut self, h: BlockHash) {
        let next = self.keys.len() as u32;
        let k = *self.keys.entry(h).or_insert(next);
        assert!(
            (k as usize) < self.key_space,
            "more distinct blocks than the key space {} the tier was built for",
            self.key_space
        );
        self.policy.access(k);
        self.stats.stored_blocks += 1;
    }

    /// Loads back a block the lookup found (a hit for the policy). The copy reads it before the
    /// same step's stores can displace it, so one displaced since still counts as loaded.
    pub fn load(&mut self, h: BlockHash) {
        if let Some(&k) = self.keys.get(&h) {
            if self.policy.contains(k) {
                self.policy.access(k);
            }
        }
        self.stats.loaded_blocks += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_most_recent_blocks_under_lru() {
        let mut t = HostTier::new(Policy::Lru, 2, 10).unwrap();
        t.store(100);
        t.store(200);
        t.load(100);
        t.store(300); // evicts 200, the least recently used
        assert!(t.contains(100) && t.contains(300) && !t.contains(200));
        assert!(!t.contains(999));
        assert_eq!(
            t.stats,
            TierStats {
                stored_blocks: 3,
                loaded_blocks: 1
            }
        );
        assert!(HostTier::new(Policy::Opt, 2, 10).is_err());
        assert!(HostTier::new(Policy::Lru, 0, 10).is_err());
    }
}
