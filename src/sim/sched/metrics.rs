//! Turns a [`Trace`] into the figures users compare policies by.

use super::engine::Trace;
use crate::workload::jobs::Job;
use serde::Serialize;

/// Figures over a set of jobs (all of them, or one class).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metrics {
    pub jobs: usize,
    pub mean_response: f64,
    /// Nearest-rank 99th percentile of response time.
    pub p99_response: f64,
    /// Mean of response / size.
    pub mean_slowdown: f64,
    /// Mean slowdown of the largest 1% of jobs by size (at least one job; ties by input order).
    pub large_slowdown: f64,
    /// Longest time from arrival to first service.
    pub max_first_wait: f64,
}

/// Metrics over the jobs `keep` selects; all fields NaN when it selects none.
pub fn metrics(jobs: &[Job], trace: &Trace, keep: impl Fn(&Job) -> bool) -> Metrics {
    let idx: Vec<usize> = (0..jobs.len()).filter(|&i| keep(&jobs[i])).collect();
    let n = idx.len();
    if n == 0 {
        return Metrics {
            jobs: 0,
            mean_response: f64::NAN,
            p99_response: f64::NAN,
            mean_slowdown: f64::NAN,
            large_slowdown: f64::NAN,
            max_first_wait: f64::NAN,
        };
    }
    let response = |i: usize| trace.completion[i] - jobs[i].arrival;
    let slowdown = |i: usize| response(i) / jobs[i].size;
    let mut responses: Vec<f64> = idx.iter().map(|&i| response(i)).collect();
    let mean_response = responses.iter().sum::<f64>() / n as f64;
    let rank = (0.99 * n as f64).ceil() as usize; // 1-based nearest rank
    let (_, p99, _) = responses.select_nth_unstable_by(rank.clamp(1, n) - 1, f64::total_cmp);
    let p99_response = *p99;
    let mean_slowdown = idx.iter().map(|&i| slowdown(i)).sum::<f64>() / n as f64;

    let large = n.div_ceil(100);
    let mut by_size = idx.clone();
    // Largest first; the index makes the order total so equal sizes pick deterministically.
    by_size.select_nth_unstable_by(large - 1, |&a, &b| {
        jobs[b].size.total_cmp(&jobs[a].size).then(a.cmp(&b))
    });
    let large_slowdown = by_size[..large].iter().map(|&i| slowdown(i)).sum::<f64>() / large as f64;

    let max_first_wait = idx
        .iter()
        .map(|&i| trace.first_start[i] - jobs[i].arrival)
        .fold(0.0, f64::max);
    Metrics {
        jobs: n,
        mean_response,
        p99_response,
        mean_slowdown,
        large_slowdown,
        max_first_wait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::jobs::Class;

    #[test]
    fn figures_of_a_hand_made_trace() {
        // 200 jobs: job i has size i + 1, arrives at 0, completes at 2(i + 1), starts at i.
        let jobs: Vec<Job> = (0..200)
            .map(|i| Job {
                arrival: 0.0,
                size: (i + 1) as f64,
                class: if i % 2 == 0 {
                    Class::Interactive
                } else {
                    Class::Batch
                },
            })
            .collect();
        let trace = Trace {
            completion: (0..200).map(|i| 2.0 * (i + 1) as f64).collect(),
            first_start: (0..200).map(|i| i as f64).collect(),
            switch_time: 0.0,
            switches: 0,
        };
        let m = metrics(&jobs, &trace, |_| true);
        assert_eq!(m.jobs, 200);
        assert_eq!(m.mean_response, 201.0); // mean of 2, 4, ..., 400
        assert_eq!(m.p99_response, 396.0); // 198th smallest of 2, 4, ..., 400
        assert_eq!(m.mean_slowdown, 2.0);
        assert_eq!(m.large_slowdown, 2.0);
        assert_eq!(m.max_first_wait, 199.0);
        let batch = metrics(&jobs, &trace, |j| j.class == Class::Batch);
        assert_eq!(batch.jobs, 100);
        assert_eq!(batch.max_first_wait, 199.0);
        assert_eq!(batch.mean_response, 202.0); // mean of 4, 8, ..., 400
        let none = metrics(&jobs, &trace, |_| false);
        assert!(none.mean_response.is_nan());
    }

    #[test]
    fn large_slowdown_picks_the_largest_jobs() {
        // Sizes 1..=100; only the size-100 job is in the top 1%; its slowdown is 3.
        let jobs: Vec<Job> = (1..=100)
            .map(|s| Job {
                arrival: 0.0,
                size: s as f64,
                class: Class::Interactive,
            })
            .collect();
        let trace = Trace {
            completion: (1..=100)
                .map(|s| if s == 100 { 300.0 } else { s as f64 })
                .collect(),
            first_start: vec![0.0; 100],
            switch_time: 0.0,
            switches: 0,
        };
        assert_eq!(metrics(&jobs, &trace, |_| true).large_slowdown, 3.0);
    }
}
