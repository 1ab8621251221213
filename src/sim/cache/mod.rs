//! Cache eviction simulator: which keys a cache of `capacity` unit-sized entries keeps, request by
//! request, under eight policies, and miss-ratio curves over all capacities in one pass for the
//! stack algorithms (LRU by stack distance, OPT by Mattson's priority stack).
//!
//! Every policy admits the requested key on a miss (demand paging) and costs O(1) amortised per
//! request, except OPT at O(log n). Keys are dense (`0..key_space`, see [`KeyTrace`]), so nothing
//! is hashed: a key is its own index into the policy's tables. Where a hit only reads or sets a
//! few bits (FIFO, CLOCK, SIEVE, S3-FIFO, ARC's list), they sit in one byte per key, a megabyte per
//! million keys that stays in the core's caches; where the key moves in a list (LRU, ARC, LFU,
//! SIEVE's queue), the key is the list node itself ([`links`]), with 32-bit links.

mod arc;
mod clock;
mod curve;
mod fifo;
mod lfu;
pub mod links;
mod lru;
mod opt;
mod opt_stack;
mod prefetch;
mod s3fifo;
mod sieve;
mod sweep;

pub use arc::Arc;
pub use clock::Clock;
pub use curve::{lru_curve, MissRatioCurve};
pub use fifo::Fifo;
pub use lfu::Lfu;
pub use lru::Lru;
pub use opt::{next_uses, Opt, NEVER};
pub use opt_stack::opt_curve;
pub use s3fifo::S3Fifo;
pub use sieve::Sieve;
pub use sweep::{
    capacity_grid, miss_ratio_curves, parse_capacities, sweep, CacheRow, Costs, CurvePoints,
    SweepSpec,
};

pub use prefetch::Ahead;

use crate::lab::procstat::thread_cpu_ns;
use crate::workload::keys::KeyTrace;
use prefetch::{ENTRY_AHEAD, NEIGHBOURS_AHEAD};
use serde::Serialize;
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum CacheSimError {
    #[error("capacity must be at least 1")]
    ZeroCapacity,
    #[error("capacity {0} is too large (at most 2^31 entries)")]
    CapacityTooLarge(u64),
    #[error("the trace is empty")]
    EmptyTrace,
    #[error("bad capacity {0:?} (expected a number of entries or a percentage of distinct keys, like 10%)")]
    BadCapacity(String),
    #[error("{0} must be a finite number")]
    BadCost(&'static str),
}

/// A cache of unit-sized entries that serves a stream of key requests.
pub trait CachePolicy {
    /// Serves a request for `key`; true on a hit. A miss admits `key`, evicting as needed.
    fn access(&mut self, key: u32) -> bool;
    /// Keys held now.
    fn len(&self) -> usize;
    /// Whether `key` is held now (ghost entries are not); changes nothing.
    fn contains(&self, key: u32) -> bool;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Accepts keys up to `key_space - 1` from now on (a smaller `key_space` changes nothing);
    /// what is held and every later answer stay as they would have been.
    fn grow_key_space(&mut self, key_space: usize);
    /// A hint that `key` comes soon (see [`prefetch`]); no effect on results.
    #[inline]
    fn prefetch(&self, _key: u32, _ahead: Ahead) {}
}

/// The size to grow a table of `current` entries to so that it holds `wanted`: at least double,
/// so that growing key by key costs O(1) amortised even where growing copies the table.
fn grown(current: usize, wanted: usize) -> usize {
    wanted.max(current.saturating_mul(2))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
#[value(rename_all = "lower")]
pub enum Policy {
    Fifo,
    Lru,
    Lfu,
    Clock,
    Arc,
    Opt,
    S3Fifo,
    Sieve,
}

crate::value_names::display_as_value_name!(Policy);

impl Policy {
    /// LRU and OPT: a larger cache always holds what a smaller one holds, so one pass over the
    /// trace gives the hit count of every capacity.
    pub fn is_stack_algorithm(self) -> bool {
        matches!(self, Policy::Lru | Policy::Opt)
    }

    /// A fresh cache of this policy for `trace` (OPT reads the whole trace ahead).
    pub fn build(
        self,
        capacity: usize,
        trace: &KeyTrace,
    ) -> Result<Box<dyn CachePolicy>, CacheSimError> {
        check_capacity(capacity)?;
        let ks = trace.key_space();
        Ok(match self {
            Policy::Fifo => Box::new(Fifo::new(capacity, ks)),
            Policy::Lru => Box::new(Lru::new(capacity, ks)),
            Policy::Lfu => Box::new(Lfu::new(capacity, ks)),
            Policy::Clock => Box::new(Clock::new(capacity, ks)),
            Policy::Arc => Box::new(Arc::new(capacity, ks)),
            Policy::Opt => Box::new(Opt::new(capacity, trace)),
            Policy::S3Fifo => Box::new(S3Fifo::new(capacity, ks)),
            Policy::Sieve => Box::new(Sieve::new(capacity, ks)),
        })
    }
}

fn check_capacity(capacity: usize) -> Result<(), CacheSimError> {
    if capacity == 0 {
        return Err(CacheSimError::ZeroCapacity);
    }
    if capacity > (1 << 31) {
        return Err(CacheSimError::CapacityTooLarge(capacity as u64));
    }
    Ok(())
}

/// Hits of one policy at one capacity over a whole trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HitCount {
    pub requests: u64,
    pub hits: u64,
}

impl HitCount {
    pub fn misses(&self) -> u64 {
        self.requests - self.hits
    }
    pub fn hit_ratio(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.hits as f64 / self.requests as f64
        }
    }
}

