//! The routers: which replica a request goes to, from what a router of each kind can see, one
//! policy per file, each citing the code it follows, each choice returned with its reason.
//!
//! - [`round_robin`]: the k-th request to replica k mod N.
//! - [`least_loaded`]: the fewest requests in flight, ties at random.
//! - [`prefix_aware`]: SGLang's cache-aware policy as its launcher deploys it, over its
//!   approximate tree of what it sent ([`token_tree`]).
//! - [`kv_aware`]: NVIDIA Dynamo's KV router: cost from the replicas' real prefix caches (its KV
//!   events), its own booking of prefill tokens and active blocks, random ties.
//! - [`directed`]: disaggregated prefill under Mooncake's Conductor, which chooses from what a
//!   router cannot see ([`crate::sim::cluster::pd::conductor`]).
//!
//! A router sees each replica's load (requests it sent there and has not seen finish), and the
//! replicas' caches as their last step left them ([`Replicas`]); it hears of first tokens and
//! finishes when they happen (the cluster's clock), as a gateway reading the streams would.

pub mod directed;
pub mod kv_aware;
pub mod least_loaded;
pub mod prefix_aware;
pub mod round_robin;
pub mod ties;
pub mod token_tree;

pub use kv_aware::KvAwareConfig;
pub use prefix_aware::{LoadTies, PrefixAwareConfig};

use crate::kv::BlockSize;
use crate::sim::engine::hash::BlockHash;
use crate::workload::serving::ServingRequest;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum RouterKind {
    RoundRobin,
    LeastLoaded,
    PrefixAware,
    KvAware,
    /// Mooncake's Conductor (FAST'25, Algorithm 1): the prefill instance with the least
    /// estimated TTFT, early rejection under SLOs (disaggregated serving only).
    Conductor,
}

crate::value_names::display_as_value_name!(RouterKind);

/// Every router's settings; the defaults are what deployments run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct RouterConfig {
    pub prefix_aware: PrefixAwareConfig,
    pub kv_aware: KvAwareConfig,
    /// Seeds the random tie breaks (and Dynamo's sampling), so a run repeats.
    pub seed: u64,
}

/// What a router may read of the replicas when a request arrives.
pub trait Replicas {
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Requests sent to replica `r` that the router has not yet seen finish.
    fn load(&self, r: usize) -> usize;

    /// How many of `hashes` (a prompt's full blocks, first first) replica `r`'s GPU prefix cache
    /// holds in a row from the first, as its last step left it.
    fn cached_blocks(&self, r: usize, hashes: &[BlockHash]) -> usize;

    /// How many of `hashes[from..]` replica `r`'s host KV tier holds in a row (0 without one).
    fn host_blocks(&self, r: usize, hashes: &[BlockHash], from: usize) -> usize;
}

/// A request as a router sees it.
#[derive(Clone, Copy)]
pub struct Arrival<'a> {
    /// Its number among the requests sent so far (0, 1, …).
    pub k: u32,
    /// Every request sent so far, this one last (`sent[k]`): the prefix tree's edges point there.
    pub sent: &'a [ServingRequest],
    /// The chained hashes of its full blocks, ⌊prompt / block size⌋ of them, as the engines hash
    /// them (empty unless the router [needs them](Router::needs_hashes)).
    pub hashes: &'a [BlockHash],
}

impl Arrival<'_> {
    pub fn request(&self) -> &ServingRequest {
        &self.sent[self.k as usize]
    }

    pub fn prompt_len(&self) -> u32 {
        self.request().prompt.len() as u32
    }
}

