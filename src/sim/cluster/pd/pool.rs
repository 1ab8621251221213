//! The KV pool across prefill nodes (Mooncake's distributed KVCache pool, FAST'25 §3 and §6):
//! with disaggregation and `--cpu-offload-scope global`, every prefill instance keeps a host
//! tier of its own (the size given, per node: the pool holds P times that), and a prefill
//! instance that misses locally can read the prefix other prefill nodes hold in host memory.
//!
//! For a request and a prefill instance, its prompt's cached prefix, in blocks from the start:
//! - `gpu`: the instance's GPU prefix cache ([`crate::sim::engine::Engine::cached_prefix_blocks`]);
//! - `host`: then its own host tier, in a row ([`ClusterCore::host_blocks`]);
//! - `remote`: then the pool, in a row: a block counts when any other prefill node's host tier
//!   holds it ready (blocks may come from several nodes, as from Mooncake Store's objects).
//!
//! Mooncake's rule (Algorithm 1, `kvcache_balancing_threshold`): with `local = gpu + host` and
//! `best = local + remote`, the instance fetches the remote part when `best / local` is not
//! below the threshold (any remote match when nothing is local), else it prefills from its local
//! match. Read in secondary accounts of the paper (arXiv 2407.00079 v4, §6.1, Algorithm 1), not
//! the paper itself: every one gives the ratio form, `best_prefix_len / prefix_len <
//! kvcache_balancing_threshold` → compute locally, else transfer `best_len − prefix_len` and
//! prefill from `best_len`, TTFT = T_transfer + T_queue + T_prefill. The paper publishes no
//! value (hand-tuned, its footnote says).
//!
//! The fetch: bytes = tokens × the model's KV bytes per token, over the fetching node's link
//! (`--kv-link-bandwidth`, [`Link::seconds`]); as the prefill→decode transfer, each fetch has
//! the link to itself (fetches and transfers do not share bandwidth, senders are never
//! congested). At its end the chunks are stored in the fetching node's host tier (Mooncake
//! copies the prefix to the instance that uses it, which also replicates hot blocks), and the
//! request reaches that instance's engine, which loads them as any host-tier hit.

use super::link::Link;
use crate::kv::BlockSize;
use crate::sim::cluster::ClusterCore;
use crate::sim::engine::hash::BlockHash;
use crate::sim::engine::host_tier::manager::ChunkKey;
use crate::sim::engine::host_tier::HostTier;
use crate::sim::engine::request::Req;
use serde::Serialize;

/// The default `--kvcache-balancing-threshold`: 1, fetch whenever the pool holds a longer
/// prefix. Mooncake's paper gives no value. The rule guards against senders congested by hot
/// blocks, which this model has not (each fetch has its link to itself); and fetching a token's
/// KV costs far less than computing it (LLaMA2-70B's 320 KiB a token over 100 GB/s is 3.4 µs,
/// its prefill on 8 A800s about 0.1 ms a token), so any longer remote prefix pays for the request
/// itself. It is also what an open-source deployment does: vLLM's Mooncake store connector
/// loads whenever the store's hit is longer than the tokens computed locally.
pub const DEFAULT_BALANCING_THRESHOLD: f64 = 1.0;

/// The pool's setting.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Pool {
    /// Mooncake's `kvcache_balancing_threshold` (≥ 1).
    pub threshold: f64,
}

impl Pool {
    /// Whether an instance with match `m` fetches its remote part (see the module's rule).
    pub fn fetches(&self, m: &Match) -> bool {
        m.remote > 0
            && (m.local() == 0 || f64::from(m.best()) >= self.threshold * f64::from(m.local()))
    }
}

/// A prompt's cached prefix for one prefill instance, in blocks from the start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Match {
    pub gpu: u32,
    pub host: u32,
    pub remote: u32,
}

impl Match {
    pub fn local(&self) -> u32 {
        self.gpu + self.host
    }

    pub fn best(&self) -> u32 {
        self.local() + self.remote
    }
}

/// Which host tiers hold each of a prompt's blocks, computed once a request.
pub struct Holders {
    /// Per block: how many prefill nodes' tiers hold it ready.
    count: Vec<u32>,
    /// Per tier, per block: whether it holds it.
    held: Vec<Vec<bool>>,
}

impl Holders {
    /// Over `hashes` (the prompt's usable full blocks) in `c`'s host tiers (one per instance).
    pub fn of(c: &ClusterCore, hashes: &[BlockHash]) -> Holders {
        let n = hashes.len();
        let held: Vec<Vec<bool>> = (0..c.engines.len())
            .map(|p| {
                // Run by run: the block after a run is not held.
                let mut h = vec![false; n];
                let mut j = 0;
                while j < n {
                    let run = c.host_blocks(p, hashes, j);
                    h[j..j + run].fill(true);
                    j += run.max(1);
                }
                h
            })
            .collect();
        let count = (0..hashes.len())
            .map(|j| held.iter().filter(|h| h[j]).count() as u32)
            .collect();
        Holders { count, held }
    }

    /// Instance `p`'s match, its GPU holding `gpu` blocks: its own tier's run after them, then
    /// the run other tiers hold.
    pub fn matched(&self, p: usize, gpu: usize) -> Match {
        let own = &self.held[p];
        let n = own.len();
        let gpu = gpu.min(n);
        let host = (gpu..n).take_while(|&j| own[j]).count();
        let from = gpu + host;
        let remote = (from..n)
            .take_while(|&j| self.count[j] > u32::from(own[j]))
            .count();
        Match {
            gpu: gpu as u32,
            host: host as u32,
            remote: remote as u32,
        }
    }
}

