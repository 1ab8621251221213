//! The routers: which replica a request goes to, from what a router of each kind can see.
//!
//! - round-robin: replica `k mod N` for the k-th request.
//! - least-loaded: the fewest requests in flight (sent and not yet seen to finish).
//! - prefix-aware: SGLang's cache-aware policy (`sgl-router`, `policies/cache_aware.rs`, with
//!   `CacheAwareConfig::default()`'s thresholds): if the loads in flight are imbalanced —
//!   `max - min > balance_abs_threshold` and `max > min × balance_rel_threshold` — the least
//!   loaded replica; otherwise the replica whose prompts in the router's own approximate tree
//!   ([`super::approx_tree`]) match the longest prefix when the matched fraction of the prompt
//!   exceeds `cache_threshold`, else the replica whose tree holds the fewest tokens. Every
//!   choice is inserted in the tree.
//! - kv-aware: NVIDIA Dynamo's KV router (`lib/llm/src/kv_router`, its documented cost):
//!   `logit = overlap_weight × prefill blocks + active blocks`, lowest wins, where prefill blocks
//!   = (prompt − overlap blocks × block size) / block size with the overlap read from the
//!   replica's real GPU prefix cache (Dynamo's KV events; here the cache as of the step before),
//!   and active blocks = the blocks of the requests in flight at their current length plus the new
//!   prompt's. Temperature 0 (Dynamo's default): no sampling.
//!
//! Ties go to the lowest replica index everywhere.

use super::approx_tree::ApproxTree;
use crate::sim::engine::hash::BlockHash;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum RouterKind {
    RoundRobin,
    LeastLoaded,
    PrefixAware,
    KvAware,
}

crate::value_names::display_as_value_name!(RouterKind);

impl RouterKind {
    /// Whether it reads prompts' block hashes.
    pub fn needs_hashes(self) -> bool {
        matches!(self, RouterKind::PrefixAware | RouterKind::KvAware)
    }
}

/// The routers' settings; the defaults are SGLang's and Dynamo's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RouterConfig {
    pub cache_threshold: f64,
    pub balance_abs_threshold: usize,
    pub balance_rel_threshold: f64,
    /// Prefix-aware: tokens each replica's share of the approximate tree may keep after an
    /// eviction (SGLang's `max_tree_size`, which counts characters).
    pub max_tree_size: u64,
    /// Prefix-aware: seconds (steps) between evictions of the approximate tree.
    pub eviction_interval: f64,
    /// Kv-aware: Dynamo's `kv_overlap_score_weight`.
    pub overlap_weight: f64,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            cache_threshold: 0.5,
            balance_abs_threshold: 32,
            balance_rel_threshold: 1.1,
            max_tree_size: 10_000,
            eviction_interval: 30.0,
            overlap_weight: 1.0,
        }
    }
}

/// What the router sees of one replica when a request arrives.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReplicaView {
    /// Requests sent and not yet seen to finish.
    pub load: usize,
    /// Kv-aware: blocks of those requests at their current length.
    pub active_blocks: u64,
    /// Kv-aware: the new prompt's leading blocks its GPU prefix cache holds.
    pub cached_blocks: usize,
}

/// How the router decided, over a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RouterStats {
    pub per_replica: Vec<usize>,
    /// Prefix-aware: requests sent by the best match, by the smallest tree, and by load.
    pub by_match: usize,
    pub by_smallest_tree: usize,
    pub by_balance: usize,
}

#[derive(Debug, Clone)]
pub struct Router {
    pub kind: RouterKind,
    pub cfg: RouterConfig,
    replicas: usize,
    block_size: u32,
    sent: usize,
    tree: Option<ApproxTree>,
    last_eviction: f64,
    pub stats: RouterStats,
}

/// The index of the smallest key, the lowest of equals.
fn argmin<K: PartialOrd>(keys: impl Iterator<Item = K>) -> usize {
    let mut best: Option<(usize, K)> = None;
    for (i, k) in keys.enumerate() {
        if best.as_ref().is_none_or(|(_, b)| k < *b) {
            best = Some((i, k));
        }
    }
    best.map_or(0, |b| b.0)
}

impl Router {
    pub fn new(kind: RouterKind, cfg: RouterConfig, replicas: usize, block_size: u32) -> Self {
        Router {
            kind,
            cfg,
            replicas,
            block_size,
            sent: 0,
            tree: (kind == RouterKind::PrefixAware).then(|| ApproxTree::new(replicas, block_size)),
            last_eviction: 0.0,
            stats: RouterStats {
                per_replica: vec![0; replicas],
                ..Default::default()
            },
        }
    }

    /// The replica for a prompt of `prompt_len` tokens whose full blocks hash to `hashes`
    /// (empty for a unique prompt), arriving at `now`, given each replica's `view`.
    pub fn route(
        &mut self,
        prompt_len: u32,
        hashes: &[BlockHash],
        now: f64,
        view: &[ReplicaView],
    ) -> usize {
        debug_assert_eq!(view.len(), self.replicas);
        let chosen = match self.kind {
            RouterKind::RoundRobin => self.sent % self.replicas,
            RouterKind::LeastLoaded => argmin(view.iter().map(|v| v.load)),
            RouterKind::PrefixAware => self.prefix_aware(prompt_len, hashes, now, view),
            RouterKind::KvAware => {
                let bs = f64::from(self.block_size);
                let new_blocks = u64::from(prompt_len.div_ceil(self.block_size));
                argmin(view.iter().map(|v| {
                    let prefill =
                        (f64::from(prompt_len) - v.cached_blocks as f64 * bs).max(0.0) / bs;
                    self.cfg.overlap_weight * prefill + (v.active_blocks + new_blocks) as f64
                }))
            }
        };
        self.sent += 1;
        self.stats.per_replica[chosen] += 1;
        chosen
    }

