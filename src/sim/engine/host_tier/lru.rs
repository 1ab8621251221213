//! vLLM 0.33's LRU policy for the CPU tier (`vllm/v1/kv_offload/cpu/policies/lru.py`,
//! `LRUCachePolicy`). It is not an LRU over store times: every chunk carries a rank
//! `(major, minor)` and the idle chunk of smallest rank goes first.
//!
//! - A request gets a request rank (the global counter, plus one) at its first access to the
//!   cache that records new keys (`_get_request_rank` from `on_request_access` or `insert`).
//! - A stored chunk ranks `(request rank, -end position)`: within an active request the tail goes
//!   before the head, and every chunk of an active request ranks by when the request started.
//! - A request's access to a held chunk raises its rank to at least `(request rank, -position)`.
//! - When the request finishes, its keys tail to head each take a fresh rank `(counter + 1, 0)`,
//!   so the head ends up the most recent; keys no longer held are skipped without using a rank.
//!
//! vLLM keeps the idle chunks in a lazily invalidated heap; an ordered set of the idle chunks'
//! current ranks gives the same order (ranks are unique: a request holds one key per position).

use super::keys::{ChunkKey, Key, ReqId};
use super::HashMapOfKeys;
use std::collections::{BTreeSet, HashMap, HashSet};

type Rank = (u64, i64);

#[derive(Debug, Clone, Default)]
pub struct LruPolicy {
    ranks: HashMapOfKeys<Rank>,
    /// The idle chunks (reference count 0) by rank, smallest first.
    idle: BTreeSet<(Rank, Key)>,
    next_rank: u64,
    request_ranks: HashMap<ReqId, u64>,
}

impl LruPolicy {
    fn request_rank(&mut self, req: ReqId) -> u64 {
        let next = &mut self.next_rank;
        *self.request_ranks.entry(req).or_insert_with(|| {
            *next += 1;
            *next
        })
    }

    fn set_rank(&mut self, key: Key, rank: Rank) {
        if let Some(old) = self.ranks.insert(key, rank) {
            if self.idle.remove(&(old, key)) {
                self.idle.insert((rank, key));
            }
        }
    }

    /// A chunk `req` stores (reference count -1: not idle yet).
    pub fn insert(&mut self, k: ChunkKey, req: ReqId) {
        let rank = (self.request_rank(req), -i64::from(k.end));
        self.ranks.insert(k.key, rank);
    }

    /// `on_request_access`: keys `req` meets for the first time, in the order met.
    pub fn on_request_access(&mut self, keys: &[ChunkKey], req: ReqId) {
        let r = self.request_rank(req);
        for k in keys {
            let rank = (r, -i64::from(k.end));
            match self.ranks.get(&k.key) {
                Some(&old) if old < rank => self.set_rank(k.key, rank),
                _ => {}
            }
        }
    }

    /// `on_request_finished`: `head_to_tail` are the request's keys in prefix order.
    pub fn on_request_finished(&mut self, head_to_tail: &[Key], req: ReqId) {
        self.request_ranks.remove(&req);
        for &key in head_to_tail.iter().rev() {
            if self.ranks.contains_key(&key) {
                self.next_rank += 1;
                self.set_rank(key, (self.next_rank, 0));
            }
        }
    }

    /// The reference count became 0.
    pub fn mark_evictable(&mut self, key: Key) {
        let rank = self.ranks[&key];
        self.idle.insert((rank, key));
    }

    /// The reference count left 0.
    pub fn mark_non_evictable(&mut self, key: Key) {
        let rank = self.ranks[&key];
        self.idle.remove(&(rank, key));
    }

    /// Exactly `n` idle chunks outside `protected`, smallest rank first, removed; or `None` and
    /// nothing changed.
    pub fn evict(&mut self, n: usize, protected: &HashSet<Key>) -> Option<Vec<Key>> {
        let chosen: Vec<(Rank, Key)> = self
            .idle
            .iter()
            .filter(|(_, k)| !protected.contains(k))
            .take(n)
            .copied()
            .collect();
        if chosen.len() < n {
            return None;
        }
        for e in &chosen {
            self.idle.remove(e);
            self.ranks.remove(&e.1);
        }
        Some(chosen.into_iter().map(|(_, k)| k).collect())
    }

    /// The rank of a held chunk (for tests).
    pub fn rank(&self, key: Key) -> Option<Rank> {
        self.ranks.get(&key).copied()
    }
}
