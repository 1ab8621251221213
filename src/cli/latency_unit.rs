//! The unit the simulators' text reports give latencies in.

use crate::sim::engine::TimeUnit;

/// Latencies in milliseconds when the clock counts seconds, else in steps: (scale, unit).
pub fn latency_unit(time_unit: TimeUnit) -> (f64, &'static str) {
    match time_unit {
        TimeUnit::Seconds => (1e3, "ms"),
        TimeUnit::Steps => (1.0, "steps"),
    }
}
