//! SIEVE (Zhang et al., NSDI 2024): one FIFO queue, a visited bit per key, and a hand that moves
//! from the oldest key toward the newest. A hit sets the bit (nothing moves); on a miss the hand
//! clears set bits as it passes and evicts the first key whose bit is clear, staying where it
//! stopped; after the newest key it wraps to the oldest. New keys enter at the newest end with the
//! bit clear. Cost: O(1) amortised, as each cleared bit was set by a hit.
//!
//! Keys are the queue's nodes, and a byte per key holds (resident, visited): a hit is one load and
//! one store into that table (a megabyte per million keys), not a walk to a list node.

use super::links::{Links, NONE};
use super::prefetch::touch;
use super::{Ahead, CachePolicy};

const QUEUE: usize = 0;
const RESIDENT: u8 = 1;
const VISITED: u8 = 2;

pub struct Sieve {
    links: Links,
    state: Vec<u8>,
    /// Next key the hand looks at; `NONE` = start from the oldest.
    hand: u32,
    capacity: usize,
}

impl Sieve {
    /// Panics if `capacity` is 0.
    pub fn new(capacity: usize, key_space: usize) -> Self {
        assert!(capacity >= 1, "capacity must be at least 1");
        Sieve {
            links: Links::new(1, key_space),
            state: vec![0; key_space],
            hand: NONE,
            capacity,
        }
    }

    /// Removes one key.
    fn evict(&mut self) {
        let oldest = || self.links.back(QUEUE).expect("a full cache has a back");
        let mut k = if self.hand == NONE {
            oldest()
        } else {
            self.hand
        };
        while self.state[k as usize] & VISITED != 0 {
            self.state[k as usize] = RESIDENT;
            k = self.links.toward_front(k).unwrap_or_else(oldest);
        }
        self.hand = self.links.toward_front(k).unwrap_or(NONE);
        self.links.unlink(QUEUE, k);
        self.state[k as usize] = 0;
    }
}

impl CachePolicy for Sieve {
    #[inline]
    fn access(&mut self, key: u32) -> bool {
        let s = &mut self.state[key as usize];
        if *s != 0 {
            *s = RESIDENT | VISITED;
            return true;
        }
        if self.links.len(QUEUE) >= self.capacity {
            self.evict();
        }
        self.state[key as usize] = RESIDENT;
        self.links.push_front(QUEUE, key);
        false
    }

    fn len(&self) -> usize {
        self.links.len(QUEUE)
    }

    fn contains(&self, key: u32) -> bool {
        self.state[key as usize] != 0
    }

    fn grow_key_space(&mut self, key_space: usize) {
        if key_space > self.links.nodes() {
            self.links
                .grow(super::grown(self.links.nodes(), key_space), 1);
            self.state.resize(self.links.nodes(), 0);
        }
    }

    #[inline(always)]
    fn prefetch(&self, key: u32, ahead: Ahead) {
        if ahead == Ahead::Entry {
            touch(&self.state, key as usize);
            // The hand's next stop: its bit, and the links an eviction there rewrites.
            let h = if self.hand == NONE {
                self.links.back(QUEUE)
            } else {
                Some(self.hand)
            };
            if let Some(h) = h {
                touch(&self.state, h as usize);
                self.links.prefetch(h, false);
                self.links.prefetch(h, true);
            }
        }
    }
}
