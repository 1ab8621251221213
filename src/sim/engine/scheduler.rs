//! vLLM V1's scheduler (`vllm/v1/core/sched/scheduler.py`, 0.33): one token budget per step,
//! running requests first and in order, then waiting ones; preemption by recompute; output
//! processing that samples one token per request whose chunk reached the end of its sequence.
//! With a host tier ([`super::host_tier`]), lent for each call: vLLM's queue of requests that
//! hold blocks (`kv_holding_waiting`, drained first; requests loading from the tier wait there),
//! skipped requests (`skip_request`), and the connector's hooks.

use super::config::{EngineConfig, Policy, Preemption};
use super::host_tier::connector::Connector;
use super::host_tier::{HostTier, OffloadMode};
use super::kv_manager::{Alloc, KvManager};
use super::request::{Req, Status};
use super::waiting::{Rank, WaitingQueue};

mod abort;
mod admit;
mod tier;

/// One request's share of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheduled {
    pub req: u32,
    pub tokens: u32,
    /// Tokens computed before this step (the context its attention reads besides the new ones).
    pub context: u32,
    /// Whether the step samples a token for it (its chunk reaches the end of its sequence).
    pub samples: bool,
}

/// What one call of the scheduler decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// In scheduling order: running requests first, then admitted ones.
    pub scheduled: Vec<Scheduled>,
    /// In the order they were preempted.
    pub preempted: Vec<u32>,
    /// Requests admitted from the waiting queue, with the prefix-cache tokens they reused.
    pub admitted: Vec<(u32, u32)>,
    /// Swap preemption: tokens of KV copied to the host and back in this step.
    pub swap_out_tokens: u64,
    pub swap_in_tokens: u64,
    /// Store-on-evict host tier: tokens of KV loaded back for admissions, and copied out for
    /// evicted blocks (the step's own copies).
    pub offload_load_tokens: u64,
    pub offload_store_tokens: u64,
    /// Native host tier: requests whose prefix loads from it (tokens), and chunks stored per
    /// request, in this step's schedule; the copies its poll reports done.
    pub kv_loads: Vec<(u32, u32)>,
    pub kv_stores: Vec<(u32, u32)>,
    pub offload_done: Vec<u64>,
}

impl SchedStats {
    /// Adds another engine's counts (a cluster's total).
    pub fn merge(&mut self, o: &SchedStats) {
        self.preemptions += o.preemptions;
        self.prefix_queries += o.prefix_queries;
        self.prefix_hits += o.prefix_hits;
        self.preempted_prefix_queries += o.preempted_prefix_queries;
        self.preempted_prefix_hits += o.preempted_prefix_hits;
        self.swapped_out_tokens += o.swapped_out_tokens;
        self.swapped_in_tokens += o.swapped_in_tokens;
        self.offload_hits += o.offload_hits;
        self.external_queries += o.external_queries;
        self.external_hits += o.external_hits;
        self.preempted_external_queries += o.preempted_external_queries;
        self.preempted_external_hits += o.preempted_external_hits;
    }
}

impl Plan {
    pub fn clear(&mut self) {
        self.scheduled.clear();
        self.preempted.clear();
        self.admitted.clear();
        self.swap_out_tokens = 0;
        self.swap_in_tokens = 0;
        self.offload_load_tokens = 0;
        self.offload_store_tokens = 0;
        self.kv_loads.clear();
        self.kv_stores.clear();
        self.offload_done.clear();
    }

    pub fn total_tokens(&self) -> u64 {
        self.scheduled.iter().map(|s| u64::from(s.tokens)).sum()
    }
}

