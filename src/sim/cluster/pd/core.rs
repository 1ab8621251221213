//! Prefill and decode instances as one [`System`]. A request arrives at the prefill instances
//! (a [`ClusterCore`] behind the chosen router) with `max_tokens` 1: the prefill instance
//! samples its first token, and, when more are asked for, keeps its blocks
//! ([`Engine::hold_kv_on_finish`]). A decode instance reserves blocks for its KV when the
//! transfer starts — when the prefill starts (layerwise) or ends (whole) — and takes the request
//! when the transfer ends ([`Link::end`]); the prefill instance frees its blocks then.
//!
//! Decode side: the instance with the fewest requests (reserved, waiting or running) whose pool
//! takes the reservation now, ties to the lowest index; when none can, the request waits in one
//! queue, first come first served, retried whenever a decode instance steps (its finishes free
//! blocks). Nothing is dropped.
//!
//! Behind Mooncake's Conductor ([`super::conductor`]) the prefill instance is the one with the
//! least estimated TTFT, and a request whose estimate misses the SLOs is rejected: it never
//! runs, and counts as finished here (rejected + finished = submitted).
//!
//! With the KV pool across prefill nodes ([`super::pool`]) a request the Conductor sends to
//! fetch a remote prefix first fetches it (from its arrival, over the link), and reaches its
//! prefill instance's engine when the fetch ends, the chunks then in that node's host tier.
//!
//! Time: the earliest of the next fetch's end, the next transfer's end, the prefill instances'
//! next step and the decode instances' next step goes first (in that order on ties: a transfer
//! that ends as a decode step begins is in that step).

use super::conductor::Rejection;
use super::link::{KvTransfer, Link, LinkSharing, Nics};
use super::pool::{self, Fetch, Pool};
use super::LocalPrefill;
use crate::kv::BlockSize;
use crate::sim::cluster::router::{Choice, RouterKind};
use crate::sim::cluster::ClusterCore;
use crate::sim::engine::config::ConfigError;
use crate::sim::engine::driver::{StepSink, System};
use crate::sim::engine::request::Req;
use crate::sim::engine::{Engine, EngineError, Slo, Submission};
use crate::stats::Time;
use crate::workload::serving::ServingRequest;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// One request's path through the instances.
#[derive(Debug, Clone)]
pub struct PdRequest {
    pub uid: u64,
    pub(super) request: ServingRequest,
    pub(super) predicted: f64,
    pub(super) id_rank: u32,
    /// (prefill instance, index in its engine).
    pub prefill: Option<(u32, u32)>,
    /// (decode instance, index in its engine).
    pub decode: Option<(u32, u32)>,
    /// Prefilled on its decode instance (conditional disaggregation).
    pub local: bool,
    /// Its prefill has begun.
    pub(super) started: bool,
    /// It waits for a decode instance to reserve blocks, or has them.
    pub(super) wanted: bool,
    /// When its reservation was asked for.
    pub(super) wanted_at: f64,
    pub prefill_end: f64,
    pub transfer_start: f64,
    pub transfer_end: f64,
    /// Prompt tokens the decode instance's prefix cache held (not moved).
    pub decode_hit_tokens: u32,
    pub kv_bytes: u64,
    /// Its reservation had to wait for a decode pool.
    pub waited_for_decode: bool,
    pub arrived: bool,
    /// Rejected early by the Conductor: it never ran.
    pub rejected: Option<Rejection>,
    /// Its fetch from the KV pool, if any.
    pub fetch: Option<Fetch>,
    /// While it fetches: the Conductor's choice and the prefix it will have cached (tokens).
    pub(super) chosen: Option<(Choice, u32)>,
}

impl PdRequest {
    pub fn id(&self) -> &str {
        &self.request.id
    }

    /// Whether its KV moves (it asks for more than the first token, and prefills remotely).
    pub fn moves(&self) -> bool {
        !self.local && self.request.output_len > 1
    }
}

/// Counts over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PdStats {
    /// Requests whose KV moved to a decode instance.
    pub moved: usize,
    /// Requests prefilled on their decode instance (conditional disaggregation).
    pub local_prefills: usize,
    /// Requests whose reservation waited for a decode pool.
    pub waited_for_decode: usize,
    pub kv_bytes_moved: u64,
    /// Requests the Conductor rejected early (never run): the least estimated TTFT over the
    /// TTFT SLO ...
    pub rejected_ttft: usize,
    /// ... or the decode instance's step with the request over the TBT (or TPOT) SLO.
    pub rejected_tbt: usize,
}

