//! The cluster's event loop: replicas of [`Engine`] advance in time order, and each arrival is
//! routed when every replica has taken the steps that begin before it (so a router sees the
//! replicas' caches as of their last step, and the finishes that happened by the arrival).
//! Under a step clock the replicas step together, step k after routing the arrivals of step k.

use super::router::{ReplicaView, Router, RouterConfig, RouterKind};
use crate::sim::engine::engine::{check_unique_ids, id_ranks, predicted_outputs};
use crate::sim::engine::hash::BlockHash;
use crate::sim::engine::host_tier::HostTier;
use crate::sim::engine::request::Req;
use crate::sim::engine::Engine;
use crate::sim::engine::{
    Clock, EngineConfig, EngineError, OffloadScope, Recording, Slo, StepRecord,
};
use crate::workload::serving::ServingRequest;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Total order on finish times for the heap of finishes the router has not seen yet.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
struct Time(f64);
impl Eq for Time {}
#[allow(clippy::derive_ord_xor_partial_ord)]
impl Ord for Time {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

pub struct Cluster {
    pub engines: Vec<Engine>,
    pub router: Router,
    requests: Vec<ServingRequest>,
    predicted: Vec<f64>,
    ranks: Vec<u32>,
    /// Request indices by arrival (ties in input order), and the next to route.
    order: Vec<u32>,
    next: usize,
    /// Per request: (replica, index in it) once routed.
    placed: Vec<Option<(u32, u32)>>,
    /// Per replica: requests in flight as the router knows them, and finishes it has not seen.
    in_flight: Vec<Vec<u32>>,
    unseen_finishes: Vec<BinaryHeap<Reverse<(Time, u32)>>>,
    done: usize,
    steps_clock: bool,
    /// Under a step clock: the step all replicas take next.
    step_index: u64,
    /// The host tiers: one per replica, or one every replica shares (`cfg.cpu_offload`'s scope).
    pub tiers: Vec<HostTier>,
    shared_tier: bool,
    hashes: Vec<BlockHash>,
}

/// One replica's step record, for the step log.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaStep {
    pub replica: usize,
    pub record: StepRecord,
}

