//! One replica online: a thread that owns an [`Engine`] — the one `sim engine` runs, driven
//! through the same [`System`] trait as [`crate::sim::engine::drive`] — and advances it to the
//! wall clock. Requests arrive over a channel and join the engine when they come (their arrival
//! is the simulated time they were received); a step begins once the wall clock reaches its
//! start, its output is handed on when the wall clock reaches its end (the thread sleeps till
//! then, taking arrivals meanwhile), and each request's new tokens go to its handler.
//!
//! Simulated time is wall time since the replica started × `time_scale`. A request received
//! while a step runs joins the next one, as in vLLM; its arrival is stamped after the start of
//! the last step taken, so a replay of the request log through [`crate::sim::engine::drive`]
//! (each request submitted at its logged arrival) takes the same steps: the served run and the
//! offline one agree request for request, whatever the wall clock's jitter.

use super::log::{aborted_line, request_line, Aborted, LogSink, StepLine};
use super::metrics::{PromptTokens, ReplicaMetrics, SchedulerState};
use super::phases::{FinishedRequest, RequestTimes, TokenTiming};
use crate::sim::engine::setup::predicted_output;
use crate::sim::engine::{Abort, Engine, EngineError, Submission, System};
use crate::workload::serving::{Prompt, ServingRequest};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

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
    /// Its times so far (engine time); `times.generated`: the tokens handed on.
    times: RequestTimes,
    max_tokens: u32,
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
    /// Whether the replica has a host tier (its hits count as vLLM's external ones).
    host_tier: bool,
    /// The last step's output timings, and its events to hand on (kept to reuse their memory).
    timings: Vec<TokenTiming>,
    outbox: Vec<(mpsc::UnboundedSender<Event>, Event)>,
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
                self.active.push(Active {
                    index,
                    events: job.events,
                    times: RequestTimes::new(arrival),
                    max_tokens: job.max_tokens,
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
        let log = self.out.step_log.clone();
        System::advance(&mut self.engine, &mut |_, record| {
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
                        log.write(&aborted_line(
                            self.index,
                            self.engine.request(index),
                            Aborted::ClientGone,
                        ))?;
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

    /// Hands on what the last step brought; records its metrics as vLLM records a step's
    /// `EngineCoreOutputs`, and the finished requests.
    fn emit(&mut self) -> std::io::Result<()> {
        let pending = std::mem::take(&mut self.to_forget);
        for index in pending {
            self.forget(index);
        }
        // The step's output lands now; it began (and admitted requests) at its start.
        let now = self.engine.now();
        let start = self.last_step_start;
        let m = self.out.metrics.clone();
        let s = self.engine.scheduler();
        m.scheduler(SchedulerState {
            running: s.running.len(),
            waiting: s.num_waiting(),
            kv_cache_usage: s.kv.used_blocks() as f64 / s.cfg.usable_blocks().max(1) as f64,
        });
        let mut prompt = PromptTokens::default();
        let mut generated = 0u64;
        let mut outputs = false;
        self.timings.clear();
        let mut k = 0;
        while k < self.active.len() {
            let a = &mut self.active[k];
            let q = self.engine.request(a.index);
            let (hit, external) = (q.first_hit, q.first_offload_hit.unwrap_or(0));
            if let (None, Some(hit)) = (a.times.scheduled, hit) {
                a.times.admitted(start);
                m.admitted(q.prompt_len, hit, self.host_tier.then_some(external));
            }
            let hit = hit.unwrap_or(0);
            if q.preemptions > a.preemptions {
                m.preempted(q.preemptions - a.preemptions);
                a.preemptions = q.preemptions;
            }
            let new = q.num_output.saturating_sub(a.times.generated);
            let finished = q.is_finished();
            if new > 0 {
                let timing = a.times.tokens(now, new);
                if let TokenTiming::First(_) = timing {
                    prompt.add(q.prompt_len, hit, external);
                }
                self.timings.push(timing);
                generated += u64::from(new);
            }
            let event = Event::Tokens {
                new,
                finished,
                cached: hit + external,
            };
            outputs |= new > 0 || finished;
            if !finished {
                if new > 0 {
                    self.outbox.push((a.events.clone(), event));
                }
                k += 1;
            } else {
                m.finished(&FinishedRequest::new(
                    &a.times,
                    q.prompt_len,
                    hit + external,
                    q.preemptions,
                    a.max_tokens,
                ));
                if let Some(log) = &self.out.request_log {
                    log.write(&request_line(self.index, q))?;
                }
                let index = a.index;
                let done = self.active.swap_remove(k);
                self.outbox.push((done.events, event));
                self.forget(index);
            }
        }
        if outputs {
            m.iteration(prompt, generated, &self.timings);
        }
        // Handed on once recorded: a client that has its answer finds it in /metrics and the
        // request log. A handler gone (client closed) is no error: the request is aborted
        // before the next step.
        for (events, event) in self.outbox.drain(..) {
            let _ = events.send(event);
        }
        Ok(())
    }

    /// Ends every request still in the engine, the ones still on their way to it included
    /// (they join first): each gets [`Event::Aborted`] and a request-log line marked
    /// `stopped`, so the log holds every request the replica took.
    fn abort_all(&mut self, inbox: Receiver<Msg>) -> std::io::Result<()> {
        while let Ok(msg) = inbox.try_recv() {
            if let Msg::Job(j) = msg {
                self.submit(j);
            }
        }
        // Jobs sent from now on fail to send: their handlers answer that the server stops.
        drop(inbox);
        for a in std::mem::take(&mut self.active) {
            let _ = a.events.send(Event::Aborted);
            if let Some(log) = &self.out.request_log {
                let q = self.engine.request(a.index);
                log.write(&aborted_line(self.index, q, Aborted::Stopped))?;
            }
        }
        Ok(())
    }
}

/// What a replica's inbox carries.
#[derive(Debug)]
pub enum Msg {
    Job(Job),
    /// End every request and stop.
    Stop,
}

/// How a wait ended.
enum Woke {
    Time,
    Job(Job),
    Closed,
    Stop,
}

/// Waits for a message until `until` (`None`: for ever). The replica runs on a thread of its
/// own and waits here, not on the async runtime's timer: a futex timeout wakes within tens of
/// microseconds of a step's end, where the runtime's millisecond timer wheel would wake it up
/// to a millisecond late on every step.
fn wait(until: Option<Instant>, inbox: &Receiver<Msg>, open: bool) -> Woke {
    let msg = match (until, open) {
        (None, true) => inbox.recv().map_err(|_| RecvTimeoutError::Disconnected),
        (Some(t), true) => inbox.recv_timeout(t.saturating_duration_since(Instant::now())),
        (Some(t), false) => {
            std::thread::sleep(t.saturating_duration_since(Instant::now()));
            return Woke::Time;
        }
        (None, false) => return Woke::Closed,
    };
    match msg {
        Ok(Msg::Job(j)) => Woke::Job(j),
        Ok(Msg::Stop) => Woke::Stop,
        Err(RecvTimeoutError::Timeout) => Woke::Time,
        Err(RecvTimeoutError::Disconnected) => Woke::Closed,
    }
}

/// Runs replica `index` on the calling thread until a [`Msg::Stop`] comes (or every sender of
/// `inbox` is gone and nothing is left to do): then every unfinished request gets
/// [`Event::Aborted`] and the logs are flushed. An engine error ends it the same way, and is
/// returned.
pub fn run(
    engine: Engine,
    index: usize,
    time_scale: f64,
    inbox: Receiver<Msg>,
    out: Outputs,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let engine_has_tier = engine.host_tier().is_some();
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
        host_tier: engine_has_tier,
        timings: Vec::new(),
        outbox: Vec::new(),
        out,
    };
    let result = drive_online(&mut r, &inbox);
    let ended = r.abort_all(inbox);
    for log in [&r.out.step_log, &r.out.request_log].into_iter().flatten() {
        log.flush()?;
    }
    result.and(ended.map_err(Into::into))
}

fn drive_online(
    r: &mut Replica,
    inbox: &Receiver<Msg>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut open = true;
    loop {
        while open {
            match inbox.try_recv() {
                Ok(Msg::Job(j)) => r.submit(j),
                Ok(Msg::Stop) => return Ok(()),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => open = false,
            }
        }
        r.abort_abandoned()?;
        let Some(start) = r.engine.next_event_time() else {
            match wait(None, inbox, open) {
                Woke::Job(j) => r.submit(j),
                Woke::Closed if open => open = false,
                Woke::Closed | Woke::Stop => return Ok(()),
                Woke::Time => {}
            }
            continue;
        };
        let at = r.wall(start);
        if at > Instant::now() {
            match wait(Some(at), inbox, open) {
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
            match wait(Some(end), inbox, open) {
                Woke::Job(j) => r.submit(j),
                Woke::Closed => open = false,
                Woke::Stop => return Ok(()),
                Woke::Time => break,
            }
        }
        r.emit()?;
    }
}