impl PdStats {
    pub fn rejected(&self) -> usize {
        self.rejected_ttft + self.rejected_tbt
    }
}

pub struct PdCore {
    pub prefill: ClusterCore,
    pub decode: Vec<Engine>,
    pub(super) link: Link,
    /// The nodes' NICs when transfers share them.
    nics: Option<Nics>,
    pub(super) local: Option<LocalPrefill>,
    pub requests: Vec<PdRequest>,
    /// Per prefill (decode) instance: the request of each of its engine's indices.
    pub(super) k_prefill: Vec<Vec<u32>>,
    pub(super) k_decode: Vec<Vec<u32>>,
    /// Per decode instance: requests reserved, waiting or running there.
    pub(super) decode_load: Vec<usize>,
    /// Sent to a prefill instance, prefill not begun (Dynamo's prefill queue).
    pub(super) prefill_queue: usize,
    /// Waiting for a decode pool, first come first served.
    pub(super) pending: VecDeque<u32>,
    /// Transfers under way, by their end.
    pub(super) transfers: BinaryHeap<Reverse<(Time, u32)>>,
    pub(super) done: usize,
    pub stats: PdStats,
    pub(super) block_size: BlockSize,
    /// Mooncake's Conductor chooses the prefill instance; the SLOs it rejects by.
    pub(super) conductor: bool,
    pub(super) slo: Slo,
    /// Per prefill instance (Conductor): its unfinished requests (index in its engine, the prefix
    /// hit it was routed with).
    pub(super) open: Vec<Vec<(u32, u32)>>,
    /// The KV pool across prefill nodes.
    pub(super) pool: Option<Pool>,
    /// Fetches from the pool under way, by their end; per prefill instance, the requests
    /// fetching for it.
    pub(super) fetches: BinaryHeap<Reverse<(Time, u32)>>,
    pub(super) fetching: Vec<Vec<u32>>,
    /// (uid, when its client got the last token, or the refusal) of the requests the last
    /// [`System::submit`] or [`System::advance`] finished.
    finishes: Vec<(u64, f64)>,
}

impl PdCore {
    /// `prefill` (its engines at `max_tokens` 1, behind its router) and `decode` engines (no
    /// requests yet, no host tier), joined by `link`.
    pub fn new(
        prefill: ClusterCore,
        decode: Vec<Engine>,
        link: Link,
        local: Option<LocalPrefill>,
    ) -> Result<PdCore, EngineError> {
        if decode.is_empty() || prefill.engines.is_empty() {
            return Err(ConfigError::NoPrefillOrDecode.into());
        }
        if !(link.gbps.is_finite() && link.gbps > 0.0) {
            return Err(ConfigError::KvLink(link.gbps).into());
        }
        let block_size = decode[0].block_size();
        let conductor = prefill.router_kind() == RouterKind::Conductor;
        let slo = prefill.engines[0].slo();
        Ok(PdCore {
            conductor,
            slo,
            open: vec![Vec::new(); prefill.engines.len()],
            pool: None,
            fetches: BinaryHeap::new(),
            fetching: vec![Vec::new(); prefill.engines.len()],
            finishes: Vec::new(),
            k_prefill: vec![Vec::new(); prefill.engines.len()],
            k_decode: vec![Vec::new(); decode.len()],
            decode_load: vec![0; decode.len()],
            prefill,
            decode,
            link,
            nics: None,
            local,
            requests: Vec::new(),
            prefill_queue: 0,
            pending: VecDeque::new(),
            transfers: BinaryHeap::new(),
            done: 0,
            stats: PdStats::default(),
            block_size,
        })
    }

    pub fn link(&self) -> &Link {
        &self.link
    }

    /// The prefill instances' host tiers form a KV pool (see [`super::pool`]): read by the
    /// Conductor, each instance with a tier of its own.
    pub fn with_pool(mut self, pool: Pool) -> Result<PdCore, EngineError> {
        if !self.conductor {
            return Err(ConfigError::PoolWithoutConductor.into());
        }
        let n = self.prefill.engines.len();
        if (0..n).any(|p| self.prefill.tier_of(p) != Some(p)) {
            return Err(ConfigError::PoolWithoutTiers.into());
        }
        if !(pool.threshold.is_finite() && pool.threshold >= 1.0) {
            return Err(ConfigError::BalancingThreshold(pool.threshold).into());
        }
        self.pool = Some(pool);
        Ok(self)
    }

    pub fn pool(&self) -> Option<Pool> {
        self.pool
    }

    pub fn block_size(&self) -> BlockSize {
        self.block_size
    }

