//! The engine loop: arrivals join the waiting queue, the scheduler plans a step, the clock
//! advances by the step's time, and the step's output is processed — right after it (the
//! synchronous loop), or after the next step has been scheduled (async scheduling: vLLM's batch
//! queue of two, where step k+1 is scheduled while step k runs, so its blocks freed by finishing
//! requests return one step later).

use super::config::{EngineConfig, Preemption};
use super::hash::BlockHash;
use super::host_tier::{HostTier, TierStats};
use super::metrics::{report, EngineReport, Integrals, Slo, TimeUnit};
use super::request::Req;
use super::scheduler::{Plan, Scheduler};
use super::setup::{check_request, prepare, Submission};
use super::step_log::{Ordered, StepRecord};
use super::step_time::{kv_bytes_per_token_per_gpu, StepModel};
use crate::kv::BlockSize;
use crate::workload::serving::ServingRequest;

mod ending;
mod remote_kv;

pub use super::error::{EngineError, IoError};
pub use ending::Abort;
pub use remote_kv::Received;

/// What a unit of time is.
#[derive(Debug, Clone, PartialEq)]
pub enum Clock {
    /// Every step takes one unit; arrivals are step indices.
    Steps,
    /// Steps take what the model says; arrivals are seconds.
    Seconds(Box<StepModel>),
}

/// What the engine records besides its report.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Recording {
    /// Keep the last step's [`StepRecord`] (for `--step-log` and the replay tests).
    pub steps: bool,
    /// Keep one [`TimelinePoint`] per step (for plots).
    pub timeline: bool,
}

/// The engine's state over one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimelinePoint {
    pub time: f64,
    pub used_blocks: u32,
    pub running: u32,
    pub waiting: u32,
}

/// The state a batch was scheduled with, for the time integrals.
#[derive(Debug, Clone, Copy, Default)]
struct Snapshot {
    used_blocks: usize,
    running: usize,
    waiting: usize,
}

/// A scheduled batch on its way through the GPU.
#[derive(Debug, Clone)]
struct Batch {
    plan: Plan,
    start: f64,
    duration: f64,
    state: Snapshot,
}

pub struct Engine {
    sched: Scheduler,
    clock: Clock,
    /// Request indices by arrival (ties in input order).
    order: Vec<u32>,
    next: usize,
    /// When the next step begins (seconds, or the step index under a step clock).
    now: f64,
    /// When the GPU finishes the batches handed to it.
    gpu_free: f64,
    /// Index of the next step.
    next_index: u64,
    /// Async scheduling: batches scheduled and not processed yet, oldest first (at most two).
    queue: std::collections::VecDeque<Batch>,
    spare: Vec<Plan>,
    finished: Vec<u32>,
    /// Requests whose first token the last step's output brought.
    first_tokens: Vec<u32>,
    /// Requests the last step admitted from the waiting queues, and when that step began.
    admitted: Vec<u32>,
    admitted_at: f64,
    done: usize,
    integrals: Integrals,
    recording: Recording,
    record: Option<StepRecord>,
    timeline: Vec<TimelinePoint>,
    slo: Slo,
    /// The host tier this engine owns (`sim engine`); a cluster's replicas are lent theirs.
    tier: Option<HostTier>,
    /// Seconds: a step that scheduled nothing waits here for the host tier's next copy.
    wake: Option<f64>,
    /// The latest arrival submitted (requests come in arrival order).
    last_arrival: f64,
    /// Slots of forgotten requests ([`Engine::forget`]), and how many were given out again.
    free_slots: Vec<u32>,
    reused_slots: usize,
}

/// The latest arrival a step clock takes: 2^52, so that every step index up to twice that is
/// counted exactly in the clock's f64 (and a u64 step counter never wraps).
pub const LAST_STEP_ARRIVAL: f64 = (1u64 << 52) as f64;

