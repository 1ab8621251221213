//! Prefix-aware: SGLang's cache-aware router as its launcher deploys it (`sglang-router` /
//! `python -m sglang_router.launch_router`, policy `cache_aware`). Every rule below is read from
//! sgl-project/sglang at d55f1c28e223226575d40d4449266630eaf2a277 (2026-08-18), paths under
//! `sgl-model-gateway/`:
//!
//! - Defaults (`bindings/python/src/sglang_router/router_args.py:53-63, 283-339`): cache
//!   threshold 0.3, balance thresholds 64 and 1.5, eviction every 60 s (120 s before PR #16263),
//!   `max_tree_size` 2^26 characters. (The Rust struct's own `CacheAwareConfig::default()`, 0.5,
//!   32 / 1.1, 30 s, 10,000, serves only workers registering with a policy hint.)
//! - Load (`src/core/worker.rs:784-806`, `src/routers/http/router.rs:282-312, 566-649`): the
//!   requests the router sent a worker whose response has not ended; the request being routed is
//!   not counted.
//! - Imbalance (`src/policies/cache_aware.rs:404-413`): `max - min > balance_abs_threshold` and
//!   `max > min × balance_rel_threshold` (f32), both strict, over every worker. Then the least
//!   loaded, uniformly at random among equals (PR #33138; 310-382), its text inserted.
//! - Otherwise a match in the approximate tree (426-450): rate = matched / prompt length
//!   (SGLang: characters), a hit only when rate > threshold (f32, strict): the replica the match
//!   points to, whatever its load. A miss goes to the least loaded, at random among equals
//!   (PR #14650 replaced the smallest tree with it; 451-467). The text is inserted for the
//!   chosen replica in every branch (469-490).
//! - Ties among the least loaded ([`LoadTies`]): at random as above, or the first worker, as
//!   `sglang-router` 0.3.2 does — the last release on PyPI under that name, the one `pip install
//!   sglang-router` deploys (its sdist's `src/policies/cache_aware.rs`: `min_by_key` over the
//!   workers' loads, in both the imbalanced and the miss branch; Rust's `min_by_key` returns the
//!   first of equal minima). Its tree, thresholds and defaults are the ones above.
//! - The tree is evicted on a fixed period of simulated time, the first one interval after the
//!   start (`cache_aware.rs:127-150`, `policies/utils.rs:21-52`: a thread that sleeps an
//!   interval, then evicts; its drift by the eviction's own time is not modelled).
//!
//! Tokens for characters: SGLang matches the request's text character by character; the
//! simulator has tokens, so it matches token by token (partial nodes included, as SGLang does)
//! and reads `max_tree_size` as [`CHARS_PER_TOKEN`] characters a token. The match rate is the
//! same fraction either way when every token spells the same number of characters; a real
//! tokenizer's tokens differ in length, so SGLang's rate can differ from the simulator's by the
//! length of the tokens at the boundary.

use super::ties::Ties;
use super::token_tree::TokenTree;
use super::{Arrival, Choice, Reason, Replicas, Router, RouterKind};
use serde::Serialize;

/// Characters per token when a count of characters is read as tokens (OpenAI's rule of thumb
/// for English text, ~4 characters a token).
pub const CHARS_PER_TOKEN: u64 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PrefixAwareConfig {
    /// `--cache-threshold`: the matched fraction above which the match wins.
    pub cache_threshold: f64,
    /// `--balance-abs-threshold`.
    pub balance_abs_threshold: usize,
    /// `--balance-rel-threshold`.
    pub balance_rel_threshold: f64,
    /// `--eviction-interval-secs`: seconds (steps under a step clock) between evictions.
    pub eviction_interval: f64,
    /// `--max-tree-size`: characters each replica's share of the tree keeps at an eviction.
    pub max_tree_size: u64,
    /// How a tie among the least loaded is broken.
    #[serde(skip_serializing_if = "LoadTies::is_random")]
    pub ties: LoadTies,
}

/// Which of several equally least-loaded replicas SGLang's router takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum LoadTies {
    /// Uniformly at random (sgl-model-gateway at the commit above, PR #33138).
    #[default]
    Random,
    /// The first in worker order (`sglang-router` 0.3.2 from PyPI).
    First,
}

impl LoadTies {
    pub fn is_random(&self) -> bool {
        *self == LoadTies::Random
    }
}

impl Default for PrefixAwareConfig {
    /// The launcher's defaults (router_args.py at the commit above).
    fn default() -> Self {
        PrefixAwareConfig {
            cache_threshold: 0.3,
            balance_abs_threshold: 64,
            balance_rel_threshold: 1.5,
            eviction_interval: 60.0,
            max_tree_size: 1 << 26,
            ties: LoadTies::Random,
        }
    }
}

