//! The cluster: replicas of [`Engine`] behind a [`Router`], driven as any [`System`] is — a
//! request is submitted at its arrival and routed then; between arrivals the replicas advance in
//! time order. A trace feeds it through [`crate::sim::engine::drive`]; a server can submit as
//! requests come.
//!
//! Time: in seconds, the replica whose next step begins first steps next, so when a request
//! arrives every step that begins before it has been taken, and the router sees each replica's
//! caches as of its last step and the first tokens and finishes that happened by the arrival
//! ([`Book`]). Under a step clock the replicas step together: step k after the arrivals of step k.

use super::book::{Book, Happened};
use super::router::{Arrival, Choice, Replicas, Router, RouterKind, RouterStats};
use crate::kv::BlockSize;
use crate::sim::engine::driver::{StepSink, System};
use crate::sim::engine::hash::BlockHash;
use crate::sim::engine::host_tier::{HostTier, OffloadMode};
use crate::sim::engine::request::Req;
use crate::sim::engine::{config::ConfigError, Engine};
use crate::sim::engine::{
    Clock, EngineConfig, EngineError, OffloadScope, Recording, Slo, Submission,
};
use crate::workload::serving::ServingRequest;
use std::collections::HashMap;

/// Where a request went.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placement {
    pub replica: u32,
    /// Its index in that replica's engine.
    pub index: u32,
    pub uid: u64,
    pub choice: Choice,
}

/// The replicas as a router sees them.
struct View<'a> {
    engines: &'a [Engine],
    book: &'a Book,
    tiers: &'a [HostTier],
    tier_of: &'a [usize],
}

impl Replicas for View<'_> {
    fn len(&self) -> usize {
        self.engines.len()
    }

    fn load(&self, r: usize) -> usize {
        self.book.load(r)
    }

    fn cached_blocks(&self, r: usize, hashes: &[BlockHash]) -> usize {
        self.engines[r].cached_prefix_blocks(hashes)
    }

    fn host_blocks(&self, r: usize, hashes: &[BlockHash], from: usize) -> usize {
        let Some(&t) = self.tier_of.get(r) else {
            return 0;
        };
        let per_chunk = self.engines[r]
            .scheduler()
            .cfg
            .cpu_offload
            .map_or(1, |o| o.blocks_per_chunk);
        self.tiers[t].held_blocks(hashes, from, per_chunk)
    }
}

pub struct ClusterCore {
    pub engines: Vec<Engine>,
    router: Box<dyn Router>,
    book: Book,
    pub stats: RouterStats,
    /// Every request submitted, in the order submitted (request `k`).
    sent: Vec<ServingRequest>,
    placed: Vec<Placement>,
    by_uid: HashMap<u64, u32>,
    /// Per replica: the `k` of each of its engine's requests.
    k_of: Vec<Vec<u32>>,
    done: usize,
    steps_clock: bool,
    /// Under a step clock: the step every replica takes next.
    step_index: u64,
    /// The host tiers, owned here and lent to a replica for each of its steps.
    pub tiers: Vec<HostTier>,
    /// Per replica, its tier's index in `tiers` (empty without tiers).
    tier_of: Vec<usize>,
    block_size: BlockSize,
    hashes: Vec<BlockHash>,
    /// The replica the last [`System::advance`] stepped (seconds clock).
    pub last_stepped: Option<usize>,
    /// (uid, finish) of the requests the last [`System::advance`] finished.
    finishes: Vec<(u64, f64)>,
}

