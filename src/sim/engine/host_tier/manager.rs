//! vLLM 0.33's CPU offloading manager (`vllm/v1/kv_offload/cpu/manager.py`,
//! `CPUOffloadingManager`, with `policies/base.py`): the chunks the host tier holds, their
//! reference counts, the request-scoped access records the policies learn from, and the
//! all-or-nothing store.
//!
//! - A chunk's reference count is -1 while its store is in flight (a lookup sees it as pending:
//!   not readable, not evictable), 0 when idle, and the number of loads reading it otherwise.
//!   Only idle chunks are evicted.
//! - [`Manager::prepare_store`] splits the offered keys into absent ones (to store) and held ones
//!   (ready ones count as reused by the request; pending ones are ignored). Storing needs
//!   `absent - free` evictions: more than the idle chunks, or more than the policy finds outside
//!   the offered keys, and it stores nothing (`None`). Stored keys are pending until
//!   [`Manager::complete_store`].
//! - A request's access record — every key it loaded or offered (absent or ready), in prefix
//!   order — is committed to the policy by [`Manager::on_request_finished`]. `touch` is never
//!   called by the connector, so nothing else reorders the policy.
//!
//! Not modelled: `store_threshold` (off by default), cache resets, KV events, failed stores.

use super::arc::ArcPolicy;
pub use super::keys::{ChunkKey, Key, ReqId};
use super::lru::LruPolicy;
use super::{HashMapOfKeys, OffloadMode, TierPolicy, TierStats};
use std::collections::{HashMap, HashSet};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    Miss,
    Hit,
    /// Held, its store still in flight.
    HitPending,
}

/// What a successful [`Manager::prepare_store`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stored {
    /// Keys to copy now, in offer order (pending until their store completes).
    pub keys: Vec<Key>,
    pub evicted: Vec<Key>,
}

#[derive(Debug, Clone, Default)]
struct Access {
    /// Every key met, first meeting first.
    keys: Vec<ChunkKey>,
    seen: HashSet<Key>,
    inserted: HashSet<Key>,
    reused: HashSet<Key>,
    store_missed: HashSet<Key>,
}

#[derive(Debug, Clone)]
enum Policy {
    Lru(LruPolicy),
    Arc(ArcPolicy),
}

#[derive(Debug, Clone)]
pub struct Manager {
    capacity: usize,
    ref_cnt: HashMapOfKeys<i32>,
    idle: usize,
    policy: Policy,
    requests: HashMap<ReqId, Access>,
    pub stats: TierStats,
}