#[derive(Debug, Clone)]
pub struct PrefixAware {
    cfg: PrefixAwareConfig,
    tree: TokenTree,
    ties: Ties,
    next_eviction: f64,
    /// Evictions run so far.
    pub evictions: u64,
}

impl PrefixAware {
    pub fn new(cfg: PrefixAwareConfig, replicas: usize, seed: u64) -> PrefixAware {
        PrefixAware {
            cfg,
            tree: TokenTree::new(replicas),
            ties: Ties::new(seed, 2),
            next_eviction: cfg.eviction_interval,
            evictions: 0,
        }
    }

    pub fn tree(&self) -> &TokenTree {
        &self.tree
    }

    /// The least loaded replica, its load, and how many share that load.
    fn least_loaded(&mut self, replicas: &dyn Replicas) -> (usize, usize, usize) {
        match self.cfg.ties {
            LoadTies::Random => super::least_loaded(&mut self.ties, replicas),
            LoadTies::First => {
                let loads: Vec<usize> = (0..replicas.len()).map(|r| replicas.load(r)).collect();
                let min = loads.iter().copied().min().expect("a cluster has replicas");
                let first = loads.iter().position(|&l| l == min).expect("the minimum");
                (first, min, loads.iter().filter(|&&l| l == min).count())
            }
        }
    }

    /// Runs the evictions due by `now`: one catches up every period that passed (a second one
    /// with no insert between would evict nothing more).
    fn evict_due(&mut self, now: f64) {
        if now < self.next_eviction {
            return;
        }
        self.tree.evict(self.cfg.max_tree_size / CHARS_PER_TOKEN);
        self.evictions += 1;
        let i = self.cfg.eviction_interval;
        let periods = ((now - self.next_eviction) / i).floor() + 1.0;
        self.next_eviction += periods * i;
    }
}

impl Router for PrefixAware {
    fn kind(&self) -> RouterKind {
        RouterKind::PrefixAware
    }

    fn route(&mut self, a: &Arrival, now: f64, replicas: &dyn Replicas) -> Choice {
        self.evict_due(now);
        let c = self.cfg;
        let loads = (0..replicas.len()).map(|r| replicas.load(r));
        let min = loads.clone().min().unwrap_or(0);
        let max = loads.max().unwrap_or(0);
        let imbalanced = max.saturating_sub(min) > c.balance_abs_threshold
            && max as f32 > min as f32 * c.balance_rel_threshold as f32;
        let len = a.prompt_len();
        let choice = if imbalanced {
            let (replica, _, tied) = self.least_loaded(replicas);
            Choice {
                replica,
                reason: Reason::Imbalanced { min, max, tied },
            }
        } else {
            let m = self.tree.prefix_match(a.sent, a.k, len);
            let rate = if len == 0 {
                0.0
            } else {
                m.tokens as f32 / len as f32
            };
            match m.tenant {
                Some(t) if rate > c.cache_threshold as f32 => Choice {
                    replica: t as usize,
                    reason: Reason::Match {
                        matched: m.tokens,
                        of: u64::from(len),
                    },
                },
                _ => {
                    let (replica, load, tied) = self.least_loaded(replicas);
                    Choice {
                        replica,
                        reason: Reason::Miss {
                            matched: m.tokens,
                            of: u64::from(len),
                            load,
                            tied,
                        },
                    }
                }
            }
        };
        self.tree.insert(a.sent, a.k, len, choice.replica as u32);
        choice
    }
}

#[cfg(test)]
mod tests {
    //! Hand cases worked from SGLang's code (the research notes' scenarios S1-S9), one token a
    //! character, under the launcher's defaults unless stated; replicas 0, 1, 2 are SGLang's
    //! w1, w2, w3. None has a load tie, so no draw decides anything.
    use super::super::testing::Stated;
    use super::*;
    use crate::workload::serving::{Prompt, ServingRequest};

    struct Case {
        router: PrefixAware,
        sent: Vec<ServingRequest>,
    }

    impl Case {
        fn new(replicas: usize) -> Case {
            Case {
                router: PrefixAware::new(PrefixAwareConfig::default(), replicas, 0),
                sent: Vec::new(),
            }
        }

        /// Routes `text` with the replicas at `loads`; returns the replica.
        fn send(&mut self, text: &str, loads: &[usize]) -> usize {
            self.choose(text, loads).replica
        }

        fn choose(&mut self, text: &str, loads: &[usize]) -> Choice {
            self.sent.push(ServingRequest {
                id: format!("r{}", self.sent.len()),
                arrival: 0.0,
                prompt: Prompt::Tokens(text.chars().map(u32::from).collect()),
                output_len: 1,
                priority: 0,
            });
            let a = Arrival {
                k: self.sent.len() as u32 - 1,
                sent: &self.sent,
                hashes: &[],
            };
            let view = Stated {
                loads: loads.to_vec(),
                ..Default::default()
            };
            self.router.route(&a, 0.0, &view)
        }

