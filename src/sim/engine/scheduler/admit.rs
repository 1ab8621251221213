//! The waiting loop of vLLM's `schedule()`: admissions from the queue of requests that hold
//! blocks, then the waiting queue, with the host tier's lookups and loads.

use super::{Plan, Scheduled, Scheduler};
use crate::sim::engine::host_tier::store_on_evict::{hit_blocks, load_blocks};
use crate::sim::engine::host_tier::HostTier;
use crate::sim::engine::kv_manager::Alloc;
use crate::sim::engine::request::Status;
use crate::sim::engine::waiting::Rank;

/// Requests a scheduling pass skipped, by the queue they return to.
#[derive(Debug, Default)]
struct Skipped {
    holding: Vec<u32>,
    waiting: Vec<u32>,
}

/// A first admission's lookups: the prefix cache's hit and what the host tier adds (tokens
/// the native tier loads, blocks the store-on-evict tier loads).
#[derive(Debug, Default, Clone, Copy)]
struct Found {
    hit_tokens: u32,
    external: u32,
    host_blocks: u32,
}

impl Scheduler {
    /// The waiting loop: admit from the head of the queues (requests holding blocks first) while
    /// budget, seats and blocks last; requests that cannot go yet are skipped, in place.
    pub(super) fn admit(
        &mut self,
        plan: &mut Plan,
        budget: &mut u64,
        threshold: u64,
        tier: &mut Option<&mut HostTier>,
    ) {
        let bs = self.kv.block_size();
        let mut skipped = Skipped::default();
        while *budget > 0 {
            let from_holding = !self.holding.is_empty();
            let queue = if from_holding {
                &self.holding
            } else {
                &self.waiting
            };
            let Some(wi) = queue.peek() else { break };
            if self.running.len() >= self.cfg.max_num_seqs {
                break;
            }
            if self.reqs[wi as usize].status == Status::LoadingKv {
                let loaded = self.offload.as_mut().is_some_and(|c| c.take_loaded(wi));
                if !loaded {
                    self.skip(from_holding, &mut skipped);
                    continue;
                }
                self.promote(wi);
            }
            let mut hit = std::mem::take(&mut self.hit);
            hit.clear();
            let r = &self.reqs[wi as usize];
            let num_tokens = r.num_tokens();
            let lookup = r.num_computed == 0;
            let mut found = Found::default();
            if lookup {
                let Some(f) = self.look_up(wi, &mut hit, tier) else {
                    self.hit = hit;
                    self.skip(from_holding, &mut skipped);
                    continue;
                };
                found = f;
            }
            let Found {
                hit_tokens,
                external,
                host_blocks,
            } = found;
            let r = &self.reqs[wi as usize];
            let loaded = host_blocks * bs;
            // Swap preemption: what the host holds beyond the hit comes back without compute.
            let restored = r
                .swapped_tokens
                .min(num_tokens - 1)
                .saturating_sub(hit_tokens + loaded);
            let computed = if lookup {
                hit_tokens + loaded + restored
            } else {
                r.num_computed
            };
            let load_async = external > 0;
            let mut n = 0;
            if !load_async {
                let Some(fits) = self.new_tokens(num_tokens - computed, threshold, *budget) else {
                    self.hit = hit;
                    break;
                };
                n = fits;
            }
            let alloc = Alloc {
                new_tokens: loaded + restored + n as u32,
                hit: &hit,
                hit_tokens,
                external_tokens: external,
                delay_cache: load_async,
                reserved_blocks: if load_async {
                    self.inflight_reserved()
                } else {
                    0
                },
                full_sequence_must_fit: self.cfg.scheduler_reserve_full_isl,
                has_scheduled_reqs: !self.running.is_empty(),
            };
            let r = &mut self.reqs[wi as usize];
            let ok = self.kv.allocate_slots(r, alloc);
            self.hit = hit;
            self.store_evicted(tier, plan);
            if !ok {
                break;
            }
            if lookup {
                self.count_lookup(wi, num_tokens, found, loaded);
            }
            if loaded > 0 {
                self.load_host_blocks(wi, found, tier, plan);
            }
            if load_async {
                self.start_async_load(wi, hit_tokens, external, tier, plan);
                self.skip(from_holding, &mut skipped);
                continue;
            }
            self.start_running(wi, from_holding, computed, restored, n, plan);
            // What vLLM's recordings observe: tokens computed before the first scheduled one.
            let before = if lookup && self.offload.is_none() {
                hit_tokens
            } else {
                computed
            };
            plan.admitted.push((wi, before));
            *budget -= n;
        }
        self.return_skipped(&skipped);
    }

