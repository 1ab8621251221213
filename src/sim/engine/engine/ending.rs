//! Ending requests from outside the step loop, for an engine that serves online
//! ([`crate::serve`]): aborting one whose client went away, and forgetting finished ones so a
//! long-running server's memory stays bounded by the requests it holds, not those it served.

use super::Engine;
use crate::sim::engine::request::{Req, Status};

/// What [`Engine::abort`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abort {
    /// Finished now, as aborted.
    Aborted,
    /// It had finished already: nothing to do.
    Finished,
    /// Its KV is being copied into its blocks (from the host tier, or another instance): try
    /// again after the next step. vLLM frees such blocks only when the copy reports done.
    Later,
}

impl Engine {
    /// Aborts request `i` before the next step (vLLM's engine core takes aborts from its input
    /// queue between steps): see [`crate::sim::engine::scheduler::Scheduler::abort`]. One that has not
    /// arrived yet never joins the waiting queue.
    pub fn abort(&mut self, i: u32) -> Abort {
        let now = self.now;
        let r = &mut self.sched.reqs[i as usize];
        match r.status {
            Status::Finished => return Abort::Finished,
            Status::LoadingKv | Status::Receiving => return Abort::Later,
            Status::Pending => {
                r.status = Status::Finished;
                r.aborted = true;
                r.finish_time = now.max(r.arrival);
                r.gaps.finish();
                r.drop_state();
            }
            Status::Waiting | Status::Preempted | Status::Running => self.sched.abort(i, now),
        }
        self.done += 1;
        Abort::Aborted
    }

    /// Drops finished request `i`'s record; its index is given to a later request. Refused
    /// (false) while anything still refers to it: a step in flight that scheduled it, blocks it
    /// keeps for another instance, the host tier's copies. Call it between steps, once the last
    /// step's outputs ([`Engine::just_finished`] and the like) have been read.
    pub fn forget(&mut self, i: u32) -> bool {
        let r = &self.sched.reqs[i as usize];
        let busy = !r.is_finished()
            || r.hold_kv
            || r.in_flight > 0
            || self.sched.offload.as_ref().is_some_and(|c| c.mentions(i));
        if busy {
            return false;
        }
        self.sched.reqs[i as usize] = Req::forgotten();
        self.free_slots.push(i);
        true
    }

    /// Stores a new request's record: in a forgotten one's slot if there is one.
    pub(super) fn place(&mut self, q: Req) -> u32 {
        match self.free_slots.pop() {
            Some(i) => {
                self.sched.reqs[i as usize] = q;
                self.reused_slots += 1;
                i
            }
            None => {
                self.sched.reqs.push(q);
                (self.sched.reqs.len() - 1) as u32
            }
        }
    }

    /// Requests submitted so far (the records kept, and those forgotten and replaced).
    pub fn submitted(&self) -> usize {
        self.sched.reqs.len() + self.reused_slots
    }
}
