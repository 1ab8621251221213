//! ARC, exactly as Megiddo and Modha define it (FAST 2003, Fig. 4): two LRU lists of cached keys,
//! T1 (seen once recently) and T2 (seen at least twice), two LRU lists of recently evicted keys,
//! B1 and B2, and a target size p for T1 that a hit in B1 raises and a hit in B2 lowers.
//!
//! The adaptation steps are the paper's real-valued ones, δ1 = max(1, |B2|/|B1|) and
//! δ2 = max(1, |B1|/|B2|), with p kept as an `f64` in [0, c]. The directory (T1 ∪ T2 ∪ B1 ∪ B2)
//! holds at most 2c keys.
//!
//! Keys are the lists' nodes (the directory holds each key at most once), and a byte per key says
//! which list holds it: a hit reads that byte and moves the key's own links.

use super::links::Links;
use super::prefetch::touch;
use super::{Ahead, CachePolicy};

const T1: usize = 0;
const T2: usize = 1;
const B1: usize = 2;
const B2: usize = 3;
/// In no list.
const OUT: u8 = 4;

pub struct Arc {
    links: Links,
    /// Which list holds each key, or `OUT`.
    list_of: Vec<u8>,
    c: usize,
    p: f64,
}

impl Arc {
    /// Panics if `capacity` is 0.
    pub fn new(capacity: usize, key_space: usize) -> Self {
        assert!(capacity >= 1, "capacity must be at least 1");
        Arc {
            links: Links::new(4, key_space),
            list_of: vec![OUT; key_space],
            c: capacity,
            p: 0.0,
        }
    }

    /// The target size of T1.
    pub fn p(&self) -> f64 {
        self.p
    }

    /// Sizes of (T1, T2, B1, B2).
    pub fn list_sizes(&self) -> [usize; 4] {
        [T1, T2, B1, B2].map(|l| self.links.len(l))
    }

    fn len_of(&self, l: usize) -> usize {
        self.links.len(l)
    }

    fn move_to_front_of(&mut self, n: u32, to: usize) {
        let from = self.list_of[n as usize] as usize;
        self.links.move_to_front(from, to, n);
        self.list_of[n as usize] = to as u8;
    }

    /// Moves the LRU key of `from` to the MRU end of `to`.
    fn demote_lru(&mut self, from: usize, to: usize) {
        let n = self
            .links
            .back(from)
            .expect("REPLACE picks a non-empty list");
        self.move_to_front_of(n, to);
    }

    /// Forgets the LRU key of `l` altogether.
    fn delete_lru(&mut self, l: usize) {
        let n = self
            .links
            .pop_back(l)
            .expect("ARC deletes from a non-empty list");
        self.list_of[n as usize] = OUT;
    }

    /// REPLACE(x, p): evict the LRU key of T1 into B1 if T1 is over its target, else that of T2
    /// into B2. The cache is full whenever this runs, so the list it picks is never empty.
    fn replace(&mut self, x_in_b2: bool) {
        let t1 = self.len_of(T1);
        let t1_f = t1 as f64;
        if t1 >= 1 && ((x_in_b2 && t1_f == self.p) || t1_f > self.p) {
            self.demote_lru(T1, B1);
        } else {
            self.demote_lru(T2, B2);
        }
    }
}

impl CachePolicy for Arc {
    #[inline]
    fn access(&mut self, key: u32) -> bool {
        let on = self.list_of[key as usize] as usize;
        let c = self.c as f64;
        match on {
            // Case I: a cache hit.
            T1 | T2 => {
                self.move_to_front_of(key, T2);
                true
            }
            // Case II: a ghost hit in B1 — recency deserved more room.
            B1 => {
                let (b1, b2) = (self.len_of(B1) as f64, self.len_of(B2) as f64);
                let delta = if b1 >= b2 { 1.0 } else { b2 / b1 };
                self.p = (self.p + delta).min(c);
                self.replace(false);
                self.move_to_front_of(key, T2);
                false
            }
            // Case III: a ghost hit in B2 — frequency deserved more room.
            B2 => {
                let (b1, b2) = (self.len_of(B1) as f64, self.len_of(B2) as f64);
                let delta = if b2 >= b1 { 1.0 } else { b1 / b2 };
                self.p = (self.p - delta).max(0.0);
                self.replace(true);
                self.move_to_front_of(key, T2);
                false
            }
            // Case IV: a miss in the whole directory.
            _ => {
                let l1 = self.len_of(T1) + self.len_of(B1);
                let l2 = self.len_of(T2) + self.len_of(B2);
                if l1 == self.c {
                    // Case A.
                    if self.len_of(T1) < self.c {
                        self.delete_lru(B1);
                        self.replace(false);
                    } else {
                        self.delete_lru(T1);
                    }
                } else if l1 + l2 >= self.c {
                    // Case B (here |L1| < c).
                    if l1 + l2 == 2 * self.c {
                        self.delete_lru(B2);
                    }
                    self.replace(false);
                }
                self.list_of[key as usize] = T1 as u8;
                self.links.push_front(T1, key);
                false
            }
        }
    }

    fn len(&self) -> usize {
        self.len_of(T1) + self.len_of(T2)
    }

    fn contains(&self, key: u32) -> bool {
        matches!(self.list_of[key as usize] as usize, T1 | T2)
    }

    fn grow_key_space(&mut self, key_space: usize) {
        if key_space > self.links.nodes() {
            self.links
                .grow(super::grown(self.links.nodes(), key_space), 4);
            self.list_of.resize(self.links.nodes(), OUT);
        }
    }

    #[inline(always)]
    fn prefetch(&self, key: u32, ahead: Ahead) {
        match ahead {
            Ahead::Entry => {
                touch(&self.list_of, key as usize);
                self.links.prefetch(key, false);
                // Misses move or delete the LRU ends of the lists.
                for l in [T1, T2, B1, B2] {
                    self.links.prefetch_back(l);
                    if let Some(b) = self.links.back(l) {
                        touch(&self.list_of, b as usize);
                    }
                }
            }
            Ahead::Neighbours => self.links.prefetch(key, true),
        }
    }
}
