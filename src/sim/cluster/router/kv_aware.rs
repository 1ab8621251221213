//! Kv-aware: NVIDIA Dynamo's KV router (`dynamo.frontend --router-mode kv`), read from
//! ai-dynamo/dynamo at 2a6da14c83617f5412caba5777dbf0e2399e9c5f (2026-08-21), paths under
//! `lib/kv-router/src/`:
//!
//! - Cost (`scheduling/selector/default.rs:217-330`, inputs `selector/mod.rs:103-216`), per
//!   worker w, for a prompt of `isl` tokens and N = ⌊isl / block⌋ full blocks:
//!   `logit = s × max(0, (A + isl) / block − (c × D + h × H)) + B + (N − M)`, lowest wins, where
//!   - A: the prefill tokens the router booked on w for requests whose first token it has not
//!     seen, each `isl − cached` as estimated when it was routed (`scheduling/queue.rs:1128-1241`;
//!     no decay under the default `--router-prefill-load-model none`),
//!   - D: the prompt's leading full blocks w's GPU cache holds (its KV events feed a radix tree;
//!     `indexer/radix_tree.rs:110-216`); here the cache as w's last step left it,
//!   - H: the blocks past D that w's host tier holds, credited at `--router-host-cache-hit-weight`
//!     (0.75; `scheduling/overlap.rs:201-272`), only when a host tier exists,
//!   - B: the distinct prompt blocks of w's booked requests (`sequences/block_tracker.rs:85-303`:
//!     a block shared by two requests counts once; generated tokens count not, as
//!     `--router-track-output-blocks` is off by default),
//!   - M: how many of the new prompt's blocks, from the first, are already booked on w
//!     (`sequences/prompt_membership_trie.rs:430-500`), so they are not charged twice,
//!   - c = `--router-kv-overlap-score-credit` 1, s = `--router-prefill-load-scale` 1
//!     (`scheduling/config.rs:853-897`). The prefill term divides without rounding: a partial
//!     last block counts as a fraction there, and not at all in N (`protocols.rs:156`).
//! - Choice (`default.rs:396-512`): at `--router-temperature` 0 (the default) the lowest logit,
//!   uniformly at random among exact equals (reservoir sampling; Dynamo's generator is unseeded,
//!   here `--seed`); above 0, p ∝ exp(−(logit − min) / ((max − min) × T)).
//! - Booking (`sequences/single.rs:185-274`, `push_router/request_guard.rs:58-110, 351-375`):
//!   on routing, A += isl − cached where cached = round((D + h × H) × block) for the chosen
//!   worker, and the prompt's blocks join B; at the first token the prefill tokens leave A; at the
//!   finish the blocks leave B.
//!
//! Not modelled: KV events' network lag (the router sees the cache of each replica's last step),
//! the 300 s expiry of stale bookings, disk tiers, taints, busy thresholds and queueing (all off by
//! default).

use super::ties::Ties;
use super::{Arrival, Choice, Reason, Replicas, Router, RouterKind};
use crate::kv::BlockSize;
use crate::sim::engine::hash::{BlockHash, HashMapOfHashes};
use serde::Serialize;
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct KvAwareConfig {
    /// `--router-kv-overlap-score-credit`: blocks of prefill each cached block saves.
    pub overlap_score_credit: f64,
    /// `--router-prefill-load-scale`: the weight of the prefill term.
    pub prefill_load_scale: f64,
    /// `--router-host-cache-hit-weight`: the credit of a block found in the host tier.
    pub host_cache_hit_weight: f64,
    /// `--router-temperature`: 0 picks the lowest cost; above 0 samples.
    pub temperature: f64,
}

impl Default for KvAwareConfig {
    fn default() -> Self {
        KvAwareConfig {
            overlap_score_credit: 1.0,
            prefill_load_scale: 1.0,
            host_cache_hit_weight: 0.75,
            temperature: 0.0,
        }
    }
}

/// What the router booked on one worker.
#[derive(Debug, Clone, Default)]
struct Worker {
    /// Booked requests per block hash.
    active: HashMapOfHashes<u32>,
    /// Prefill tokens of booked requests whose first token has not come (A).
    prefill_tokens: u64,
}

