//! An engine as one side of disaggregated serving: a prefill instance keeps a finished request's
//! blocks until its KV has been read, and a decode instance reserves blocks for KV that arrives
//! over a link, then schedules the request as one whose prompt is computed.
//!
//! vLLM does the same through a KV connector (`NixlConnector`, vllm/v1/distributed/
//! kv_transfer/kv_connector/v1/nixl_connector.py): `request_finished` delays freeing the
//! prefill side's blocks, and the decode side's `get_num_new_matched_tokens` asks for the prompt
//! past its own prefix-cache hit, holding the blocks while the load runs
//! (`WAITING_FOR_REMOTE_KVS`). Here the first token is the prefill instance's (Mooncake's and
//! the model), so the decode side starts with one token sampled.

use super::{Engine, EngineError};
use crate::sim::engine::hash::BlockHash;
use crate::sim::engine::kv_manager::Alloc;
use crate::sim::engine::request::{Req, Status};
use crate::sim::engine::setup::{check_request, Submission};

/// A request whose KV a decode instance reserved blocks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Its index in this engine.
    pub index: u32,
    /// Prompt tokens this engine's prefix cache held already (not moved over the link).
    pub hit_tokens: u32,
}

impl Engine {
    /// Request `i`, once finished, keeps its blocks until [`Engine::release_held_kv`].
    pub fn hold_kv_on_finish(&mut self, i: u32) {
        self.sched.reqs[i as usize].hold_kv = true;
    }

    /// Frees the blocks finished request `i` kept (its KV has been read at `at`).
    pub fn release_held_kv(&mut self, i: u32, at: f64) {
        let r = &mut self.sched.reqs[i as usize];
        debug_assert!(r.is_finished() && r.hold_kv);
        self.sched.kv.free(r);
        r.hold_kv = false;
        r.drop_state();
        self.wake_up(at);
    }

    /// The requests the last step admitted (indices in this engine; re-admissions after a
    /// preemption too), and when that step began.
    pub fn just_admitted(&self) -> (&[u32], f64) {
        (&self.admitted, self.admitted_at)
    }

    /// Reserves blocks for the prompt's KV and the next token's slot, past this engine's own
    /// prefix-cache hit, for a request whose first token is sampled elsewhere; `None` (nothing
    /// changed) when the pool cannot take it now (the watermark applies, as to an admission).
    /// The request waits, queued nowhere, until [`Engine::kv_arrived`].
    pub fn receive_kv(
        &mut self,
        s: Submission<'_>,
        hashes: Vec<BlockHash>,
    ) -> Result<Option<Received>, EngineError> {
        check_request(&self.sched.cfg, s.request)?;
        let mut q = Req::new(s.request, s.predicted, s.id_rank, s.uid);
        if !hashes.is_empty() {
            q = q.with_hashes(hashes);
        }
        q.num_output = 1;
        q.status = Status::Waiting;
        let mut hit = Vec::new();
        let hit_tokens = self.sched.kv.get_computed_blocks(&mut q, &mut hit);
        let alloc = Alloc {
            new_tokens: 1,
            hit: &hit,
            hit_tokens,
            external_tokens: q.prompt_len - hit_tokens,
            delay_cache: true,
            reserved_blocks: 0,
            full_sequence_must_fit: false,
            has_scheduled_reqs: !self.sched.running.is_empty(),
        };
        if !self.sched.kv.allocate_slots(&mut q, alloc) {
            return Ok(None);
        }
        q.status = Status::Receiving;
        q.num_computed = q.prompt_len;
        q.first_hit = Some(hit_tokens);
        let index = self.place(q);
        Ok(Some(Received { index, hit_tokens }))
    }

    /// Request `i`'s KV arrived at `at`, its first token sampled elsewhere at
    /// `first_token_time`: its blocks join the prefix cache and it waits with them for a seat,
    /// from `at` on.
    pub fn kv_arrived(&mut self, i: u32, at: f64, first_token_time: f64) {
        let r = &mut self.sched.reqs[i as usize];
        r.first_token_time = first_token_time;
        // Its token intervals (Mooncake's TBT) start from the first token, the move in the first.
        r.gaps.token_at(first_token_time);
        debug_assert_eq!(r.status, Status::Receiving);
        if self.sched.kv.caching() {
            let n = r.num_computed;
            self.sched.kv.cache_blocks(r, n);
        }
        self.sched.add_holding(i);
        self.wake_up(at);
    }

    /// Blocks freed or filled at `at` by another instance: a step that found nothing to
    /// schedule may find something from then on.
    fn wake_up(&mut self, at: f64) {
        if self.wake == Some(f64::INFINITY) {
            self.wake = None;
        }
        self.now = self.now.max(at);
    }

    /// Whether blocks of this pool wait on another instance: a finished request's KV still to
    /// be read, or a reservation whose KV is on its way.
    pub(super) fn waits_on_another_instance(&self) -> bool {
        self.sched
            .reqs
            .iter()
            .any(|r| (r.hold_kv && r.is_finished()) || r.status == Status::Receiving)
    }
}

impl Engine {
    /// The engine's clock: when its next step may begin (after its last step's output).
    pub fn clock_now(&self) -> f64 {
        self.now
    }
}
