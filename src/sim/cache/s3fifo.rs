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

use super::links::{Links, NONE};
use super::prefetch::touch;
use super::{Ahead, CachePolicy};

const SMALL: usize = 0;
const MAIN: usize = 1;
const GHOST: usize = 2;

/// Hits in S needed to move to M instead of leaving.
pub const MOVE_TO_MAIN_THRESHOLD: u8 = 2;
const MAX_FREQ: u8 = 3;

pub struct S3Fifo {
    links: Links,
    list_of: Vec<u8>,
    freq: Vec<u8>,
    key_of: Vec<u32>,
    node_of: Vec<u32>,
    free: Vec<u32>,
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
        let ghost_cap = main_share;
        // Each key is in at most one queue.
        let nodes = (capacity + ghost_cap).min(key_space);
        let links = Links::new(3, nodes);
        let first = links.first_node();
        S3Fifo {
            links,
            list_of: vec![u8::MAX; 3 + nodes],
            freq: vec![0; 3 + nodes],
            key_of: vec![NONE; 3 + nodes],
            node_of: vec![NONE; key_space],
            free: (first..first + nodes as u32).rev().collect(),
            capacity,
            main_share,
            ghost_cap,
        }
    }

    /// Sizes of (S, M, G).
    pub fn queue_sizes(&self) -> [usize; 3] {
        [SMALL, MAIN, GHOST].map(|l| self.links.len(l))
    }

    fn put(&mut self, n: u32, list: usize) {
        self.links.push_front(list, n);
        self.list_of[n as usize] = list as u8;
    }

    fn forget(&mut self, n: u32) {
        self.node_of[self.key_of[n as usize] as usize] = NONE;
        self.list_of[n as usize] = u8::MAX;
        self.free.push(n);
    }

    fn evict(&mut self) {
        if self.links.len(MAIN) > self.main_share || self.links.is_empty(SMALL) {
            self.evict_main();
        } else {
            self.evict_small();
        }
    }

    fn evict_small(&mut self) {
        while let Some(n) = self.links.pop_back(SMALL) {
            if self.freq[n as usize] >= MOVE_TO_MAIN_THRESHOLD {
                self.freq[n as usize] = 0;
                self.put(n, MAIN);
                continue;
            }
            if self.ghost_cap == 0 {
                self.forget(n);
            } else {
                self.put(n, GHOST);
                if self.links.len(GHOST) > self.ghost_cap {
                    let g = self.links.pop_back(GHOST).expect("over-full ghost");
                    self.forget(g);
                }
            }
            return;
        }
    }

    fn evict_main(&mut self) {
        while let Some(n) = self.links.pop_back(MAIN) {
            let f = self.freq[n as usize];
            if f >= 1 {
                self.freq[n as usize] = f - 1;
                self.put(n, MAIN);
            } else {
                self.forget(n);
                return;
            }
        }
    }
}

impl CachePolicy for S3Fifo {
    #[inline]
    fn access(&mut self, key: u32) -> bool {
        let n = self.node_of[key as usize];
        let in_ghost = n != NONE && self.list_of[n as usize] == GHOST as u8;
        if n != NONE && !in_ghost {
            let f = &mut self.freq[n as usize];
            *f = (*f + 1).min(MAX_FREQ);
            return true;
        }
        if in_ghost {
            self.links.unlink(GHOST, n);
            self.forget(n);
        }
        while self.len() >= self.capacity {
            self.evict();
        }
        let n = self.free.pop().expect("a free node after eviction");
        self.key_of[n as usize] = key;
        self.node_of[key as usize] = n;
        self.freq[n as usize] = 0;
        self.put(n, if in_ghost { MAIN } else { SMALL });
        false
    }

    fn grow_key_space(&mut self, key_space: usize) {
        if key_space <= self.node_of.len() {
            return;
        }
        self.node_of.resize(key_space, NONE);
        let old = self.key_of.len() - 3;
        let nodes = (self.capacity + self.ghost_cap).min(key_space);
        self.links.grow(nodes - old);
        self.list_of.resize(3 + nodes, u8::MAX);
        self.freq.resize(3 + nodes, 0);
        self.key_of.resize(3 + nodes, NONE);
        self.free.extend((3 + old as u32..3 + nodes as u32).rev());
    }

    fn len(&self) -> usize {
        self.links.len(SMALL) + self.links.len(MAIN)
    }

    fn contains(&self, key: u32) -> bool {
        let n = self.node_of[key as usize];
        n != NONE && self.list_of[n as usize] != GHOST as u8
    }

    #[inline(always)]
    fn prefetch(&self, key: u32, ahead: Ahead) {
        let n = self.node_of[key as usize];
        match ahead {
            Ahead::Entry => {
                touch(&self.node_of, key as usize);
                // Evictions start at the oldest end of each queue.
                for l in [SMALL, MAIN, GHOST] {
                    if let Some(b) = self.links.back(l) {
                        self.links.prefetch(b, true);
                        touch(&self.freq, b as usize);
                        touch(&self.node_of, self.key_of[b as usize] as usize);
                    }
                }
            }
            Ahead::Node => {
                touch(&self.list_of, n as usize);
                touch(&self.freq, n as usize);
            }
            Ahead::Neighbours => {
                if self.list_of.get(n as usize) == Some(&(GHOST as u8)) {
                    self.links.prefetch(n, true);
                }
            }
        }
    }
}