/// Seconds one policy loop took: the CPU time of its thread and the wall-clock time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CoreTime {
    pub cpu_s: f64,
    pub wall_s: f64,
}

struct CoreClock {
    cpu_ns: u64,
    wall: std::time::Instant,
}

impl CoreClock {
    fn start() -> Self {
        CoreClock {
            cpu_ns: thread_cpu_ns(),
            wall: std::time::Instant::now(),
        }
    }

    fn elapsed(&self) -> CoreTime {
        CoreTime {
            cpu_s: (thread_cpu_ns() - self.cpu_ns) as f64 * 1e-9,
            wall_s: self.wall.elapsed().as_secs_f64(),
        }
    }
}

/// Counts hits with the policy's own type, so the per-request call is inlined, looking ahead in
/// the trace to prefetch what the coming requests will touch. `time`: also how long the loop
/// took (the cache's construction and release are outside it).
fn count_hits(mut cache: impl CachePolicy, keys: &[u32], time: bool) -> (u64, Option<CoreTime>) {
    let clock = time.then(CoreClock::start);
    let n = keys.len();
    let mut hits = 0;
    for t in 0..n {
        if t + ENTRY_AHEAD < n {
            cache.prefetch(keys[t + ENTRY_AHEAD], Ahead::Entry);
        }
        if t + NEIGHBOURS_AHEAD < n {
            cache.prefetch(keys[t + NEIGHBOURS_AHEAD], Ahead::Neighbours);
        }
        hits += cache.access(keys[t]) as u64;
    }
    (hits, clock.map(|c| c.elapsed()))
}

/// Runs one policy at one capacity over `trace`.
pub fn simulate(
    policy: Policy,
    trace: &KeyTrace,
    capacity: usize,
) -> Result<HitCount, CacheSimError> {
    Ok(simulate_timed(policy, trace, capacity, false)?.0)
}

/// [`simulate`], and with `time` how long the policy loop alone took.
pub fn simulate_timed(
    policy: Policy,
    trace: &KeyTrace,
    capacity: usize,
    time: bool,
) -> Result<(HitCount, Option<CoreTime>), CacheSimError> {
    check_capacity(capacity)?;
    if trace.is_empty() {
        return Err(CacheSimError::EmptyTrace);
    }
    let ks = trace.key_space();
    let keys = trace.keys();
    let (hits, core) = match policy {
        Policy::Fifo => count_hits(Fifo::new(capacity, ks), keys, time),
        Policy::Lru => count_hits(Lru::new(capacity, ks), keys, time),
        Policy::Lfu => count_hits(Lfu::new(capacity, ks), keys, time),
        Policy::Clock => count_hits(Clock::new(capacity, ks), keys, time),
        Policy::Arc => count_hits(Arc::new(capacity, ks), keys, time),
        Policy::Opt => count_hits(Opt::new(capacity, trace), keys, time),
        Policy::S3Fifo => count_hits(S3Fifo::new(capacity, ks), keys, time),
        Policy::Sieve => count_hits(Sieve::new(capacity, ks), keys, time),
    };
    let count = HitCount {
        requests: keys.len() as u64,
        hits,
    };
    Ok((count, core))
}

