//! Synthetic key traces: Zipf popularity, a loop, a scan mixed into a hot set, a drifting hot set,
//! and explicit sequences. Key numbers are a seeded random permutation of popularity ranks, so that
//! hot keys are scattered over the key space as they are in real traces (a policy's tables see no
//! free locality from "hot keys are small numbers").

use super::cache_trace::{read_key_trace, TraceFormat, TraceReadOptions};
use super::dense_keys::DenseKeys;
use super::keys::{KeyTrace, KeyTraceError, KeyWorkload};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

/// Parameters of the generated workloads; a trace file ignores all but `requests` (a limit).
#[derive(Debug, Clone)]
pub struct KeyGenParams {
    /// Key space of the generators.
    pub keys: u32,
    /// Zipf exponent (0 = uniform).
    pub alpha: f64,
    pub requests: usize,
    /// Hot-set size for `scan` and `drift`; `None` = a tenth of the keys.
    pub hot: Option<u32>,
    pub seed: u64,
}

impl KeyGenParams {
    fn check(&self) -> Result<(), KeyTraceError> {
        at_least("keys", self.keys as u64, 1)?;
        at_least("requests", self.requests as u64, 1)?;
        if !(self.alpha.is_finite() && self.alpha >= 0.0) {
            return Err(KeyTraceError::BadAlpha(self.alpha));
        }
        Ok(())
    }

    fn hot_set(&self, must_leave_cold: bool) -> Result<u32, KeyTraceError> {
        let hot = self.hot.unwrap_or((self.keys / 10).max(1));
        at_least("hot set", hot as u64, 1)?;
        let limit = if must_leave_cold {
            self.keys.saturating_sub(1)
        } else {
            self.keys
        };
        if hot > limit {
            return Err(KeyTraceError::BadHotSet {
                hot: hot as u64,
                keys: self.keys as u64,
            });
        }
        Ok(hot)
    }
}

fn at_least(what: &'static str, got: u64, min: u64) -> Result<(), KeyTraceError> {
    if got < min {
        return Err(KeyTraceError::TooSmall { what, min, got });
    }
    Ok(())
}

/// Builds the trace a workload names. Trace files are cut to `p.requests` requests.
pub fn key_trace(
    workload: &KeyWorkload,
    p: &KeyGenParams,
    format: Option<TraceFormat>,
    read: &TraceReadOptions,
) -> Result<KeyTrace, KeyTraceError> {
    match workload {
        KeyWorkload::Seq(ids) => sequence(ids),
        KeyWorkload::Trace(path) => {
            at_least("requests", p.requests as u64, 1)?;
            let format = match format {
                Some(f) => f,
                None => TraceFormat::from_path(path)?,
            };
            read_key_trace(path, format, read, p.requests)
        }
        KeyWorkload::Zipf => {
            p.check()?;
            Ok(zipf(p.keys, p.alpha, p.requests, p.seed))
        }
        KeyWorkload::Loop => {
            p.check()?;
            Ok(loop_over(p.keys, p.requests))
        }
        KeyWorkload::Scan => {
            p.check()?;
            let hot = p.hot_set(true)?;
            Ok(scan_into_hot_set(p.keys, hot, p.alpha, p.requests, p.seed))
        }
        KeyWorkload::Drift => {
            p.check()?;
            let hot = p.hot_set(false)?;
            Ok(drifting_hot_set(p.keys, hot, p.alpha, p.requests, p.seed))
        }
    }
}

/// Popularity rank (0 = hottest) → key number.
fn scattered_keys(keys: u32, rng: &mut StdRng) -> Vec<u32> {
    let mut perm: Vec<u32> = (0..keys).collect();
    perm.shuffle(rng);
    perm
}

/// Zipf ranks `0..n` (0 most popular), probability ∝ 1/(rank+1)^alpha.
struct ZipfRanks {
    dist: Zipf<f64>,
    n: u32,
}

impl ZipfRanks {
    fn new(n: u32, alpha: f64) -> Self {
        // n >= 1 and alpha >= 0 are checked by the callers.
        let dist = Zipf::new(n as f64, alpha).expect("n >= 1, alpha >= 0");
        ZipfRanks { dist, n }
    }