/// Counts over the whole run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SchedStats {
    pub preemptions: u64,
    /// vLLM's prefix-cache counts (`PrefixCacheStats.record`, vllm/v1/metrics/stats.py, called by
    /// `KVCacheManager.record_prefix_cache_stats` at admission): tokens looked up and tokens found
    /// at first admissions (`queries`, `hits`: what `vllm:prefix_cache_queries` / `_hits` export)
    /// and at re-admissions after preemption (`preempted_queries`, `preempted_hits`, kept apart).
    pub prefix_queries: u64,
    pub prefix_hits: u64,
    pub preempted_prefix_queries: u64,
    pub preempted_prefix_hits: u64,
    pub swapped_out_tokens: u64,
    pub swapped_in_tokens: u64,
    /// Host tier: prompt tokens admissions found there (beyond the GPU's hits).
    pub offload_hits: u64,
    /// Native host tier, vLLM's `external_prefix_cache_queries/hits`: at each admission that
    /// looks up (first ones; then admissions after a preemption), the tokens past the GPU hit
    /// and the tokens the tier holds.
    pub external_queries: u64,
    pub external_hits: u64,
    pub preempted_external_queries: u64,
    pub preempted_external_hits: u64,
}

#[derive(Debug, Clone)]
pub struct Scheduler {
    pub cfg: EngineConfig,
    pub kv: KvManager,
    pub reqs: Vec<Req>,
    pub running: Vec<u32>,
    pub waiting: WaitingQueue,
    /// vLLM's `kv_holding_waiting`: waiting requests that hold blocks (loading from the host
    /// tier, or loaded and not admitted yet), served before `waiting`.
    pub holding: WaitingQueue,
    pub stats: SchedStats,
    /// The native host tier's scheduler side.
    pub offload: Option<Connector>,
    /// Schedules so far (the step a host tier's copy was created in).
    schedules: u64,
    /// vLLM's `_inflight_prefills` (kept with a native tier, whose loads reserve the blocks these
    /// prefills still need): admitted or loading, prefill not done.
    inflight: std::collections::BTreeSet<u32>,
    /// Swap preemption: host space left, in tokens of KV.
    host_tokens_left: u64,
    /// Requests finished since the last schedule (vLLM reports their ids in the next one).
    finished_unreported: bool,
    hit: Vec<u32>,
}

impl Scheduler {
    /// `host_tokens` is the host space for swapped KV, in tokens (ignored unless swapping);
    /// `offload_seconds_per_block` the host tier's link (`None`: copies take no time).
    pub fn new(
        cfg: EngineConfig,
        reqs: Vec<Req>,
        host_tokens: u64,
        offload_seconds_per_block: Option<f64>,
    ) -> Self {
        let mut kv = KvManager::new(&cfg);
        let offload = match cfg.cpu_offload {
            Some(o) if o.mode == OffloadMode::Native => {
                if offload_seconds_per_block.is_some() {
                    kv.keep_step_blocks();
                }
                Some(Connector::new(
                    cfg.block_size,
                    o.blocks_per_chunk as u32,
                    o.prompt_only,
                    cfg.enable_prefix_caching,
                    offload_seconds_per_block,
                ))
            }
            Some(_) => {
                kv.record_evictions();
                None
            }
            None => None,
        };
        Scheduler {
            kv,
            waiting: WaitingQueue::new(cfg.scheduling_policy),
            holding: WaitingQueue::new(cfg.scheduling_policy),
            offload,
            schedules: 0,
            inflight: std::collections::BTreeSet::new(),
            cfg,
            reqs,
            running: Vec::new(),
            stats: SchedStats::default(),
            host_tokens_left: host_tokens,
            finished_unreported: false,
            hit: Vec::new(),
        }
    }

    fn rank(&self, i: u32) -> Rank {
        Rank::of(
            &self.reqs[i as usize],
            self.cfg.scheduling_policy,
            self.cfg.aging_delay,
        )
    }

    /// The request joins the waiting queue.
    pub fn add_request(&mut self, i: u32) {
        self.reqs[i as usize].status = Status::Waiting;
        let rank = self.rank(i);
        self.waiting.add(i, rank);
    }

    /// A request that holds its blocks (its KV arrived from elsewhere) joins the queue of
    /// requests that hold blocks, as vLLM's `_update_waiting_for_remote_kv` returns one.
    pub fn add_holding(&mut self, i: u32) {
        self.reqs[i as usize].status = Status::Waiting;
        let rank = self.rank(i);
        self.holding.add(i, rank);
    }

