//! The unit the simulators' text reports give latencies in.

/// Latencies in milliseconds when the clock counts seconds, else in steps: (scale, unit).
pub fn latency_unit(time_unit: &str) -> (f64, &'static str) {
    if time_unit == "s" {
        (1e3, "ms")
    } else {
        (1.0, "steps")
    }
}
