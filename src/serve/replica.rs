//! One replica online: a task that owns an [`Engine`] — the one `sim engine` runs, driven
//! through the same [`System`] trait as [`crate::sim::engine::drive`] — and advances it to the
//! wall clock. Requests arrive over a channel and join the engine when they come (their arrival
//! is the simulated time they were received); a step begins once the wall clock reaches its
//! start, its output is handed on when the wall clock reaches its end (the task sleeps till
//! then, taking arrivals meanwhile), and each request's new tokens go to its handler.
//!
//! Simulated time is wall time since the replica started × `time_scale`. A request received
//! while a step runs joins the next one, as in vLLM; its arrival is stamped after the start of
//! the last step taken, so a replay of the request log through [`crate::sim::engine::drive`]
//! (each request submitted at its logged arrival) takes the same steps: the served run and the
//! offline one agree request for request, whatever the wall clock's jitter.

use super::log::{aborted_line, request_line, LogSink, StepLine};
use super::metrics::ReplicaMetrics;
use crate::sim::engine::setup::predicted_output;
use crate::sim::engine::{Abort, Engine, EngineError, Submission, System};
use crate::workload::serving::{Prompt, ServingRequest};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use tokio::time::{sleep_until, Duration, Instant};

/// A request handed to a replica.
#[derive(Debug)]
pub struct Job {
    pub id: String,
    pub prompt: Vec<u32>,
    pub max_tokens: u32,
    pub priority: i64,
    pub events: mpsc::UnboundedSender<Event>,
}

/// What a replica tells a request's handler.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The engine took it (the first event of every request it takes).
    Accepted,
    /// The step that just ended brought `new` tokens (0 with `finished` never happens: the last
    /// step always brings the last token); `finished` when it was the last.
    Tokens {
        new: u32,
        finished: bool,
        /// Prompt tokens found in the prefix cache at admission.
        cached: u32,
    },
    /// The engine refuses it (it can never fit).
    Refused(String),
    /// The server stops before it finished.
    Aborted,
}

/// A request in the engine, not finished yet.
struct Active {
    index: u32,
    events: mpsc::UnboundedSender<Event>,
    sent: u32,
    /// When its last token was handed on (engine time).
    last_token: f64,
    admitted: bool,
    preemptions: u32,
}

/// Where a replica writes and what it counts.
pub struct Outputs {
    pub metrics: Arc<ReplicaMetrics>,
    pub step_log: Option<LogSink>,
    pub request_log: Option<LogSink>,
}

/// The smallest f64 above `t` (t >= 0).
fn just_after(t: f64) -> f64 {
    f64::from_bits(t.max(0.0).to_bits() + 1)
}

struct Replica {
    engine: Engine,
    index: usize,
    origin: Instant,
    time_scale: f64,
    active: Vec<Active>,
    /// The latest arrival submitted, and the start of the last step taken: an arrival is
    /// stamped after both.
    last_arrival: f64,
    last_step_start: f64,
    submitted: u64,
    /// Finished requests the engine could not forget yet (a step in flight still holds them).
    to_forget: Vec<u32>,
    out: Outputs,
}

impl Replica {
    fn sim_now(&self) -> f64 {
        self.origin.elapsed().as_secs_f64() * self.time_scale
    }

    /// When the wall clock reaches simulated time `t`.
    fn wall(&self, t: f64) -> Instant {
        let secs = (t / self.time_scale).clamp(0.0, 1e9);
        self.origin + Duration::from_secs_f64(secs)
    }

    fn submit(&mut self, job: Job) {
        let mut arrival = self.sim_now().max(self.last_arrival);
        if arrival <= self.last_step_start {
            arrival = just_after(self.last_step_start);
        }
        let request = ServingRequest {
            id: job.id,
            arrival,
            prompt: Prompt::Tokens(job.prompt),
            output_len: job.max_tokens,
            priority: job.priority,
        };
        let uid = self.submitted;
        let s = Submission {
            request: &request,
            uid,
            predicted: predicted_output(&self.engine.scheduler().cfg, &request, uid),
            // Ids are numbered in arrival order, so string order is arrival order.
            id_rank: u32::try_from(uid).unwrap_or(u32::MAX),
        };
        match self.engine.submit(s, Vec::new()) {
            Ok(index) => {
                let _ = job.events.send(Event::Accepted);
                self.submitted += 1;
                self.last_arrival = arrival;
                self.out
                    .metrics
                    .request_max_tokens
                    .observe(f64::from(job.max_tokens));
                self.active.push(Active {
                    index,
                    events: job.events,
                    sent: 0,
                    last_token: arrival,
                    admitted: false,
                    preemptions: 0,
                });
            }
            Err(e) => {
                let _ = job.events.send(Event::Refused(e.to_string()));
            }
        }
    }