    /// vLLM's `has_requests`: requests wait or run, or finished ones are not reported yet, or
    /// the host tier has copies in flight.
    pub fn has_requests(&self) -> bool {
        !self.running.is_empty()
            || !self.waiting.is_empty()
            || !self.holding.is_empty()
            || self.finished_unreported
            || self.tier_busy()
    }

    /// Requests waiting, in either queue.
    pub fn num_waiting(&self) -> usize {
        self.waiting.len() + self.holding.len()
    }

    /// The running request to preempt: the most recently admitted (FCFS), or the one ranked last
    /// (the first of equals in running order, as Python's `max`).
    fn victim(&self) -> usize {
        if self.cfg.scheduling_policy == Policy::Fcfs {
            return self.running.len() - 1;
        }
        let mut best = 0;
        let mut best_rank = self.rank(self.running[0]);
        for (pos, &i) in self.running.iter().enumerate().skip(1) {
            let rank = self.rank(i);
            if rank.victim_cmp(&best_rank).is_gt() {
                (best, best_rank) = (pos, rank);
            }
        }
        best
    }

    fn preempt(&mut self, i: u32, plan: &mut Plan) {
        let r = &mut self.reqs[i as usize];
        if let Preemption::Swap { .. } = self.cfg.preemption {
            let kv = u64::from(r.num_computed);
            if kv > 0 && kv <= self.host_tokens_left {
                self.host_tokens_left -= kv;
                r.swapped_tokens = r.num_computed;
                plan.swap_out_tokens += kv;
                self.stats.swapped_out_tokens += kv;
            }
        }
        self.kv.free(r);
        r.status = Status::Preempted;
        r.num_computed = 0;
        r.stale = r.in_flight;
        r.placeholders = 0;
        r.preemptions += 1;
        self.inflight.remove(&i);
        self.stats.preemptions += 1;
        plan.preempted.push(i);
        let rank = self.rank(i);
        self.waiting.prepend(i, rank);
    }

    /// Gives swapped KV's host space back.
    fn release_host(&mut self, i: u32) {
        let r = &mut self.reqs[i as usize];
        self.host_tokens_left += u64::from(std::mem::take(&mut r.swapped_tokens));
    }

    /// One call of vLLM's `schedule()`, with `_update_after_schedule` (and, with a native host
    /// tier, the connector's `build_connector_meta`); `tier` is this engine's host tier, if any.
    pub fn schedule(&mut self, plan: &mut Plan, mut tier: Option<&mut HostTier>) {
        plan.clear();
        self.schedules += 1;
        let mut budget = self.cfg.max_num_batched_tokens as u64;
        // The cap on a prefill chunk only applies when another request could use the budget.
        let threshold = if self.running.len() + self.waiting.len() > 1 {
            self.cfg.long_prefill_token_threshold as u64
        } else {
            0
        };
        self.schedule_running(plan, &mut budget, threshold, &mut tier);
        if plan.preempted.is_empty() {
            self.admit(plan, &mut budget, threshold, &mut tier);
        }
        self.finished_unreported = false;
        self.update_after_schedule(plan);
        if let (Some(c), Some(t)) = (&mut self.offload, tier.and_then(HostTier::native)) {
            let reqs = &mut self.reqs;
            let scheduled: Vec<(u32, u32)> = plan
                .scheduled
                .iter()
                .map(|s| (s.req, reqs[s.req as usize].num_computed))
                .collect();
            c.store_pass(
                scheduled.into_iter(),
                reqs,
                self.schedules,
                t,
                &mut plan.kv_stores,
            );
        }
    }

    /// The running loop: each running request in order gets its tokens, preempting others (or
    /// itself) when its blocks do not fit.
    fn schedule_running(
        &mut self,
        plan: &mut Plan,
        budget: &mut u64,
        threshold: u64,
        tier: &mut Option<&mut HostTier>,
    ) {
        let ranked_victims = self.cfg.scheduling_policy != Policy::Fcfs;
        let mut idx = 0;
        while idx < self.running.len() && *budget > 0 {
            let ri = self.running[idx];
            let n = self.running_tokens(ri, threshold, *budget);
            if n == 0 {
                idx += 1;
                continue;
            }
            let computed = self.reqs[ri as usize].num_computed;
            if !self.allocate_or_preempt(ri, n, &mut idx, budget, plan, tier) {
                if ranked_victims && self.reqs[ri as usize].status == Status::Preempted {
                    // It preempted itself; the requests after it rank higher and may still fit.
                    continue;
                }
                break;
            }
            plan.scheduled.push(Scheduled {
                req: ri,
                tokens: n as u32,
                context: computed,
                samples: false,
            });
            *budget -= n;
            idx += 1;
        }
    }

