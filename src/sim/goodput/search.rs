//! The rate-scale search (see [`super`]) over any run that carries an engine report: an engine's,
//! or a cluster's total ([`crate::sim::cluster::capacity`]).

use super::SearchLimits;
use crate::sim::engine::{EngineReport, SloTargets};

/// What a search found, with whatever a probe returns kept for the highest scale that held.
#[derive(Debug, Clone, PartialEq)]
pub struct Searched<T> {
    /// As [`super::Capacity::rate_scale`], [`super::Capacity::failed_scale`],
    /// [`super::Capacity::probes`].
    pub rate_scale: f64,
    pub failed_scale: f64,
    pub probes: usize,
    /// The probe at `rate_scale`; `None` when none held.
    pub held: Option<T>,
}

/// [`super::search`] over any run that yields an [`EngineReport`] (`report` finds it in what `run`
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
