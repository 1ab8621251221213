//! A scheduler's hooks for its host tier: the store-on-evict tier's stores, the native tier's
//! copies in time, and the blocks its loads reserve.

use super::{Plan, Scheduler};
use crate::sim::engine::host_tier::connector::Connector;
use crate::sim::engine::host_tier::HostTier;

impl Scheduler {
    /// The native host tier has copies in flight, or a finished request's store to try.
    pub fn tier_busy(&self) -> bool {
        self.offload.as_ref().is_some_and(Connector::busy)
    }

    /// Store-on-evict tier: the blocks the last allocation evicted go to `tier`.
    pub(super) fn store_evicted(&mut self, tier: &mut Option<&mut HostTier>, plan: &mut Plan) {
        if let Some(t) = tier.as_deref_mut().and_then(HostTier::store_on_evict) {
            let bs = u64::from(self.kv.block_size());
            for h in self.kv.pool.drain_evicted() {
                t.store(h);
                plan.offload_store_tokens += bs;
            }
        }
    }

    /// Native tier: the step just scheduled begins at `start` on the GPU (its index under a step
    /// clock). Submits and polls the host tier's copies into `plan`; returns when the forward
    /// can start (later when it must wait for a flushed store).
    pub fn begin_transfers(&mut self, plan: &mut Plan, start: f64) -> f64 {
        let reused = self.kv.take_step_blocks();
        let Some(c) = &mut self.offload else {
            return start;
        };
        let poll = c.begin_step(self.schedules, start, &plan.preempted, &reused);
        plan.offload_done = poll.done;
        poll.start
    }

    /// Native tier: when the next copy in flight ends (seconds), if one is.
    pub fn next_transfer_done(&self) -> Option<f64> {
        self.offload.as_ref().and_then(Connector::next_done)
    }

    /// Native tier: the step's forward ends at `end`; the loads it created start.
    pub fn end_transfers(&mut self, end: f64) {
        if let Some(c) = &mut self.offload {
            c.end_step(self.schedules, end);
        }
    }

    /// vLLM's `_inflight_prefill_reserved_blocks`: blocks the admitted prefills still need.
    pub(super) fn inflight_reserved(&self) -> usize {
        self.inflight
            .iter()
            .map(|&i| self.kv.remaining_blocks(&self.reqs[i as usize]))
            .sum()
    }
}