/// Why a router chose the replica it chose.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "rule", rename_all = "kebab-case")]
pub enum Reason {
    /// Round-robin's turn.
    Turn,
    /// The fewest requests in flight; `tied` replicas had it (the pick among them at random).
    LeastLoaded { load: usize, tied: usize },
    /// Prefix-aware: loads imbalanced beyond both thresholds: the least loaded.
    Imbalanced { min: usize, max: usize, tied: usize },
    /// Prefix-aware: `matched` of the prompt's `of` tokens matched this replica's text, above
    /// the threshold.
    Match { matched: u64, of: u64 },
    /// Prefix-aware: the best match was at or below the threshold: the least loaded.
    Miss {
        matched: u64,
        of: u64,
        load: usize,
        tied: usize,
    },
    /// Kv-aware: the lowest cost; `tied` replicas had it exactly (the pick among them at random).
    Cost { cost: f64, tied: usize },
    /// Kv-aware at a temperature above 0: drawn with probability `p`.
    Sampled { cost: f64, p: f64 },
    /// Conductor: the least estimated TTFT (seconds: queue + prefill + the KV's tail to decode).
    Estimate {
        ttft: f64,
        /// A remote prefix fetched from the KV pool (0: none).
        fetch: f64,
        queue: f64,
        prefill: f64,
        transfer: f64,
    },
}

impl Reason {
    /// The rule's name, as the stats count it.
    pub fn rule(&self) -> &'static str {
        match self {
            Reason::Turn => "turn",
            Reason::LeastLoaded { .. } => "least-loaded",
            Reason::Imbalanced { .. } => "imbalanced",
            Reason::Match { .. } => "match",
            Reason::Miss { .. } => "miss",
            Reason::Cost { .. } => "cost",
            Reason::Sampled { .. } => "sampled",
            Reason::Estimate { .. } => "estimate",
        }
    }

    /// Whether the choice was drawn among equals (or sampled).
    pub fn random(&self) -> bool {
        match *self {
            Reason::LeastLoaded { tied, .. }
            | Reason::Imbalanced { tied, .. }
            | Reason::Miss { tied, .. }
            | Reason::Cost { tied, .. } => tied > 1,
            Reason::Sampled { .. } => true,
            Reason::Turn | Reason::Match { .. } | Reason::Estimate { .. } => false,
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tie = |tied: usize| {
            if tied > 1 {
                format!(", drawn among {tied}")
            } else {
                String::new()
            }
        };
        match *self {
            Reason::Turn => write!(f, "its turn"),
            Reason::LeastLoaded { load, tied } => write!(f, "least loaded ({load}{})", tie(tied)),
            Reason::Imbalanced { min, max, tied } => {
                write!(f, "imbalanced {min}..{max}: least loaded{}", tie(tied))
            }
            Reason::Match { matched, of } => write!(f, "matched {matched} of {of} tokens"),
            Reason::Miss {
                matched,
                of,
                load,
                tied,
            } => write!(
                f,
                "matched {matched} of {of} tokens, not above the threshold: least loaded ({load}{})",
                tie(tied)
            ),
            Reason::Cost { cost, tied } => write!(f, "lowest cost {cost}{}", tie(tied)),
            Reason::Sampled { cost, p } => write!(f, "cost {cost} drawn with p {p:.3}"),
            Reason::Estimate {
                ttft,
                fetch,
                queue,
                prefill,
                transfer,
            } => {
                let fetch = if fetch > 0.0 {
                    format!("pool fetch {:.2} + ", fetch * 1e3)
                } else {
                    String::new()
                };
                write!(
                    f,
                    "least estimated TTFT {:.1} ms ({fetch}queue {:.1} + prefill {:.1} + KV tail {:.2})",
                    ttft * 1e3,
                    queue * 1e3,
                    prefill * 1e3,
                    transfer * 1e3
                )
            }
        }
    }
}

/// A router's choice.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Choice {
    pub replica: usize,
    pub reason: Reason,
}

/// How a router decided, over a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RouterStats {
    pub per_replica: Vec<usize>,
    /// Decisions per rule (see [`Reason::rule`]).
    pub by_rule: BTreeMap<&'static str, usize>,
    /// Decisions drawn at random among equals, or sampled.
    pub random: usize,
}

