//! One engine's capacity: the search's answer with the figures of the run at it.

use super::{search_by, SearchLimits};
use crate::sim::engine::{EngineReport, SloTargets};
use serde::Serialize;

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
            goodput_rps: r.objectives.goodput.unwrap_or(0.0),
            attainment: slo.met(r),
            p99_ttft_s: r.latency.ttft.map_or(f64::NAN, |d| d.p99),
            p99_tpot_s: r.latency.tpot.map_or(0.0, |d| d.p99),
            p99_tbt_s: r.latency.tbt.map_or(0.0, |d| d.p99),
            kv_peak: r.occupancy.peak_kv_utilization,
            kv_mean: r.occupancy.mean_kv_utilization,
            preemptions: r.preemption.preemptions,
            output_tokens_per_s: r.throughput.output_tokens_per_time,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::engine::TimeUnit;

    const DEFAULT_SLO: SloTargets = SloTargets {
        ttft_s: Some(2.0),
        tpot_s: Some(0.1),
        tbt_s: None,
        attainment: 0.9,
        judged: crate::sim::engine::Judged::Joint,
    };

    /// A report whose attainment is `met` (all requests completed).
    fn report(met: f64) -> EngineReport {
        let mut r = EngineReport::empty(TimeUnit::Seconds);
        r.requests = 100;
        r.completed = 100;
        r.objectives.slo = DEFAULT_SLO.slo();
        r.objectives.goodput = Some(met * 100.0);
        r.objectives.slo_attainment = Some(met);
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