    /// Takes the step that begins now.
    fn step(&mut self) -> Result<(), EngineError> {
        self.last_step_start = self
            .engine
            .next_event_time()
            .unwrap_or(self.last_step_start);
        let replica = self.index;
        let metrics = self.out.metrics.clone();
        let log = self.out.step_log.clone();
        System::advance(&mut self.engine, &mut |_, record| {
            let tokens: u32 = record.scheduled.0.iter().map(|(_, n)| n).sum();
            metrics.iteration_tokens.observe(f64::from(tokens));
            if let Some(log) = &log {
                log.write(&StepLine { replica, record })
                    .map_err(|e| EngineError::Output(e.into()))?;
            }
            Ok(())
        })
    }

    /// Drops the records of finished requests (their slots go to later ones), so the engine's
    /// memory is bounded by the requests it holds.
    fn forget(&mut self, index: u32) {
        if !self.engine.forget(index) {
            self.to_forget.push(index);
        }
    }

    /// Aborts the requests whose handler has gone (its client closed the connection), before
    /// the next step, as vLLM's engine core takes aborts between steps. vLLM records no
    /// finished-request metrics for them (`OutputProcessor.abort_requests`,
    /// vllm/v1/engine/output_processor.py, 0.33.0, drops their state without stats); the
    /// request log marks them `aborted`.
    fn abort_abandoned(&mut self) -> std::io::Result<()> {
        let mut k = 0;
        while k < self.active.len() {
            let a = &self.active[k];
            if !a.events.is_closed() {
                k += 1;
                continue;
            }
            match self.engine.abort(a.index) {
                Abort::Aborted => {
                    let index = a.index;
                    if let Some(log) = &self.out.request_log {
                        log.write(&aborted_line(self.index, self.engine.request(index)))?;
                    }
                    self.active.swap_remove(k);
                    self.forget(index);
                }
                // Finished: the next emit records it; loading: try after the next step.
                Abort::Finished | Abort::Later => k += 1,
            }
        }
        Ok(())
    }

    /// Hands on what the last step brought; records finished requests.
    fn emit(&mut self) -> std::io::Result<()> {
        let pending = std::mem::take(&mut self.to_forget);
        for index in pending {
            self.forget(index);
        }
        let now = self.engine.now();
        let m = self.out.metrics.clone();
        let s = self.engine.scheduler();
        m.running.set(s.running.len() as i64);
        m.waiting.set(s.num_waiting() as i64);
        m.kv_cache_usage
            .set(s.kv.used_blocks() as f64 / s.cfg.usable_blocks().max(1) as f64);
        let mut k = 0;
        while k < self.active.len() {
            let a = &mut self.active[k];
            let q = self.engine.request(a.index);
            if !a.admitted {
                if let Some(hit) = q.first_hit {
                    a.admitted = true;
                    m.prefix_cache_queries.inc_by(u64::from(q.prompt_len));
                    m.prefix_cache_hits.inc_by(u64::from(hit));
                }
            }
            if q.preemptions > a.preemptions {
                m.preemptions
                    .inc_by(u64::from(q.preemptions - a.preemptions));
                a.preemptions = q.preemptions;
            }
            let new = q.num_output.saturating_sub(a.sent);
            let finished = q.is_finished();
            if new > 0 {
                if a.sent == 0 {
                    m.time_to_first_token
                        .observe(q.first_token_time - q.arrival);
                    m.prompt_tokens.inc_by(u64::from(q.prompt_len));
                } else {
                    m.inter_token_latency.observe(now - a.last_token);
                }
                m.generation_tokens.inc_by(u64::from(new));
                a.sent += new;
                a.last_token = now;
            }
            if new > 0 || finished {
                // A handler gone (client closed) is no error: the request is aborted before
                // the next step.
                let _ = a.events.send(Event::Tokens {
                    new,
                    finished,
                    cached: q.first_hit.unwrap_or(0),
                });
            }
            if finished {
                m.finished("length");
                m.e2e_latency.observe(q.finish_time - q.arrival);
                m.request_prompt_tokens.observe(f64::from(q.prompt_len));
                m.request_generation_tokens.observe(f64::from(q.num_output));
                if q.num_output > 1 {
                    m.time_per_output_token.observe(
                        (q.finish_time - q.first_token_time) / f64::from(q.num_output - 1),
                    );
                }
                if let Some(log) = &self.out.request_log {
                    log.write(&request_line(self.index, q))?;
                }
                let index = a.index;
                self.active.swap_remove(k);
                self.forget(index);
            } else {
                k += 1;
            }
        }
        Ok(())
    }

