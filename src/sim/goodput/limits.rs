//! How far and how finely a capacity search looks.

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