impl Manager {
    /// A tier of `capacity` chunks.
    pub fn new(capacity: usize, policy: TierPolicy) -> Self {
        Manager {
            capacity,
            ref_cnt: HashMapOfKeys::default(),
            idle: 0,
            policy: match policy {
                TierPolicy::Lru => Policy::Lru(LruPolicy::default()),
                TierPolicy::Arc => Policy::Arc(ArcPolicy::new(capacity)),
            },
            requests: HashMap::new(),
            stats: TierStats {
                mode: OffloadMode::Native,
                ..Default::default()
            },
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Chunks held, pending ones included.
    pub fn len(&self) -> usize {
        self.ref_cnt.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ref_cnt.is_empty()
    }

    pub fn lookup(&self, key: Key) -> Lookup {
        match self.ref_cnt.get(&key) {
            None => Lookup::Miss,
            Some(&r) if r < 0 => Lookup::HitPending,
            Some(_) => Lookup::Hit,
        }
    }

    /// `_record_request_cache_access`: `keys` in the order offered; `reused` among them.
    fn record_access(&mut self, req: ReqId, keys: &[ChunkKey], reused: &[Key]) {
        let a = self.requests.entry(req).or_default();
        let fresh: Vec<ChunkKey> = keys
            .iter()
            .filter(|k| a.seen.insert(k.key))
            .copied()
            .collect();
        a.keys.extend_from_slice(&fresh);
        for &k in reused {
            if !a.inserted.contains(&k) {
                a.reused.insert(k);
            }
        }
        if !fresh.is_empty() {
            if let Policy::Lru(p) = &mut self.policy {
                p.on_request_access(&fresh, req);
            }
        }
    }

    /// Pins `keys` (all held and ready) for a load by `req`.
    pub fn prepare_load(&mut self, keys: &[ChunkKey], req: ReqId) {
        for k in keys {
            let r = self
                .ref_cnt
                .get_mut(&k.key)
                .expect("a load reads held chunks");
            assert!(*r >= 0, "a load reads ready chunks");
            if *r == 0 {
                self.idle -= 1;
                if let Policy::Lru(p) = &mut self.policy {
                    p.mark_non_evictable(k.key);
                }
            }
            *r += 1;
        }
        let reused: Vec<Key> = keys.iter().map(|k| k.key).collect();
        self.record_access(req, keys, &reused);
    }

    pub fn complete_load(&mut self, keys: &[Key]) {
        for k in keys {
            let r = self.ref_cnt.get_mut(k).expect("a loaded chunk stays held");
            assert!(*r > 0);
            *r -= 1;
            if *r == 0 {
                self.idle += 1;
                if let Policy::Lru(p) = &mut self.policy {
                    p.mark_evictable(*k);
                }
            }
        }
    }

    /// Offers `keys` (one request's, in prefix order) for store: `None` when the absent ones do
    /// not fit, else the keys to copy and the chunks evicted for them.
    pub fn prepare_store(&mut self, keys: &[ChunkKey], req: ReqId) -> Option<Stored> {
        let mut to_store = Vec::new();
        let mut ready = Vec::new();
        for k in keys {
            match self.ref_cnt.get(&k.key) {
                None => to_store.push(*k),
                Some(&r) if r >= 0 => ready.push(k.key),
                Some(_) => {}
            }
        }
        let a = self.requests.entry(req).or_default();
        let missed: Vec<Key> = to_store
            .iter()
            .map(|k| k.key)
            .filter(|k| a.store_missed.insert(*k))
            .collect();
        if let (Policy::Arc(p), false) = (&mut self.policy, missed.is_empty()) {
            p.on_store_miss(&missed);
        }
        let recorded: Vec<ChunkKey> = keys
            .iter()
            .filter(|k| match self.ref_cnt.get(&k.key) {
                None => true,
                Some(&r) => r >= 0,
            })
            .copied()
            .collect();
        self.record_access(req, &recorded, &ready);
        if to_store.is_empty() {
            return Some(Stored::default());
        }
        let free = self.capacity - self.ref_cnt.len();
        let mut evicted = Vec::new();
        if to_store.len() > free {
            let need = to_store.len() - free;
            if need > self.idle {
                return None;
            }
            let protected: HashSet<Key> = keys.iter().map(|k| k.key).collect();
            let ref_cnt = &self.ref_cnt;
            evicted = match &mut self.policy {
                Policy::Lru(p) => p.evict(need, &protected)?,
                Policy::Arc(p) => p.evict(need, &protected, |k| ref_cnt[&k] == 0)?,
            };
            self.idle -= evicted.len();
            for k in &evicted {
                self.ref_cnt.remove(k);
            }
        }
        for k in &to_store {
            self.ref_cnt.insert(k.key, -1);
            match &mut self.policy {
                Policy::Lru(p) => p.insert(*k, req),
                Policy::Arc(p) => p.insert(k.key),
            }
        }
        let a = self.requests.entry(req).or_default();
        a.inserted.extend(to_store.iter().map(|k| k.key));
        Some(Stored {
            keys: to_store.iter().map(|k| k.key).collect(),
            evicted,
        })
    }

    /// The stores of `keys` completed: they become readable and evictable.
    pub fn complete_store(&mut self, keys: &[Key]) {
        for k in keys {
            if let Some(r) = self.ref_cnt.get_mut(k) {
                if *r < 0 {
                    *r = 0;
                    self.idle += 1;
                    if let Policy::Lru(p) = &mut self.policy {
                        p.mark_evictable(*k);
                    }
                }
            }
        }
    }

    /// Commits `req`'s access record to the policy (vLLM calls it one step after the finish).
    pub fn on_request_finished(&mut self, req: ReqId) {
        let Some(mut a) = self.requests.remove(&req) else {
            return;
        };
        a.keys.sort_by_key(|k| k.end);
        let head_to_tail: Vec<Key> = a.keys.iter().map(|k| k.key).collect();
        match &mut self.policy {
            Policy::Lru(p) => p.on_request_finished(&head_to_tail, req),
            Policy::Arc(p) => {
                let insertion_only: HashSet<Key> =
                    a.inserted.difference(&a.reused).copied().collect();
                p.on_request_finished(&head_to_tail, &insertion_only, &a.reused)
            }
        }
    }

    /// The LRU rank of a held chunk (for tests).
    pub fn lru_rank(&self, key: Key) -> Option<(u64, i64)> {
        match &self.policy {
            Policy::Lru(p) => p.rank(key),
            Policy::Arc(_) => None,
        }
    }

    /// ARC's lists and target (for tests).
    pub fn arc_lists(&self) -> Option<([Vec<Key>; 4], f64)> {
        match &self.policy {
            Policy::Arc(p) => Some(p.lists()),
            Policy::Lru(_) => None,
        }
    }

    /// Idle chunks (reference count 0), counted both ways (for tests).
    pub fn check(&self) -> Result<(), String> {
        let idle = self.ref_cnt.values().filter(|&&r| r == 0).count();
        if idle != self.idle {
            return Err(format!("{idle} idle chunks, {} counted", self.idle));
        }
        if self.ref_cnt.len() > self.capacity {
            return Err(format!(
                "{} chunks held, capacity {}",
                self.ref_cnt.len(),
                self.capacity
            ));
        }
        Ok(())
    }
}