/// Hit (true) or miss of every request: for tests that compare policies request by request.
pub fn hit_sequence(
    policy: Policy,
    trace: &KeyTrace,
    capacity: usize,
) -> Result<Vec<bool>, CacheSimError> {
    let mut cache = policy.build(capacity, trace)?;
    Ok(trace.keys().iter().map(|&k| cache.access(k)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_policy_lists() {
        use crate::value_names::parse_list;
        use clap::ValueEnum;
        let list = |s| parse_list::<Policy>(s, "policy");
        assert_eq!(list("all").unwrap(), Policy::value_variants());
        assert_eq!(
            list("sieve, lru,lru").unwrap(),
            [Policy::Lru, Policy::Sieve]
        );
        assert_eq!(
            list("lru,mru").unwrap_err(),
            r#"unknown policy "mru" (expected fifo, lru, lfu, clock, arc, opt, s3fifo, sieve or all)"#
        );
    }

    #[test]
    fn rejects_zero_capacity_and_empty_traces() {
        let t = KeyTrace::from_keys(vec![1, 2]);
        assert_eq!(
            simulate(Policy::Lru, &t, 0),
            Err(CacheSimError::ZeroCapacity)
        );
        let empty = KeyTrace::from_keys(vec![]);
        assert_eq!(
            simulate(Policy::Opt, &empty, 3),
            Err(CacheSimError::EmptyTrace)
        );
    }

    #[test]
    fn contains_answers_what_the_next_access_will() {
        use clap::ValueEnum;
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let keys: Vec<u32> = (0..4000).map(|_| rng.random_range(0..60)).collect();
        let trace = KeyTrace::from_keys(keys.clone());
        for &p in Policy::value_variants() {
            let mut c = p.build(17, &trace).unwrap();
            let mut hits = 0;
            for &k in &keys {
                let held = c.contains(k);
                assert_eq!(c.access(k), held, "{p}");
                assert!(c.contains(k), "{p}: {k} just admitted");
                hits += u32::from(held);
            }
            assert!(hits > 100 && hits < 3900, "{p}: {hits}");
        }
    }

    #[test]
    fn growing_the_key_space_changes_no_answer() {
        use clap::ValueEnum;
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let keys: Vec<u32> = (0..6000)
            .map(|i| rng.random_range(0..(10 + i / 20)))
            .collect();
        let trace = KeyTrace::from_keys(keys.clone());
        for &p in Policy::value_variants() {
            if p == Policy::Opt {
                continue;
            }
            for cap in [1, 7, 40, 400] {
                let mut full = p.build(cap, &trace).unwrap();
                let tiny = KeyTrace::from_keys(vec![0]);
                let mut grown = p.build(cap, &tiny).unwrap();
                let mut space = 1;
                for (t, &k) in keys.iter().enumerate() {
                    if k as usize >= space {
                        space = k as usize + 1 + rng.random_range(0..3);
                        grown.grow_key_space(space);
                        // Shrinking is not a thing: a smaller space changes nothing.
                        grown.grow_key_space(rng.random_range(0..space));
                    }
                    assert_eq!(grown.access(k), full.access(k), "{p} cap {cap} at {t}");
                    assert_eq!(grown.len(), full.len(), "{p} cap {cap} at {t}");
                    if t % 50 == 0 {
                        for q in 0..space.min(trace.key_space()) as u32 {
                            assert_eq!(grown.contains(q), full.contains(q), "{p} {q}");
                        }
                    }
                }
            }
        }
    }
}
