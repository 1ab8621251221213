//! When the native tier's copies finish, and in which step's output vLLM reports them
//! (vLLM 0.33 `offloading/worker.py` `handle_preemptions`, `start_kv_transfers`,
//! `prepare_store_kv`; `kv_connector_model_runner_mixin.py` `_get_kv_connector_output`;
//! `kv_offload/cpu/gpu_worker.py`).
//!
//! - A store created in step N's schedule is queued at the end of step N and submitted at the start
//!   of step N+1, on the device-to-host stream, after the compute already queued: it starts at
//!   step N+1's start, behind the stores before it (one FIFO queue per direction).
//! - A load created in step N's schedule is submitted after step N's forward is launched, on the
//!   host-to-device stream, after that forward: it starts when step N ends, behind the loads
//!   before it.
//! - A copy lasts its GPU blocks × (KV bytes of a block on one GPU) / `--offload-bandwidth`: every
//!   GPU moves its own shard over its own link at once. Copies overlap each other and the forward
//!   passes on their own streams, so they add nothing to a step's time.
//! - Completions are polled once per step, right after its forward is launched (taken as the
//!   step's start): a job is reported in the output of the first step whose start is at or
//!   after its end.
//! - A flush: when a store's source blocks are handed out again (its request finished and the
//!   blocks were reused in this step's schedule) or its request is preempted, the worker submits
//!   the store at once and waits for it before this step's forward, which starts that much later.
//!
//! Under a step clock every copy takes no time (the spec's zero-duration rule): a job created in
//! step N is reported in step N+1's output, and a flush waits for nothing.

use super::manager::Key;

/// One copy between the GPU and the host tier.
#[derive(Debug, Clone)]
pub struct Job {
    /// The engine's request.
    pub req: u32,
    pub store: bool,
    pub keys: Vec<Key>,
    /// GPU blocks it copies.
    pub blocks: u32,
    /// A store's chunk indices in its request (the blocks it reads).
    pub chunks: Vec<u32>,
    /// The step whose schedule created it.
    pub created: u64,
    /// When the copy ends, once submitted (seconds).
    pub done_at: Option<f64>,
    /// Reported in a step's output already.
    pub reported: bool,
}

/// The host link of one engine: a FIFO queue per direction.
#[derive(Debug, Clone, Default)]
pub struct Link {
    /// Seconds one GPU block takes over the link; `None` under a step clock.
    pub seconds_per_block: Option<f64>,
    store_tail: f64,
    load_tail: f64,
}

impl Link {
    pub fn new(seconds_per_block: Option<f64>) -> Self {
        Link {
            seconds_per_block,
            ..Default::default()
        }
    }

    /// Whether copies take time (seconds), or none (a step clock).
    pub fn timed(&self) -> bool {
        self.seconds_per_block.is_some()
    }

    /// Submits `job` at `at` behind its direction's queue (seconds only).
    pub fn submit(&mut self, job: &mut Job, at: f64) {
        let spb = self.seconds_per_block.unwrap_or(0.0);
        let tail = if job.store {
            &mut self.store_tail
        } else {
            &mut self.load_tail
        };
        *tail = at.max(*tail) + f64::from(job.blocks) * spb;
        job.done_at = Some(*tail);
    }

    /// Whether `job` is reported by the poll of step `step`, which starts at `start`.
    pub fn done_by(&self, job: &Job, step: u64, start: f64) -> bool {
        if self.timed() {
            job.done_at.is_some_and(|t| t <= start)
        } else {
            job.created < step
        }
    }
}
