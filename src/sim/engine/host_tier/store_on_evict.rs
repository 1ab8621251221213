//! The store-on-evict tier (`--cpu-offload-mode store-on-evict`; the simulator's own, not
//! vLLM's): a full block the GPU prefix cache evicts (taken from the free queue for reuse) is
//! copied to host memory under its block hash; an admission whose prefix continues past the GPU
//! hits into blocks the tier holds loads them in the same step, before its compute. The tier
//! evicts by one of `sim cache`'s policies ([`crate::sim::cache`]).
//!
//! Those policies index dense keys, so the tier numbers block hashes in the order it first
//! stores them and widens the policy's key space as it meets new ones.

use super::{HashMapOfKeys, OffloadMode, TierStats};
use crate::sim::cache::{CachePolicy, Fifo, Lfu, Lru, Policy, S3Fifo, Sieve};
use crate::sim::engine::config_error::ConfigError;
use crate::sim::engine::hash::BlockHash;
use crate::sim::engine::request::Req;

pub struct EvictTier {
    policy: Box<dyn CachePolicy + Send>,
    keys: HashMapOfKeys<u32>,
    key_space: usize,
    pub capacity_blocks: usize,
    pub stats: TierStats,
}

impl std::fmt::Debug for EvictTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvictTier")
            .field("capacity_blocks", &self.capacity_blocks)
            .field("held", &self.policy.len())
            .field("stats", &self.stats)
            .finish()
    }
}

/// The `sim cache` policies the tier can use: every one but OPT, which needs the future.
pub fn evict_policy_names() -> &'static str {
    "fifo, lru, lfu, clock, arc, s3fifo, sieve"
}

/// The key space a tier starts with; it doubles as the tier meets more blocks.
const FIRST_KEY_SPACE: usize = 1024;

impl EvictTier {
    /// A tier of `capacity_blocks` (at least 1) evicting by `policy`.
    pub fn new(policy: Policy, capacity_blocks: usize) -> Result<Self, ConfigError> {
        if capacity_blocks == 0 {
            return Err(ConfigError::NoChunk);
        }
        let ks = FIRST_KEY_SPACE;
        let policy: Box<dyn CachePolicy + Send> = match policy {
            Policy::Fifo => Box::new(Fifo::new(capacity_blocks, ks)),
            Policy::Lru => Box::new(Lru::new(capacity_blocks, ks)),
            Policy::Lfu => Box::new(Lfu::new(capacity_blocks, ks)),
            Policy::Clock => Box::new(crate::sim::cache::Clock::new(capacity_blocks, ks)),
            Policy::Arc => Box::new(crate::sim::cache::Arc::new(capacity_blocks, ks)),
            Policy::S3Fifo => Box::new(S3Fifo::new(capacity_blocks, ks)),
            Policy::Sieve => Box::new(Sieve::new(capacity_blocks, ks)),
            Policy::Opt => return Err(ConfigError::EvictByOpt(evict_policy_names())),
        };
        Ok(EvictTier {
            policy,
            keys: HashMapOfKeys::default(),
            key_space: ks,
            capacity_blocks,
            stats: TierStats {
                mode: OffloadMode::StoreOnEvict,
                ..Default::default()
            },
        })
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
        if k as usize >= self.key_space {
            self.key_space *= 2;
            self.policy.grow_key_space(self.key_space);
        }
        let held = self.policy.len();
        let hit = self.policy.access(k);
        // A miss comes in; whatever it pushed out left the tier.
        let evicted = (held + usize::from(!hit)).saturating_sub(self.policy.len());
        self.stats.evicted_chunks += evicted as u64;
        self.stats.stored_chunks += 1;
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
        self.stats.loaded_chunks += 1;
        self.stats.loaded_blocks += 1;
    }
}

/// How many of `r`'s full blocks after its first `from` (the GPU hit) `tier` holds in a row,
/// within the `num_tokens - 1` tokens a lookup may cover.
pub fn hit_blocks(tier: &EvictTier, r: &mut Req, from: u32, block_size: u32) -> u32 {
    let max_blocks = (r.num_tokens() - 1) / block_size;
    let mut n = 0;
    for j in from..max_blocks {
        if !tier.contains(r.block_hash(j, block_size)) {
            break;
        }
        n += 1;
    }
    n
}

/// Loads `n` blocks of `r` from `tier`, after its first `from`.
pub fn load_blocks(tier: &mut EvictTier, r: &mut Req, from: u32, n: u32, block_size: u32) {
    for j in from..from + n {
        tier.load(r.block_hash(j, block_size));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_most_recent_blocks_under_lru_past_its_first_key_space() {
        let mut t = EvictTier::new(Policy::Lru, 2).unwrap();
        // More distinct blocks than the key space it starts with: it grows.
        for h in 0..3 * FIRST_KEY_SPACE as u64 {
            t.store(1000 + h);
        }
        t.store(100);
        t.store(200);
        t.load(100);
        t.store(300); // evicts 200, the least recently used
        assert!(t.contains(100) && t.contains(300) && !t.contains(200));
        assert!(!t.contains(999) && !t.contains(1000));
        assert_eq!(t.len(), 2);
        let n = 3 * FIRST_KEY_SPACE as u64 + 3;
        assert_eq!((t.stats.stored_blocks, t.stats.loaded_blocks), (n, 1));
        // Every distinct block stored but the two held was evicted.
        assert_eq!(t.stats.evicted_chunks, n - 2);
        assert!(EvictTier::new(Policy::Opt, 2).is_err());
        assert!(EvictTier::new(Policy::Lru, 0).is_err());
    }
}
