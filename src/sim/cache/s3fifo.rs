//! S3-FIFO (Yang et al., SOSP 2023): a small FIFO S (10% of the capacity) that filters one-hit
//! wonders, a main FIFO M (the rest) run as a CLOCK with 2-bit counters, and a ghost FIFO G of
//! recently filtered keys (as many entries as M). Details follow libCacheSim's S3FIFOv0, the
//! authors' reference implementation:
//!
//! - A hit raises the key's counter, saturating at 3. A miss admits the key to M if G remembers it
//!   (and forgets it in G), otherwise to S, with the counter at 0.
//! - To free a slot: evict from M if M is over its share or S is empty, else from S.
//! - Evicting from S: the oldest key moves to M (counter reset) if it was hit at least twice
//!   (`move-to-main-threshold=2`), and the next oldest is examined; otherwise it leaves the
//!   cache and its key enters G.
//! - Evicting from M: the oldest key is reinserted with its counter lowered by one while the counter
//!   is positive, else it leaves the cache.
//!
//! S gets max(1, ⌊c/10⌋) of the capacity so that tiny caches still filter. O(1) amortised: every
//! reinsertion lowers a counter that a hit raised, every move to M empties a slot of S.
//!
//! libCacheSim's default S3-FIFO (libCacheSim/cache/eviction/S3FIFO.c, 1a1a11a/libCacheSim at
//! 035d832c, what the `libcachesim` 0.3.5 package runs) departs from S3FIFOv0 in one rule, as its
//! opening comment says: until the first eviction, a new key that finds S full enters M. Only the
//! warm-up differs, so hit ratios differ slightly (0.7782 here against 0.7827 there on
//! scripts/bench-vs-libcachesim's trace; with that rule added they agree to the request).
//!
//! Layout: the three queues are FIFOs of keys (a key leaves the middle of one only on a ghost hit),
//! and a byte per key holds its queue and counter, so a hit is one load and one store into a
//! table of a megabyte per million keys. A ghost hit leaves its entry in
//! G, stale: each entry carries the stamp it was pushed with, and counts only while the key is
//! still a ghost with that stamp. Stale entries are dropped when they reach the front, or all at
//! once when they outnumber the live ones (O(1) amortised).

use super::prefetch::touch;
use super::{Ahead, CachePolicy};
use std::collections::VecDeque;

/// The low two bits of a key's state byte: where it is.
const OUT: u8 = 0;
const SMALL: u8 = 1;
const MAIN: u8 = 2;
const GHOST: u8 = 3;
const WHERE: u8 = 3;
/// The counter sits above them.
const FREQ_SHIFT: u32 = 2;

/// Hits in S needed to move to M instead of leaving.
pub const MOVE_TO_MAIN_THRESHOLD: u8 = 2;
const MAX_FREQ: u8 = 3;

pub struct S3Fifo {
    /// `where | freq << FREQ_SHIFT` per key.
    state: Vec<u8>,
    /// Oldest at the front.
    small: VecDeque<u32>,
    main: VecDeque<u32>,
    /// (key, stamp); live entries are the keys whose state says GHOST and `ghost_stamp` matches.
    ghost: VecDeque<(u32, u32)>,
    ghost_stamp: Vec<u32>,
    ghost_live: usize,
    pushes: u32,
    capacity: usize,
    main_share: usize,
    ghost_cap: usize,
}

impl S3Fifo {
    /// Panics if `capacity` is 0.
    pub fn new(capacity: usize, key_space: usize) -> Self {
        assert!(capacity >= 1, "capacity must be at least 1");
        let small = (capacity / 10).max(1);
        let main_share = capacity - small.min(capacity);
        S3Fifo {
            state: vec![OUT; key_space],
            small: VecDeque::new(),
            main: VecDeque::new(),
            ghost: VecDeque::new(),
            ghost_stamp: vec![0; key_space],
            ghost_live: 0,
            pushes: 0,
            capacity,
            main_share,
            ghost_cap: main_share,
        }
    }

    /// Sizes of (S, M, G).
    pub fn queue_sizes(&self) -> [usize; 3] {
        [self.small.len(), self.main.len(), self.ghost_live]
    }