        /// Inserts `text` for `tenant` straight into the tree (no routing).
        fn insert(&mut self, text: &str, tenant: u32) {
            self.sent.push(ServingRequest {
                id: format!("r{}", self.sent.len()),
                arrival: 0.0,
                prompt: Prompt::Tokens(text.chars().map(u32::from).collect()),
                output_len: 1,
                priority: 0,
            });
            let k = self.sent.len() as u32 - 1;
            let len = text.chars().count() as u32;
            self.router.tree.insert(&self.sent[..], k, len, tenant);
        }

        fn sizes(&self, n: u32) -> Vec<u64> {
            (0..n).map(|t| self.router.tree.tenant_tokens(t)).collect()
        }
    }

    #[test]
    fn a_cold_miss_goes_to_the_least_loaded_and_a_hit_ignores_load() {
        let mut c = Case::new(2);
        assert_eq!(c.send("abcdef", &[1, 0]), 1);
        // "abcd" matches inside the node "abcdef": 4/7 > 0.3, replica 1 although 0 is idle.
        let hit = c.choose("abcdxyz", &[0, 5]);
        assert_eq!(
            hit,
            Choice {
                replica: 1,
                reason: Reason::Match { matched: 4, of: 7 }
            }
        );
        assert_eq!(c.send("zzzz", &[0, 5]), 0);
    }

    #[test]
    fn the_threshold_is_strict() {
        let mut c = Case::new(2);
        assert_eq!(c.send("abc", &[0, 1]), 0);
        // 3/10 is exactly 0.3 in f32, not above it: a miss, to the least loaded.
        assert_eq!(c.send("abcdefghij", &[3, 2]), 1);
        let mut c = Case::new(2);
        assert_eq!(c.send("abcd", &[0, 1]), 0);
        // 4/13 = 0.308: a hit on the busier replica.
        assert_eq!(c.send("abcdefghijklm", &[3, 2]), 0);
    }

    #[test]
    fn imbalance_needs_both_limits_strictly_and_its_choice_is_inserted_too() {
        let mut c = Case::new(2);
        assert_eq!(c.send("system prompt A", &[0, 1]), 0);
        // 67 > 64 and 70 > 4.5: imbalanced, the least loaded; " q1" is inserted for replica 1.
        assert!(matches!(
            c.choose("system prompt A q1", &[70, 3]),
            Choice {
                replica: 1,
                reason: Reason::Imbalanced {
                    min: 3,
                    max: 70,
                    tied: 1
                }
            }
        ));
        // 66 - 2 = 64 is not above 64: the match, 17 of 18, ends in " q1", created by 1.
        assert_eq!(c.send("system prompt A q2", &[66, 2]), 1);
        // 66 > 64 but 200 > 201 is false: balanced; the match ends in the split " q" (1's).
        assert_eq!(c.send("system prompt A q3", &[200, 134]), 1);
        // 68 > 64 and 202 > 201: imbalanced, to 0 though the prefix is 1's.
        assert_eq!(c.send("system prompt A q4", &[134, 202]), 0);
    }

    #[test]
    fn loads_compare_over_every_replica() {
        let mut c = Case::new(3);
        assert_eq!(c.send("shared doc", &[0, 1, 1]), 0);
        // max - min = 67 with the idle replica 2: imbalanced, to 2 (not 1).
        assert_eq!(c.send("shared doc part 2", &[70, 10, 3]), 2);
        // 70 - 6 = 64: balanced; 16 of 17 match into " part 2", created by 2.
        assert_eq!(c.send("shared doc part 3", &[70, 10, 6]), 2);
    }

    #[test]
    fn a_match_returns_the_replica_that_created_the_text() {
        let mut c = Case::new(2);
        assert_eq!(c.send("hello world", &[0, 1]), 0);
        assert_eq!(c.send("hello world", &[80, 0]), 1);
        assert_eq!(c.sizes(2), [11, 11]);
        // Both hold "hello world"; its creator, 0, wins though 1 is idle.
        assert_eq!(c.send("hello world, again", &[10, 0]), 0);
        assert_eq!(c.sizes(2), [18, 11]);
    }

