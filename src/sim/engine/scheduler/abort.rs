//! A request finished from outside the scheduler: vLLM's `Scheduler.finish_requests(ids,
//! RequestStatus.FINISHED_ABORTED)` (vllm/v1/core/sched/scheduler.py, vllm 0.33.0), which the
//! server calls when a client goes away.

use super::Scheduler;
use crate::sim::engine::request::Status;

impl Scheduler {
    /// Aborts request `i` (running, or in either waiting queue) at `now`, as `finish_requests`
    /// does: out of its queue, finished, the host tier's connector told (`_free_request` →
    /// `_connector_finished`), its blocks freed at once (`_free_blocks`; vLLM defers them only
    /// for an asynchronous KV connector, `defer_block_free`). A step in flight that scheduled it
    /// still runs; its output for it is dropped ([`Scheduler::update_from_output`] skips
    /// finished requests, as vLLM's skips ids it no longer holds).
    pub fn abort(&mut self, i: u32, now: f64) {
        let r = &mut self.reqs[i as usize];
        let status = r.status;
        debug_assert!(matches!(
            status,
            Status::Waiting | Status::Preempted | Status::Running
        ));
        r.status = Status::Finished;
        r.aborted = true;
        r.finish_time = now;
        r.gaps.finish();
        if let Some(c) = &mut self.offload {
            c.request_finished(i, r);
        }
        if !r.hold_kv {
            self.kv.free(r);
            r.drop_state();
        }
        self.inflight.remove(&i);
        if status == Status::Running {
            self.running.retain(|&k| k != i);
        } else {
            self.waiting.remove(i);
            self.holding.remove(i);
        }
        self.release_host(i);
        self.finished_unreported = true;
    }
}