    fn prefix_aware(
        &mut self,
        prompt_len: u32,
        hashes: &[BlockHash],
        now: f64,
        view: &[ReplicaView],
    ) -> usize {
        let c = self.cfg;
        let tree = self
            .tree
            .as_mut()
            .expect("a prefix-aware router has a tree");
        if now - self.last_eviction >= c.eviction_interval {
            tree.evict(c.max_tree_size);
            self.last_eviction = now;
        }
        let max = view.iter().map(|v| v.load).max().unwrap_or(0);
        let min = view.iter().map(|v| v.load).min().unwrap_or(0);
        let imbalanced = max.saturating_sub(min) > c.balance_abs_threshold
            && max as f64 > min as f64 * c.balance_rel_threshold;
        let chosen = if imbalanced {
            self.stats.by_balance += 1;
            argmin(view.iter().map(|v| v.load))
        } else {
            let (blocks, tenant) = tree.prefix_match(hashes);
            let rate = (blocks as f64 * f64::from(self.block_size)) / f64::from(prompt_len.max(1));
            match tenant {
                Some(t) if rate > c.cache_threshold => {
                    self.stats.by_match += 1;
                    t as usize
                }
                _ => {
                    self.stats.by_smallest_tree += 1;
                    tree.smallest_tenant() as usize
                }
            }
        };
        tree.insert(hashes, chosen as u32, now);
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn views(loads: &[usize]) -> Vec<ReplicaView> {
        loads
            .iter()
            .map(|&load| ReplicaView {
                load,
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn simple_routers_rotate_or_take_the_least_loaded_lowest_first() {
        let mut rr = Router::new(RouterKind::RoundRobin, RouterConfig::default(), 3, 16);
        let picks: Vec<usize> = (0..5)
            .map(|_| rr.route(10, &[], 0.0, &views(&[0, 0, 0])))
            .collect();
        assert_eq!(picks, [0, 1, 2, 0, 1]);
        let mut ll = Router::new(RouterKind::LeastLoaded, RouterConfig::default(), 3, 16);
        assert_eq!(ll.route(10, &[], 0.0, &views(&[2, 1, 1])), 1);
        assert_eq!(ll.route(10, &[], 0.0, &views(&[0, 0, 0])), 0);
        assert_eq!(ll.stats.per_replica, [1, 1, 0]);
    }

    #[test]
    fn prefix_aware_follows_matches_above_the_threshold_and_balances_beyond_both_limits() {
        let cfg = RouterConfig {
            balance_abs_threshold: 2,
            ..Default::default()
        };
        let mut r = Router::new(RouterKind::PrefixAware, cfg, 2, 16);
        // Empty trees: the smallest (both 0) is replica 0.
        assert_eq!(r.route(64, &[1, 2, 3], 0.0, &views(&[0, 0])), 0);
        // Nothing matches: replica 1 holds fewer tokens.
        assert_eq!(r.route(64, &[9, 8, 7], 0.0, &views(&[1, 0])), 1);
        // 3 of 4 blocks match replica 0 (75% > 50%), though it is busier.
        assert_eq!(r.route(64, &[1, 2, 3, 4], 0.0, &views(&[2, 1])), 0);
        // 1 block of 4 (25%): the smallest tree, replica 1 (48 tokens against 64).
        assert_eq!(r.route(64, &[1, 5, 6, 7], 0.0, &views(&[2, 1])), 1);
        // Imbalanced (4 - 1 > 2 and 4 > 1.1): the least loaded despite the match.
        assert_eq!(r.route(64, &[1, 2, 3, 4], 0.0, &views(&[4, 1])), 1);
        // Imbalanced by the absolute limit only (4 - 1 > 2) but not the relative one.
        let mut r2 = Router::new(
            RouterKind::PrefixAware,
            RouterConfig {
                balance_abs_threshold: 2,
                balance_rel_threshold: 5.0,
                ..Default::default()
            },
            2,
            16,
        );
        r2.route(64, &[1, 2, 3, 4], 0.0, &views(&[0, 0]));
        assert_eq!(r2.route(64, &[1, 2, 3, 4], 0.0, &views(&[4, 1])), 0);
        assert_eq!(
            (
                r.stats.by_match,
                r.stats.by_smallest_tree,
                r.stats.by_balance
            ),
            (1, 3, 1)
        );
    }

    #[test]
    fn kv_aware_weighs_cached_blocks_against_active_blocks() {
        let mut r = Router::new(RouterKind::KvAware, RouterConfig::default(), 3, 16);
        let v = |active_blocks, cached_blocks| ReplicaView {
            load: 0,
            active_blocks,
            cached_blocks,
        };
        // 160-token prompt (10 blocks): costs 10+5, 4+9, 10+2 (+10 new blocks each).
        assert_eq!(r.route(160, &[], 0.0, &[v(5, 0), v(9, 6), v(2, 0)]), 2);
        // Equal costs 10+4 and 6+8: the lower index.
        assert_eq!(r.route(160, &[], 0.0, &[v(8, 4), v(4, 0), v(9, 0)]), 0);
        // Weight 2 makes the cache count double: 2×4+9 = 17 beats 2×10+2 = 22.
        let mut w = Router::new(
            RouterKind::KvAware,
            RouterConfig {
                overlap_weight: 2.0,
                ..Default::default()
            },
            2,
            16,
        );
        assert_eq!(w.route(160, &[], 0.0, &[v(2, 0), v(9, 6)]), 1);
    }
}