/// One routed request's booking.
#[derive(Debug, Clone)]
struct Booking {
    replica: usize,
    hashes: Vec<BlockHash>,
    /// Its share of A until its first token.
    prefill_tokens: u64,
}

#[derive(Debug, Clone)]
pub struct KvAware {
    cfg: KvAwareConfig,
    block_size: BlockSize,
    workers: Vec<Worker>,
    bookings: HashMap<u32, Booking>,
    ties: Ties,
    costs: Vec<f64>,
    cached: Vec<f64>,
}

impl KvAware {
    pub fn new(cfg: KvAwareConfig, replicas: usize, block_size: BlockSize, seed: u64) -> KvAware {
        KvAware {
            cfg,
            block_size,
            workers: vec![Worker::default(); replicas],
            bookings: HashMap::new(),
            ties: Ties::new(seed, 3),
            costs: Vec::new(),
            cached: Vec::new(),
        }
    }

    /// Each worker's logit for `a`, into `self.costs`, and its cached-block estimate (D + h × H)
    /// into `self.cached`.
    fn costs(&mut self, a: &Arrival, replicas: &dyn Replicas) {
        let c = self.cfg;
        let bs = f64::from(self.block_size.tokens());
        let isl = f64::from(a.prompt_len());
        let n = a.hashes.len() as f64;
        self.costs.clear();
        self.cached.clear();
        for (r, w) in self.workers.iter().enumerate() {
            let d = replicas.cached_blocks(r, a.hashes);
            let h = replicas.host_blocks(r, a.hashes, d);
            let credit = c.overlap_score_credit * d as f64 + c.host_cache_hit_weight * h as f64;
            let prefill =
                c.prefill_load_scale * ((w.prefill_tokens as f64 + isl) / bs - credit).max(0.0);
            let m = a
                .hashes
                .iter()
                .take_while(|h| w.active.contains_key(h))
                .count();
            let decode = w.active.len() as f64 + (n - m as f64);
            self.costs.push(prefill + decode);
            self.cached
                .push(d as f64 + c.host_cache_hit_weight * h as f64);
        }
    }
}

impl Router for KvAware {
    fn kind(&self) -> RouterKind {
        RouterKind::KvAware
    }

    fn needs_hashes(&self) -> bool {
        true
    }

    fn route(&mut self, a: &Arrival, _now: f64, replicas: &dyn Replicas) -> Choice {
        self.costs(a, replicas);
        let choice = if self.cfg.temperature > 0.0 {
            let (replica, p) = self.ties.softmax(&self.costs, self.cfg.temperature);
            Choice {
                replica,
                reason: Reason::Sampled {
                    cost: self.costs[replica],
                    p,
                },
            }
        } else {
            let pick = self
                .ties
                .argmin(self.costs.iter().copied())
                .expect("a cluster has replicas");
            Choice {
                replica: pick.index,
                reason: Reason::Cost {
                    cost: pick.key,
                    tied: pick.tied,
                },
            }
        };
        let r = choice.replica;
        let isl = u64::from(a.prompt_len());
        let cached = (self.cached[r] * f64::from(self.block_size.tokens())).round() as u64;
        let prefill_tokens = isl - cached.min(isl);
        let w = &mut self.workers[r];
        w.prefill_tokens += prefill_tokens;
        for h in a.hashes {
            *w.active.entry(*h).or_default() += 1;
        }
        self.bookings.insert(
            a.k,
            Booking {
                replica: r,
                hashes: a.hashes.to_vec(),
                prefill_tokens,
            },
        );
        choice
    }

    fn first_token(&mut self, k: u32, _replica: usize) {
        if let Some(b) = self.bookings.get_mut(&k) {
            self.workers[b.replica].prefill_tokens -= b.prefill_tokens;
            b.prefill_tokens = 0;
        }
    }