    #[test]
    fn partial_matches_count_and_a_split_keeps_its_creator() {
        let mut c = Case::new(3);
        assert_eq!(c.send("abcdefgh", &[0, 1, 1]), 0);
        assert_eq!(c.send("abcxyz", &[70, 0, 1]), 1);
        // "abc" then "xy" of "xyz": 5/9, in "xyz" (1's), not the idle 2.
        let c5 = c.choose("abcxy-123", &[5, 5, 0]);
        assert_eq!(c5.reason, Reason::Match { matched: 5, of: 9 });
        assert_eq!(c5.replica, 1);
        // The match stops inside the split node "abc" (0's): 2/5 = 0.4.
        assert_eq!(c.send("abQRS", &[5, 5, 0]), 0);
        // Sizes count the characters newly attributed: abc + defgh + QRS, abc + xyz + -123.
        assert_eq!(c.sizes(3), [11, 10, 0]);
    }

    #[test]
    fn a_miss_goes_to_the_least_loaded_not_the_smallest_tree() {
        let mut c = Case::new(2);
        assert_eq!(c.send("a long shared system prompt number one", &[0, 1]), 0);
        assert_eq!(c.send("short", &[1, 0]), 1);
        // Before PR #14650 the smaller tree (replica 1, 5 characters) would have won.
        assert_eq!(c.send("unrelated question", &[0, 3]), 0);
        // An empty prompt matches nothing: least loaded, and adds nothing.
        assert_eq!(c.send("", &[2, 1]), 1);
        assert_eq!(c.sizes(2), [38 + 18, 5]);
    }

    #[test]
    fn eviction_cuts_each_replica_by_its_least_recent_leaves() {
        let mut c = Case::new(2);
        c.insert("abcd", 0);
        c.insert("wxyz", 0);
        c.insert("abcd", 1);
        assert_eq!(c.sizes(2), [8, 4]);
        c.router.tree.evict(5);
        // Replica 0's oldest leaf, "abcd", goes; replica 1 keeps its copy and now owns the match.
        assert_eq!(c.sizes(2), [4, 4]);
        assert_eq!(c.send("abcd", &[0, 0]), 1);
        let mut c = Case::new(2);
        for t in ["abcdef", "abcxyz", "qq"] {
            c.insert(t, 0);
        }
        assert_eq!(c.sizes(1), [11]);
        c.router.tree.evict(5);
        // "def" then "xyz" go, leaving "abc" and "qq".
        assert_eq!(c.sizes(1), [5]);
        assert!(matches!(
            c.choose("abcdef", &[0, 1]).reason,
            Reason::Match { matched: 3, .. }
        ));
    }

    #[test]
    fn first_ties_take_the_first_least_loaded_in_both_branches() {
        // sglang-router 0.3.2: `min_by_key` over the loads, the first of equal minima.
        let mut c = Case::new(4);
        c.router.cfg.ties = LoadTies::First;
        for seed in 0..8 {
            c.router.ties = Ties::new(seed, 2);
            // Texts that share no first character: every one misses.
            let first = |base: u8| char::from(base + seed as u8);
            let miss = c.choose(&format!("{}m", first(b'A')), &[2, 1, 1, 1]);
            assert_eq!(
                (miss.replica, miss.reason),
                (
                    1,
                    Reason::Miss {
                        matched: 0,
                        of: 2,
                        load: 1,
                        tied: 3
                    }
                ),
                "seed {seed}"
            );
            // 100 - 30 > 64 and 100 > 45: imbalanced; replicas 2 and 3 tie at 30.
            let imbalanced = c.choose(&format!("{}i", first(b'a')), &[100, 31, 30, 30]);
            assert_eq!(imbalanced.replica, 2, "seed {seed}");
        }
        // Random ties spread the same misses (a draw among three, eight seeds).
        let mut c = Case::new(4);
        let chosen: std::collections::BTreeSet<usize> = (0..8)
            .map(|seed| {
                c.router.ties = Ties::new(seed, 2);
                c.send(
                    &format!("{}r", char::from(b'P' + seed as u8)),
                    &[2, 1, 1, 1],
                )
            })
            .collect();
        assert!(chosen.len() > 1 && !chosen.contains(&0), "{chosen:?}");
    }

    #[test]
    fn evictions_run_on_a_fixed_period_of_simulated_time() {
        let cfg = PrefixAwareConfig {
            eviction_interval: 10.0,
            max_tree_size: 0,
            ..PrefixAwareConfig::default()
        };
        let mut r = PrefixAware::new(cfg, 2, 0);
        r.evict_due(9.9);
        assert_eq!(r.evictions, 0);
        r.evict_due(10.0);
        r.evict_due(19.0);
        assert_eq!(r.evictions, 1);
        // 35 s: the periods at 20 and 30 passed; one eviction catches up, the next is at 40.
        r.evict_due(35.0);
        r.evict_due(39.9);
        assert_eq!(r.evictions, 2);
        r.evict_due(40.0);
        assert_eq!(r.evictions, 3);
    }
}