    /// The tokens running request `ri` asks for this step: what is left of its sequence, at
    /// most the long-prefill threshold, the budget and the model's length; 0 skips it.
    fn running_tokens(&self, ri: u32, threshold: u64, budget: u64) -> u64 {
        let max_model_len = self.cfg.max_model_len as u64;
        let r = &self.reqs[ri as usize];
        let (computed, placeholders) = (u64::from(r.num_computed), u64::from(r.placeholders));
        // Async: the step in flight already reaches max_tokens; scheduling more is waste.
        if placeholders > 0 && computed + 2 >= u64::from(r.prompt_len + r.max_tokens) + placeholders
        {
            return 0;
        }
        let mut n = u64::from(r.num_tokens()) + placeholders - computed;
        if threshold > 0 && n > threshold {
            n = threshold;
        }
        n.min(budget)
            .min(max_model_len.saturating_sub(computed + 1))
    }

    /// Allocates `n` new tokens' blocks for running request `ri`, preempting victims until they
    /// fit; false when `ri` itself was preempted. A ranked victim leaves the running list where
    /// it stands (`idx` follows) and gives back the budget it was scheduled this step.
    fn allocate_or_preempt(
        &mut self,
        ri: u32,
        n: u64,
        idx: &mut usize,
        budget: &mut u64,
        plan: &mut Plan,
        tier: &mut Option<&mut HostTier>,
    ) -> bool {
        let ranked_victims = self.cfg.scheduling_policy != Policy::Fcfs;
        loop {
            let alloc = Alloc {
                new_tokens: n as u32,
                hit: &[],
                hit_tokens: 0,
                external_tokens: 0,
                delay_cache: false,
                reserved_blocks: 0,
                full_sequence_must_fit: false,
                has_scheduled_reqs: true,
            };
            let ok = self.kv.allocate_slots(&mut self.reqs[ri as usize], alloc);
            self.store_evicted(tier, plan);
            if ok {
                return true;
            }
            let pos = self.victim();
            let victim = self.running[pos];
            if ranked_victims {
                self.running.remove(pos);
                if pos < *idx {
                    *idx -= 1;
                }
                if let Some(p) = plan.scheduled.iter().position(|s| s.req == victim) {
                    *budget += u64::from(plan.scheduled.remove(p).tokens);
                }
            } else {
                self.running.pop();
            }
            self.preempt(victim, plan);
            if victim == ri {
                return false;
            }
        }
    }

    /// vLLM's `_update_after_schedule`: the scheduled tokens count as computed (and in flight);
    /// a chunk that reaches the end of its sequence samples.
    fn update_after_schedule(&mut self, plan: &mut Plan) {
        let async_scheduling = self.cfg.async_scheduling;
        for s in &mut plan.scheduled {
            let r = &mut self.reqs[s.req as usize];
            r.num_computed += s.tokens;
            r.in_flight += s.tokens;
            r.scheduled_tokens += u64::from(s.tokens);
            s.samples = r.num_computed >= r.num_tokens() + r.placeholders;
            if async_scheduling && s.samples {
                r.placeholders += 1;
            }
            if s.samples {
                self.inflight.remove(&s.req);
            }
        }
    }