impl RouterStats {
    pub fn new(replicas: usize) -> RouterStats {
        RouterStats {
            per_replica: vec![0; replicas],
            ..Default::default()
        }
    }

    pub fn count(&mut self, c: &Choice) {
        self.per_replica[c.replica] += 1;
        *self.by_rule.entry(c.reason.rule()).or_default() += 1;
        self.random += usize::from(c.reason.random());
    }

    /// Replicas sent fewer than a quarter of the mean's requests: the router leaves them idle
    /// (or nearly so).
    pub fn starved(&self) -> Vec<usize> {
        let n = self.per_replica.len();
        let total: usize = self.per_replica.iter().sum();
        if n < 2 || total == 0 {
            return Vec::new();
        }
        (0..n)
            .filter(|&r| self.per_replica[r] * 4 * n < total)
            .collect()
    }
}

/// A routing policy.
pub trait Router: Send {
    fn kind(&self) -> RouterKind;

    /// Whether it reads [`Arrival::hashes`].
    fn needs_hashes(&self) -> bool {
        false
    }

    /// The replica for `a`, arriving at `now`.
    fn route(&mut self, a: &Arrival, now: f64, replicas: &dyn Replicas) -> Choice;

    /// Request `k`, sent to `replica`, streamed its first token.
    fn first_token(&mut self, _k: u32, _replica: usize) {}

    /// Request `k`, sent to `replica`, finished.
    fn finished(&mut self, _k: u32, _replica: usize) {}
}

/// A router of `kind` for `replicas` replicas of `block_size`-token blocks.
pub fn build(
    kind: RouterKind,
    cfg: &RouterConfig,
    replicas: usize,
    block_size: BlockSize,
) -> Box<dyn Router> {
    match kind {
        RouterKind::RoundRobin => Box::new(round_robin::RoundRobin::new(replicas)),
        RouterKind::LeastLoaded => Box::new(least_loaded::LeastLoaded::new(cfg.seed)),
        RouterKind::PrefixAware => Box::new(prefix_aware::PrefixAware::new(
            cfg.prefix_aware,
            replicas,
            cfg.seed,
        )),
        RouterKind::KvAware => Box::new(kv_aware::KvAware::new(
            cfg.kv_aware,
            replicas,
            block_size,
            cfg.seed,
        )),
        RouterKind::Conductor => Box::new(directed::Directed::new(cfg.seed)),
    }
}

/// The least loaded replica, at random among equals (shared by the policies that fall back to it).
pub(crate) fn least_loaded(
    ties: &mut ties::Ties,
    replicas: &dyn Replicas,
) -> (usize, usize, usize) {
    let p = ties
        .argmin((0..replicas.len()).map(|r| replicas.load(r)))
        .expect("a cluster has replicas");
    (p.index, p.key, p.tied)
}

#[cfg(test)]
pub(crate) mod testing {
    //! Replicas stated by hand, for the routers' unit tests.
    use super::*;

    #[derive(Debug, Clone, Default)]
    pub struct Stated {
        pub loads: Vec<usize>,
        /// Per replica: the block hashes its GPU cache holds.
        pub cached: Vec<Vec<BlockHash>>,
        /// Per replica: the block hashes its host tier holds.
        pub host: Vec<Vec<BlockHash>>,
    }

    impl Replicas for Stated {
        fn len(&self) -> usize {
            self.loads.len()
        }
        fn load(&self, r: usize) -> usize {
            self.loads[r]
        }
        fn cached_blocks(&self, r: usize, hashes: &[BlockHash]) -> usize {
            let c = self.cached.get(r).map_or(&[][..], |v| v);
            hashes.iter().take_while(|h| c.contains(h)).count()
        }
        fn host_blocks(&self, r: usize, hashes: &[BlockHash], from: usize) -> usize {
            let c = self.host.get(r).map_or(&[][..], |v| v);
            hashes[from..].iter().take_while(|h| c.contains(h)).count()
        }
    }
}