impl ClusterCore {
    /// `replicas` engines of `cfg` on `clock` behind `router`; with `cfg.cpu_offload` a host tier
    /// per replica or one shared, as its scope says.
    pub fn new(
        cfg: &EngineConfig,
        clock: &Clock,
        replicas: usize,
        router: Box<dyn Router>,
        recording: Recording,
        slo: Slo,
    ) -> Result<ClusterCore, EngineError> {
        if replicas == 0 {
            return Err(ConfigError::NoReplica.into());
        }
        let engines = (0..replicas)
            .map(|_| Engine::open(cfg.clone(), clock.clone(), recording, slo))
            .collect::<Result<Vec<_>, _>>()?;
        let mut tiers = Vec::new();
        let mut tier_of = Vec::new();
        if let Some(o) = &cfg.cpu_offload {
            // vLLM's manager serves one engine's connector; shared, a replica would wait on
            // chunks another replica is still storing with nothing to wake it.
            if o.mode == OffloadMode::Native && o.scope == OffloadScope::Global && replicas > 1 {
                return Err(ConfigError::SharedNativeTier.into());
            }
            let count = match o.scope {
                OffloadScope::Local => replicas,
                OffloadScope::Global => 1,
            };
            for _ in 0..count {
                tiers.push(HostTier::new(o)?);
            }
            tier_of = (0..replicas)
                .map(|r| if count == 1 { 0 } else { r })
                .collect();
        }
        let block_size = engines[0].block_size();
        Ok(ClusterCore {
            engines,
            router,
            book: Book::new(replicas),
            stats: RouterStats::new(replicas),
            sent: Vec::new(),
            placed: Vec::new(),
            by_uid: HashMap::new(),
            k_of: vec![Vec::new(); replicas],
            done: 0,
            steps_clock: matches!(clock, Clock::Steps),
            step_index: 0,
            tiers,
            tier_of,
            block_size,
            hashes: Vec::new(),
            last_stepped: None,
            finishes: Vec::new(),
        })
    }

    pub fn router_kind(&self) -> RouterKind {
        self.router.kind()
    }

    pub fn router(&self) -> &dyn Router {
        &*self.router
    }

    /// How many of `hashes[from..]` replica `rep`'s own host tier holds ready in a row (0
    /// without a tier), as a router credits them.
    pub fn host_blocks(&self, rep: usize, hashes: &[BlockHash], from: usize) -> usize {
        View {
            engines: &self.engines,
            book: &self.book,
            tiers: &self.tiers,
            tier_of: &self.tier_of,
        }
        .host_blocks(rep, hashes, from)
    }

    /// The index in `tiers` of replica `rep`'s host tier.
    pub fn tier_of(&self, rep: usize) -> Option<usize> {
        self.tier_of.get(rep).copied()
    }

    /// Where the request numbered `uid` went, and its state there.
    pub fn placed(&self, uid: u64) -> Option<(&Placement, &Req)> {
        let k = *self.by_uid.get(&uid)?;
        let p = &self.placed[k as usize];
        Some((p, self.engines[p.replica as usize].request(p.index)))
    }

    /// Replica `rep`'s step, lent its host tier (its own, or the one every replica shares).
    fn step_replica(&mut self, rep: usize) -> Result<bool, EngineError> {
        let tier = match self.tier_of.get(rep) {
            Some(&t) => self.tiers.get_mut(t),
            None => None,
        };
        self.engines[rep].advance(tier)
    }

    /// Records the first tokens and finishes of replica `rep`'s last step.
    fn collect(&mut self, rep: usize) {
        let e = &self.engines[rep];
        for &i in e.just_started() {
            let r = e.request(i);
            self.book.record(
                r.first_token_time,
                Happened::FirstToken,
                self.k_of[rep][i as usize],
                rep,
            );
        }
        for &i in e.just_finished() {
            let r = e.request(i);
            self.book.record(
                r.finish_time,
                Happened::Finished,
                self.k_of[rep][i as usize],
                rep,
            );
            self.finishes.push((r.uid, r.finish_time));
        }
        self.done += e.just_finished().len();
    }

    /// Every invariant of every replica (see [`Engine::check`]), and the cluster's own
    /// bookkeeping: each request placed once, finishes counted once, loads as placed.
    pub fn check(&self) -> Result<(), String> {
        for (rep, e) in self.engines.iter().enumerate() {
            e.check().map_err(|m| format!("replica {rep}: {m}"))?;
        }
        let finished: usize = self.engines.iter().map(|e| e.finished_requests()).sum();
        if finished != self.done {
            return Err(format!(
                "{finished} finished in the replicas, {} counted",
                self.done
            ));
        }
        let held: usize = self.k_of.iter().map(Vec::len).sum();
        if held != self.sent.len() || self.placed.len() != self.sent.len() {
            return Err(format!(
                "{} sent, {} placed, {held} held by the replicas",
                self.sent.len(),
                self.placed.len()
            ));
        }
        if self.book.in_flight() < self.sent.len() - self.done {
            return Err(format!(
                "{} in flight for the router, {} unfinished",
                self.book.in_flight(),
                self.sent.len() - self.done
            ));
        }
        Ok(())
    }
}