    /// A first admission's lookups: the prefix cache's hit into `hit`, then the host tier's;
    /// `None` while the native tier's lookup is not done (the request is skipped).
    fn look_up(
        &mut self,
        wi: u32,
        hit: &mut Vec<u32>,
        tier: &mut Option<&mut HostTier>,
    ) -> Option<Found> {
        let caching = self.cfg.enable_prefix_caching;
        let bs = self.kv.block_size();
        let r = &mut self.reqs[wi as usize];
        debug_assert!(r.status != Status::Running);
        let hit_tokens = self.kv.get_computed_blocks(r, hit);
        let mut found = Found {
            hit_tokens,
            ..Found::default()
        };
        match (&mut self.offload, tier.as_deref_mut()) {
            (Some(c), Some(HostTier::Native(t))) => {
                found.external = c.lookup(wi, r, hit_tokens, t)?
            }
            // Store-on-evict: the blocks right after the hit load in this step.
            (_, Some(HostTier::StoreOnEvict(t))) if caching => {
                found.host_blocks = hit_blocks(t, r, hit.len() as u32, bs);
            }
            _ => {}
        }
        Some(found)
    }

    /// The tokens to compute this step of the `left` uncomputed: at most the long-prefill
    /// threshold and the budget; `None` when they do not fit and chunked prefill is off.
    fn new_tokens(&self, left: u32, threshold: u64, budget: u64) -> Option<u64> {
        let mut n = u64::from(left);
        if threshold > 0 && n > threshold {
            n = threshold;
        }
        if !self.cfg.enable_chunked_prefill && n > budget {
            return None;
        }
        Some(n.min(budget))
    }

    /// An admitted request's first lookups in the statistics: prefix-cache queries and hits
    /// (preempted requests' apart), the connector's, and its first hits.
    fn count_lookup(&mut self, wi: u32, num_tokens: u32, found: Found, loaded: u32) {
        let caching = self.cfg.enable_prefix_caching;
        let Found {
            hit_tokens,
            external,
            ..
        } = found;
        let r = &mut self.reqs[wi as usize];
        if caching && r.preemptions > 0 {
            self.stats.preempted_prefix_queries += u64::from(num_tokens);
            self.stats.preempted_prefix_hits += u64::from(hit_tokens);
        } else if caching {
            self.stats.prefix_queries += u64::from(num_tokens);
            self.stats.prefix_hits += u64::from(hit_tokens);
        }
        r.first_hit.get_or_insert(hit_tokens);
        r.first_offload_hit.get_or_insert(loaded + external);
        if self.offload.is_some() && num_tokens > hit_tokens {
            // vLLM's connector prefix-cache stats (`connector_prefix_cache_stats`).
            let q = u64::from(num_tokens - hit_tokens);
            if r.preemptions > 0 {
                self.stats.preempted_external_queries += q;
                self.stats.preempted_external_hits += u64::from(external);
            } else {
                self.stats.external_queries += q;
                self.stats.external_hits += u64::from(external);
            }
        }
        self.stats.offload_hits += u64::from(loaded + external);
    }

