//! The one run loop: a [`System`] (one engine, or a cluster of them) is handed each request at its
//! arrival and advanced between arrivals, step by step. A trace is one driver of a system
//! ([`drive`]); an online server is another (it submits as requests come and advances to the wall
//! clock), so a system never needs its whole workload up front. A trace reaches the system
//! through an open loop (each request at its arrival) or through N clients ([`Clients`]: each
//! request sent at its arrival or when a client is free, whichever is later).

use super::clients::{ClientPool, ClientReport, Clients};
use super::error::EngineError;
use super::setup::{Prepared, Submission};
use super::step_log::StepRecord;
use crate::workload::serving::ServingRequest;

/// Something requests are submitted to and that advances in time.
pub trait System {
    /// Takes a request arriving at `now`, no earlier than any request submitted before it and no
    /// later than [`System::next_event_time`].
    fn submit(&mut self, s: Submission<'_>, now: f64) -> Result<(), EngineError>;

    /// When the next step begins (seconds, or the step index under a step clock); `None` when
    /// nothing submitted is left to do.
    fn next_event_time(&self) -> Option<f64>;

    /// Takes the step (or, under a step clock, the steps of every replica) that begins at
    /// [`System::next_event_time`]; hands each step's record to `steps` with its replica when
    /// steps are recorded.
    fn advance(&mut self, steps: &mut StepSink<'_>) -> Result<(), EngineError>;

    /// Requests finished so far.
    fn finished(&self) -> usize;

    /// Whether work is left once every request has finished: a host tier's copies in flight, or
    /// the last store try of requests that just finished (vLLM's engine keeps stepping while its
    /// connector has such work: `Scheduler.has_requests`).
    fn copies_in_flight(&self) -> bool {
        false
    }

    /// Appends (uid, time) for each request the last [`System::submit`] or [`System::advance`]
    /// finished: when its last token reached its client (the end of the step that sampled it),
    /// or, refused on arrival, then. Asked only after a call that raised [`System::finished`];
    /// a closed loop frees a client at each. A system that reports none cannot run one.
    fn last_finished(&self, _out: &mut Vec<(u64, f64)>) {}
}

/// Where the steps a system takes go: (replica, record).
pub type StepSink<'a> = dyn FnMut(usize, &StepRecord) -> Result<(), EngineError> + 'a;

/// Feeds `p`'s requests to `sys` at their arrivals and advances it until every one has finished
/// and its copies are done;
/// `steps` gets every step taken, `progress(finished, total)` is called now and then.
pub fn drive(
    sys: &mut dyn System,
    p: &Prepared,
    steps: &mut StepSink<'_>,
    progress: impl FnMut(usize, usize),
) -> Result<(), EngineError> {
    drive_clients(sys, p, Clients::Open, steps, progress).map(|_| ())
}

/// [`drive`] with the requests sent as `clients` send them: under [`Clients::Closed`] each
/// request goes at its arrival or when one of the clients is free, whichever is later, arriving
/// at the system then (the rules and their sources: [`super::clients`]); returns what the
/// clients saw. [`Clients::Open`] is [`drive`].
pub fn drive_clients(
    sys: &mut dyn System,
    p: &Prepared,
    clients: Clients,
    steps: &mut StepSink<'_>,
    mut progress: impl FnMut(usize, usize),
) -> Result<Option<ClientReport>, EngineError> {
    let total = p.len();
    let mut pool = match clients {
        Clients::Open => None,
        Clients::Closed { max_concurrency } => Some(ClientPool::new(
            max_concurrency,
            p.requests.iter().map(|r| r.arrival).collect(),
        )),
    };
    let mut finishes = Vec::new();
    let mut next = 0;
    let mut events = 0u64;
    let mut now = 0.0f64;
    while sys.finished() < total || sys.copies_in_flight() {
        let t = sys.next_event_time();
        let send = match &pool {
            None => p.arrival(next),
            Some(c) => p.arrival(next).and_then(|a| c.send_time(a)),
        };
        let before = sys.finished();
        match (send, t) {
            (Some(a), _) if t.is_none_or(|t| a <= t) => {
                now = now.max(a);
                let s = p.submission(next);
                match &mut pool {
                    None => sys.submit(s, a)?,
                    Some(c) => {
                        c.sent(s.uid, a);
                        // It reaches the system when sent.
                        let sent = ServingRequest {
                            arrival: a,
                            ..s.request.clone()
                        };
                        sys.submit(
                            Submission {
                                request: &sent,
                                ..s
                            },
                            a,
                        )?
                    }
                }
                next += 1;
            }
            (_, Some(t)) => {
                now = now.max(t);
                sys.advance(steps)?
            }
            (_, None) if sys.finished() == total => break,
            (_, None) => {
                return Err(EngineError::Unfinished {
                    time: now,
                    unfinished: total - sys.finished(),
                })
            }
        }
        if let Some(c) = &mut pool {
            let done = sys.finished() - before;
            if done > 0 {
                finishes.clear();
                sys.last_finished(&mut finishes);
                if finishes.len() != done {
                    return Err(super::config::ConfigError::ClientsWithoutFinishes.into());
                }
                for &(uid, at) in &finishes {
                    c.finished(uid, at);
                }
            }
        }
        events += 1;
        if events.is_multiple_of(8192) {
            progress(sys.finished(), total);
            if crate::progress::watch::interrupted() {
                return Err(EngineError::Interrupted);
            }
        }
    }
    progress(sys.finished(), total);
    Ok(pool.map(|c| c.report()))
}
