//! The discrete-event loop: one server, jobs sorted by arrival, a [`Policy`] that owns the waiting
//! jobs. Events are arrivals, the end of the running job's slice (completion or quantum expiry),
//! the end of a context switch, and policy timers (MLFQ boosts). Each costs O(1) here plus the
//! policy's own O(log n) at most.
//!
//! Ties: all jobs arriving at one instant are queued before anything is decided. Arrivals are
//! handled before a completion or expiry at the same instant, so a job that
//! arrives when a round-robin quantum expires queues ahead of the expired job; then the slice end;
//! then a policy timer.
//!
//! Context switches: every preemption — the server stops a job that still has work and starts a
//! *different* one — costs `switch_cost` time in which no job progresses. Starting a job after a
//! completion or after idling is free, and so is resuming the job that was just stopped. A switch
//! cannot be interrupted; arrivals during it are queued and looked at when it ends.

use super::policy::{Ctx, Policy, Requeue};
use super::SchedError;
use crate::workload::jobs::Job;

/// What happened to every job, indexed like the input.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub completion: Vec<f64>,
    /// When the job first received service (after any switch in front of it).
    pub first_start: Vec<f64>,
    /// Total time the server spent switching.
    pub switch_time: f64,
    /// Switches paid for (preemptions that handed the server to another job).
    pub switches: u64,
}

#[derive(Clone, Copy)]
struct Running {
    job: u32,
    /// When work on the job (re)starts: after the switch, if one was paid.
    work_start: f64,
    /// When the policy wants the server back (quantum), or infinity.
    slice_end: f64,
}

struct Engine<'a, P> {
    jobs: &'a [Job],
    policy: P,
    remaining: Vec<f64>,
    running: Option<Running>,
    /// The job most recently taken off the server with work left, if the server has not served
    /// anyone since: starting a different job now is a paid switch.
    interrupted: Option<u32>,
    switch_cost: f64,
    trace: Trace,
}

/// Runs `jobs` (sorted by arrival, sizes > 0) through `policy` until every job completes; an
/// error if the simulated time leaves f64's range, where no event could follow another.
/// Panics with 2^32 - 1 jobs or more (job ids are `u32`); [`super::trace_policy`] checks first.
pub fn simulate<P: Policy>(jobs: &[Job], policy: P, switch_cost: f64) -> Result<Trace, SchedError> {
    assert!(jobs.len() < u32::MAX as usize, "at most 2^32 - 2 jobs");
    debug_assert!(jobs.windows(2).all(|w| w[0].arrival <= w[1].arrival));
    let n = jobs.len();
    let mut e = Engine {
        jobs,
        policy,
        remaining: jobs.iter().map(|j| j.size).collect(),
        running: None,
        interrupted: None,
        switch_cost: switch_cost.max(0.0),
        trace: Trace {
            completion: vec![f64::NAN; n],
            first_start: vec![f64::NAN; n],
            switch_time: 0.0,
            switches: 0,
        },
    };
    e.run()?;
    Ok(e.trace)
}

/// The policy's view, built from fields so that `self.policy` can be borrowed mutably beside it.
macro_rules! ctx {
    ($e:expr, $now:expr) => {
        &Ctx {
            now: $now,
            jobs: $e.jobs,
            remaining: &$e.remaining,
        }
    };
}