    /// Decode instances by load, fewest requests first, ties to the lowest index.
    pub(super) fn decode_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.decode.len()).collect();
        order.sort_by_key(|&d| (self.decode_load[d], d));
        order
    }

    /// The request's state in the prefill engine.
    pub fn prefill_req(&self, k: usize) -> Option<&Req> {
        let (p, i) = self.requests[k].prefill?;
        Some(self.prefill.engines[p as usize].request(i))
    }

    /// The request's state in the decode engine.
    pub fn decode_req(&self, k: usize) -> Option<&Req> {
        let (d, i) = self.requests[k].decode?;
        Some(self.decode[d as usize].request(i))
    }

    /// Reserves decode blocks for the requests waiting for them, in order, from `at` on; stops
    /// at the first no decode pool takes.
    fn reserve_pending(&mut self, at: f64) -> Result<(), EngineError> {
        while let Some(&k) = self.pending.front() {
            let order = self.decode_order();
            let q = &self.requests[k as usize];
            let s = Submission {
                request: &q.request,
                uid: q.uid,
                predicted: q.predicted,
                id_rank: q.id_rank,
            };
            let mut got = None;
            for d in order {
                if let Some(rc) = self.decode[d].receive_kv(s, Vec::new())? {
                    got = Some((d, rc));
                    break;
                }
            }
            let Some((d, rc)) = got else {
                let q = &mut self.requests[k as usize];
                if !q.waited_for_decode {
                    q.waited_for_decode = true;
                    self.stats.waited_for_decode += 1;
                }
                return Ok(());
            };
            self.pending.pop_front();
            let q = &mut self.requests[k as usize];
            q.decode = Some((d as u32, rc.index));
            q.decode_hit_tokens = rc.hit_tokens;
            q.transfer_start = at.max(q.wanted_at);
            q.kv_bytes = self
                .link
                .bytes(q.request.prompt.len() as u32 - rc.hit_tokens);
            self.k_decode[d].push(k);
            self.decode_load[d] += 1;
            self.stats.moved += 1;
            self.stats.kv_bytes_moved += q.kv_bytes;
            if q.prefill_end.is_finite() {
                self.start_transfer(k);
            }
        }
        Ok(())
    }

    /// Transfers share their nodes' NICs as `sharing` says.
    pub fn with_link_sharing(mut self, sharing: LinkSharing) -> PdCore {
        self.nics = match sharing {
            LinkSharing::Own => None,
            LinkSharing::Fifo => Some(Nics::new(self.prefill.engines.len(), self.decode.len())),
        };
        self
    }

    /// Request `k` has its decode blocks and its prefill is done: its transfer's end is known.
    fn start_transfer(&mut self, k: u32) {
        let q = &mut self.requests[k as usize];
        q.transfer_end = match (&mut self.nics, q.prefill, q.decode) {
            (Some(n), Some((p, _)), Some((d, _))) => n.transfer(
                &self.link,
                (p as usize, d as usize),
                q.transfer_start,
                q.prefill_end,
                q.kv_bytes,
            ),
            _ => self.link.end(q.transfer_start, q.prefill_end, q.kv_bytes),
        };
        self.transfers.push(Reverse((Time(q.transfer_end), k)));
    }

    /// What prefill instance `rep`'s last step began and finished.
    fn after_prefill_step(&mut self, rep: usize) -> Result<(), EngineError> {
        let e = &self.prefill.engines[rep];
        let (admitted, at) = e.just_admitted();
        for &i in admitted {
            let k = self.k_prefill[rep][i as usize];
            let q = &mut self.requests[k as usize];
            if q.started {
                continue;
            }
            q.started = true;
            self.prefill_queue -= 1;
            if q.moves() && self.link.mode == KvTransfer::Layerwise {
                q.wanted = true;
                q.wanted_at = at;
                self.pending.push_back(k);
            }
        }
        let e = &self.prefill.engines[rep];
        let finished: Vec<(u32, f64)> = e
            .just_finished()
            .iter()
            .map(|&i| {
                (
                    self.k_prefill[rep][i as usize],
                    e.request(i).first_token_time,
                )
            })
            .collect();
        if self.conductor {
            let e = &self.prefill.engines[rep];
            self.open[rep].retain(|&(i, _)| !e.request(i).is_finished());
        }
        for (k, end) in finished {
            let q = &mut self.requests[k as usize];
            q.prefill_end = end;
            if !q.moves() {
                self.done += 1;
                self.finishes.push((q.uid, end));
                continue;
            }
            if !q.wanted {
                q.wanted = true;
                q.wanted_at = q.prefill_end;
                self.pending.push_back(k);
            } else if q.decode.is_some() {
                self.start_transfer(k);
            }
        }
        self.reserve_pending(at)
    }

    /// The transfer of request `k` ends at `at`.
    fn arrive(&mut self, k: u32, at: f64) {
        let q = &mut self.requests[k as usize];
        q.arrived = true;
        let (d, di) = q.decode.expect("a transfer has its decode instance");
        let (p, pi) = q.prefill.expect("a transfer has its prefill instance");
        self.decode[d as usize].kv_arrived(di, at, q.prefill_end);
        self.prefill.engines[p as usize].release_held_kv(pi, at);
    }

    /// Request `k` was just submitted to a prefill instance, with `hit` tokens cached by the
    /// Conductor's estimate.
    fn on_prefill(&mut self, k: u32, hit: u32) {
        let q = &self.requests[k as usize];
        let (p, _) = self.prefill.placed(q.uid).expect("just placed");
        let (rep, i) = (p.replica, p.index);
        if self.conductor {
            self.open[rep as usize].push((i, hit));
        }
        if q.request.output_len > 1 {
            self.prefill.engines[rep as usize].hold_kv_on_finish(i);
        }
        self.requests[k as usize].prefill = Some((rep, i));
        self.k_prefill[rep as usize].push(k);
    }

    /// Request `k`'s fetch from the pool ends at `at`: its chunks go to its instance's host tier,
    /// and the request to its engine, arriving now.
    fn land(&mut self, k: u32, at: f64) -> Result<(), EngineError> {
        let q = &mut self.requests[k as usize];
        let (choice, hit) = q.chosen.take().expect("a fetch has its choice");
        let rep = choice.replica;
        let first = ServingRequest {
            output_len: 1,
            arrival: at,
            ..q.request.clone()
        };
        let (uid, predicted, id_rank) = (q.uid, q.predicted, q.id_rank);
        let f = q.fetch.expect("a fetch");
        let hashes = self.hashes(&first, uid);
        let bpc = self.prefill.engines[rep]
            .scheduler()
            .cfg
            .cpu_offload
            .map_or(1, |o| o.blocks_per_chunk) as u32;
        let t = self
            .prefill
            .tier_of(rep)
            .expect("the pool has a tier per node");
        let stored = pool::store(
            &mut self.prefill.tiers[t],
            &hashes,
            f.from,
            f.to,
            bpc,
            self.block_size,
            uid,
        );
        if let Some(f) = &mut self.requests[k as usize].fetch {
            f.stored = stored;
        }
        self.fetching[rep].retain(|&x| x != k);
        let s1 = Submission {
            request: &first,
            uid,
            predicted,
            id_rank,
        };
        self.prefill.submit_to(s1, at, choice)?;
        self.on_prefill(k, hit);
        Ok(())
    }

    /// Dynamo's conditional disaggregation for a request about to go to decode instance `d`.
    fn prefills_locally(&self, r: &ServingRequest, uid: u64, d: usize) -> bool {
        let Some(c) = self.local else {
            return false;
        };
        let bs = self.block_size.tokens();
        let mut probe = Req::new(r, 0.0, 0, uid);
        let hashes: Vec<_> = (0..r.prompt.len() as u32 / bs)
            .map(|j| probe.block_hash(j, bs))
            .collect();
        let hit = self.decode[d].cached_prefix_blocks(&hashes) as u32 * bs;
        c.is_local(r.prompt.len() as u32 - hit, self.prefill_queue)
    }
}

