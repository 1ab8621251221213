//! Runs policies over capacities: table rows with hit ratio, average access cost and the ratio to
//! OPT at the same capacity, and miss-ratio curves (one pass for LRU and OPT, one simulation per
//! capacity for the rest). Independent runs go to rayon's threads.

use super::{
    lru_curve, opt_curve, simulate, simulate_timed, CacheSimError, CoreTime, HitCount, Policy,
};
use crate::workload::keys::KeyTrace;
use rayon::prelude::*;
use serde::Serialize;

/// What a hit and a miss cost (any unit: ns, dollars, bytes fetched).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    pub hit: f64,
    pub miss: f64,
}

impl Costs {
    pub fn new(hit: f64, miss: f64) -> Result<Self, CacheSimError> {
        if !hit.is_finite() {
            return Err(CacheSimError::BadCost("hit cost"));
        }
        if !miss.is_finite() {
            return Err(CacheSimError::BadCost("miss cost"));
        }
        Ok(Costs { hit, miss })
    }

    pub fn average(&self, c: &HitCount) -> f64 {
        let h = c.hit_ratio();
        h * self.hit + (1.0 - h) * self.miss
    }
}

#[derive(Debug, Clone)]
pub struct SweepSpec {
    pub policies: Vec<Policy>,
    pub capacities: Vec<usize>,
    pub costs: Costs,
    /// Also run OPT at each capacity, for every row's bound.
    pub with_opt: bool,
    /// Time each run's policy loop.
    pub time_core: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CacheRow {
    pub policy: Policy,
    pub capacity: usize,
    pub requests: u64,
    pub hits: u64,
    pub misses: u64,
    pub hit_ratio: f64,
    /// hit_ratio × hit cost + (1 − hit_ratio) × miss cost.
    pub avg_cost: f64,
    /// OPT's hit ratio at the same capacity: the bound every policy here stays under (absent
    /// when OPT did not run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opt_hit_ratio: Option<f64>,
    /// How long the policy loop took (when timed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub core_time: Option<CoreTime>,
}

/// One row per (policy, capacity), in the order of `spec.policies` then `spec.capacities`.
pub fn sweep(trace: &KeyTrace, spec: &SweepSpec) -> Result<Vec<CacheRow>, CacheSimError> {
    if spec.capacities.contains(&0) {
        return Err(CacheSimError::ZeroCapacity);
    }
    let mut runs: Vec<(Policy, usize)> = spec
        .policies
        .iter()
        .flat_map(|&p| spec.capacities.iter().map(move |&c| (p, c)))
        .collect();
    // OPT's row at each capacity is the peer of every other row.
    if spec.with_opt && !spec.policies.contains(&Policy::Opt) {
        runs.extend(spec.capacities.iter().map(|&c| (Policy::Opt, c)));
    }
    let counts = runs
        .par_iter()
        .map(|&(p, c)| simulate_timed(p, trace, c, spec.time_core))
        .collect::<Result<Vec<_>, _>>()?;
    let opt = |cap: usize| {
        runs.iter()
            .zip(&counts)
            .find(|((p, c), _)| *p == Policy::Opt && *c == cap)
            .map(|(_, (h, _))| h.hit_ratio())
    };
    Ok(runs
        .iter()
        .zip(&counts)
        .filter(|((p, _), _)| spec.policies.contains(p))
        .map(|(&(policy, capacity), (h, core_time))| CacheRow {
            policy,
            capacity,
            requests: h.requests,
            hits: h.hits,
            misses: h.misses(),
            hit_ratio: h.hit_ratio(),
            avg_cost: spec.costs.average(h),
            opt_hit_ratio: opt(capacity),
            core_time: *core_time,
        })
        .collect())
}

/// A policy's miss ratio at a list of capacities.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurvePoints {
    pub policy: Policy,
    /// True when computed in one pass from stack distances.
    pub one_pass: bool,
    pub points: Vec<(usize, f64)>,
}

/// Miss-ratio curves of `policies` at `capacities`.
pub fn miss_ratio_curves(
    trace: &KeyTrace,
    policies: &[Policy],
    capacities: &[usize],
) -> Result<Vec<CurvePoints>, CacheSimError> {
    if trace.is_empty() {
        return Err(CacheSimError::EmptyTrace);
    }
    policies
        .par_iter()
        .map(|&policy| {
            let points = if policy.is_stack_algorithm() {
                let curve = match policy {
                    Policy::Lru => lru_curve(trace.keys(), trace.key_space()),
                    _ => {
                        let max = capacities.iter().copied().max().unwrap_or(1);
                        opt_curve(trace.keys(), trace.key_space(), max)
                    }
                };
                capacities
                    .iter()
                    .map(|&c| (c, curve.miss_ratio(c)))
                    .collect()
            } else {
                capacities
                    .par_iter()
                    .map(|&c| Ok((c, 1.0 - simulate(policy, trace, c)?.hit_ratio())))
                    .collect::<Result<Vec<_>, CacheSimError>>()?
            };
            Ok(CurvePoints {
                policy,
                one_pass: policy.is_stack_algorithm(),
                points,
            })
        })
        .collect()
}

/// About `points` capacities spread geometrically over `1..=max`.
pub fn capacity_grid(max: usize, points: usize) -> Vec<usize> {
    let max = max.max(1);
    let points = points.max(2);
    let mut grid: Vec<usize> = (0..points)
        .map(|i| {
            let f = i as f64 / (points - 1) as f64;
            (max as f64).powf(f).round() as usize
        })
        .collect();
    grid.push(max);
    grid.sort_unstable();
    grid.dedup();
    grid
}

/// Parses `C[,C...]` where each C is a number of entries or a percentage of `distinct` keys
/// (rounded, at least 1).
pub fn parse_capacities(s: &str, distinct: usize) -> Result<Vec<usize>, CacheSimError> {
    s.split(',')
        .map(|t| {
            let t = t.trim();
            let bad = || CacheSimError::BadCapacity(t.to_string());
            let c = match t.strip_suffix('%') {
                Some(pct) => {
                    let f: f64 = pct.trim().parse().map_err(|_| bad())?;
                    if !(f > 0.0 && f.is_finite()) {
                        return Err(bad());
                    }
                    ((f / 100.0 * distinct as f64).round() as usize).max(1)
                }
                None => t.parse::<usize>().map_err(|_| bad())?,
            };
            if c == 0 {
                return Err(CacheSimError::ZeroCapacity);
            }
            Ok(c)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_counts_and_percentages() {
        assert_eq!(parse_capacities("10, 5%,0.1%", 1000).unwrap(), [10, 50, 1]);
        assert_eq!(parse_capacities("0", 10), Err(CacheSimError::ZeroCapacity));
        assert!(parse_capacities("ten", 10).is_err());
        assert!(parse_capacities("-5%", 10).is_err());
        assert!(parse_capacities("", 10).is_err());
    }

    #[test]
    fn grid_is_increasing_and_ends_at_max() {
        let g = capacity_grid(1000, 8);
        assert_eq!((g[0], *g.last().unwrap()), (1, 1000));
        assert!(g.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(capacity_grid(1, 8), [1]);
    }

    #[test]
    fn average_cost_weighs_hits_and_misses() {
        let c = Costs::new(1.0, 11.0).unwrap();
        let h = HitCount {
            requests: 4,
            hits: 3,
        };
        assert_eq!(c.average(&h), 3.5);
        assert!(Costs::new(f64::NAN, 1.0).is_err());
    }
}
