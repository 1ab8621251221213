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
        let caching = self.cfg.enable_prefix_caching;
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
            let r = &mut self.reqs[wi as usize];
            let num_tokens = r.num_tokens();
            let lookup = r.num_computed == 0;
            let (mut hit_tokens, mut external, mut host_blocks) = (0, 0, 0);
            if lookup {
                debug_assert!(r.status != Status::Running);
                hit_tokens = self.kv.get_computed_blocks(r, &mut hit);
                match (&mut self.offload, tier.as_deref_mut()) {
                    (Some(c), Some(HostTier::Native(t))) => match c.lookup(wi, r, hit_tokens, t) {
                        Some(e) => external = e,
                        None => {
                            self.hit = hit;
                            self.skip(from_holding, &mut skipped);
                            continue;
                        }
                    },
                    // Store-on-evict: the blocks right after the hit load in this step.
                    (_, Some(HostTier::StoreOnEvict(t))) if caching => {
                        host_blocks = hit_blocks(t, r, hit.len() as u32, bs);
                    }
                    _ => {}
                }
            }
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
                n = u64::from(num_tokens - computed);
                if threshold > 0 && n > threshold {
                    n = threshold;
                }
                if !self.cfg.enable_chunked_prefill && n > *budget {
                    self.hit = hit;
                    break;
                }
                n = n.min(*budget);
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
            let r = &mut self.reqs[wi as usize];
            if lookup {
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
            if let (Some(t), true) = (
                tier.as_deref_mut().and_then(HostTier::store_on_evict),
                loaded > 0,
            ) {
                load_blocks(t, r, hit_tokens / bs, host_blocks, bs);
                plan.offload_load_tokens += u64::from(loaded);
            }
            if load_async {
                // Holds its blocks and waits, without budget, until the load is reported.
                let (c, t) = (self.offload.as_mut(), tier.as_deref_mut());
                let (Some(c), Some(HostTier::Native(t))) = (c, t) else {
                    unreachable!("an async load comes from the native tier")
                };
                c.start_load(wi, hit_tokens, external, self.schedules, t);
                r.status = Status::LoadingKv;
                r.num_computed = hit_tokens + external;
                self.inflight.insert(wi);
                plan.kv_loads.push((wi, external));
                self.skip(from_holding, &mut skipped);
                continue;
            }
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
            // What vLLM's recordings observe: tokens computed before the first scheduled one.
            let before = if lookup && self.offload.is_none() {
                hit_tokens
            } else {
                computed
            };
            plan.admitted.push((wi, before));
            *budget -= n;
        }
        // Back to the front of their queues, in the order skipped (vLLM's `prepend_requests`).
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