impl System for PdCore {
    fn submit(&mut self, s: Submission<'_>, now: f64) -> Result<(), EngineError> {
        self.finishes.clear();
        let r = s.request;
        let k = self.requests.len() as u32;
        let mut q = PdRequest {
            uid: s.uid,
            request: r.clone(),
            predicted: s.predicted,
            id_rank: s.id_rank,
            prefill: None,
            decode: None,
            local: false,
            started: false,
            wanted: false,
            wanted_at: f64::NAN,
            prefill_end: f64::NAN,
            transfer_start: f64::NAN,
            transfer_end: f64::NAN,
            decode_hit_tokens: 0,
            kv_bytes: 0,
            waited_for_decode: false,
            arrived: false,
            rejected: None,
            fetch: None,
            chosen: None,
        };
        let d = self.decode_order()[0];
        if self.prefills_locally(r, s.uid, d) {
            let i = self.decode[d].submit(s, Vec::new())?;
            q.local = true;
            q.decode = Some((d as u32, i));
            self.k_decode[d].push(k);
            self.decode_load[d] += 1;
            self.stats.local_prefills += 1;
        } else {
            let first = ServingRequest {
                output_len: 1,
                ..r.clone()
            };
            let s1 = Submission {
                request: &first,
                ..s
            };
            let mut hit = 0;
            if self.conductor {
                match self.conduct(r, s.uid, now, d)? {
                    Ok((choice, h, Some(f))) => {
                        // It reaches its instance when its remote prefix has landed there.
                        q.fetch = Some(f);
                        q.chosen = Some((choice, h));
                        self.fetches.push(Reverse((Time(f.end), k)));
                        self.fetching[choice.replica].push(k);
                        self.prefill_queue += 1;
                        self.requests.push(q);
                        return Ok(());
                    }
                    Ok((choice, h, None)) => {
                        self.prefill.submit_to(s1, now, choice)?;
                        hit = h;
                    }
                    Err(why) => {
                        match why {
                            Rejection::Ttft { .. } => self.stats.rejected_ttft += 1,
                            Rejection::Tbt { .. } => self.stats.rejected_tbt += 1,
                        }
                        q.rejected = Some(why);
                        self.requests.push(q);
                        self.done += 1;
                        self.finishes.push((s.uid, now));
                        return Ok(());
                    }
                }
            } else {
                self.prefill.submit(s1, now)?;
            }
            self.requests.push(q);
            self.on_prefill(k, hit);
            self.prefill_queue += 1;
            return Ok(());
        }
        self.requests.push(q);
        Ok(())
    }

