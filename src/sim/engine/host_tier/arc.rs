//! vLLM 0.33's ARC policy for the CPU tier (`vllm/v1/kv_offload/cpu/policies/arc.py`,
//! `ARCCachePolicy`), which differs from the textbook ARC of `sim cache`:
//!
//! - A store appends to the MRU end of T1 and drops the key from the ghost lists B1 and B2.
//! - Before a store, each key the request misses for the first time (tail first) adapts the
//!   target size of T1: a key in B1 raises it by max(1, |B2| / |B1|) (at most the capacity), a
//!   key in B2 lowers it by max(1, |B1| / |B2|) (at least 0); the ghost key moves to its list's
//!   MRU end.
//! - Loads reorder nothing. When the request finishes, its keys tail to head: a key it only
//!   inserted moves to the MRU end of its own list; a key it reused (loaded, or found ready when
//!   offering it for store) moves from T1 to the MRU end of T2, or to the MRU end of T2.
//! - Evicting n chunks, one at a time: from the LRU end of T1 when the virtual size of T1 (T1
//!   less the chunks chosen from it so far) is at least the integer part of the target, else of
//!   T2; then the other list; only idle chunks outside the protected keys; all or nothing. The
//!   evicted keys go to the MRU ends of B1 and B2, each trimmed to the capacity.

use super::keys::Key;
use super::HashMapOfKeys;
use std::collections::{BTreeMap, HashSet};

/// Keys from least to most recently moved to the end, with O(log n) moves.
#[derive(Debug, Clone, Default)]
struct OrderedKeys {
    seq_of: HashMapOfKeys<u64>,
    by_seq: BTreeMap<u64, Key>,
    next: u64,
}

impl OrderedKeys {
    fn len(&self) -> usize {
        self.by_seq.len()
    }

    fn contains(&self, k: Key) -> bool {
        self.seq_of.contains_key(&k)
    }

    fn remove(&mut self, k: Key) -> bool {
        match self.seq_of.remove(&k) {
            Some(s) => {
                self.by_seq.remove(&s);
                true
            }
            None => false,
        }
    }

    /// Appends `k` at the MRU end, or moves it there.
    fn push_back(&mut self, k: Key) {
        self.remove(k);
        self.next += 1;
        self.seq_of.insert(k, self.next);
        self.by_seq.insert(self.next, k);
    }

    fn pop_front(&mut self) -> Option<Key> {
        let (_, k) = self.by_seq.pop_first()?;
        self.seq_of.remove(&k);
        Some(k)
    }

    /// LRU end first.
    fn iter(&self) -> impl Iterator<Item = Key> + '_ {
        self.by_seq.values().copied()
    }
}

#[derive(Debug, Clone)]
pub struct ArcPolicy {
    capacity: usize,
    target_t1: f64,
    t1: OrderedKeys,
    t2: OrderedKeys,
    b1: OrderedKeys,
    b2: OrderedKeys,
}

impl ArcPolicy {
    pub fn new(capacity: usize) -> Self {
        ArcPolicy {
            capacity,
            target_t1: 0.0,
            t1: OrderedKeys::default(),
            t2: OrderedKeys::default(),
            b1: OrderedKeys::default(),
            b2: OrderedKeys::default(),
        }
    }

    pub fn insert(&mut self, key: Key) {
        self.t1.push_back(key);
        self.b1.remove(key);
        self.b2.remove(key);
    }

    fn adapt_to_ghost_hit(&mut self, key: Key) {
        let (b1, b2) = (self.b1.len() as f64, self.b2.len() as f64);
        if self.b1.contains(key) {
            self.target_t1 = (self.target_t1 + (b2 / b1).max(1.0)).min(self.capacity as f64);
            self.b1.push_back(key);
        } else if self.b2.contains(key) {
            self.target_t1 = (self.target_t1 - (b1 / b2).max(1.0)).max(0.0);
            self.b2.push_back(key);
        }
    }

    /// `on_store_miss`: the keys a request is about to store, first seen by it, in offer order.
    pub fn on_store_miss(&mut self, keys: &[Key]) {
        for &k in keys.iter().rev() {
            self.adapt_to_ghost_hit(k);
        }
    }

    /// `on_request_finished`: `head_to_tail` are the request's keys in prefix order.
    pub fn on_request_finished(
        &mut self,
        head_to_tail: &[Key],
        insertion_only: &HashSet<Key>,
        reused: &HashSet<Key>,
    ) {
        for &k in head_to_tail.iter().rev() {
            if insertion_only.contains(&k) {
                if self.t1.contains(k) {
                    self.t1.push_back(k);
                } else if self.t2.contains(k) {
                    self.t2.push_back(k);
                }
                continue;
            }
            if reused.contains(&k) {
                // From T1, or within T2, to T2's most recent end.
                if self.t1.remove(k) || self.t2.contains(k) {
                    self.t2.push_back(k);
                }
            }
        }
    }

    /// Exactly `n` chunks for which `idle` holds, outside `protected`, moved to the ghost lists;
    /// or `None` and nothing changed.
    pub fn evict(
        &mut self,
        n: usize,
        protected: &HashSet<Key>,
        idle: impl Fn(Key) -> bool,
    ) -> Option<Vec<Key>> {
        let ok = |k: &Key| idle(*k) && !protected.contains(k);
        let mut chosen: Vec<(Key, bool)> = Vec::with_capacity(n);
        let mut virtual_t1 = self.t1.len();
        let target = self.target_t1 as usize;
        {
            // One monotonic scan per list, as vLLM's iterators.
            let mut t1 = self.t1.iter().filter(ok);
            let mut t2 = self.t2.iter().filter(ok);
            for _ in 0..n {
                let mut pick = None;
                if virtual_t1 >= target {
                    pick = t1.next().map(|k| (k, true));
                }
                if pick.is_none() {
                    pick = t2.next().map(|k| (k, false));
                }
                if pick.is_none() {
                    pick = Some((t1.next()?, true));
                }
                let (k, from_t1) = pick.expect("set above");
                if from_t1 {
                    virtual_t1 -= 1;
                }
                chosen.push((k, from_t1));
            }
        }
        for &(k, from_t1) in &chosen {
            if from_t1 {
                self.t1.remove(k);
                self.b1.push_back(k);
            } else {
                self.t2.remove(k);
                self.b2.push_back(k);
            }
        }
        for ghost in [&mut self.b1, &mut self.b2] {
            while ghost.len() > self.capacity {
                ghost.pop_front();
            }
        }
        Some(chosen.into_iter().map(|(k, _)| k).collect())
    }

    /// (T1, T2, B1, B2) from their LRU ends, and the target size of T1 (for tests).
    pub fn lists(&self) -> ([Vec<Key>; 4], f64) {
        let v = |l: &OrderedKeys| l.iter().collect();
        (
            [v(&self.t1), v(&self.t2), v(&self.b1), v(&self.b2)],
            self.target_t1,
        )
    }
}
