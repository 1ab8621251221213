//! The engine loop: arrivals join the waiting queue, the scheduler plans a step, the clock
//! advances by the step's time, and the step's output is processed — right after it (the
//! synchronous loop), or after the next step has been scheduled (async scheduling: vLLM's batch
//! queue of two, where step k+1 is scheduled while step k runs, so its blocks freed by finishing
//! requests return one step later).

use super::config::{ConfigError, EngineConfig, Policy, Preemption};
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

/// The state a step ran with, for the time integrals.
#[derive(Debug, Clone, Copy, Default)]
struct Snapshot {
    used_blocks: usize,
    running: usize,
    waiting: usize,
}

#[derive(Debug, Clone)]
struct InFlight {
    plan: Plan,
    index: u64,
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
    now: f64,
    /// Index of the next step to execute.
    next_index: u64,
    inflight: Option<InFlight>,
    spare: Plan,
    finished: Vec<u32>,
    integrals: Integrals,
    recording: Recording,
    record: Option<StepRecord>,
    timeline: Vec<TimelinePoint>,
    slo: Slo,
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
        let mut seen = std::collections::HashSet::new();
        for r in requests {
            check_request(&cfg, r)?;
            if !seen.insert(r.id.as_str()) {
                return Err(EngineError::Request {
                    id: r.id.clone(),
                    detail: "duplicate id".into(),
                });
            }
        }
        let predicted = if matches!(cfg.scheduling_policy, Policy::Sjf | Policy::Srpt) {
            predictions(requests, cfg.prediction.sigma, cfg.prediction.seed)
        } else {
            requests.iter().map(|r| f64::from(r.output_len)).collect()
        };
        let mut by_id: Vec<u32> = (0..requests.len() as u32).collect();
        by_id.sort_by(|&a, &b| requests[a as usize].id.cmp(&requests[b as usize].id));
        let mut id_rank = vec![0u32; requests.len()];
        for (rank, &i) in by_id.iter().enumerate() {
            id_rank[i as usize] = rank as u32;
        }
        let reqs: Vec<Req> = requests
            .iter()
            .zip(&predicted)
            .zip(&id_rank)
            .map(|((r, &p), &rank)| Req::new(r, p, rank))
            .collect();
        let mut order: Vec<u32> = (0..requests.len() as u32).collect();
        order.sort_by(|&a, &b| {
            requests[a as usize]
                .arrival
                .total_cmp(&requests[b as usize].arrival)
        });
        let host_tokens = match (&cfg.preemption, &clock) {
            (Preemption::Swap { host_bytes, .. }, Clock::Seconds(m)) => {
                host_bytes / kv_bytes_per_token_per_gpu(&m.model, m.tp).max(1)
            }
            _ => u64::MAX,
        };
        let first = requests[order[0] as usize].arrival;
        let now = if matches!(clock, Clock::Steps) {
            first.ceil()
        } else {
            first
        };
        Ok(Engine {
            sched: Scheduler::new(cfg, reqs, host_tokens),
            clock,
            order,
            next: 0,
            now,
            next_index: 0,
            inflight: None,
            spare: Plan::default(),
            finished: Vec::new(),
            integrals: Integrals::default(),
            recording,
            record: None,
            timeline: Vec::new(),
            slo,
        })
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
        self.sched.reqs.iter().filter(|r| r.is_finished()).count()
    }

    /// The time (or step index) up to which arrivals join before the next schedule.
    fn admission_horizon(&self) -> f64 {
        match self.clock {
            // The index of the step being scheduled.
            Clock::Steps => self.next_index as f64,
            Clock::Seconds(_) => self.now,
        }
    }

    fn admit_arrivals(&mut self) {
        let horizon = self.admission_horizon();
        while let Some(&i) = self.order.get(self.next) {
            if self.sched.reqs[i as usize].arrival > horizon {
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

    /// Nothing to do until the next arrival: the clock (and, under a step clock, the step index)
    /// jumps to it.
    fn idle_until(&mut self, t: f64) {
        match self.clock {
            Clock::Steps => {
                let step = t.ceil().max(self.next_index as f64);
                self.next_index = step as u64;
                self.now = step;
            }
            Clock::Seconds(_) => self.now = self.now.max(t),
        }
    }

    fn duration(&self, plan: &Plan) -> f64 {
        match &self.clock {
            Clock::Steps => 1.0,
            Clock::Seconds(m) => m.step_seconds(plan),
        }
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            used_blocks: self.sched.kv.used_blocks(),
            running: self.sched.running.len(),
            waiting: self.sched.waiting.len(),
        }
    }

    /// Executes until one step's output has been processed. Returns false when every request has
    /// finished.
    pub fn step(&mut self) -> Result<bool, EngineError> {
        loop {
            self.admit_arrivals();
            let mut plan = std::mem::take(&mut self.spare);
            plan.clear();
            if self.sched.has_requests() {
                self.sched.schedule(&mut plan);
            }
            let planned = !plan.scheduled.is_empty() || !plan.preempted.is_empty();
            let state = self.snapshot();
            let Some(cur) = self.inflight.take() else {
                if !planned {
                    self.spare = plan;
                    match self.next_arrival() {
                        Some(t) => {
                            self.idle_until(t);
                            continue;
                        }
                        None if self.sched.has_requests() => {
                            return Err(EngineError::Stalled {
                                step: self.next_index,
                                waiting: self.sched.waiting.len(),
                            })
                        }
                        None => return Ok(false),
                    }
                }
                let duration = self.duration(&plan);
                let step = InFlight {
                    plan,
                    index: self.next_index,
                    start: self.now,
                    duration,
                    state,
                };
                self.next_index += 1;
                if self.sched.cfg.async_scheduling {
                    // Its output comes back after the next schedule.
                    self.inflight = Some(step);
                    continue;
                }
                self.finish(step);
                return Ok(true);
            };
            // Async: `plan` was scheduled while `cur` ran; `cur`'s output is processed now.
            let end = cur.start + cur.duration;
            if planned {
                let duration = self.duration(&plan);
                self.inflight = Some(InFlight {
                    plan,
                    index: self.next_index,
                    start: end,
                    duration,
                    state,
                });
                self.next_index += 1;
            } else {
                self.spare = plan;
            }
            self.finish(cur);
            return Ok(true);
        }
    }

    /// Processes a step's output at its end and records it.
    fn finish(&mut self, step: InFlight) {
        let end = step.start + step.duration;
        self.finished.clear();
        self.sched
            .update_from_output(&step.plan, end, &mut self.finished);
        let s = step.state;
        self.integrals.add(
            step.duration,
            s.used_blocks,
            s.running,
            s.waiting,
            step.plan.total_tokens(),
        );
        if self.recording.timeline {
            self.timeline.push(TimelinePoint {
                time: step.start,
                used_blocks: s.used_blocks as u32,
                running: s.running as u32,
                waiting: s.waiting as u32,
            });
        }
        if self.recording.steps {
            let reqs = &self.sched.reqs;
            let id = |i: &u32| reqs[*i as usize].id.clone();
            self.record = Some(StepRecord {
                step: step.index,
                time: step.start,
                scheduled: Ordered(
                    step.plan
                        .scheduled
                        .iter()
                        .map(|s| (id(&s.req), s.tokens))
                        .collect(),
                ),
                preempted: step.plan.preempted.iter().map(id).collect(),
                finished: self.finished.iter().map(id).collect(),
                free_blocks: self.sched.kv.pool.num_free(),
                prefix_hit_tokens: Ordered(
                    step.plan
                        .admitted
                        .iter()
                        .map(|(i, h)| (id(i), *h))
                        .collect(),
                ),
            });
        }
        // The next step (in flight already under async scheduling) starts where this one ended.
        self.now = end;
        self.spare = step.plan;
    }

    /// Runs to the end; `progress(finished, total)` is called every few thousand steps.
    pub fn run(
        &mut self,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<EngineReport, EngineError> {
        let total = self.sched.reqs.len();
        let mut done = 0;
        while self.step()? {
            done += self.finished.len();
            if self.integrals.steps % 4096 == 0 {
                progress(done, total);
            }
        }
        progress(done, total);
        Ok(self.report())
    }

    pub fn report(&self) -> EngineReport {
        report(
            &self.sched.reqs,
            &self.sched.stats,
            &self.integrals,
            self.sched.cfg.usable_blocks(),
            self.slo,
            match self.clock {
                Clock::Steps => "steps",
                Clock::Seconds(_) => "s",
            },
        )
    }

    /// Every invariant of the scheduler and the block manager (see [`Scheduler::check`]).
    pub fn check(&self) -> Result<(), String> {
        self.sched.check()
    }
}
