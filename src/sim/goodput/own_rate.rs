//! Rate scale 1 of a capacity search: a trace's own arrival rate.

use crate::workload::serving::ServingRequest;

/// The rate scale 1 of a capacity search, and whether the arrivals had to be spaced to give one:
/// requests / (last arrival − first arrival), or, when they span no time, arrivals respaced 1 s
/// apart (a rate of n / (n − 1)).
pub fn own_rate(reqs: &mut [ServingRequest]) -> (f64, bool) {
    let first = reqs.iter().map(|r| r.arrival).fold(f64::INFINITY, f64::min);
    let last = reqs
        .iter()
        .map(|r| r.arrival)
        .fold(f64::NEG_INFINITY, f64::max);
    let n = reqs.len() as f64;
    if last > first {
        (n / (last - first), false)
    } else {
        for (i, r) in reqs.iter_mut().enumerate() {
            r.arrival = i as f64;
        }
        (n / (n - 1.0).max(1.0), true)
    }
}
