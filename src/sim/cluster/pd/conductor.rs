//! Mooncake's Conductor (FAST'25, Algorithm 1, "KVCache-centric scheduling"): for every prefill
//! instance, estimated TTFT = queueing time + the prefill time of the request's tokens past that
//! instance's cached prefix (+ here the KV's tail to the decode instance); the least estimate
//! wins (ties: the lowest index). Early rejection: when the least estimate exceeds the TTFT SLO,
//! or the decode instance's step with the request would exceed the TBT (or TPOT) SLO, the
//! request is rejected and never runs.
//!
//! Every time comes from the engine's own step-time model ([`StepModel::step_seconds`]), not a
//! fit: the queue is the instance's unfinished prefills (running ones first, then the waiting in
//! arrival order, each past the prefix it was routed with) stepped as vLLM's scheduler chunks
//! them — at most `max_num_batched_tokens` tokens and `max_num_seqs` requests a step — plus what
//! remains of the step in flight; the request's prefill is its uncached tokens stepped alone
//! after that queue. The pool's room and the prefix the queued requests will leave cached are
//! not foreseen. With the KV pool across prefill nodes ([`super::pool`]) an instance's cached
//! prefix is its GPU's and its own host tier's, and Mooncake's remote-prefix term is added:
//! when the instance fetches a longer prefix from the pool (`kvcache_balancing_threshold`), the
//! fetch's time over the link, and the prefill past that longer prefix. Requests still fetching
//! for an instance count in its queue, past the prefix they will have.

use super::link::Link;
use crate::sim::engine::config::EngineConfig;
use crate::sim::engine::request::Status;
use crate::sim::engine::scheduler::{Plan, Scheduled};
use crate::sim::engine::step_time::StepModel;
use crate::sim::engine::Engine;
use serde::Serialize;

/// One prefill instance's estimate for a request, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    /// Bringing a remote prefix from the pool (0: none fetched).
    pub fetch: f64,
    pub queue: f64,
    pub prefill: f64,
    /// The KV's arrival at the decode instance past the prefill's end ([`Link::end`]).
    pub transfer: f64,
    /// Prompt tokens this instance will hold cached (at most prompt − 1): its GPU prefix
    /// cache's, and with the pool its host tier's and what it fetches.
    pub hit_tokens: u32,
}

impl Estimate {
    pub fn ttft(&self) -> f64 {
        self.fetch + self.queue + self.prefill + self.transfer
    }
}

/// Why a request was rejected early.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "rule", rename_all = "kebab-case")]
pub enum Rejection {
    /// The least estimated TTFT exceeds the TTFT SLO.
    Ttft { estimate: f64, slo: f64 },
    /// The decode instance's step with the request exceeds the TBT (or TPOT) SLO.
    Tbt { estimate: f64, slo: f64 },
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Rejection::Ttft { estimate, slo } => write!(
                f,
                "rejected: estimated TTFT {:.1} ms > SLO {:.1} ms",
                estimate * 1e3,
                slo * 1e3
            ),
            Rejection::Tbt { estimate, slo } => write!(
                f,
                "rejected: estimated decode step {:.2} ms > SLO {:.2} ms",
                estimate * 1e3,
                slo * 1e3
            ),
        }
    }
}

/// Seconds `model` gives `work` — per request (tokens left to compute, tokens computed), in the
/// order the scheduler takes them — stepped as vLLM's scheduler chunks prefills: each step takes
/// up to `max_num_batched_tokens` tokens (at most `long_prefill_token_threshold` a request when
/// set) from up to `max_num_seqs` requests, first first.
pub fn prefill_seconds(model: &StepModel, cfg: &EngineConfig, work: &mut [(u32, u32)]) -> f64 {
    let cap = match cfg.long_prefill_token_threshold {
        0 => u32::MAX,
        t => t.min(u32::MAX as usize) as u32,
    };
    let budget_per_step = cfg.max_num_batched_tokens.clamp(1, u32::MAX as usize) as u32;
    let mut plan = Plan::default();
    let mut total = 0.0;
    let mut first = 0;
    loop {
        while first < work.len() && work[first].0 == 0 {
            first += 1;
        }
        if first == work.len() {
            return total;
        }
        plan.scheduled.clear();
        let mut budget = budget_per_step;
        for (j, w) in work[first..].iter_mut().enumerate() {
            if budget == 0 || plan.scheduled.len() >= cfg.max_num_seqs.max(1) {
                break;
            }
            if w.0 == 0 {
                continue;
            }
            let n = w.0.min(budget).min(cap);
            plan.scheduled.push(Scheduled {
                req: j as u32,
                tokens: n,
                context: w.1,
                samples: n == w.0,
            });
            w.0 -= n;
            w.1 += n;
            budget -= n;
        }
        total += model.step_seconds(&plan);
    }
}

