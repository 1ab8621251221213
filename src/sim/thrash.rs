//! Demand paging and thrashing: a reference string with phases (each phase touches its own working
//! set of pages, plus occasional random pages anywhere), replayed against memories of several sizes
//! with LRU replacement. Below the working-set size LRU keeps evicting pages the phase is about to
//! touch again; above it only the first touch of each page and the random accesses fault. The fault
//! rate and the mean access time (from a hit cost and a fault cost) show the knee at the working set.

use rand::{rngs::StdRng, Rng, SeedableRng};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum ThrashError {
    #[error("{0} must be positive")]
    Zero(&'static str),
    #[error("working set of {working_set} pages exceeds the {universe} pages that exist")]
    WorkingSetTooLarge { working_set: u64, universe: u64 },
    #[error("random share must lie in [0, 1], got {0}")]
    BadShare(f64),
    #[error("{0} pages or more is too many to simulate")]
    TooLarge(u64),
    #[error("{0} accesses is more than the {MAX_ACCESSES} allowed")]
    TooManyAccesses(usize),
    #[error("costs must be finite and non-negative")]
    BadCost,
}

/// How a phase walks its working set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    /// Each access picks a working-set page uniformly at random.
    Uniform,
    /// Accesses cycle through the working set in order (LRU's worst case below its size).
    Loop,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PhasedWorkload {
    /// Pages that exist (random accesses pick among them).
    pub universe: u64,
    /// Pages each phase touches.
    pub working_set: u64,
    pub phases: usize,
    /// Accesses per phase.
    pub phase_len: usize,
    /// Probability that an access goes to a random page of the universe instead.
    pub random_share: f64,
    pub pattern: Pattern,
    pub seed: u64,
}

const MAX_PAGES: u64 = 1 << 24;
const MAX_ACCESSES: usize = 1 << 28;

impl PhasedWorkload {
    /// The reference string. Each phase's working set is a run of consecutive pages at a random
    /// place in the universe.
    pub fn generate(&self) -> Result<Vec<u64>, ThrashError> {
        if self.universe == 0 {
            return Err(ThrashError::Zero("universe"));
        }
        if self.working_set == 0 {
            return Err(ThrashError::Zero("working set"));
        }
        if self.universe > MAX_PAGES {
            return Err(ThrashError::TooLarge(self.universe));
        }
        if self.working_set > self.universe {
            return Err(ThrashError::WorkingSetTooLarge {
                working_set: self.working_set,
                universe: self.universe,
            });
        }
        if !(0.0..=1.0).contains(&self.random_share) {
            return Err(ThrashError::BadShare(self.random_share));
        }
        let accesses = self.phases.saturating_mul(self.phase_len);
        if accesses > MAX_ACCESSES {
            return Err(ThrashError::TooManyAccesses(accesses));
        }
        let mut rng = StdRng::seed_from_u64(self.seed);
        let mut out = Vec::with_capacity(self.phases * self.phase_len);
        for _ in 0..self.phases {
            let base = rng.random_range(0..=self.universe - self.working_set);
            for i in 0..self.phase_len {
                let page = if rng.random_bool(self.random_share) {
                    rng.random_range(0..self.universe)
                } else {
                    match self.pattern {
                        Pattern::Uniform => base + rng.random_range(0..self.working_set),
                        Pattern::Loop => base + i as u64 % self.working_set,
                    }
                };
                out.push(page);
            }
        }
        Ok(out)
    }
}

/// LRU over `frames` frames: each resident page's last-use stamp, and the pages by stamp.
pub struct Lru {
    frames: usize,
    stamp_of: std::collections::HashMap<u64, u64>,
    by_stamp: BTreeMap<u64, u64>,
    clock: u64,
}

impl Lru {
    pub fn new(frames: usize) -> Self {
        Lru {
            frames,
            stamp_of: Default::default(),
            by_stamp: BTreeMap::new(),
            clock: 0,
        }
    }

    /// Touches `page`; true on a hit. A miss loads it, evicting the least recently used page when
    /// every frame is taken. With zero frames every access misses.
    pub fn access(&mut self, page: u64) -> bool {
        self.clock += 1;
        if let Some(old) = self.stamp_of.insert(page, self.clock) {
            self.by_stamp.remove(&old);
            self.by_stamp.insert(self.clock, page);
            return true;
        }
        if self.frames == 0 {
            self.stamp_of.remove(&page);
            return false;
        }
        if self.stamp_of.len() > self.frames {
            let (_, victim) = self.by_stamp.pop_first().expect("memory is full");
            self.stamp_of.remove(&victim);
        }
        self.by_stamp.insert(self.clock, page);
        false
    }

    pub fn resident(&self) -> usize {
        self.stamp_of.len()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ThrashRow {
    pub frames: u64,
    /// frames / working set.
    pub memory_ratio: f64,
    pub accesses: u64,
    pub faults: u64,
    pub fault_rate: f64,
    pub avg_access_ns: f64,
    /// avg_access_ns / hit cost: how much slower than a memory that never faults.
    pub slowdown: f64,
    /// Independent-reference estimate: working-set accesses hit with probability frames/W
    /// (uniform pattern) or not at all below W (loop); random accesses almost always fault.
    pub estimate: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Costs {
    pub hit_ns: f64,
    pub fault_ns: f64,
}

/// Faults of `trace` under LRU with `frames` frames.
pub fn count_faults(trace: &[u64], frames: u64) -> u64 {
    let mut lru = Lru::new(frames as usize);
    trace.iter().filter(|&&p| !lru.access(p)).count() as u64
}

fn estimate(w: &PhasedWorkload, frames: u64) -> f64 {
    let ws = w.working_set as f64;
    let f = frames as f64;
    let in_set = match w.pattern {
        Pattern::Uniform => (1.0 - f / ws).max(0.0),
        Pattern::Loop => f64::from(u8::from(frames < w.working_set)),
    };
    let cold = (w.phases as u64 * w.working_set) as f64 / (w.phases * w.phase_len).max(1) as f64;
    ((1.0 - w.random_share) * in_set + w.random_share + cold).min(1.0)
}

/// Replays the workload's reference string against each memory size (in parallel).
pub fn sweep(
    w: &PhasedWorkload,
    frames: &[u64],
    costs: Costs,
) -> Result<Vec<ThrashRow>, ThrashError> {
    let ok = |c: f64| c.is_finite() && c >= 0.0;
    if !ok(costs.hit_ns) || !ok(costs.fault_ns) {
        return Err(ThrashError::BadCost);
    }
    if let Some(&f) = frames.iter().find(|&&f| f > MAX_PAGES) {
        return Err(ThrashError::TooLarge(f));
    }
    let trace = w.generate()?;
    let n = trace.len() as u64;
    Ok(frames
        .par_iter()
        .map(|&f| {
            let faults = count_faults(&trace, f);
            let fault_rate = if n == 0 {
                0.0
            } else {
                faults as f64 / n as f64
            };
            let avg = (1.0 - fault_rate) * costs.hit_ns + fault_rate * costs.fault_ns;
            ThrashRow {
                frames: f,
                memory_ratio: f as f64 / w.working_set as f64,
                accesses: n,
                faults,
                fault_rate,
                avg_access_ns: avg,
                slowdown: if costs.hit_ns > 0.0 {
                    avg / costs.hit_ns
                } else {
                    f64::NAN
                },
                estimate: estimate(w, f),
            }
        })
        .collect())
}

/// The knee: the smallest memory size whose fault rate has come down to within `band` (a share
/// of the whole drop) of the lowest rate measured. None for fewer than two sizes or no drop.
pub fn knee(rows: &[ThrashRow], band: f64) -> Option<u64> {
    let mut sorted: Vec<&ThrashRow> = rows.iter().collect();
    sorted.sort_by_key(|r| r.frames);
    let lo = sorted
        .iter()
        .map(|r| r.fault_rate)
        .fold(f64::INFINITY, f64::min);
    let hi = sorted.iter().map(|r| r.fault_rate).fold(0.0, f64::max);
    if sorted.len() < 2 || hi - lo <= 0.0 {
        return None;
    }
    sorted
        .iter()
        .find(|r| r.fault_rate - lo <= band * (hi - lo))
        .map(|r| r.frames)
}

/// Memory sizes around the working set: from W/8 to 4W, dense near W.
pub fn default_frames(working_set: u64) -> Vec<u64> {
    let mut v: Vec<u64> = [
        0.125, 0.25, 0.5, 0.75, 0.875, 0.9375, 1.0, 1.0625, 1.125, 1.25, 1.5, 2.0, 4.0,
    ]
    .iter()
    .map(|&r| (r * working_set as f64).round() as u64)
    .filter(|&f| f > 0)
    .collect();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_by_hand() {
        // Frames 2: a b a c b -> miss miss hit miss(evicts b) miss(evicts a).
        let mut l = Lru::new(2);
        let hits: Vec<bool> = [1, 2, 1, 3, 2].iter().map(|&p| l.access(p)).collect();
        assert_eq!(hits, [false, false, true, false, false]);
        assert_eq!(l.resident(), 2);
        assert!(l.access(3));
        assert!(!l.access(1));
        assert!(!Lru::new(0).access(5));
    }

    #[test]
    fn knee_picks_the_first_size_near_the_floor() {
        let row = |frames, fault_rate| ThrashRow {
            frames,
            memory_ratio: 0.0,
            accesses: 1,
            faults: 0,
            fault_rate,
            avg_access_ns: 0.0,
            slowdown: 0.0,
            estimate: 0.0,
        };
        let rows = [row(8, 0.9), row(16, 0.5), row(32, 0.02), row(64, 0.01)];
        assert_eq!(knee(&rows, 0.05), Some(32));
        assert_eq!(knee(&rows[..1], 0.05), None);
    }
}