    /// Ends every request still in the engine.
    fn abort_all(&mut self) {
        for a in self.active.drain(..) {
            let _ = a.events.send(Event::Aborted);
        }
    }
}

/// How a wait ended.
enum Woke {
    Time,
    Job(Job),
    Closed,
    Stop,
}

async fn wait(
    until: Option<Instant>,
    jobs: &mut mpsc::Receiver<Job>,
    open: bool,
    stop: &mut watch::Receiver<bool>,
) -> Woke {
    let sleep = async {
        match until {
            Some(t) => sleep_until(t).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        _ = stop.changed() => Woke::Stop,
        j = jobs.recv(), if open => j.map_or(Woke::Closed, Woke::Job),
        () = sleep => Woke::Time,
    }
}

/// Runs replica `index` until `stop` turns true (or every sender of `jobs` is gone and nothing
/// is left to do): then every unfinished request gets [`Event::Aborted`] and the logs are
/// flushed. An engine error ends it the same way, and is returned.
pub async fn run(
    engine: Engine,
    index: usize,
    time_scale: f64,
    mut jobs: mpsc::Receiver<Job>,
    mut stop: watch::Receiver<bool>,
    out: Outputs,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut r = Replica {
        engine,
        index,
        origin: Instant::now(),
        time_scale,
        active: Vec::new(),
        last_arrival: 0.0,
        last_step_start: f64::NEG_INFINITY,
        submitted: 0,
        to_forget: Vec::new(),
        out,
    };
    let result = drive_online(&mut r, &mut jobs, &mut stop).await;
    r.abort_all();
    for log in [&r.out.step_log, &r.out.request_log].into_iter().flatten() {
        log.flush()?;
    }
    result
}

async fn drive_online(
    r: &mut Replica,
    jobs: &mut mpsc::Receiver<Job>,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut open = true;
    loop {
        if *stop.borrow() {
            return Ok(());
        }
        while open {
            match jobs.try_recv() {
                Ok(j) => r.submit(j),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => open = false,
            }
        }
        r.abort_abandoned()?;
        let Some(start) = r.engine.next_event_time() else {
            if !open {
                return Ok(());
            }
            match wait(None, jobs, open, stop).await {
                Woke::Job(j) => r.submit(j),
                Woke::Closed => open = false,
                Woke::Stop => return Ok(()),
                Woke::Time => {}
            }
            continue;
        };
        let at = r.wall(start);
        if at > Instant::now() {
            match wait(Some(at), jobs, open, stop).await {
                Woke::Job(j) => r.submit(j),
                Woke::Closed => open = false,
                Woke::Stop => return Ok(()),
                Woke::Time => {}
            }
            continue;
        }
        r.step()?;
        // The step's output lands at its end: sleep till then, taking arrivals.
        let end = r.wall(r.engine.now());
        while Instant::now() < end {
            match wait(Some(end), jobs, open, stop).await {
                Woke::Job(j) => r.submit(j),
                Woke::Closed => open = false,
                Woke::Stop => return Ok(()),
                Woke::Time => break,
            }
        }
        r.emit()?;
    }
}
