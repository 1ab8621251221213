//! The policy interface and the policies that serve the waiting job of smallest rank: FCFS, SJF,
//! SRPT, SRPT on predicted sizes, strict priority, priority with aging.

use crate::workload::jobs::{Class, Job};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// What a policy may look at: the clock, the jobs, and the work each job has left (current for
/// the running job too: the engine charges it before asking).
pub struct Ctx<'a> {
    pub now: f64,
    pub jobs: &'a [Job],
    pub remaining: &'a [f64],
}

/// Why a job enters a policy's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    Arrived,
    /// Taken off the server because [`Policy::preempts`] said so.
    Preempted,
    /// Its slice (quantum) ran out.
    SliceUsed,
    /// Taken off the server for a policy timer ([`Policy::on_timer`] runs next).
    Timer,
}

/// A scheduling policy: it owns the waiting jobs and chooses who runs.
pub trait Policy {
    fn enqueue(&mut self, job: u32, why: Requeue, ctx: &Ctx);
    /// Removes the next job to serve, with how long it may run before the policy wants the server
    /// back (infinity: until it completes or is preempted).
    fn dequeue(&mut self, ctx: &Ctx) -> Option<(u32, f64)>;
    /// Whether a waiting job should take the server from `running` now.
    fn preempts(&self, _running: u32, _ctx: &Ctx) -> bool {
        false
    }
    /// The next timer at or after `now` (infinity: none).
    fn next_timer(&mut self, _now: f64) -> f64 {
        f64::INFINITY
    }
    /// The timer fired; the running job, if any, has been enqueued with [`Requeue::Timer`].
    fn on_timer(&mut self, _now: f64, _ctx: &Ctx) {}
}

/// First come, first served: a FIFO, never preempts.
#[derive(Default)]
pub struct Fcfs {
    queue: VecDeque<u32>,
}

impl Policy for Fcfs {
    fn enqueue(&mut self, job: u32, _why: Requeue, _ctx: &Ctx) {
        self.queue.push_back(job);
    }
    fn dequeue(&mut self, _ctx: &Ctx) -> Option<(u32, f64)> {
        self.queue.pop_front().map(|j| (j, f64::INFINITY))
    }
}

/// A job's place in line: smaller runs first; `job` breaks ties (lower index first).
#[derive(Debug, Clone, Copy)]
struct Entry {
    level: u8,
    value: f64,
    job: u32,
}

impl Entry {
    fn cmp_key(&self, other: &Self) -> Ordering {
        self.level
            .cmp(&other.level)
            .then(self.value.total_cmp(&other.value))
            .then(self.job.cmp(&other.job))
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp_key(other) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    // Reversed: BinaryHeap is a max-heap and we want the smallest rank on top.
    fn cmp(&self, other: &Self) -> Ordering {
        other.cmp_key(self)
    }
}

/// How a ranked policy orders jobs: (level, value), smaller first.
pub trait Rank {
    /// Whether a better-ranked arrival takes the server from the running job.
    const PREEMPTIVE: bool;
    fn rank(&self, job: u32, ctx: &Ctx) -> (u8, f64);
}

/// Serves the waiting job of smallest [`Rank`] from a binary heap: O(log n) per event.
pub struct Ranked<R> {
    heap: BinaryHeap<Entry>,
    rank: R,
}

impl<R: Rank> Ranked<R> {
    pub fn new(rank: R) -> Self {
        Ranked {
            heap: BinaryHeap::new(),
            rank,
        }
    }

    fn entry(&self, job: u32, ctx: &Ctx) -> Entry {
        let (level, value) = self.rank.rank(job, ctx);
        Entry { level, value, job }
    }
}

impl<R: Rank> Policy for Ranked<R> {
    fn enqueue(&mut self, job: u32, _why: Requeue, ctx: &Ctx) {
        // A waiting job's rank does not change while it waits, so it is computed once here.
        let e = self.entry(job, ctx);
        self.heap.push(e);
    }
    fn dequeue(&mut self, _ctx: &Ctx) -> Option<(u32, f64)> {
        self.heap.pop().map(|e| (e.job, f64::INFINITY))
    }
    fn preempts(&self, running: u32, ctx: &Ctx) -> bool {
        // Strictly better only: on a tie the running job keeps the server.
        R::PREEMPTIVE
            && self.heap.peek().is_some_and(|top| {
                let (level, value) = self.rank.rank(running, ctx);
                top.level
                    .cmp(&level)
                    .then(top.value.total_cmp(&value))
                    .is_lt()
            })
    }
}

/// Shortest job first, non-preemptive.
pub struct ShortestJob;
impl Rank for ShortestJob {
    const PREEMPTIVE: bool = false;
    fn rank(&self, job: u32, ctx: &Ctx) -> (u8, f64) {
        (0, ctx.jobs[job as usize].size)
    }
}

/// Shortest remaining processing time, preemptive.
pub struct ShortestRemaining;
impl Rank for ShortestRemaining {
    const PREEMPTIVE: bool = true;
    fn rank(&self, job: u32, ctx: &Ctx) -> (u8, f64) {
        (0, ctx.remaining[job as usize])
    }
}

/// SRPT on predicted sizes: rank = predicted size − service received (may go negative when the
/// prediction was too small; such a job keeps the server).
pub struct PredictedRemaining {
    pub predicted: Vec<f64>,
}
impl Rank for PredictedRemaining {
    const PREEMPTIVE: bool = true;
    fn rank(&self, job: u32, ctx: &Ctx) -> (u8, f64) {
        let j = job as usize;
        let attained = ctx.jobs[j].size - ctx.remaining[j];
        (0, self.predicted[j] - attained)
    }
}

/// Strict priority, preemptive: interactive before batch, FCFS within a class.
pub struct StrictPriority;
impl Rank for StrictPriority {
    const PREEMPTIVE: bool = true;
    fn rank(&self, job: u32, ctx: &Ctx) -> (u8, f64) {
        let j = &ctx.jobs[job as usize];
        (j.class as u8, j.arrival)
    }
}

/// Priority with aging, preemptive. A job's priority grows linearly with its time in the system
/// and interactive jobs start `batch_delay` ahead, so a batch job ranks like an interactive job
/// that arrived `batch_delay` later. Rank = arrival (+ `batch_delay` for batch): it never changes,
/// which keeps the heap valid while everyone ages. `batch_delay` = ∞ is strict priority; 0 is FCFS
/// (preemptive ties aside).
pub struct Aging {
    pub batch_delay: f64,
}
impl Rank for Aging {
    const PREEMPTIVE: bool = true;
    fn rank(&self, job: u32, ctx: &Ctx) -> (u8, f64) {
        let j = &ctx.jobs[job as usize];
        let delay = if j.class == Class::Batch {
            self.batch_delay
        } else {
            0.0
        };
        (0, j.arrival + delay)
    }
}