    fn sample(&self, rng: &mut StdRng) -> u32 {
        let rank = self.dist.sample(rng) as u64;
        (rank.clamp(1, self.n as u64) - 1) as u32
    }
}

/// Independent requests with Zipf(alpha) popularity over `keys` keys.
pub fn zipf(keys: u32, alpha: f64, requests: usize, seed: u64) -> KeyTrace {
    let mut rng = StdRng::seed_from_u64(seed);
    let perm = scattered_keys(keys, &mut rng);
    let ranks = ZipfRanks::new(keys, alpha);
    let v = (0..requests)
        .map(|_| perm[ranks.sample(&mut rng) as usize])
        .collect();
    KeyTrace::new(v, keys).expect("keys drawn below the key space")
}

/// 0, 1, …, keys-1, 0, 1, …: the workload on which LRU and FIFO miss on every request once the
/// loop is longer than the cache.
pub fn loop_over(keys: u32, requests: usize) -> KeyTrace {
    let v = (0..requests).map(|i| (i % keys as usize) as u32).collect();
    KeyTrace::new(v, keys).expect("keys below the key space")
}

/// A Zipf(alpha) hot set of `hot` keys; in the middle of the trace, every other request is the next
/// key of a one-off scan over the `keys - hot` cold keys (the scan is cut short if it would take
/// more than half of the requests).
pub fn scan_into_hot_set(keys: u32, hot: u32, alpha: f64, requests: usize, seed: u64) -> KeyTrace {
    let mut rng = StdRng::seed_from_u64(seed);
    let perm = scattered_keys(keys, &mut rng);
    let ranks = ZipfRanks::new(hot, alpha);
    let scan_len = ((keys - hot) as usize).min(requests / 2);
    let scan_start = (requests - 2 * scan_len) / 2;
    let scan_end = scan_start + 2 * scan_len;
    let v = (0..requests)
        .map(|i| {
            if (scan_start..scan_end).contains(&i) && (i - scan_start) % 2 == 1 {
                perm[hot as usize + (i - scan_start) / 2]
            } else {
                perm[ranks.sample(&mut rng) as usize]
            }
        })
        .collect();
    KeyTrace::new(v, keys).expect("keys below the key space")
}

/// A Zipf(alpha) hot set of `hot` consecutive popularity slots whose window start moves from 0 to
/// `keys` over the trace (wrapping), so yesterday's hot keys go cold and new ones heat up.
pub fn drifting_hot_set(keys: u32, hot: u32, alpha: f64, requests: usize, seed: u64) -> KeyTrace {
    let mut rng = StdRng::seed_from_u64(seed);
    let perm = scattered_keys(keys, &mut rng);
    let ranks = ZipfRanks::new(hot, alpha);
    let v = (0..requests)
        .map(|i| {
            let start = (i as u128 * keys as u128 / requests as u128) as u64;
            let slot = (start + ranks.sample(&mut rng) as u64) % keys as u64;
            perm[slot as usize]
        })
        .collect();
    KeyTrace::new(v, keys).expect("keys below the key space")
}

/// The given ids in order, numbered densely by first appearance.
pub fn sequence(ids: &[u64]) -> Result<KeyTrace, KeyTraceError> {
    if ids.is_empty() {
        return Err(KeyTraceError::EmptyTrace("seq:".into()));
    }
    let mut dense = DenseKeys::new();
    let v = ids
        .iter()
        .map(|&id| dense.key(id))
        .collect::<Result<Vec<_>, _>>()?;
    KeyTrace::new(v, dense.len())
}