impl ClusterCore {
    /// Submits `s` at `now` to the replica its caller chose (Mooncake's Conductor, which reads
    /// what a router cannot: [`crate::sim::cluster::pd::conductor`]).
    pub fn submit_to(
        &mut self,
        s: Submission<'_>,
        now: f64,
        choice: Choice,
    ) -> Result<(), EngineError> {
        self.place(s, now, Some(choice))
    }

    /// Submits `s` at `now` to `chosen`, or to the router's choice.
    fn place(
        &mut self,
        s: Submission<'_>,
        now: f64,
        chosen: Option<Choice>,
    ) -> Result<(), EngineError> {
        let r = s.request;
        let k = self.sent.len() as u32;
        self.book.catch_up(now, &mut *self.router);
        self.hashes.clear();
        if self.router.needs_hashes() {
            // The prompt's full blocks, hashed as its engine will hash them.
            let bs = self.block_size.tokens();
            let mut probe = Req::new(r, 0.0, 0, s.uid);
            for j in 0..r.prompt.len() as u32 / bs {
                self.hashes.push(probe.block_hash(j, bs));
            }
        }
        self.sent.push(r.clone());
        let view = View {
            engines: &self.engines,
            book: &self.book,
            tiers: &self.tiers,
            tier_of: &self.tier_of,
        };
        let arrival = Arrival {
            k,
            sent: &self.sent,
            hashes: &self.hashes,
        };
        let choice = match chosen {
            Some(c) if c.replica < self.engines.len() => c,
            Some(c) => return Err(ConfigError::NoSuchReplica(c.replica, self.engines.len()).into()),
            None if self.router.kind() == RouterKind::Conductor => {
                return Err(ConfigError::ConductorColocated.into())
            }
            None => self.router.route(&arrival, now, &view),
        };
        let rep = choice.replica;
        // The engine takes the hashes over instead of computing them again.
        let hashes = if r.prompt.has_tokens() {
            std::mem::take(&mut self.hashes)
        } else {
            Vec::new()
        };
        let index = self.engines[rep].submit(s, hashes)?;
        self.k_of[rep].push(k);
        self.book.sent(rep);
        self.stats.count(&choice);
        self.by_uid.insert(s.uid, k);
        self.placed.push(Placement {
            replica: rep as u32,
            index,
            uid: s.uid,
            choice,
        });
        Ok(())
    }
}

impl System for ClusterCore {
    fn submit(&mut self, s: Submission<'_>, now: f64) -> Result<(), EngineError> {
        self.place(s, now, None)
    }

    fn next_event_time(&self) -> Option<f64> {
        let soonest = self
            .engines
            .iter()
            .filter_map(|e| e.next_step_time())
            .min_by(f64::total_cmp);
        if self.steps_clock {
            soonest.map(|_| self.step_index as f64)
        } else {
            soonest
        }
    }

    fn advance(&mut self, steps: &mut StepSink<'_>) -> Result<(), EngineError> {
        self.finishes.clear();
        if self.steps_clock {
            // Every replica idle until the next arrival: their idle steps are skipped together,
            // as one engine's are (the spell's first and last steps taken and logged).
            let idle: Option<Vec<Option<f64>>> = self
                .engines
                .iter()
                .map(|e| e.is_idle().then(|| e.next_arrival()))
                .collect();
            let skip_to = idle
                .and_then(|a| a.into_iter().flatten().min_by(f64::total_cmp))
                .filter(|&a| a > self.step_index as f64)
                .map(|a| a.ceil() as u64 - 1);
            for rep in 0..self.engines.len() {
                self.step_replica(rep)?;
                if let Some(rec) = self.engines[rep].last_record() {
                    steps(rep, rec)?;
                }
                self.collect(rep);
            }
            self.step_index += 1;
            if let Some(last_idle) = skip_to.filter(|&s| s > self.step_index) {
                for e in &mut self.engines {
                    e.skip_idle_steps_to(last_idle);
                }
                self.step_index = last_idle;
            }
            return Ok(());
        }
        let mut soonest: Option<(usize, f64)> = None;
        for (rep, e) in self.engines.iter().enumerate() {
            if let Some(t) = e.next_step_time() {
                if soonest.is_none_or(|(_, s)| t < s) {
                    soonest = Some((rep, t));
                }
            }
        }
        self.last_stepped = soonest.map(|(rep, _)| rep);
        if let Some((rep, _)) = soonest {
            if self.step_replica(rep)? {
                if let Some(rec) = self.engines[rep].last_record() {
                    steps(rep, rec)?;
                }
            }
            self.collect(rep);
        }
        Ok(())
    }