impl Cluster {
    /// `replicas` engines of `cfg` on `clock` (each its own pool; a host tier per replica, or one
    /// shared, as `cfg.cpu_offload` says), routing `requests` by `router`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: &EngineConfig,
        clock: &Clock,
        replicas: usize,
        router: RouterKind,
        router_cfg: RouterConfig,
        requests: &[ServingRequest],
        recording: Recording,
        slo: Slo,
    ) -> Result<Cluster, EngineError> {
        if replicas == 0 {
            return Err(crate::sim::engine::config::ConfigError(
                "--replicas must be at least 1".into(),
            )
            .into());
        }
        if requests.is_empty() {
            return Err(EngineError::NoRequests);
        }
        let engines = (0..replicas)
            .map(|_| Engine::open(cfg.clone(), clock.clone(), recording, slo))
            .collect::<Result<Vec<_>, _>>()?;
        let mut tiers = Vec::new();
        let shared_tier = cfg
            .cpu_offload
            .is_some_and(|o| o.scope == OffloadScope::Global);
        if let Some(o) = &cfg.cpu_offload {
            let n = if shared_tier { 1 } else { replicas };
            for _ in 0..n {
                tiers.push(HostTier::new(o)?);
            }
        }
        check_unique_ids(requests)?;
        let predicted = predicted_outputs(cfg, requests);
        let mut order: Vec<u32> = (0..requests.len() as u32).collect();
        order.sort_by(|&a, &b| {
            requests[a as usize]
                .arrival
                .total_cmp(&requests[b as usize].arrival)
        });
        let block_size = engines[0].block_size();
        Ok(Cluster {
            router: Router::new(router, router_cfg, replicas, block_size),
            requests: requests.to_vec(),
            predicted,
            ranks: id_ranks(requests),
            order,
            next: 0,
            placed: vec![None; requests.len()],
            in_flight: vec![Vec::new(); replicas],
            unseen_finishes: vec![BinaryHeap::new(); replicas],
            done: 0,
            steps_clock: matches!(clock, Clock::Steps),
            step_index: 0,
            tiers,
            shared_tier,
            hashes: Vec::new(),
            engines,
        })
    }

    pub fn requests(&self) -> &[ServingRequest] {
        &self.requests
    }

    /// Request `g`'s replica and state, once routed.
    pub fn placed(&self, g: usize) -> Option<(usize, &Req)> {
        self.placed[g].map(|(r, i)| (r as usize, self.engines[r as usize].request(i)))
    }

    pub fn finished_requests(&self) -> usize {
        self.done
    }

    /// The finishes of requests that finished by `now`, as the router learns of them.
    fn see_finishes(&mut self, now: f64) {
        for (rep, heap) in self.unseen_finishes.iter_mut().enumerate() {
            while let Some(&Reverse((Time(t), g))) = heap.peek() {
                if t > now {
                    break;
                }
                heap.pop();
                let v = &mut self.in_flight[rep];
                if let Some(p) = v.iter().position(|&x| x == g) {
                    v.swap_remove(p);
                }
            }
        }
    }

    /// Routes the next arrival and submits it to its replica.
    fn route_next(&mut self) -> Result<(), EngineError> {
        let g = self.order[self.next] as usize;
        self.next += 1;
        let now = self.requests[g].arrival;
        self.see_finishes(now);
        let r = &self.requests[g];
        let kind = self.router.kind;
        let bs = self.engines[0].block_size();
        self.hashes.clear();
        if kind.needs_hashes() && r.prompt.has_tokens() {
            // The blocks a prefix lookup may cover, hashed as the engines hash them.
            let mut probe = Req::new(r, 0.0, 0, g as u64);
            for j in 0..(r.prompt.len() as u32 - 1) / bs {
                self.hashes.push(probe.block_hash(j, bs));
            }
        }
        let views: Vec<ReplicaView> = (0..self.engines.len())
            .map(|rep| {
                let e = &self.engines[rep];
                let mut v = ReplicaView {
                    load: self.in_flight[rep].len(),
                    ..Default::default()
                };
                if kind == RouterKind::KvAware {
                    v.active_blocks = self.in_flight[rep]
                        .iter()
                        .map(|&x| {
                            let (_, i) = self.placed[x as usize].expect("routed");
                            u64::from(e.request(i).num_tokens().div_ceil(bs))
                        })
                        .sum();
                    v.cached_blocks = e.cached_prefix_blocks(&self.hashes);
                }
                v
            })
            .collect();
        let rep = self
            .router
            .route(r.prompt.len() as u32, &self.hashes, now, &views);
        // The engine takes the hashes over instead of computing them again.
        let hashes = std::mem::take(&mut self.hashes);
        let i = self.engines[rep].submit(r, self.predicted[g], self.ranks[g], g as u64, hashes)?;
        self.placed[g] = Some((rep as u32, i));
        self.in_flight[rep].push(g as u32);
        Ok(())
    }

    /// Replica `rep`'s step, lent its host tier.
    fn advance(&mut self, rep: usize) -> Result<bool, EngineError> {
        let t = if self.shared_tier { 0 } else { rep };
        self.engines[rep].advance(self.tiers.get_mut(t))
    }

    /// Records the finishes of replica `rep`'s last step; returns how many.
    fn collect_finishes(&mut self, rep: usize) -> usize {
        let e = &self.engines[rep];
        let n = e.just_finished().len();
        for &i in e.just_finished() {
            let r = e.request(i);
            let g = r.uid as u32;
            self.unseen_finishes[rep].push(Reverse((Time(r.finish_time), g)));
        }
        self.done += n;
        n
    }

    /// Advances the cluster by one event: a routing, one replica's step (seconds), or every
    /// replica's step (steps). Pushes the steps taken to `log` (with `Recording::steps`).
    /// Returns false once every request has finished.
    pub fn step(&mut self, log: &mut Vec<ReplicaStep>) -> Result<bool, EngineError> {
        if self.done == self.requests.len() {
            return Ok(false);
        }
        if self.steps_clock {
            let k = self.step_index as f64;
            while self.next < self.order.len()
                && self.requests[self.order[self.next] as usize].arrival <= k
            {
                self.route_next()?;
            }
            for rep in 0..self.engines.len() {
                self.advance(rep)?;
                if let Some(rec) = self.engines[rep].last_record() {
                    log.push(ReplicaStep {
                        replica: rep,
                        record: rec.clone(),
                    });
                }
                self.collect_finishes(rep);
            }
            self.step_index += 1;
            return Ok(true);
        }
        let mut soonest: Option<(usize, f64)> = None;
        for (rep, e) in self.engines.iter().enumerate() {
            if let Some(t) = e.next_step_time() {
                if soonest.is_none_or(|(_, s)| t < s) {
                    soonest = Some((rep, t));
                }
            }
        }
        let arrival = self
            .order
            .get(self.next)
            .map(|&g| self.requests[g as usize].arrival);
        match (arrival, soonest) {
            (Some(a), s) if s.is_none_or(|(_, t)| a <= t) => self.route_next()?,
            (_, Some((rep, _))) => {
                if self.advance(rep)? {
                    if let Some(rec) = self.engines[rep].last_record() {
                        log.push(ReplicaStep {
                            replica: rep,
                            record: rec.clone(),
                        });
                    }
                }
                self.collect_finishes(rep);
            }
            (None, None) => {
                return Err(EngineError::Stalled {
                    step: 0,
                    waiting: self.requests.len() - self.done,
                })
            }
            _ => unreachable!("covered above"),
        }
        Ok(true)
    }

    /// Every invariant of every replica (see [`Engine::check`]), and the cluster's own
    /// bookkeeping: each request routed at most once, finished ones counted once.
    pub fn check(&self) -> Result<(), String> {
        for (rep, e) in self.engines.iter().enumerate() {
            e.check().map_err(|m| format!("replica {rep}: {m}"))?;
        }
        let finished: usize = self.engines.iter().map(|e| e.finished_requests()).sum();
        if finished != self.done {
            return Err(format!(
                "{} finished in the replicas, {} counted",
                finished, self.done
            ));
        }
        let routed = self.placed.iter().filter(|p| p.is_some()).count();
        if routed != self.next {
            return Err(format!("{routed} placed, {} routed", self.next));
        }
        Ok(())
    }
}
