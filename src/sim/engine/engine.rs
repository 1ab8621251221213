//! The engine loop: arrivals join the waiting queue, the scheduler plans a step, the clock
//! advances by the step's time, and the step's output is processed — right after it (the
//! synchronous loop), or after the next step has been scheduled (async scheduling: vLLM's batch
//! queue of two, where step k+1 is scheduled while step k runs, so its blocks freed by finishing
//! requests return one step later).

use super::config::{ConfigError, EngineConfig, Policy, Preemption};
use super::hash::BlockHash;
use super::host_tier::{HostTier, TierStats};
use super::metrics::{report, EngineReport, Integrals, Slo};
use super::request::Req;
use super::scheduler::{Plan, Scheduler};
use super::step_log::{Ordered, StepRecord};
use super::step_time::{kv_bytes_per_token_per_gpu, StepModel};
use crate::workload::serving::ServingRequest;
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum EngineError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("request {id}: {detail}")]
    Request { id: String, detail: String },
    #[error("no requests")]
    NoRequests,
    #[error("writing the step log: {0}")]
    Output(String),
    #[error(
        "the engine stalled at step {step}: {waiting} requests wait and nothing can be scheduled"
    )]
    Stalled { step: u64, waiting: usize },
}

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
}

/// Predicted output lengths: true × e^N(0, sigma²) from their own seed.
fn predictions(requests: &[ServingRequest], sigma: f64, seed: u64) -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed_0e17);
    match Normal::new(0.0, sigma) {
        Ok(noise) if sigma > 0.0 => requests
            .iter()
            .map(|r| f64::from(r.output_len) * noise.sample(&mut rng).exp())
            .collect(),
        _ => requests.iter().map(|r| f64::from(r.output_len)).collect(),
    }
}

/// The output lengths the ranking policies believe: predicted under SJF and SRPT, else true.
pub fn predicted_outputs(cfg: &EngineConfig, requests: &[ServingRequest]) -> Vec<f64> {
    if matches!(cfg.scheduling_policy, Policy::Sjf | Policy::Srpt) {
        predictions(requests, cfg.prediction.sigma, cfg.prediction.seed)
    } else {
        requests.iter().map(|r| f64::from(r.output_len)).collect()
    }
}

/// An error naming the first id used twice.
pub fn check_unique_ids(requests: &[ServingRequest]) -> Result<(), EngineError> {
    let mut seen = std::collections::HashSet::new();
    match requests.iter().find(|r| !seen.insert(r.id.as_str())) {
        Some(r) => Err(EngineError::Request {
            id: r.id.clone(),
            detail: "duplicate id".into(),
        }),
        None => Ok(()),
    }
}

/// Each request's id's position among all ids in string order (vLLM's last tie-break).
pub fn id_ranks(requests: &[ServingRequest]) -> Vec<u32> {
    let mut by_id: Vec<u32> = (0..requests.len() as u32).collect();
    by_id.sort_by(|&a, &b| requests[a as usize].id.cmp(&requests[b as usize].id));
    let mut rank = vec![0u32; requests.len()];
    for (r, &i) in by_id.iter().enumerate() {
        rank[i as usize] = r as u32;
    }
    rank
}

/// Checks that every request can run to completion in this engine.
fn check_request(cfg: &EngineConfig, r: &ServingRequest) -> Result<(), EngineError> {
    let bad = |detail: String| {
        Err(EngineError::Request {
            id: r.id.clone(),
            detail,
        })
    };
    let prompt = r.prompt.len() as u64;
    if prompt == 0 || r.output_len == 0 {
        return bad("prompt and output need at least one token each".into());
    }
    if !(r.arrival.is_finite() && r.arrival >= 0.0) {
        return bad(format!(
            "arrival must be finite and >= 0, got {}",
            r.arrival
        ));
    }
    if prompt >= cfg.max_model_len as u64 {
        return bad(format!(
            "a prompt of {prompt} tokens reaches max_model_len {}",
            cfg.max_model_len
        ));
    }
    // The KV it ever holds at once: prompt and every sampled token but the last.
    let peak = (prompt + u64::from(r.output_len) - 1).min(cfg.max_model_len as u64);
    let blocks = peak.div_ceil(cfg.block_size as u64);
    if blocks > cfg.usable_blocks() as u64 {
        return bad(format!(
            "{peak} tokens need {blocks} blocks of {}, the pool holds {} (num_gpu_blocks {} less the null block)",
            cfg.block_size,
            cfg.usable_blocks(),
            cfg.num_gpu_blocks
        ));
    }
    if !cfg.enable_chunked_prefill && peak > cfg.max_num_batched_tokens as u64 {
        return bad(format!(
            "without chunked prefill, {peak} tokens exceed max_num_batched_tokens {}",
            cfg.max_num_batched_tokens
        ));
    }
    Ok(())
}

