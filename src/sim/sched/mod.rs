//! Scheduling simulator: one server, a stream of jobs, and the classic policies — FCFS, SJF, SRPT,
//! round robin, MLFQ, strict priority, priority with aging, SRPT on predicted sizes — compared by
//! response time, slowdown, first wait and time lost to context switches.
//!
//! ```
//! use pagedkv::sim::sched::{run_policy, PolicyKind, SchedParams};
//! use pagedkv::workload::jobs::{poisson_jobs, PoissonWorkload, SizeDist};
//!
//! let jobs = poisson_jobs(&PoissonWorkload {
//!     jobs: 10_000, load: 0.8, sizes: SizeDist::Exponential, interactive_fraction: 0.5, seed: 1,
//! }).unwrap();
//! let fcfs = run_policy(&jobs, PolicyKind::Fcfs, &SchedParams::default()).unwrap();
//! let srpt = run_policy(&jobs, PolicyKind::Srpt, &SchedParams::default()).unwrap();
//! assert!(srpt.all.mean_response < fcfs.all.mean_response);
//! ```

mod engine;
mod metrics;
mod policy;
mod quantum;

pub use engine::{simulate, Trace};
pub use metrics::{metrics, Metrics};
pub use policy::{
    Aging, Ctx, Fcfs, Policy, PredictedRemaining, Rank, Ranked, Requeue, ShortestJob,
    ShortestRemaining, StrictPriority,
};
pub use quantum::{Mlfq, RoundRobin};

use crate::workload::jobs::{Class, Job};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};
use serde::Serialize;
use thiserror::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    Fcfs,
    Sjf,
    Srpt,
    Rr,
    Mlfq,
    Prio,
    Aging,
    SrptPred,
}

crate::value_names::display_as_value_name!(PolicyKind);

impl PolicyKind {
    /// Whether the policy looks at job classes.
    pub fn uses_classes(self) -> bool {
        matches!(self, PolicyKind::Prio | PolicyKind::Aging)
    }
}

/// Knobs of the policies; each policy reads the ones it needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SchedParams {
    /// Round-robin quantum, and MLFQ's top-level allotment.
    pub quantum: f64,
    /// Server time lost per preemption (see the engine's notes).
    pub switch_cost: f64,
    /// MLFQ levels (1..=32).
    pub levels: u8,
    /// MLFQ: period of the boost back to the top level.
    pub boost: Option<f64>,
    /// Aging: how much later a batch job ranks than an interactive job of the same arrival.
    pub aging_delay: f64,
    /// SRPT-pred: predicted size = size × e^N(0, sigma²).
    pub sigma: f64,
    /// Seed of the prediction noise.
    pub prediction_seed: u64,
}

impl Default for SchedParams {
    fn default() -> Self {
        SchedParams {
            quantum: 0.1,
            switch_cost: 0.0,
            levels: 4,
            boost: None,
            aging_delay: 10.0,
            sigma: 0.5,
            prediction_seed: 0,
        }
    }
}

#[derive(Debug, Error, Clone, PartialEq)]
pub enum SchedError {
    #[error("{0}")]
    BadParam(String),
    #[error("job {index}: {msg}")]
    BadJob { index: usize, msg: String },
    #[error("no jobs to simulate")]
    NoJobs,
    #[error("the simulated time passes f64's largest value (1.8e308): arrivals, sizes and switch costs add up beyond it; choose smaller ones")]
    TimeOverflow,
    #[error("{what} {value} would take about {events:.1e} events to simulate (at most {MAX_EVENTS:.0e}); raise it")]
    TooFine {
        what: &'static str,
        value: f64,
        events: f64,
    },
}

/// The most time slices or boosts a run may take: a few minutes of simulation.
pub const MAX_EVENTS: f64 = 2e9;