    /// vLLM's `update_from_output` for `plan`'s step, whose output is processed at `now`: one token
    /// (id 0) per request whose chunk reached the end of its sequence; requests that reach
    /// `max_tokens` (or `max_model_len`) finish and free their blocks. Pushes them to `finished`.
    /// With a native host tier (`tier`), then the copies the step's poll reported
    /// (`_update_from_kv_xfer_finished`).
    pub fn update_from_output(
        &mut self,
        plan: &Plan,
        now: f64,
        finished: &mut Vec<u32>,
        tier: Option<&mut HostTier>,
    ) {
        let first = finished.len();
        let max_model_len = self.cfg.max_model_len as u64;
        for s in &plan.scheduled {
            let r = &mut self.reqs[s.req as usize];
            r.in_flight -= s.tokens;
            // Output of a step scheduled before the request's preemption: delivered, but it must
            // not move the counters the preemption reset.
            let stale = r.stale > 0;
            if stale {
                r.stale -= s.tokens;
            }
            if r.is_finished() || !s.samples {
                continue;
            }
            let status_before = r.status;
            let had_placeholders = r.placeholders > 0;
            r.num_output += 1;
            r.gaps.token_at(now);
            if r.first_token_time.is_nan() {
                r.first_token_time = now;
            }
            let stopped =
                u64::from(r.num_tokens()) >= max_model_len || r.num_output >= r.max_tokens;
            if !stale && r.placeholders > 0 {
                r.placeholders -= 1;
            }
            if !stale && status_before == Status::Running && had_placeholders {
                let upto = r.num_computed - r.in_flight;
                self.kv.cache_blocks(r, upto);
            }
            if stopped {
                r.status = Status::Finished;
                r.finish_time = now;
                r.gaps.finish();
                if let Some(c) = &mut self.offload {
                    c.request_finished(s.req, r);
                }
                self.inflight.remove(&s.req);
                if !r.hold_kv {
                    self.kv.free(r);
                }
                if status_before != Status::Running {
                    self.waiting.remove(s.req);
                    self.holding.remove(s.req);
                }
                self.release_host(s.req);
                finished.push(s.req);
            }
        }
        if finished.len() > first {
            self.finished_unreported = true;
            let reqs = &self.reqs;
            self.running.retain(|&i| !reqs[i as usize].is_finished());
            for &i in &finished[first..] {
                let r = &mut self.reqs[i as usize];
                if !r.hold_kv {
                    r.drop_state();
                }
            }
        }
        if let (Some(c), Some(t)) = (&mut self.offload, tier.and_then(HostTier::native)) {
            c.complete(&plan.offload_done, t);
        }
    }

    /// Every invariant of the block manager and the queues; for tests, after any step.
    pub fn check(&self) -> Result<(), String> {
        self.kv.check(&self.reqs)?;
        let mut place = vec![0u8; self.reqs.len()];
        for &i in &self.running {
            place[i as usize] += 1;
            if self.reqs[i as usize].status != Status::Running {
                return Err(format!(
                    "{} is in the running list but not running",
                    self.reqs[i as usize].id
                ));
            }
        }
        for (holds, i) in (self.waiting.ordered().into_iter().map(|i| (false, i)))
            .chain(self.holding.ordered().into_iter().map(|i| (true, i)))
        {
            place[i as usize] += 1;
            let r = &self.reqs[i as usize];
            let ok = match r.status {
                Status::Waiting | Status::Preempted => holds == (r.num_computed > 0),
                Status::LoadingKv => holds,
                _ => false,
            };
            if !ok {
                return Err(format!(
                    "{} waits with status {:?} and {} computed tokens in the {} queue",
                    r.id,
                    r.status,
                    r.num_computed,
                    if holds { "holding" } else { "waiting" }
                ));
            }
        }
        for (i, r) in self.reqs.iter().enumerate() {
            let want = u8::from(matches!(
                r.status,
                Status::Waiting | Status::Preempted | Status::Running | Status::LoadingKv
            ));
            if place[i] != want {
                return Err(format!(
                    "{} ({:?}) is queued {} times",
                    r.id, r.status, place[i]
                ));
            }
            if r.num_computed > r.num_tokens() + r.placeholders {
                return Err(format!(
                    "{}: {} computed of {} tokens",
                    r.id,
                    r.num_computed,
                    r.num_tokens()
                ));
            }
        }
        if self.running.len() > self.cfg.max_num_seqs {
            return Err(format!(
                "{} running, max_num_seqs {}",
                self.running.len(),
                self.cfg.max_num_seqs
            ));
        }
        Ok(())
    }
}