    /// Store-on-evict: the host blocks right after the hit load back into the request's blocks.
    fn load_host_blocks(
        &mut self,
        wi: u32,
        found: Found,
        tier: &mut Option<&mut HostTier>,
        plan: &mut Plan,
    ) {
        let bs = self.kv.block_size();
        let r = &mut self.reqs[wi as usize];
        if let Some(t) = tier.as_deref_mut().and_then(HostTier::store_on_evict) {
            load_blocks(t, r, found.hit_tokens / bs, found.host_blocks, bs);
            plan.offload_load_tokens += u64::from(found.host_blocks * bs);
        }
    }

    /// Holds its blocks and waits, without budget, until the load is reported.
    fn start_async_load(
        &mut self,
        wi: u32,
        hit_tokens: u32,
        external: u32,
        tier: &mut Option<&mut HostTier>,
        plan: &mut Plan,
    ) {
        let (c, t) = (self.offload.as_mut(), tier.as_deref_mut());
        let (Some(c), Some(HostTier::Native(t))) = (c, t) else {
            unreachable!("an async load comes from the native tier")
        };
        c.start_load(wi, hit_tokens, external, self.schedules, t);
        let r = &mut self.reqs[wi as usize];
        r.status = Status::LoadingKv;
        r.num_computed = hit_tokens + external;
        self.inflight.insert(wi);
        plan.kv_loads.push((wi, external));
    }

    /// The admitted request leaves its queue and runs `n` new tokens after `computed`.
    fn start_running(
        &mut self,
        wi: u32,
        from_holding: bool,
        computed: u32,
        restored: u32,
        n: u64,
        plan: &mut Plan,
    ) {
        let r = &mut self.reqs[wi as usize];
        let num_tokens = r.num_tokens();
        r.status = Status::Running;
        r.num_computed = computed;
        if r.swapped_tokens > 0 {
            plan.swap_in_tokens += u64::from(restored);
            self.stats.swapped_in_tokens += u64::from(restored);
            self.release_host(wi);
        }
        if from_holding {
            self.holding.pop();
        } else {
            self.waiting.pop();
        }
        if self.offload.is_some() && u64::from(computed) + n < u64::from(num_tokens) {
            self.inflight.insert(wi);
        }
        self.running.push(wi);
        plan.scheduled.push(Scheduled {
            req: wi,
            tokens: n as u32,
            context: computed,
            samples: false,
        });
    }

    /// Back to the front of their queues, in the order skipped (vLLM's `prepend_requests`).
    fn return_skipped(&mut self, skipped: &Skipped) {
        for (queue, list) in [
            (&mut self.holding, &skipped.holding),
            (&mut self.waiting, &skipped.waiting),
        ] {
            for &i in list.iter().rev() {
                let rank = Rank::of(
                    &self.reqs[i as usize],
                    self.cfg.scheduling_policy,
                    self.cfg.aging_delay,
                );
                queue.prepend(i, rank);
            }
        }
    }

    /// vLLM's `skip_request`: the head of its queue sits this pass out, to return to the front
    /// of the queue for requests that hold blocks if it holds some.
    fn skip(&mut self, from_holding: bool, skipped: &mut Skipped) {
        let i = if from_holding {
            self.holding.pop()
        } else {
            self.waiting.pop()
        }
        .expect("skips the head");
        let r = &self.reqs[i as usize];
        if r.num_computed > 0 || r.status == Status::LoadingKv {
            skipped.holding.push(i);
        } else {
            skipped.waiting.push(i);
        }
    }

    /// vLLM's `_update_waiting_for_remote_kv`: the load is done; the loaded blocks join the
    /// prefix cache, and a whole prompt loaded leaves its last token to compute.
    fn promote(&mut self, i: u32) {
        let r = &mut self.reqs[i as usize];
        if self.cfg.enable_prefix_caching {
            let n = r.num_computed;
            self.kv.cache_blocks(r, n);
        }
        if r.num_computed == r.num_tokens() {
            r.num_computed -= 1;
        }
        r.status = if r.preemptions > 0 {
            Status::Preempted
        } else {
            Status::Waiting
        };
    }
}
