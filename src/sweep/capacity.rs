//! SLO capacity: the highest request rate an engine sustains within its service-level objectives,
//! found by searching the rate scale of a trace (arrival times divided by the scale), each probe a
//! whole engine run.
//!
//! A run sustains its load when its requests meet the SLOs by the rule of [`SloTargets`]: a share
//! of them within every objective (DistServe's SLO attainment, Mooncake's effective request
//! capacity, what vLLM's `bench serve --goodput` counts), or each objective's percentile (MLPerf).
//! The presets and the sweep's default are in [`crate::sim::engine::slo`].
//!
//! The search doubles (by [`SearchLimits::step`]) from the trace's own rate until one probe holds
//! and one fails, then bisects geometrically until the two are within
//! [`SearchLimits::resolution`] of each other or the probes run out; the capacity is the highest
//! scale seen to hold. Attainment need not fall monotonically with the rate (a burst may land
//! differently), so the figure is the bracket's lower end, not a proof that every lower rate holds.
//!
//! [`search_by`] runs the same search over anything that carries an engine report: a cluster's
//! layouts ([`crate::sim::cluster::capacity`]).

use crate::sim::engine::EngineReport;
pub use crate::sim::engine::SloTargets;
use serde::Serialize;

/// How far and how finely the search looks.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SearchLimits {
    /// The first probe's rate scale (1: the trace as recorded).
    pub start: f64,
    /// Factor between probes while no bracket is found.
    pub step: f64,
    /// Stop when the failing scale is within this fraction above the holding one.
    pub resolution: f64,
    /// Engine runs at most, per search.
    pub max_probes: usize,
    /// The scales searched lie in [min_scale, max_scale].
    pub min_scale: f64,
    pub max_scale: f64,
}

impl Default for SearchLimits {
    fn default() -> Self {
        SearchLimits {
            start: 1.0,
            step: 4.0,
            resolution: 0.02,
            max_probes: 12,
            min_scale: 1.0 / 1024.0,
            max_scale: 1024.0,
        }
    }
}

impl SearchLimits {
    /// Whether a bracket from `held` (0: none held) to `failed` is within the resolution.
    pub fn closes(&self, held: f64, failed: f64) -> bool {
        held > 0.0 && failed <= held * (1.0 + self.resolution)
    }
}

/// The run at the capacity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AtCapacity {
    /// Completed requests within both objectives, per second.
    pub goodput_rps: f64,
    /// Share of the requests within both objectives.
    pub attainment: f64,
    pub p99_ttft_s: f64,
    pub p99_tpot_s: f64,
    /// p99 of Mooncake's TBT ([`crate::sim::engine::tbt`]); 0 without a request of two outputs.
    pub p99_tbt_s: f64,
    /// Blocks in use over usable blocks: the peak, and the time average over busy time.
    pub kv_peak: f64,
    pub kv_mean: f64,
    pub preemptions: u64,
    pub output_tokens_per_s: f64,
}

impl AtCapacity {
    fn of(r: &EngineReport, slo: &SloTargets) -> Self {
        AtCapacity {
            goodput_rps: r.goodput.unwrap_or(0.0),
            attainment: slo.met(r),
            p99_ttft_s: r.ttft.map_or(f64::NAN, |d| d.p99),
            p99_tpot_s: r.tpot.map_or(0.0, |d| d.p99),
            p99_tbt_s: r.tbt.map_or(0.0, |d| d.p99),
            kv_peak: r.peak_kv_utilization,
            kv_mean: r.mean_kv_utilization,
            preemptions: r.preemptions,
            output_tokens_per_s: r.output_tokens_per_time,
        }
    }
}

/// What one search found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Capacity {
    /// The highest rate scale seen to hold; 0 when even [`SearchLimits::min_scale`] failed.
    pub rate_scale: f64,
    /// The lowest scale above it seen to fail; infinite (JSON null) when none failed up to
    /// [`SearchLimits::max_scale`].
    pub failed_scale: f64,
    /// Engine runs made.
    pub probes: usize,
    /// The run at `rate_scale`; `None` when none held.
    pub at: Option<AtCapacity>,
}

impl Capacity {
    /// Whether the search bracketed the capacity within the resolution asked.
    pub fn resolved(&self, limits: &SearchLimits) -> bool {
        limits.closes(self.rate_scale, self.failed_scale)
    }
}

/// What a search found, with whatever a probe returns kept for the highest scale that held.
#[derive(Debug, Clone, PartialEq)]
pub struct Searched<T> {
    /// As [`Capacity::rate_scale`], [`Capacity::failed_scale`], [`Capacity::probes`].
    pub rate_scale: f64,
    pub failed_scale: f64,
    pub probes: usize,
    /// The probe at `rate_scale`; `None` when none held.
    pub held: Option<T>,
}