impl<P: Policy> Engine<'_, P> {
    fn run(&mut self) -> Result<(), SchedError> {
        let n = self.jobs.len();
        let mut next = 0usize;
        // An arrival came during a switch: look at preemption once the switch ends.
        let mut check_after_switch = false;
        // Time of the last event handled.
        let mut clock = 0.0f64;
        loop {
            let t_arrival = if next < n {
                self.jobs[next].arrival
            } else {
                f64::INFINITY
            };
            let Some(r) = self.running else {
                if next == n {
                    return Ok(()); // nothing running, nothing waiting (dispatch found no one), none to come
                }
                // Idle until the next arrival.
                clock = t_arrival;
                next = self.admit_arrivals(next, clock);
                self.dispatch(clock);
                continue;
            };
            let t_done = r.work_start + self.remaining[r.job as usize];
            if !t_done.is_finite() {
                // Every later event would tie at infinity: no order, no end.
                return Err(SchedError::TimeOverflow);
            }
            let t_end = t_done.min(r.slice_end);
            let t_switch = if check_after_switch {
                r.work_start
            } else {
                f64::INFINITY
            };
            // A timer that falls inside a switch waits for its end.
            let t_timer = self.policy.next_timer(clock).max(r.work_start);
            if t_arrival <= t_end && t_arrival <= t_timer && t_arrival <= t_switch {
                let now = t_arrival;
                clock = now;
                next = self.admit_arrivals(next, now);
                if now < r.work_start {
                    check_after_switch = true;
                } else if now < t_end {
                    // (When the slice ends at this very instant the server is about to choose
                    // anyway: asking now could only waste a switch on a finished quantum.)
                    self.preempt_if_asked(now);
                }
            } else if t_switch <= t_end && t_switch <= t_timer {
                clock = t_switch;
                check_after_switch = false;
                self.preempt_if_asked(clock);
            } else if t_end <= t_timer {
                clock = t_end;
                self.end_slice(r, clock);
            } else {
                let now = t_timer;
                clock = now;
                self.take_off(now, Requeue::Timer);
                self.policy.on_timer(now, ctx!(self, now));
                check_after_switch = false;
                self.dispatch(now);
            }
        }
    }

    /// Hands the policy every job arriving at `now`, from index `next`, so that it sees all of
    /// them before it chooses. Returns the next index not yet arrived.
    fn admit_arrivals(&mut self, mut next: usize, now: f64) -> usize {
        while next < self.jobs.len() && self.jobs[next].arrival == now {
            self.policy
                .enqueue(next as u32, Requeue::Arrived, ctx!(self, now));
            next += 1;
        }
        next
    }

    /// Charges the running job for the work done up to `now`.
    fn advance(&mut self, now: f64) {
        if let Some(r) = &mut self.running {
            if now > r.work_start {
                // Clamped: rounding in `work_start + remaining` must not leave negative work.
                let left = &mut self.remaining[r.job as usize];
                *left = (*left - (now - r.work_start)).max(0.0);
                r.work_start = now;
            }
        }
    }

    fn preempt_if_asked(&mut self, now: f64) {
        self.advance(now);
        let Some(r) = self.running else { return };
        if self.policy.preempts(r.job, ctx!(self, now)) {
            self.take_off(now, Requeue::Preempted);
            self.dispatch(now);
        }
    }

    fn end_slice(&mut self, r: Running, now: f64) {
        let j = r.job as usize;
        if r.work_start + self.remaining[j] <= r.slice_end {
            self.remaining[j] = 0.0;
            self.trace.completion[j] = now;
            self.running = None;
            self.interrupted = None;
        } else {
            self.take_off(now, Requeue::SliceUsed);
        }
        self.dispatch(now);
    }

    /// Puts the running job back into the policy's queue.
    fn take_off(&mut self, now: f64, why: Requeue) {
        self.advance(now);
        if let Some(r) = self.running.take() {
            self.interrupted = Some(r.job);
            self.policy.enqueue(r.job, why, ctx!(self, now));
        }
    }

    /// Starts the policy's next job, if any, paying a switch when it replaces an interrupted one.
    fn dispatch(&mut self, now: f64) {
        debug_assert!(self.running.is_none());
        let Some((job, slice)) = self.policy.dequeue(ctx!(self, now)) else {
            return;
        };
        let mut start = now;
        if self.interrupted.is_some_and(|i| i != job) {
            start += self.switch_cost;
            self.trace.switch_time += self.switch_cost;
            self.trace.switches += 1;
        }
        self.interrupted = None;
        let first = &mut self.trace.first_start[job as usize];
        if first.is_nan() {
            *first = start;
        }
        // A positive slice always moves the clock, even one below the clock's resolution.
        let slice_end = if slice > 0.0 {
            (start + slice).max(start.next_up())
        } else {
            start
        };
        self.running = Some(Running {
            job,
            work_start: start,
            slice_end,
        });
    }
}