/// Under a step clock, an arrival the clock can count to.
fn check_step_arrival(clock: &Clock, r: &ServingRequest) -> Result<(), EngineError> {
    if matches!(clock, Clock::Steps) && r.arrival > LAST_STEP_ARRIVAL {
        return Err(EngineError::Request {
            id: r.id.clone(),
            detail: format!(
                "arrival {} is beyond the step clock's last arrival, step 2^52",
                r.arrival
            ),
        });
    }
    Ok(())
}

impl Engine {
    /// An engine for `requests`, each arriving at its time; with `cfg.cpu_offload`, its own host
    /// tier. The same as [`Engine::open`] and a [`Engine::submit`] per request in arrival order
    /// (so request `i` of the engine is the `i`-th to arrive; [`Req::uid`] is its input index).
    pub fn new(
        cfg: EngineConfig,
        requests: &[ServingRequest],
        clock: Clock,
        recording: Recording,
        slo: Slo,
    ) -> Result<Engine, EngineError> {
        cfg.validate()?;
        let prepared = prepare(&cfg, requests)?;
        let tier = cfg.cpu_offload.as_ref().map(HostTier::new).transpose()?;
        let mut e = Engine::open(cfg, clock, recording, slo)?;
        e.tier = tier;
        for k in 0..prepared.len() {
            e.submit(prepared.submission(k), Vec::new())?;
        }
        Ok(e)
    }

    /// An engine that holds no requests yet: a cluster's replica, fed by [`Engine::submit`].
    pub fn open(
        cfg: EngineConfig,
        clock: Clock,
        recording: Recording,
        slo: Slo,
    ) -> Result<Engine, EngineError> {
        cfg.validate()?;
        let host_tokens = match (&cfg.preemption, &clock) {
            (Preemption::Swap { host_bytes, .. }, Clock::Seconds(m)) => {
                host_bytes / kv_bytes_per_token_per_gpu(&m.model, m.tp).max(1)
            }
            _ => u64::MAX,
        };
        // The host tier's link: one GPU's share of a block over it.
        let offload_seconds_per_block = match (&cfg.cpu_offload, &clock) {
            (Some(o), Clock::Seconds(m)) => Some(
                kv_bytes_per_token_per_gpu(&m.model, m.tp) as f64 * cfg.block_size.get() as f64
                    / (o.gbps * 1e9),
            ),
            _ => None,
        };
        Ok(Engine {
            sched: Scheduler::new(cfg, Vec::new(), host_tokens, offload_seconds_per_block),
            clock,
            order: Vec::new(),
            next: 0,
            now: 0.0,
            gpu_free: 0.0,
            next_index: 0,
            queue: std::collections::VecDeque::new(),
            spare: Vec::new(),
            finished: Vec::new(),
            first_tokens: Vec::new(),
            admitted: Vec::new(),
            admitted_at: 0.0,
            done: 0,
            integrals: Integrals::default(),
            recording,
            record: None,
            timeline: Vec::new(),
            slo,
            tier: None,
            wake: None,
            last_arrival: f64::NEG_INFINITY,
            free_slots: Vec::new(),
            reused_slots: 0,
        })
    }