/// Refuses a quantum (round-robin, MLFQ) or an MLFQ boost period so fine for `jobs` that the run
/// would not end in reasonable time; other policies take one event per arrival and completion.
pub fn check_event_count(
    jobs: &[Job],
    kind: PolicyKind,
    p: &SchedParams,
) -> Result<(), SchedError> {
    let work: f64 = jobs.iter().map(|j| j.size).sum();
    let slices = work / p.quantum;
    if matches!(kind, PolicyKind::Rr | PolicyKind::Mlfq) && slices > MAX_EVENTS {
        return Err(SchedError::TooFine {
            what: "quantum",
            value: p.quantum,
            events: slices,
        });
    }
    let span = jobs.last().map_or(0.0, |j| j.arrival) + work;
    match p.boost {
        Some(boost) if kind == PolicyKind::Mlfq && span / boost > MAX_EVENTS => {
            Err(SchedError::TooFine {
                what: "boost period",
                value: boost,
                events: span / boost,
            })
        }
        _ => Ok(()),
    }
}

impl SchedParams {
    pub fn validate(&self) -> Result<(), SchedError> {
        let bad = |m: String| Err(SchedError::BadParam(m));
        if !(self.quantum.is_finite() && self.quantum > 0.0) {
            return bad(format!("quantum must be > 0, got {}", self.quantum));
        }
        if !(self.switch_cost.is_finite() && self.switch_cost >= 0.0) {
            return bad(format!(
                "switch cost must be >= 0, got {}",
                self.switch_cost
            ));
        }
        if !(1..=32).contains(&self.levels) {
            return bad(format!(
                "MLFQ levels must lie in 1..=32, got {}",
                self.levels
            ));
        }
        if let Some(b) = self.boost {
            if !(b.is_finite() && b > 0.0) {
                return bad(format!("boost period must be > 0, got {b}"));
            }
        }
        if self.aging_delay.is_nan() || self.aging_delay < 0.0 {
            return bad(format!(
                "aging delay must be >= 0, got {}",
                self.aging_delay
            ));
        }
        if !(self.sigma.is_finite() && self.sigma >= 0.0) {
            return bad(format!("sigma must be >= 0, got {}", self.sigma));
        }
        Ok(())
    }
}

/// Checks what the engine assumes: finite non-negative arrivals in order, finite sizes > 0.
pub fn validate_jobs(jobs: &[Job]) -> Result<(), SchedError> {
    if jobs.is_empty() {
        return Err(SchedError::NoJobs);
    }
    if jobs.len() >= u32::MAX as usize {
        return Err(SchedError::BadParam(format!(
            "at most {} jobs, got {}",
            u32::MAX - 1,
            jobs.len()
        )));
    }
    let mut last = 0.0;
    for (index, j) in jobs.iter().enumerate() {
        let bad = |msg: String| Err(SchedError::BadJob { index, msg });
        if !(j.arrival.is_finite() && j.arrival >= 0.0) {
            return bad(format!(
                "arrival must be finite and >= 0, got {}",
                j.arrival
            ));
        }
        if j.arrival < last {
            return bad("jobs must be sorted by arrival".into());
        }
        if !(j.size.is_finite() && j.size > 0.0) {
            return bad(format!("size must be finite and > 0, got {}", j.size));
        }
        last = j.arrival;
    }
    Ok(())
}

/// Predicted sizes for SRPT-pred: size × e^N(0, sigma²), from their own seed so the job list is
/// the same with or without predictions.
pub fn predicted_sizes(jobs: &[Job], sigma: f64, seed: u64) -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5EED_F09E);
    match Normal::new(0.0, sigma) {
        Ok(noise) if sigma > 0.0 => jobs
            .iter()
            .map(|j| j.size * noise.sample(&mut rng).exp())
            .collect(),
        _ => jobs.iter().map(|j| j.size).collect(),
    }
}

