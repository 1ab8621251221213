//! Time-sliced policies: round robin, and the multi-level feedback queue built on it.

use super::policy::{Ctx, Policy, Requeue};
use std::collections::VecDeque;

/// Round robin: a FIFO of jobs, each served for at most `quantum` before going to the back.
/// Arrivals join the back. With one job in the system its quanta run back to back for free.
pub struct RoundRobin {
    queue: VecDeque<u32>,
    quantum: f64,
}

impl RoundRobin {
    pub fn new(quantum: f64) -> Self {
        RoundRobin {
            queue: VecDeque::new(),
            quantum,
        }
    }
}

impl Policy for RoundRobin {
    fn enqueue(&mut self, job: u32, _why: Requeue, _ctx: &Ctx) {
        self.queue.push_back(job);
    }
    fn dequeue(&mut self, _ctx: &Ctx) -> Option<(u32, f64)> {
        self.queue.pop_front().map(|j| (j, self.quantum))
    }
}

/// Multi-level feedback queue. Jobs enter the top level (0). Level `k` is round robin with an
/// allotment of `quantum * 2^k`; a job that uses up its allotment drops one level (the bottom
/// level keeps it, as round robin). A job waiting at a higher level preempts a lower-level one;
/// the preempted job goes back to the front of its level and keeps what is left of its
/// allotment. With `boost` set, every `boost` time units all jobs return to the top level with a
/// fresh allotment, so long jobs cannot starve.
pub struct Mlfq {
    queues: Vec<VecDeque<u32>>,
    level: Vec<u8>,
    /// Service received at the current level.
    used: Vec<f64>,
    quantum: f64,
    boost: Option<f64>,
    next_boost: f64,
    /// Remaining work of the job on the server when it was dispatched.
    dispatched_remaining: f64,
}

impl Mlfq {
    /// `levels` ≥ 1; `jobs` is the number of jobs the simulation holds.
    pub fn new(jobs: usize, levels: u8, quantum: f64, boost: Option<f64>) -> Self {
        let levels = levels.max(1) as usize;
        Mlfq {
            queues: vec![VecDeque::new(); levels],
            level: vec![0; jobs],
            used: vec![0.0; jobs],
            quantum,
            boost,
            next_boost: boost.unwrap_or(f64::INFINITY),
            dispatched_remaining: 0.0,
        }
    }

    fn allotment(&self, level: u8) -> f64 {
        self.quantum * 2f64.powi(level as i32)
    }

    fn top_waiting_level(&self) -> Option<usize> {
        self.queues.iter().position(|q| !q.is_empty())
    }

    /// The first boost time strictly after `now`.
    fn boost_after(&self, now: f64) -> f64 {
        let Some(period) = self.boost else {
            return f64::INFINITY;
        };
        let t = ((now / period).floor() + 1.0) * period;
        // Rounding can put it at or before `now`; the clock must move on.
        if t > now {
            t
        } else {
            (t + period).max(now.next_up())
        }
    }
}

impl Policy for Mlfq {
    fn enqueue(&mut self, job: u32, why: Requeue, ctx: &Ctx) {
        let j = job as usize;
        if why == Requeue::Arrived {
            self.level[j] = 0;
            self.used[j] = 0.0;
            self.queues[0].push_back(job);
            return;
        }
        self.used[j] += self.dispatched_remaining - ctx.remaining[j];
        let lvl = self.level[j] as usize;
        if why == Requeue::SliceUsed {
            let down = (lvl + 1).min(self.queues.len() - 1);
            self.level[j] = down as u8;
            self.used[j] = 0.0;
            self.queues[down].push_back(job);
        } else {
            self.queues[lvl].push_front(job);
        }
    }

    fn dequeue(&mut self, ctx: &Ctx) -> Option<(u32, f64)> {
        let lvl = self.top_waiting_level()?;
        let job = self.queues[lvl].pop_front()?;
        let j = job as usize;
        self.dispatched_remaining = ctx.remaining[j];
        let slice = (self.allotment(lvl as u8) - self.used[j]).max(0.0);
        Some((job, slice))
    }

    fn preempts(&self, running: u32, _ctx: &Ctx) -> bool {
        self.top_waiting_level()
            .is_some_and(|l| l < self.level[running as usize] as usize)
    }

    fn next_timer(&mut self, now: f64) -> f64 {
        if self.next_boost < now {
            self.next_boost = self.boost_after(now);
        }
        self.next_boost
    }

    fn on_timer(&mut self, now: f64, _ctx: &Ctx) {
        // Everyone to the top, keeping the order: level 0 first, then level 1, ...
        let mut top = std::mem::take(&mut self.queues[0]);
        for q in self.queues.iter_mut().skip(1) {
            top.extend(q.drain(..));
        }
        for &job in &top {
            self.level[job as usize] = 0;
            self.used[job as usize] = 0.0;
        }
        self.queues[0] = top;
        self.next_boost = self.boost_after(now);
    }
}