/// Uniformly random keys; handy for tests that want no structure at all.
pub fn uniform(keys: u32, requests: usize, seed: u64) -> KeyTrace {
    let mut rng = StdRng::seed_from_u64(seed);
    let v = (0..requests).map(|_| rng.random_range(0..keys)).collect();
    KeyTrace::new(v, keys).expect("keys below the key space")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(t: &KeyTrace) -> Vec<u64> {
        let mut c = vec![0u64; t.key_space()];
        for &k in t.keys() {
            c[k as usize] += 1;
        }
        c
    }

    #[test]
    fn zipf_frequencies_follow_the_power_law() {
        let (keys, alpha, n) = (50u32, 1.0, 400_000usize);
        let t = zipf(keys, alpha, n, 3);
        let mut c = counts(&t);
        c.sort_unstable_by(|a, b| b.cmp(a));
        let h: f64 = (1..=keys).map(|r| (r as f64).powf(-alpha)).sum();
        for rank in [1usize, 2, 5, 10, 50] {
            let expect = n as f64 * (rank as f64).powf(-alpha) / h;
            let got = c[rank - 1] as f64;
            // Sorted counts estimate the rank frequencies; 4 standard deviations plus slack.
            let tol = 4.0 * expect.sqrt() + 0.02 * expect;
            assert!((got - expect).abs() < tol, "rank {rank}: {got} vs {expect}");
        }
    }

    #[test]
    fn same_seed_same_trace_other_seed_other_trace() {
        assert_eq!(zipf(100, 0.8, 1000, 9), zipf(100, 0.8, 1000, 9));
        assert_ne!(zipf(100, 0.8, 1000, 9), zipf(100, 0.8, 1000, 10));
    }

    #[test]
    fn loop_cycles_through_every_key() {
        assert_eq!(loop_over(3, 7).keys(), &[0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn scan_touches_each_cold_key_once_in_the_middle() {
        let (keys, hot, n) = (1000u32, 100u32, 10_000usize);
        let t = scan_into_hot_set(keys, hot, 0.9, n, 1);
        let mut rng = StdRng::seed_from_u64(1);
        let perm = scattered_keys(keys, &mut rng);
        let c = counts(&t);
        let cold = &perm[hot as usize..];
        assert!(cold.iter().all(|&k| c[k as usize] == 1));
        let hot_total: u64 = perm[..hot as usize].iter().map(|&k| c[k as usize]).sum();
        assert_eq!(hot_total as usize, n - cold.len());
        let first_cold = t.keys().iter().position(|k| cold.contains(k)).unwrap();
        assert_eq!(first_cold, (n - 2 * cold.len()) / 2 + 1);
    }

    #[test]
    fn drift_moves_the_hot_set() {
        let t = drifting_hot_set(1000, 50, 0.0, 20_000, 4);
        let first: std::collections::HashSet<u32> = t.keys()[..200].iter().copied().collect();
        let middle: std::collections::HashSet<u32> =
            t.keys()[9_900..10_100].iter().copied().collect();
        assert!(first.len() <= 60 && middle.len() <= 60);
        assert!(first.intersection(&middle).count() < 5);
    }

    #[test]
    fn sequence_renumbers_by_first_appearance() {
        let t = sequence(&[10, 20, 10, 5]).unwrap();
        assert_eq!((t.keys(), t.key_space()), (&[0u32, 1, 0, 2][..], 3));
        assert!(sequence(&[]).is_err());
    }

    #[test]
    fn bad_parameters_are_errors() {
        let p = |keys, alpha, requests, hot| KeyGenParams {
            keys,
            alpha,
            requests,
            hot,
            seed: 0,
        };
        let none = TraceReadOptions::default();
        let run = |w: KeyWorkload, p: KeyGenParams| key_trace(&w, &p, None, &none);
        assert!(run(KeyWorkload::Zipf, p(0, 1.0, 10, None)).is_err());
        assert!(run(KeyWorkload::Zipf, p(10, -1.0, 10, None)).is_err());
        assert!(run(KeyWorkload::Zipf, p(10, f64::NAN, 10, None)).is_err());
        assert!(run(KeyWorkload::Zipf, p(10, 1.0, 0, None)).is_err());
        assert!(run(KeyWorkload::Scan, p(10, 1.0, 10, Some(10))).is_err());
        assert!(run(KeyWorkload::Scan, p(1, 1.0, 10, None)).is_err());
        assert!(run(KeyWorkload::Drift, p(10, 1.0, 10, Some(11))).is_err());
        assert!(run(KeyWorkload::Drift, p(10, 1.0, 10, Some(10))).is_ok());
    }
}