    /// Adds a request, arriving at its time (no earlier than the requests submitted before it);
    /// `hashes` are its first full blocks' hashes if already known (else empty). Returns its
    /// index in this engine.
    pub fn submit(
        &mut self,
        s: Submission<'_>,
        hashes: Vec<BlockHash>,
    ) -> Result<u32, EngineError> {
        let r = s.request;
        check_request(&self.sched.cfg, r)?;
        check_step_arrival(&self.clock, r)?;
        if r.arrival < self.last_arrival {
            return Err(EngineError::Request {
                id: r.id.clone(),
                detail: "submitted before an earlier-arriving request".into(),
            });
        }
        let mut q = Req::new(r, s.predicted, s.id_rank, s.uid);
        if !hashes.is_empty() {
            q = q.with_hashes(hashes);
        }
        let i = self.place(q);
        self.last_arrival = r.arrival;
        // The arrivals already admitted are never read again: a server's list stays short.
        if self.next >= 4096 && 2 * self.next >= self.order.len() {
            self.order.drain(..self.next);
            self.next = 0;
        }
        self.order.push(i);
        Ok(i)
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    /// The record of the step the last [`Engine::step`] completed (with [`Recording::steps`]).
    pub fn last_record(&self) -> Option<&StepRecord> {
        self.record.as_ref()
    }

    pub fn timeline(&self) -> &[TimelinePoint] {
        &self.timeline
    }

    pub fn finished_requests(&self) -> usize {
        self.done
    }

    /// The requests the last step finished (indices in this engine).
    pub fn just_finished(&self) -> &[u32] {
        &self.finished
    }

    /// The requests whose first token the last step's output brought (indices in this engine).
    pub fn just_started(&self) -> &[u32] {
        &self.first_tokens
    }

    /// Request `i` of this engine.
    pub fn request(&self, i: u32) -> &Req {
        &self.sched.reqs[i as usize]
    }

    /// When the next step begins: now while requests or batches remain, else at the next
    /// arrival; `None` with nothing submitted left to do. (Seconds; under a step clock, now.)
    pub fn next_step_time(&self) -> Option<f64> {
        if let Some(w) = self.wake {
            return Some(self.next_arrival().map_or(w, |a| a.min(w)).max(self.now));
        }
        if self.sched.has_requests() || !self.queue.is_empty() {
            return Some(self.now);
        }
        self.next_arrival().map(|t| t.max(self.now))
    }

    /// The engine's time: where its last step's output landed (an online driver sleeps to it
    /// before it hands that output on).
    pub fn now(&self) -> f64 {
        self.now
    }

    /// How many of `hashes` (a prompt's block hashes, first block first) the GPU prefix cache
    /// holds in a row from the start, as of the last step.
    pub fn cached_prefix_blocks(&self, hashes: &[BlockHash]) -> usize {
        hashes
            .iter()
            .take_while(|&&h| self.sched.kv.pool.get_cached(h).is_some())
            .count()
    }

    pub fn block_size(&self) -> BlockSize {
        self.sched.cfg.block_size
    }

    /// The time integrals of the steps so far (a cluster adds its replicas').
    pub fn integrals(&self) -> &Integrals {
        &self.integrals
    }

    pub fn slo(&self) -> Slo {
        self.slo
    }

    /// The step-time model its clock runs on (`None` under a step clock).
    pub fn step_model(&self) -> Option<&StepModel> {
        match &self.clock {
            Clock::Seconds(m) => Some(m),
            Clock::Steps => None,
        }
    }

    /// Gives this engine a host tier of its own, lent to each of its steps (`sim engine`; a
    /// cluster keeps its replicas' tiers and lends them itself).
    pub fn attach_tier(&mut self, tier: HostTier) {
        self.tier = Some(tier);
    }

    /// Whether its host tier still has copies in flight or stores to try.
    pub fn tier_busy(&self) -> bool {
        self.sched.tier_busy()
    }

    /// The host tier this engine owns (`sim engine`; a cluster's replicas own none).
    pub fn host_tier(&self) -> Option<&HostTier> {
        self.tier.as_ref()
    }

    pub fn host_tier_mut(&mut self) -> Option<&mut HostTier> {
        self.tier.as_mut()
    }

    /// The counts of the host tier this engine owns.
    pub fn tier_stats(&self) -> Option<TierStats> {
        self.tier.as_ref().map(HostTier::stats)
    }

    /// Adds the requests that have arrived by the step beginning now: arrival <= step index under
    /// a step clock, <= now in seconds.
    fn admit_arrivals(&mut self) {
        while let Some(&i) = self.order.get(self.next) {
            let r = &self.sched.reqs[i as usize];
            if r.arrival > self.now {
                break;
            }
            // (Aborted before it arrived: it never waits.)
            if !r.is_finished() {
                self.sched.add_request(i);
            }
            self.next += 1;
        }
    }

    pub fn next_arrival(&self) -> Option<f64> {
        self.order
            .get(self.next)
            .map(|&i| self.sched.reqs[i as usize].arrival)
    }

    fn duration(&self, plan: &Plan) -> f64 {
        match &self.clock {
            Clock::Steps => 1.0,
            // A batch of nothing launches nothing.
            Clock::Seconds(_) if plan.scheduled.is_empty() && plan.swap_out_tokens == 0 => 0.0,
            Clock::Seconds(m) => m.step_seconds(plan),
        }
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            used_blocks: self.sched.kv.used_blocks(),
            running: self.sched.running.len(),
            waiting: self.sched.num_waiting(),
        }
    }

