//! Belady's OPT (MIN) for demand paging: on a miss with the cache full, evict the key whose next
//! request lies furthest in the future (never-again keys first). Offline: it reads the whole trace
//! ahead, through the next-use time of every request.
//!
//! O(log n) per request: a max-heap of next-use times. A hit or admission pushes the key's new
//! next use; the entry it replaces (whose time is now) is left in the heap, stale. Stale entries
//! hold times ≤ now and live ones times > now, so while any live entry exists the heap's top is
//! live: the victim is always the top. The heap is compacted when stale entries outnumber live ones.
//!
//! An entry is one `u64`: a finite next use `t` names its key through the trace (`keys[t]`), and a
//! key never requested again is stored as `u64::MAX - key`, above every finite time.

use super::prefetch::touch;
use super::{Ahead, CachePolicy};
use crate::workload::keys::KeyTrace;
use std::collections::BinaryHeap;

/// Next-use time of a key that is never requested again.
pub const NEVER: u64 = u64::MAX;

/// Finite next-use times are request indices, far below this.
const FINITE_LIMIT: u64 = u64::MAX / 2;

/// For each request `t`, the index of the next request for the same key, or [`NEVER`].
pub fn next_uses(keys: &[u32], key_space: usize) -> Vec<u64> {
    let mut next_seen = vec![NEVER; key_space];
    let mut out = vec![NEVER; keys.len()];
    for (t, &k) in keys.iter().enumerate().rev() {
        out[t] = std::mem::replace(&mut next_seen[k as usize], t as u64);
    }
    out
}

pub struct Opt {
    next_use: Vec<u64>,
    keys: Vec<u32>,
    now: usize,
    heap: BinaryHeap<u64>,
    resident: Vec<bool>,
    len: usize,
    capacity: usize,
}

impl Opt {
    /// OPT for the requests of `trace`, which `access` must then be called with, in order.
    /// Panics if `capacity` is 0.
    pub fn new(capacity: usize, trace: &KeyTrace) -> Self {
        assert!(capacity >= 1, "capacity must be at least 1");
        let slots = capacity.min(trace.key_space());
        Opt {
            next_use: next_uses(trace.keys(), trace.key_space()),
            keys: trace.keys().to_vec(),
            now: 0,
            heap: BinaryHeap::with_capacity(2 * slots + 64),
            resident: vec![false; trace.key_space()],
            len: 0,
            capacity,
        }
    }

    fn compact(&mut self) {
        let now = self.now as u64;
        self.heap.retain(|&entry| entry > now);
    }
}

impl CachePolicy for Opt {
    /// Panics if called more often than the trace has requests.
    #[inline]
    fn access(&mut self, key: u32) -> bool {
        let next = self.next_use[self.now];
        let hit = self.resident[key as usize];
        if !hit {
            if self.len == self.capacity {
                let top = self.heap.pop().expect("a full cache has live entries");
                let victim = if top > FINITE_LIMIT {
                    (u64::MAX - top) as u32
                } else {
                    self.keys[top as usize]
                };
                debug_assert!(self.resident[victim as usize]);
                self.resident[victim as usize] = false;
                self.len -= 1;
            }
            self.resident[key as usize] = true;
            self.len += 1;
        }
        self.heap.push(if next == NEVER {
            u64::MAX - key as u64
        } else {
            next
        });
        if self.heap.len() > 2 * self.len + 64 {
            self.compact();
        }
        self.now += 1;
        hit
    }

    fn len(&self) -> usize {
        self.len
    }

    fn contains(&self, key: u32) -> bool {
        self.resident[key as usize]
    }

    /// OPT answers for its trace's keys only; this keeps the trait's promise all the same.
    fn grow_key_space(&mut self, key_space: usize) {
        if key_space > self.resident.len() {
            self.resident.resize(key_space, false);
        }
    }

    #[inline(always)]
    fn prefetch(&self, key: u32, ahead: Ahead) {
        if ahead == Ahead::Entry {
            touch(&self.resident, key as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_uses_point_at_the_next_request_of_each_key() {
        assert_eq!(
            next_uses(&[0, 1, 0, 2, 1], 3),
            vec![2, 4, NEVER, NEVER, NEVER]
        );
    }
}