    fn finished(&self) -> usize {
        self.done
    }

    fn copies_in_flight(&self) -> bool {
        self.engines.iter().any(Engine::tier_busy)
    }

    fn last_finished(&self, out: &mut Vec<(u64, f64)>) {
        out.extend_from_slice(&self.finishes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::cluster::router::{build, Reason, RouterConfig};
    use crate::sim::engine::host_tier::manager::ChunkKey;
    use crate::sim::engine::CpuOffload;
    use crate::workload::serving::Prompt;

    /// Two replicas with a native host tier each (chunks of `per_chunk` blocks of 4 tokens).
    fn cluster(per_chunk: usize) -> ClusterCore {
        let cfg = EngineConfig {
            block_size: BlockSize::of(4),
            num_gpu_blocks: 64,
            cpu_offload: Some(CpuOffload {
                mode: OffloadMode::Native,
                chunks: 16,
                blocks_per_chunk: per_chunk,
                policy: crate::sim::cache::Policy::Lru,
                prompt_only: true,
                gbps: 1.0,
                scope: OffloadScope::Local,
            }),
            ..EngineConfig::default()
        };
        let router = build(
            RouterKind::KvAware,
            &RouterConfig::default(),
            2,
            BlockSize::of(4),
        );
        ClusterCore::new(
            &cfg,
            &Clock::Steps,
            2,
            router,
            Recording::default(),
            Slo::default(),
        )
        .unwrap()
    }

    fn prompt() -> ServingRequest {
        ServingRequest {
            id: "p".into(),
            arrival: 0.0,
            prompt: Prompt::Tokens((1..=17).collect()),
            output_len: 1,
            priority: 0,
        }
    }

    /// Stores the chunks ending at `ends` (in blocks) of the prompt's hashes in replica `rep`'s
    /// tier, completed or still in flight.
    fn store(c: &mut ClusterCore, rep: usize, hashes: &[BlockHash], ends: &[usize], done: bool) {
        let tier = c.tiers[rep].native().unwrap();
        let keys: Vec<ChunkKey> = ends
            .iter()
            .map(|&e| ChunkKey {
                key: hashes[e - 1],
                end: 4 * e as u32,
            })
            .collect();
        tier.prepare_store(&keys, 9).unwrap();
        if done {
            tier.complete_store(&keys.iter().map(|k| k.key).collect::<Vec<_>>());
        }
    }

    #[test]
    fn the_kv_aware_router_credits_the_blocks_a_replicas_own_host_tier_holds() {
        let r = prompt();
        let mut probe = Req::new(&r, 0.0, 0, 0);
        let hashes: Vec<BlockHash> = (0..4).map(|j| probe.block_hash(j, 4)).collect();
        for (per_chunk, ends, held) in [(1, vec![1, 2, 3], 3), (2, vec![2, 4], 4), (2, vec![4], 0)]
        {
            let mut c = cluster(per_chunk);
            store(&mut c, 1, &hashes, &ends, true);
            let view = View {
                engines: &c.engines,
                book: &c.book,
                tiers: &c.tiers,
                tier_of: &c.tier_of,
            };
            // Consecutive from the first block: chunk [3, 4] alone is past a miss.
            assert_eq!(
                view.host_blocks(1, &hashes, 0),
                held,
                "{per_chunk} {ends:?}"
            );
            assert_eq!(view.host_blocks(0, &hashes, 0), 0);
            if held == 0 {
                continue;
            }
            assert_eq!(view.host_blocks(1, &hashes, 1), held - 1);
            let s = Submission {
                request: &r,
                uid: 0,
                predicted: 1.0,
                id_rank: 0,
            };
            c.submit(s, 0.0).unwrap();
            // Replica 1's logit is lower by 0.75 per held block: no tie to draw.
            let (p, _) = c.placed(0).unwrap();
            assert_eq!(p.replica, 1);
            assert!(
                matches!(p.choice.reason, Reason::Cost { tied: 1, .. }),
                "{p:?}"
            );
        }
        // A chunk whose store is still in flight is not yet a hit.
        let mut c = cluster(1);
        store(&mut c, 1, &hashes, &[1, 2], false);
        assert_eq!(c.tiers[1].held_blocks(&hashes, 0, 1), 0);
    }
}