impl Engine {
    /// An engine for `requests`, each arriving at its time; with `cfg.cpu_offload`, its own host
    /// tier.
    pub fn new(
        cfg: EngineConfig,
        requests: &[ServingRequest],
        clock: Clock,
        recording: Recording,
        slo: Slo,
    ) -> Result<Engine, EngineError> {
        cfg.validate()?;
        if requests.is_empty() {
            return Err(EngineError::NoRequests);
        }
        let tier = cfg.cpu_offload.as_ref().map(HostTier::new).transpose()?;
        let predicted = predicted_outputs(&cfg, requests);
        let ranks = id_ranks(requests);
        let mut e = Engine::open(cfg, clock, recording, slo)?;
        e.tier = tier;
        for r in requests {
            check_request(&e.sched.cfg, r)?;
        }
        check_unique_ids(requests)?;
        let mut order: Vec<u32> = (0..requests.len() as u32).collect();
        order.sort_by(|&a, &b| {
            requests[a as usize]
                .arrival
                .total_cmp(&requests[b as usize].arrival)
        });
        // Requests enter in arrival order, each keeping its input index as its number.
        e.sched.reqs = requests
            .iter()
            .enumerate()
            .map(|(i, r)| Req::new(r, predicted[i], ranks[i], i as u64))
            .collect();
        e.order = order;
        e.now = match e.clock {
            Clock::Steps => 0.0,
            Clock::Seconds(_) => requests[e.order[0] as usize].arrival,
        };
        e.gpu_free = e.now;
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
                kv_bytes_per_token_per_gpu(&m.model, m.tp) as f64 * cfg.block_size as f64
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
            done: 0,
            integrals: Integrals::default(),
            recording,
            record: None,
            timeline: Vec::new(),
            slo,
            tier: None,
            wake: None,
        })
    }

    /// Adds request `r`, numbered `uid` among every request its blocks may meet, arriving at its
    /// time (no earlier than the requests submitted before it). `predicted` is the output length
    /// ranking policies believe; `id_rank` its id's place in string order among all ids;
    /// `hashes` its first full blocks' hashes if already known (else empty). Returns its index
    /// in this engine.
    pub fn submit(
        &mut self,
        r: &ServingRequest,
        predicted: f64,
        id_rank: u32,
        uid: u64,
        hashes: Vec<BlockHash>,
    ) -> Result<u32, EngineError> {
        check_request(&self.sched.cfg, r)?;
        if let Some(&last) = self.order.last() {
            if r.arrival < self.sched.reqs[last as usize].arrival {
                return Err(EngineError::Request {
                    id: r.id.clone(),
                    detail: "submitted before an earlier-arriving request".into(),
                });
            }
        }
        let i = self.sched.reqs.len() as u32;
        let mut q = Req::new(r, predicted, id_rank, uid);
        if !hashes.is_empty() {
            q = q.with_hashes(hashes);
        }
        self.sched.reqs.push(q);
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

    /// How many of `hashes` (a prompt's block hashes, first block first) the GPU prefix cache
    /// holds in a row from the start, as of the last step.
    pub fn cached_prefix_blocks(&self, hashes: &[BlockHash]) -> usize {
        hashes
            .iter()
            .take_while(|&&h| self.sched.kv.pool.get_cached(h).is_some())
            .count()
    }

    pub fn block_size(&self) -> u32 {
        self.sched.kv.block_size()
    }

    /// The time integrals of the steps so far (a cluster adds its replicas').
    pub fn integrals(&self) -> &Integrals {
        &self.integrals
    }

    pub fn slo(&self) -> Slo {
        self.slo
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
            if self.sched.reqs[i as usize].arrival > self.now {
                break;
            }
            self.sched.add_request(i);
            self.next += 1;
        }
    }

    fn next_arrival(&self) -> Option<f64> {
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
    /// A step clock logs idle steps too; in seconds the clock jumps to the next arrival instead.
    /// Returns false once every request has finished (and the host tier's copies are done).
    /// The engine lends its own host tier, if it has one, to the step.
    pub fn step(&mut self) -> Result<bool, EngineError> {
        if self.done == self.sched.reqs.len() && !self.sched.tier_busy() {
            return Ok(false);
        }
        let mut tier = self.tier.take();
        let stepped = self.advance(tier.as_mut());
        self.tier = tier;
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
            let stalled = plan.scheduled.is_empty()
                && plan.preempted.is_empty()
                && self.queue.is_empty()
                && self.sched.running.is_empty()
                && self.sched.num_waiting() > 0
                && !self.sched.tier_busy();
            if stalled && self.next_arrival().is_none() {
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

    /// Processes a batch's output at time `at` and accounts for its time on the GPU.
    fn process(&mut self, batch: Batch, at: f64, tier: Option<&mut HostTier>) {
        self.sched
            .update_from_output(&batch.plan, at, &mut self.finished, tier);
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
                Clock::Steps => "steps",
                Clock::Seconds(_) => "s",
            },
        );
        r.offload_mode = self.sched.cfg.cpu_offload.map(|o| o.mode);
        r
    }

    /// Every invariant of the scheduler and the block manager (see [`Scheduler::check`]).
    pub fn check(&self) -> Result<(), String> {
        self.sched.check()
    }
}