    fn finished(&mut self, k: u32, _replica: usize) {
        let Some(b) = self.bookings.remove(&k) else {
            return;
        };
        let w = &mut self.workers[b.replica];
        w.prefill_tokens -= b.prefill_tokens;
        for h in &b.hashes {
            if let Some(n) = w.active.get_mut(h) {
                *n -= 1;
                if *n == 0 {
                    w.active.remove(h);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Hand cases worked from Dynamo's cost (block size 4; the research notes' S1-S8), with the
    //! replicas' caches stated: `a`, `b`, … are block hashes.
    use super::super::testing::Stated;
    use super::*;
    use crate::workload::serving::{Prompt, ServingRequest};

    struct Case {
        router: KvAware,
        sent: Vec<ServingRequest>,
        view: Stated,
    }

    impl Case {
        fn new(replicas: usize, cfg: KvAwareConfig, seed: u64) -> Case {
            Case {
                router: KvAware::new(cfg, replicas, BlockSize::of(4), seed),
                sent: Vec::new(),
                view: Stated {
                    loads: vec![0; replicas],
                    cached: vec![Vec::new(); replicas],
                    host: vec![Vec::new(); replicas],
                },
            }
        }

        /// Routes a prompt of `isl` tokens whose full blocks are `blocks`.
        fn send(&mut self, isl: u32, blocks: &[BlockHash]) -> Choice {
            self.sent.push(ServingRequest {
                id: format!("r{}", self.sent.len()),
                arrival: 0.0,
                prompt: Prompt::Unique(isl),
                output_len: 1,
                priority: 0,
            });
            let a = Arrival {
                k: self.sent.len() as u32 - 1,
                sent: &self.sent,
                hashes: blocks,
            };
            self.router.route(&a, 0.0, &self.view)
        }

        fn cost(&self, replica: usize, tied: usize, cost: f64) -> Choice {
            Choice {
                replica,
                reason: Reason::Cost { cost, tied },
            }
        }
    }

    const A: BlockHash = 1;
    const B: BlockHash = 2;
    const C: BlockHash = 3;
    const D: BlockHash = 4;
    const E: BlockHash = 5;
    const X: BlockHash = 10;
    const Y: BlockHash = 11;
    const Z: BlockHash = 12;
    const P: BlockHash = 20;
    const Q: BlockHash = 21;
    const R: BlockHash = 22;

    fn default() -> KvAwareConfig {
        KvAwareConfig::default()
    }

    #[test]
    fn a_cached_prefix_wins_between_idle_replicas() {
        let mut c = Case::new(2, default(), 0);
        c.view.cached[0] = vec![A, B];
        // 16/4 - 2 + 4 = 6 against 16/4 + 4 = 8.
        assert_eq!(c.send(16, &[A, B, C, D]), c.cost(0, 1, 6.0));
        // Booked: 16 - 8 cached tokens of prefill, 4 blocks.
        assert_eq!(c.router.workers[0].prefill_tokens, 8);
        assert_eq!(c.router.workers[0].active.len(), 4);
    }

    #[test]
    fn equal_costs_are_drawn_at_random_and_a_partial_block_counts_only_in_prefill() {
        let mut picks = [0; 2];
        for seed in 0..64 {
            let mut c = Case::new(2, default(), seed);
            // 14/4 + 3 full blocks = 6.5 on both.
            let ch = c.send(14, &[A, B, C]);
            assert_eq!(ch.reason, Reason::Cost { cost: 6.5, tied: 2 });
            picks[ch.replica] += 1;
        }
        assert!(picks[0] > 10 && picks[1] > 10, "{picks:?}");
    }

    #[test]
    fn an_unfinished_prefill_counts_until_its_first_token() {
        let mut c = Case::new(2, default(), 0);
        c.view.cached = vec![vec![X], vec![P]];
        // r0 [x y z]: 12/4 - 1 + 3 = 5 on 0 against 3 + 3 = 6; books 12 - 4 = 8 tokens.
        assert_eq!(c.send(12, &[X, Y, Z]), c.cost(0, 1, 5.0));
        // r1 [p q r]: (8 + 12)/4 + 3 + 3 = 11 on 0, 12/4 - 1 + 3 = 5 on 1.
        assert_eq!(c.send(12, &[P, Q, R]), c.cost(1, 1, 5.0));
        c.router.first_token(1, 1);
        c.view.cached = vec![Vec::new(), Vec::new()];
        // [a b]: (8 + 8)/4 + 3 + 2 = 9 on 0 (r0 still in prefill), 8/4 + 3 + 2 = 7 on 1.
        assert_eq!(c.send(8, &[A, B]), c.cost(1, 1, 7.0));
        // Once r0's first token came: 8/4 + 3 + 2 = 7 on 0 against (8 + 8)/4 + 5 + 2 = 11 on 1,
        // which has r2's prefill and 5 blocks booked.
        c.router.first_token(0, 0);
        assert_eq!(c.send(8, &[E, D]), c.cost(0, 1, 7.0));
    }

    #[test]
    fn a_block_booked_twice_on_a_replica_counts_once() {
        let mut c = Case::new(2, default(), 0);
        c.view.cached = vec![vec![A], vec![E]];
        assert_eq!(c.send(16, &[A, B, C, D]).replica, 0);
        assert_eq!(c.send(16, &[E, 6, 7, 8]).replica, 1);
        c.router.first_token(0, 0);
        c.router.first_token(1, 1);
        c.view.cached = vec![vec![A, B, C, D], vec![A, B, C, D]];
        // [a b c d] + 2: 18/4 - 4 + 4 + (4 - 4) = 4.5 on 0, whose booked blocks it repeats,
        // against 0.5 + 4 + 4 = 8.5 on 1 (without the dedup 0 would also cost 8.5).
        assert_eq!(c.send(18, &[A, B, C, D]), c.cost(0, 1, 4.5));
        assert_eq!(c.router.workers[0].active.len(), 4);
        assert_eq!(c.router.workers[0].active[&A], 2);
    }

    #[test]
    fn the_host_tier_is_credited_at_its_weight_and_finishes_release_bookings() {
        let mut c = Case::new(2, default(), 0);
        c.view.cached = vec![vec![A], vec![A, B]];
        c.view.host = vec![vec![B, C], Vec::new()];
        // 16/4 - (1 + 0.75 × 2) + 4 = 5.5 against 16/4 - 2 + 4 = 6.
        assert_eq!(c.send(16, &[A, B, C, D]), c.cost(0, 1, 5.5));
        // cached = round((1 + 1.5) × 4) = 10: 6 tokens of prefill booked.
        assert_eq!(c.router.workers[0].prefill_tokens, 6);
        // Weight 0: the host tier is ignored and replica 1 wins, 6 against 7.
        let cfg = KvAwareConfig {
            host_cache_hit_weight: 0.0,
            ..default()
        };
        let mut c0 = Case::new(2, cfg, 0);
        c0.view = c.view.clone();
        assert_eq!(c0.send(16, &[A, B, C, D]), c0.cost(1, 1, 6.0));
        // A finish before the first token releases the prefill and the blocks.
        c.router.finished(0, 0);
        assert_eq!(c.router.workers[0].prefill_tokens, 0);
        assert!(c.router.workers[0].active.is_empty());
    }

    #[test]
    fn above_temperature_zero_the_choice_is_sampled() {
        let cfg = KvAwareConfig {
            temperature: 1.0,
            ..default()
        };
        let mut n0 = 0;
        for seed in 0..400 {
            let mut c = Case::new(2, cfg, seed);
            c.view.cached[0] = vec![A, B];
            // Costs 6 and 8: p = 1 / (1 + e^-1) = 0.731 for replica 0.
            let ch = c.send(16, &[A, B, C, D]);
            let Reason::Sampled { cost, p } = ch.reason else {
                panic!("{ch:?}")
            };
            let want = 1.0 / (1.0 + (-1f64).exp());
            if ch.replica == 0 {
                n0 += 1;
                assert_eq!(cost, 6.0);
                assert!((p - want).abs() < 1e-12);
            } else {
                assert!((p - (1.0 - want)).abs() < 1e-12);
            }
        }
        // Binomial(400, 0.731): mean 292, sd 8.9.
        assert!((240..=345).contains(&n0), "{n0}");
    }
}