    /// One step of vLLM's engine core (`EngineCore.step`, or `step_with_batch_queue` under async
    /// scheduling): add arrivals; if the scheduler holds requests, schedule a batch; process the
    /// output of a batch (this one when synchronous; the oldest of the two in flight when async).
    /// A step clock logs idle steps too, the first and the last of a spell (the ones between are
    /// skipped: [`Engine::skip_idle_steps_to`]); in seconds the clock jumps to the next arrival.
    /// Returns false once every request has finished (and the host tier's copies are done).
    /// The engine lends its own host tier, if it has one, to the step.
    pub fn step(&mut self) -> Result<bool, EngineError> {
        if self.done == self.submitted() && !self.sched.tier_busy() {
            return Ok(false);
        }
        let idle = self.idle_until_arrival();
        let mut tier = self.tier.take();
        let stepped = self.advance(tier.as_mut());
        self.tier = tier;
        if let Some(arrival) = idle {
            self.skip_idle_steps_to(arrival.ceil() as u64 - 1);
        }
        stepped
    }

    /// One step as [`Engine::step`], also when every request has finished (a cluster's replicas
    /// step together under a step clock, idle or not), with `tier` lent by the tier's owner (a
    /// cluster: the replica's own tier, or the one every replica shares). In seconds, with
    /// nothing to run and no arrival ahead, it does nothing and returns false.
    pub fn advance(&mut self, mut tier: Option<&mut HostTier>) -> Result<bool, EngineError> {
        if let Some(w) = self.wake.take() {
            // Waited for the host tier's next copy, or an arrival before it.
            self.now = self.now.max(self.next_arrival().map_or(w, |a| a.min(w)));
        }
        self.admit_arrivals();
        let index = self.next_index;
        let steps = matches!(self.clock, Clock::Steps);
        let mut record = self.recording.steps.then(|| StepRecord {
            step: index,
            time: self.now,
            ..Default::default()
        });
        self.finished.clear();
        self.first_tokens.clear();
        self.admitted.clear();
        let mut to_process = None;
        if self.sched.has_requests() {
            let mut plan = self.spare.pop().unwrap_or_default();
            self.sched.schedule(&mut plan, tier.as_deref_mut());
            if let Some(rec) = &mut record {
                let id = |i: u32| self.sched.reqs[i as usize].id.clone();
                rec.scheduled = Ordered(
                    plan.scheduled
                        .iter()
                        .map(|s| (id(s.req), s.tokens))
                        .collect(),
                );
                rec.preempted = plan.preempted.iter().map(|&i| id(i)).collect();
                rec.prefix_hit_tokens =
                    Ordered(plan.admitted.iter().map(|&(i, h)| (id(i), h)).collect());
                rec.kv_load_tokens =
                    Ordered(plan.kv_loads.iter().map(|&(i, n)| (id(i), n)).collect());
                rec.kv_store_chunks =
                    Ordered(plan.kv_stores.iter().map(|&(i, n)| (id(i), n)).collect());
            }
            let stuck = plan.scheduled.is_empty()
                && plan.preempted.is_empty()
                && self.sched.running.is_empty()
                && self.sched.num_waiting() > 0
                && !self.sched.tier_busy();
            let stalled = stuck && self.queue.is_empty();
            // (Async: the batches in flight may be the empty ones of earlier such steps.)
            let parked = stuck && self.queue.iter().all(|b| b.plan.scheduled.is_empty());
            if parked && self.waits_on_another_instance() {
                // Blocks another instance will free (a transfer's end): sleep until then.
                self.wake = Some(f64::INFINITY);
            } else if stalled && self.next_arrival().is_none() {
                return Err(EngineError::Stalled {
                    step: index,
                    waiting: self.sched.num_waiting(),
                });
            }
            let duration = self.duration(&plan);
            // A flushed host-tier store can hold the forward back.
            let start = self
                .sched
                .begin_transfers(&mut plan, self.now.max(self.gpu_free));
            self.gpu_free = start + duration;
            self.admitted.extend(plan.admitted.iter().map(|&(i, _)| i));
            self.admitted_at = start;
            self.sched.end_transfers(start + duration);
            let tokens = plan.total_tokens();
            if !steps && tokens == 0 && self.sched.tier_busy() {
                self.wake = self.sched.next_transfer_done();
            }
            let batch = Batch {
                state: self.snapshot(),
                plan,
                start,
                duration,
            };
            if self.sched.cfg.async_scheduling {
                self.queue.push_back(batch);
                let fill = self.queue.len() < 2 && (tokens > 0 || self.sched.has_requests());
                if !fill {
                    to_process = self.queue.pop_front();
                }
            } else {
                to_process = Some(batch);
            }
        } else if let Some(b) = self.queue.pop_front() {
            to_process = Some(b);
        } else if !steps {
            // Idle in seconds: no step until the next arrival.
            let Some(t) = self.next_arrival() else {
                return Ok(false);
            };
            self.now = self.now.max(t);
            return self.advance(tier);
        }
        if let Some(batch) = to_process {
            // A step clock stamps outputs at the end of the step that processes them.
            let at = if steps {
                index as f64 + 1.0
            } else {
                batch.start + batch.duration
            };
            self.process(batch, at, tier);
            if !steps {
                self.now = self.now.max(at);
            }
        }
        if steps {
            self.now = index as f64 + 1.0;
        }
        self.next_index += 1;
        if let Some(mut rec) = record {
            let reqs = &self.sched.reqs;
            rec.finished = self
                .finished
                .iter()
                .map(|&i| reqs[i as usize].id.clone())
                .collect();
            rec.free_blocks = self.sched.kv.pool.num_free();
            self.record = Some(rec);
        }
        Ok(true)
    }