/// The prefill work queued on `e` at `now`: what remains of its step in flight (seconds) and,
/// per unfinished request of `open` (its index in `e`, the prefix hit it was routed with),
/// (tokens left, tokens computed), running ones first.
pub fn queued_work(e: &Engine, open: &[(u32, u32)], now: f64) -> (f64, Vec<(u32, u32)>) {
    let mut running = Vec::new();
    let mut waiting = Vec::new();
    for &(i, hit) in open {
        let r = e.request(i);
        match r.status {
            Status::Finished => {}
            Status::Running | Status::LoadingKv => {
                running.push((r.prompt_len.saturating_sub(r.num_computed), r.num_computed))
            }
            _ => {
                let done = r.num_computed.max(hit);
                waiting.push((r.prompt_len.saturating_sub(done), done));
            }
        }
    }
    running.extend(waiting);
    ((e.now() - now).max(0.0), running)
}

/// A request as one prefill instance would take it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ask {
    pub prompt_len: u32,
    /// Prompt tokens the instance will hold cached, after a fetch of `fetch` seconds.
    pub hit: u32,
    pub fetch: f64,
    /// The KV bound for the decode instance (0 when it does not move).
    pub kv_bytes: u64,
}

/// Instance `e`'s estimate for `ask` at `now`: its queue `open` and then `fetching` (requests
/// still fetching for it: tokens left, tokens cached), the request's prefill, its KV over `link`.
pub fn estimate(
    e: &Engine,
    model: &StepModel,
    open: &[(u32, u32)],
    fetching: &[(u32, u32)],
    now: f64,
    ask: Ask,
    link: &Link,
) -> Estimate {
    let Ask {
        prompt_len,
        hit,
        fetch,
        kv_bytes,
    } = ask;
    let cfg = &e.scheduler().cfg;
    let (in_flight, mut work) = queued_work(e, open, now);
    work.extend_from_slice(fetching);
    let queue = in_flight + prefill_seconds(model, cfg, &mut work);
    let prefill = prefill_seconds(model, cfg, &mut [(prompt_len - hit, hit)]);
    let transfer = if kv_bytes == 0 {
        0.0
    } else {
        let start = now + fetch + queue;
        let end = start + prefill;
        link.end(start, end, kv_bytes) - end
    };
    Estimate {
        fetch,
        queue,
        prefill,
        transfer,
        hit_tokens: hit,
    }
}

/// Seconds of decode instance `e`'s next step with a request of `prompt_len` tokens joining
/// its running batch (one token each, after its computed tokens).
pub fn decode_step_seconds(e: &Engine, model: &StepModel, prompt_len: u32) -> f64 {
    let s = e.scheduler();
    let mut plan = Plan::default();
    for &i in &s.running {
        plan.scheduled.push(Scheduled {
            req: i,
            tokens: 1,
            context: s.reqs[i as usize].num_computed,
            samples: true,
        });
    }
    plan.scheduled.push(Scheduled {
        req: u32::MAX,
        tokens: 1,
        context: prompt_len,
        samples: true,
    });
    model.step_seconds(&plan)
}

/// The least estimate's instance, ties to the lowest index.
pub fn least(estimates: &[Estimate]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (p, e) in estimates.iter().enumerate() {
        if best.is_none_or(|b| e.ttft() < estimates[b].ttft()) {
            best = Some(p);
        }
    }
    best
}