/// Searches the rate scale: `run(scale)` runs the engine at that scale (see the module docs).
pub fn search<E>(
    limits: &SearchLimits,
    slo: &SloTargets,
    run: impl FnMut(f64) -> Result<EngineReport, E>,
) -> Result<Capacity, E> {
    let s = search_by(limits, slo, run, |r| r)?;
    Ok(Capacity {
        rate_scale: s.rate_scale,
        failed_scale: s.failed_scale,
        probes: s.probes,
        at: s.held.as_ref().map(|r| AtCapacity::of(r, slo)),
    })
}

/// [`search`] over any run that yields an [`EngineReport`] (`report` finds it in what `run`
/// returns: a cluster's total, say); keeps the run at the capacity whole.
pub fn search_by<T, E>(
    limits: &SearchLimits,
    slo: &SloTargets,
    mut run: impl FnMut(f64) -> Result<T, E>,
    report: impl Fn(&T) -> &EngineReport,
) -> Result<Searched<T>, E> {
    let mut held: Option<(f64, T)> = None;
    let mut failed: Option<f64> = None;
    let mut probes = 0;
    while probes < limits.max_probes {
        let scale = match (&held, failed) {
            (None, None) => limits.start,
            (Some((lo, _)), None) => lo * limits.step,
            (None, Some(hi)) => hi / limits.step,
            (Some((lo, _)), Some(hi)) => {
                if hi <= lo * (1.0 + limits.resolution) {
                    break;
                }
                (lo * hi).sqrt()
            }
        };
        if !(limits.min_scale..=limits.max_scale).contains(&scale) {
            break;
        }
        let out = run(scale)?;
        probes += 1;
        if slo.sustained(report(&out)) {
            held = Some((scale, out));
        } else {
            failed = Some(scale);
        }
    }
    Ok(Searched {
        rate_scale: held.as_ref().map_or(0.0, |(s, _)| *s),
        failed_scale: failed.unwrap_or(f64::INFINITY),
        probes,
        held: held.map(|(_, t)| t),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT_SLO: SloTargets = SloTargets {
        ttft_s: Some(2.0),
        tpot_s: Some(0.1),
        tbt_s: None,
        attainment: 0.9,
        judged: crate::sim::engine::Judged::Joint,
    };

    /// A report whose attainment is `met` (all requests completed).
    fn report(met: f64) -> EngineReport {
        let mut r = EngineReport::empty("s");
        r.requests = 100;
        r.completed = 100;
        r.slo = DEFAULT_SLO.slo();
        r.goodput = Some(met * 100.0);
        r.slo_attainment = Some(met);
        r
    }

    #[test]
    fn finds_a_threshold_within_the_resolution_from_either_side() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(24);
        let limits = SearchLimits::default();
        for _ in 0..200 {
            // Within 128× of the start either side: bracketed in at most 5 probes, resolved in 7 more.
            let threshold = 2f64.powf(rng.random_range(-7.0..7.0));
            let mut seen = Vec::new();
            let c = search::<()>(&limits, &DEFAULT_SLO, |s| {
                seen.push(s);
                Ok(report(if s <= threshold { 0.95 } else { 0.5 }))
            })
            .unwrap();
            assert!(
                c.rate_scale <= threshold && c.failed_scale > threshold,
                "{c:?}"
            );
            assert!(c.resolved(&limits), "{threshold}: {c:?} after {seen:?}");
            assert_eq!(c.probes, seen.len());
            assert!(c.probes <= limits.max_probes);
            assert_eq!(c.at.as_ref().unwrap().attainment, 0.95);
        }
    }

    #[test]
    fn out_of_range_and_out_of_probes_say_so() {
        let limits = SearchLimits::default();
        let always = search::<()>(&limits, &DEFAULT_SLO, |_| Ok(report(1.0))).unwrap();
        assert_eq!(always.rate_scale, 1024.0);
        assert!(always.failed_scale.is_infinite() && !always.resolved(&limits));
        let never = search::<()>(&limits, &DEFAULT_SLO, |_| Ok(report(0.89))).unwrap();
        assert_eq!((never.rate_scale, never.at.is_none()), (0.0, true));
        let few = SearchLimits {
            max_probes: 3,
            ..limits
        };
        let c = search::<()>(&few, &DEFAULT_SLO, |s| {
            Ok(report(if s < 3.0 { 0.9 } else { 0.0 }))
        })
        .unwrap();
        // 1 holds, 4 fails, 2 holds: three probes, bracket [2, 4] left unresolved.
        assert_eq!((c.rate_scale, c.failed_scale, c.probes), (2.0, 4.0, 3));
        assert!(!c.resolved(&few));
    }

    #[test]
    fn attainment_counts_every_request_not_only_the_completed() {
        let mut r = report(1.0);
        r.completed = 80;
        assert_eq!(DEFAULT_SLO.met(&r), 0.8);
        assert!(!DEFAULT_SLO.sustained(&r));
    }
}