    /// Under a step clock, with nothing to do before it: the next arrival, after which the steps
    /// before it may be skipped (the last idle step is the one before the arrival's, arrival <=
    /// step index: see [`Engine::skip_idle_steps_to`]).
    pub fn idle_until_arrival(&self) -> Option<f64> {
        let steps = matches!(self.clock, Clock::Steps);
        self.next_arrival()
            .filter(|&a| steps && self.is_idle() && a > self.now)
    }

    /// Whether this engine has nothing to schedule and nothing in flight: its next step is idle
    /// unless a request arrives for it.
    pub fn is_idle(&self) -> bool {
        !self.sched.has_requests() && self.queue.is_empty() && !self.sched.tier_busy()
    }

    /// Under a step clock, while [`Engine::is_idle`]: makes `step` the next step when it lies
    /// beyond the next one, skipping the idle steps between. vLLM's loop takes every idle step,
    /// and each changes nothing but the step index, so skipping them changes no state, no
    /// time and no request's figures; the step index stays the step clock's time (an arrival at
    /// `a` enters at the first step whose index >= `a`). So an idle spell shows in the step log
    /// as its first step and its last (the one before the arrival), and the gap between their
    /// indices is the steps skipped: a spell of one or two idle steps, as in vLLM's recordings,
    /// is logged whole, and a distant arrival costs two lines instead of a line per step.
    pub fn skip_idle_steps_to(&mut self, step: u64) {
        debug_assert!(matches!(self.clock, Clock::Steps) && self.is_idle());
        if step > self.next_index {
            self.next_index = step;
            self.now = step as f64;
        }
    }