/// Runs one policy over `jobs` and returns the raw trace.
pub fn trace_policy(jobs: &[Job], kind: PolicyKind, p: &SchedParams) -> Result<Trace, SchedError> {
    p.validate()?;
    validate_jobs(jobs)?;
    check_event_count(jobs, kind, p)?;
    let c = p.switch_cost;
    match kind {
        PolicyKind::Fcfs => simulate(jobs, Fcfs::default(), c),
        PolicyKind::Sjf => simulate(jobs, Ranked::new(ShortestJob), c),
        PolicyKind::Srpt => simulate(jobs, Ranked::new(ShortestRemaining), c),
        PolicyKind::Rr => simulate(jobs, RoundRobin::new(p.quantum), c),
        PolicyKind::Mlfq => simulate(jobs, Mlfq::new(jobs.len(), p.levels, p.quantum, p.boost), c),
        PolicyKind::Prio => simulate(jobs, Ranked::new(StrictPriority), c),
        PolicyKind::Aging => simulate(
            jobs,
            Ranked::new(Aging {
                batch_delay: p.aging_delay,
            }),
            c,
        ),
        PolicyKind::SrptPred => {
            let predicted = predicted_sizes(jobs, p.sigma, p.prediction_seed);
            simulate(jobs, Ranked::new(PredictedRemaining { predicted }), c)
        }
    }
}

/// One class's figures under a policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassReport {
    pub class: Class,
    #[serde(flatten)]
    pub metrics: Metrics,
}

/// A policy's figures over all jobs and, when the jobs hold more than one class, per class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyReport {
    pub policy: PolicyKind,
    #[serde(flatten)]
    pub all: Metrics,
    pub switch_time: f64,
    pub switches: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_class: Vec<ClassReport>,
}

/// Runs one policy and summarises it.
pub fn run_policy(
    jobs: &[Job],
    kind: PolicyKind,
    p: &SchedParams,
) -> Result<PolicyReport, SchedError> {
    let trace = trace_policy(jobs, kind, p)?;
    let classes: Vec<Class> = <Class as clap::ValueEnum>::value_variants()
        .iter()
        .copied()
        .filter(|&c| jobs.iter().any(|j| j.class == c))
        .collect();
    let per_class = if classes.len() > 1 {
        classes
            .into_iter()
            .map(|class| ClassReport {
                class,
                metrics: metrics(jobs, &trace, |j| j.class == class),
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok(PolicyReport {
        policy: kind,
        all: metrics(jobs, &trace, |_| true),
        switch_time: trace.switch_time,
        switches: trace.switches,
        per_class,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs(n: usize, size: f64) -> Vec<Job> {
        (0..n)
            .map(|i| Job {
                arrival: i as f64,
                size,
                class: Class::Interactive,
            })
            .collect()
    }

    #[test]
    fn a_quantum_or_boost_too_fine_for_the_work_is_refused_before_the_run() {
        // 1000 units of work in slices of 1e-7: 1e10 slices, above the 2e9 bound.
        let work = jobs(1000, 1.0);
        let fine = SchedParams {
            quantum: 1e-7,
            ..SchedParams::default()
        };
        for kind in [PolicyKind::Rr, PolicyKind::Mlfq] {
            match trace_policy(&work, kind, &fine) {
                Err(SchedError::TooFine { what, events, .. }) => {
                    assert_eq!(what, "quantum");
                    assert!((events - 1e10).abs() < 1.0, "{events}");
                }
                other => panic!("{kind:?}: {other:?}"),
            }
        }
        // Policies that never slice run with the same quantum (one event per arrival and end).
        assert!(trace_policy(&work, PolicyKind::Fcfs, &fine).is_ok());
        // A boost every 1e-7 over a span of 999 + 1000: refused for MLFQ only.
        let boosted = SchedParams {
            boost: Some(1e-7),
            ..SchedParams::default()
        };
        assert!(matches!(
            trace_policy(&work, PolicyKind::Mlfq, &boosted),
            Err(SchedError::TooFine {
                what: "boost period",
                ..
            })
        ));
        assert!(trace_policy(&work, PolicyKind::Rr, &boosted).is_ok());
        // Just under the bound: passes the check (not run here).
        let at = SchedParams {
            quantum: 1000.0 / MAX_EVENTS * (1.0 + 1e-9),
            ..SchedParams::default()
        };
        assert_eq!(check_event_count(&work, PolicyKind::Rr, &at), Ok(()));
    }
}