/// A fetch from the pool: blocks `from..to` of the request's prompt.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Fetch {
    pub from: u32,
    pub to: u32,
    pub start: f64,
    pub end: f64,
    pub bytes: u64,
    /// Its chunks were stored in the fetching node's host tier at its end (a native tier whose
    /// every chunk is pinned or pending refuses them; the bytes moved all the same).
    pub stored: bool,
}

impl Fetch {
    /// Blocks `from..to` (`block_size` tokens each) over `link` from `start`.
    pub fn new(from: u32, to: u32, block_size: BlockSize, link: &Link, start: f64) -> Fetch {
        let bytes = link.bytes((to - from) * block_size.tokens());
        Fetch {
            from,
            to,
            start,
            end: start + link.seconds(bytes),
            bytes,
            stored: false,
        }
    }

    /// The prompt tokens it brought that request `r` (its whole path) loaded from the host tier:
    /// the overlap of its range with `[first_hit, first_hit + first_offload_hit)`.
    pub fn used_tokens(&self, r: &Req, block_size: BlockSize) -> u32 {
        let (gpu, bs) = (r.first_hit.unwrap_or(0), block_size.tokens());
        let host_end = gpu + r.first_offload_hit.unwrap_or(0);
        let lo = gpu.max(self.from * bs);
        let hi = host_end.min(self.to * bs);
        hi.saturating_sub(lo)
    }
}

/// Stores blocks `from..to` of `hashes` in `tier`, on behalf of the request numbered `uid`:
/// a native tier takes the chunks of `blocks_per_chunk` blocks (`from` and `to` on chunk
/// bounds, as the pool's runs are), stored and completed at once; a store-on-evict tier the
/// blocks. Returns whether the tier took them.
pub fn store(
    tier: &mut HostTier,
    hashes: &[BlockHash],
    from: u32,
    to: u32,
    blocks_per_chunk: u32,
    block_size: BlockSize,
    uid: u64,
) -> bool {
    let to = (to as usize).min(hashes.len()) as u32;
    match tier {
        HostTier::Native(m) => {
            let bpc = blocks_per_chunk.max(1);
            let keys: Vec<ChunkKey> = (from / bpc..to / bpc)
                .map(|c| ChunkKey {
                    key: hashes[((c + 1) * bpc - 1) as usize],
                    end: (c + 1) * bpc * block_size.tokens(),
                })
                .collect();
            let Some(stored) = m.prepare_store(&keys, uid) else {
                m.stats.store_failures += 1;
                return false;
            };
            let n = stored.keys.len() as u64;
            m.stats.stored_chunks += n;
            m.stats.stored_blocks += n * u64::from(bpc);
            m.stats.evicted_chunks += stored.evicted.len() as u64;
            m.complete_store(&stored.keys);
            true
        }
        HostTier::StoreOnEvict(t) => {
            for &h in &hashes[from as usize..to as usize] {
                t.store(h);
            }
            true
        }
    }
}

/// Prompt tokens by where each request found them, over a run: the whole path's first
/// admission on its prefill instance (a request prefilled on its decode instance counts there).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct TierHits {
    /// Prompt tokens of the requests that ran.
    pub prompt_tokens: u64,
    /// Found in the GPU prefix cache.
    pub gpu_hit_tokens: u64,
    /// Loaded from the instance's own host tier ...
    pub local_host_hit_tokens: u64,
    /// ... of which none came from the pool: these did, fetched from other prefill nodes.
    pub remote_hit_tokens: u64,
    /// Pool fetches, and the bytes they moved over the link (apart from the prefill → decode
    /// KV bytes); tokens fetched (some may be evicted before their request reads them).
    pub fetches: usize,
    pub fetched_tokens: u64,
    pub pool_bytes_moved: u64,
    /// Fetches whose chunks the fetching node's tier refused.
    pub store_failures: usize,
}

impl TierHits {
    fn ratio(&self, x: u64) -> Option<f64> {
        (self.prompt_tokens > 0).then(|| x as f64 / self.prompt_tokens as f64)
    }

    pub fn gpu_ratio(&self) -> Option<f64> {
        self.ratio(self.gpu_hit_tokens)
    }

    pub fn local_host_ratio(&self) -> Option<f64> {
        self.ratio(self.local_host_hit_tokens)
    }

    pub fn remote_ratio(&self) -> Option<f64> {
        self.ratio(self.remote_hit_tokens)
    }

    /// Every tier together.
    pub fn hit_ratio(&self) -> Option<f64> {
        self.ratio(self.gpu_hit_tokens + self.local_host_hit_tokens + self.remote_hit_tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_balancing_threshold_compares_the_best_match_with_the_local_one() {
        let pool = Pool { threshold: 2.0 };
        let m = |gpu, host, remote| Match { gpu, host, remote };
        // Local 4 blocks, best 6: 1.5 < 2, prefill from the local match.
        assert!(!pool.fetches(&m(3, 1, 2)));
        // Best 8: 2.0, not below: fetch.
        assert!(pool.fetches(&m(4, 0, 4)));
        // Nothing local: any remote match is fetched; nothing remote, nothing to fetch.
        assert!(pool.fetches(&m(0, 0, 1)));
        assert!(!pool.fetches(&m(5, 2, 0)));
        let every = Pool { threshold: 1.0 };
        assert!(every.fetches(&m(100, 0, 1)));
    }
}