    /// Processes a batch's output at time `at` and accounts for its time on the GPU.
    fn process(&mut self, batch: Batch, at: f64, tier: Option<&mut HostTier>) {
        let before = self.first_tokens.len();
        for s in &batch.plan.scheduled {
            if s.samples && self.sched.reqs[s.req as usize].first_token_time.is_nan() {
                self.first_tokens.push(s.req);
            }
        }
        self.sched
            .update_from_output(&batch.plan, at, &mut self.finished, tier);
        // A sample may be discarded (a request preempted while its step ran): keep the requests
        // that did get their first token.
        let reqs = &self.sched.reqs;
        let mut k = before;
        for j in before..self.first_tokens.len() {
            let i = self.first_tokens[j];
            if !reqs[i as usize].first_token_time.is_nan() {
                self.first_tokens[k] = i;
                k += 1;
            }
        }
        self.first_tokens.truncate(k);
        self.done += self.finished.len();
        let s = batch.state;
        self.integrals.add(
            batch.duration,
            s.used_blocks,
            s.running,
            s.waiting,
            batch.plan.total_tokens(),
        );
        if self.recording.timeline {
            self.timeline.push(TimelinePoint {
                time: batch.start,
                used_blocks: s.used_blocks as u32,
                running: s.running as u32,
                waiting: s.waiting as u32,
            });
        }
        self.spare.push(batch.plan);
    }

    /// Runs to the end; `progress(finished, total)` is called every few thousand steps.
    pub fn run(
        &mut self,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<EngineReport, EngineError> {
        let total = self.sched.reqs.len();
        while self.step()? {
            if self.next_index.is_multiple_of(4096) {
                progress(self.done, total);
                if crate::progress::watch::interrupted() {
                    return Err(EngineError::Interrupted);
                }
            }
        }
        progress(self.done, total);
        Ok(self.report())
    }

    pub fn report(&self) -> EngineReport {
        let mut r = report(
            &self.sched.reqs,
            &self.sched.stats,
            &self.integrals,
            self.sched.cfg.usable_blocks(),
            self.slo,
            match self.clock {
                Clock::Steps => TimeUnit::Steps,
                Clock::Seconds(_) => TimeUnit::Seconds,
            },
        );
        r.offload.offload_mode = self.sched.cfg.cpu_offload.map(|o| o.mode);
        r
    }

    /// Every invariant of the scheduler and the block manager (see [`Scheduler::check`]).
    pub fn check(&self) -> Result<(), String> {
        self.sched.check()
    }
}

/// One engine alone, as the run loop drives it.
impl super::driver::System for Engine {
    fn submit(&mut self, s: Submission<'_>, _now: f64) -> Result<(), EngineError> {
        Engine::submit(self, s, Vec::new()).map(|_| ())
    }

    fn next_event_time(&self) -> Option<f64> {
        self.next_step_time()
    }

    fn advance(&mut self, steps: &mut super::driver::StepSink<'_>) -> Result<(), EngineError> {
        let idle = self.idle_until_arrival();
        let mut tier = self.tier.take();
        let stepped = Engine::advance(self, tier.as_mut());
        self.tier = tier;
        if stepped? {
            if let Some(r) = &self.record {
                steps(0, r)?;
            }
        }
        if let Some(arrival) = idle {
            self.skip_idle_steps_to(arrival.ceil() as u64 - 1);
        }
        Ok(())
    }

    fn finished(&self) -> usize {
        self.done
    }

    fn copies_in_flight(&self) -> bool {
        self.tier_busy()
    }

    fn last_finished(&self, out: &mut Vec<(u64, f64)>) {
        out.extend(self.finished.iter().map(|&i| {
            let r = &self.sched.reqs[i as usize];
            (r.uid, r.finish_time)
        }));
    }
}
