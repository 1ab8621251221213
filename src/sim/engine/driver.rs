//! The one run loop: a [`System`] (one engine, or a cluster of them) is handed each request at its
//! arrival and advanced between arrivals, step by step. A trace is one driver of a system
//! ([`drive`]); an online server is another (it submits as requests come and advances to the wall
//! clock), so a system never needs its whole workload up front.

use super::engine::EngineError;
use super::setup::{Prepared, Submission};
use super::step_log::StepRecord;

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
    mut progress: impl FnMut(usize, usize),
) -> Result<(), EngineError> {
    let total = p.len();
    let mut next = 0;
    let mut events = 0u64;
    let mut now = 0.0f64;
    while sys.finished() < total || sys.copies_in_flight() {
        let t = sys.next_event_time();
        match (p.arrival(next), t) {
            (Some(a), _) if t.is_none_or(|t| a <= t) => {
                now = now.max(a);
                sys.submit(p.submission(next), a)?;
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
        events += 1;
        if events.is_multiple_of(8192) {
            progress(sys.finished(), total);
        }
    }
    progress(sys.finished(), total);
    Ok(())
}