    fn next_event_time(&self) -> Option<f64> {
        let fetch = self.fetches.peek().map(|Reverse((Time(t), _))| *t);
        let transfer = self.transfers.peek().map(|Reverse((Time(t), _))| *t);
        let decode = self
            .decode
            .iter()
            .filter_map(Engine::next_step_time)
            .min_by(f64::total_cmp);
        // An instance asleep until another frees its blocks has no next step of its own.
        [fetch, transfer, self.prefill.next_event_time(), decode]
            .into_iter()
            .flatten()
            .filter(|t| t.is_finite())
            .min_by(f64::total_cmp)
    }

    fn advance(&mut self, steps: &mut StepSink<'_>) -> Result<(), EngineError> {
        self.finishes.clear();
        let transfer = self.transfers.peek().map(|Reverse((Time(t), k))| (*t, *k));
        let prefill = self.prefill.next_event_time();
        let mut decode: Option<(usize, f64)> = None;
        for (d, e) in self.decode.iter().enumerate() {
            if let Some(t) = e.next_step_time() {
                if decode.is_none_or(|(_, s)| t < s) {
                    decode = Some((d, t));
                }
            }
        }
        let before = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => a <= b,
            (a, _) => a.is_some(),
        };
        let td = decode.map(|(_, t)| t);
        if let Some(&Reverse((Time(t), k))) = self.fetches.peek() {
            let tt = transfer.map(|(t, _)| t);
            if before(Some(t), tt) && before(Some(t), prefill) && before(Some(t), td) {
                self.fetches.pop();
                return self.land(k, t);
            }
        }
        if let Some((t, k)) = transfer {
            if before(Some(t), prefill) && before(Some(t), td) {
                self.transfers.pop();
                self.arrive(k, t);
                return Ok(());
            }
        }
        if before(prefill, td) {
            self.prefill.advance(steps)?;
            if let Some(rep) = self.prefill.last_stepped {
                self.after_prefill_step(rep)?;
            }
            return Ok(());
        }
        let Some((d, _)) = decode else {
            return Ok(());
        };
        let offset = self.prefill.engines.len();
        if self.decode[d].advance(None)? {
            if let Some(rec) = self.decode[d].last_record() {
                steps(offset + d, rec)?;
            }
        }
        let e = &self.decode[d];
        self.finishes.extend(e.just_finished().iter().map(|&i| {
            let r = e.request(i);
            (r.uid, r.finish_time)
        }));
        let finished = e.just_finished().len();
        self.done += finished;
        self.decode_load[d] -= finished;
        if finished > 0 && !self.pending.is_empty() {
            let at = self.decode[d].clock_now();
            self.reserve_pending(at)?;
        }
        Ok(())
    }

    fn finished(&self) -> usize {
        self.done
    }

    fn copies_in_flight(&self) -> bool {
        self.prefill.copies_in_flight()
    }

    fn last_finished(&self, out: &mut Vec<(u64, f64)>) {
        out.extend_from_slice(&self.finishes);
    }
}

pub(super) fn needs_seconds() -> EngineError {
    ConfigError::ConductorWithSteps.into()
}