    fn freq(&self, key: u32) -> u8 {
        self.state[key as usize] >> FREQ_SHIFT
    }

    fn set(&mut self, key: u32, place: u8, freq: u8) {
        self.state[key as usize] = place | (freq << FREQ_SHIFT);
    }

    fn is_live_ghost(&self, (key, stamp): (u32, u32)) -> bool {
        self.state[key as usize] & WHERE == GHOST && self.ghost_stamp[key as usize] == stamp
    }

    fn evict(&mut self) {
        if self.main.len() > self.main_share || self.small.is_empty() {
            self.evict_main();
        } else {
            self.evict_small();
        }
    }

    fn evict_small(&mut self) {
        while let Some(k) = self.small.pop_front() {
            if self.freq(k) >= MOVE_TO_MAIN_THRESHOLD {
                self.set(k, MAIN, 0);
                self.main.push_back(k);
                continue;
            }
            if self.ghost_cap == 0 {
                self.set(k, OUT, 0);
            } else {
                self.demote_to_ghost(k);
            }
            return;
        }
    }

    fn demote_to_ghost(&mut self, k: u32) {
        self.set(k, GHOST, 0);
        self.pushes = self.pushes.wrapping_add(1);
        self.ghost_stamp[k as usize] = self.pushes;
        self.ghost.push_back((k, self.pushes));
        self.ghost_live += 1;
        if self.ghost_live > self.ghost_cap {
            // Forget the oldest live ghost.
            while let Some(e) = self.ghost.pop_front() {
                if self.is_live_ghost(e) {
                    self.set(e.0, OUT, 0);
                    self.ghost_live -= 1;
                    break;
                }
            }
        }
        // Stamps stay unique: an entry leaves within 2 x ghost_cap + 65 < 2^32 pushes.
        if self.ghost.len() > 2 * self.ghost_live + 64 {
            let mut ghost = std::mem::take(&mut self.ghost);
            ghost.retain(|&e| self.is_live_ghost(e));
            self.ghost = ghost;
        }
    }

    fn evict_main(&mut self) {
        while let Some(k) = self.main.pop_front() {
            let f = self.freq(k);
            if f >= 1 {
                self.set(k, MAIN, f - 1);
                self.main.push_back(k);
            } else {
                self.set(k, OUT, 0);
                return;
            }
        }
    }
}

impl CachePolicy for S3Fifo {
    #[inline]
    fn access(&mut self, key: u32) -> bool {
        let s = self.state[key as usize];
        let place = s & WHERE;
        if place == SMALL || place == MAIN {
            let f = s >> FREQ_SHIFT;
            self.state[key as usize] = s + (u8::from(f < MAX_FREQ) << FREQ_SHIFT);
            return true;
        }
        let was_ghost = place == GHOST;
        if was_ghost {
            // Its entry in G goes stale.
            self.ghost_live -= 1;
            self.set(key, OUT, 0);
        }
        while self.len() >= self.capacity {
            self.evict();
        }
        if was_ghost {
            self.set(key, MAIN, 0);
            self.main.push_back(key);
        } else {
            self.set(key, SMALL, 0);
            self.small.push_back(key);
        }
        false
    }

    fn len(&self) -> usize {
        self.small.len() + self.main.len()
    }

    fn contains(&self, key: u32) -> bool {
        matches!(self.state[key as usize] & WHERE, SMALL | MAIN)
    }

    fn grow_key_space(&mut self, key_space: usize) {
        if key_space > self.state.len() {
            self.state.resize(key_space, OUT);
            self.ghost_stamp.resize(key_space, 0);
        }
    }

    #[inline(always)]
    fn prefetch(&self, key: u32, ahead: Ahead) {
        if ahead == Ahead::Entry {
            touch(&self.state, key as usize);
            // Evictions start at the oldest end of each queue.
            for q in [&self.small, &self.main] {
                if let Some(&k) = q.front() {
                    touch(&self.state, k as usize);
                }
            }
            if let Some(&(k, _)) = self.ghost.front() {
                touch(&self.state, k as usize);
                touch(&self.ghost_stamp, k as usize);
            }
        }
    }
}
