//! SIEVE (Zhang et al., NSDI 2024): one FIFO queue, a visited bit per key, and a hand that moves
//! from the oldest key toward the newest. A hit sets the bit (nothing moves); on a miss the hand
//! clears set bits as it passes and evicts the first key whose bit is clear, staying where it
//! stopped; after the newest key it wraps to the oldest. New keys enter at the newest end with the
//! bit clear. Cost: O(1) amortised, as each cleared bit was set by a hit.

use super::links::{Links, NONE};
use super::prefetch::touch;
use super::{Ahead, CachePolicy};

const QUEUE: usize = 0;

pub struct Sieve {
    links: Links,
    key_of: Vec<u32>,
    visited: Vec<bool>,
    node_of: Vec<u32>,
    /// Next node the hand looks at; `NONE` = start from the oldest.
    hand: u32,
    slots: usize,
    capacity: usize,
}

impl Sieve {
    /// Panics if `capacity` is 0.
    pub fn new(capacity: usize, key_space: usize) -> Self {
        assert!(capacity >= 1, "capacity must be at least 1");
        let slots = capacity.min(key_space);
        Sieve {
            links: Links::new(1, slots),
            key_of: vec![NONE; 1 + slots],
            visited: vec![false; 1 + slots],
            node_of: vec![NONE; key_space],
            hand: NONE,
            slots,
            capacity,
        }
    }

    /// Removes one key and returns its free node.
    fn evict(&mut self) -> u32 {
        let oldest = || self.links.back(QUEUE).expect("a full cache has a back");
        let mut n = if self.hand == NONE {
            oldest()
        } else {
            self.hand
        };
        while std::mem::replace(&mut self.visited[n as usize], false) {
            n = self.links.toward_front(QUEUE, n).unwrap_or_else(oldest);
        }
        self.hand = self.links.toward_front(QUEUE, n).unwrap_or(NONE);
        self.links.unlink(QUEUE, n);
        self.node_of[self.key_of[n as usize] as usize] = NONE;
        n
    }
}

impl CachePolicy for Sieve {
    #[inline]
    fn access(&mut self, key: u32) -> bool {
        let n = self.node_of[key as usize];
        if n != NONE {
            self.visited[n as usize] = true;
            return true;
        }
        let len = self.links.len(QUEUE);
        let n = if len < self.slots {
            self.links.first_node() + len as u32
        } else {
            self.evict()
        };
        self.key_of[n as usize] = key;
        self.visited[n as usize] = false;
        self.node_of[key as usize] = n;
        self.links.push_front(QUEUE, n);
        false
    }

    fn grow_key_space(&mut self, key_space: usize) {
        if key_space <= self.node_of.len() {
            return;
        }
        self.node_of.resize(key_space, NONE);
        let slots = self.capacity.min(key_space);
        // Nodes are handed out in order while the queue is short, so new ones go at the end.
        self.links.grow(slots - self.slots);
        self.key_of.resize(1 + slots, NONE);
        self.visited.resize(1 + slots, false);
        self.slots = slots;
    }

    fn len(&self) -> usize {
        self.links.len(QUEUE)
    }

    fn contains(&self, key: u32) -> bool {
        self.node_of[key as usize] != NONE
    }

    #[inline(always)]
    fn prefetch(&self, key: u32, ahead: Ahead) {
        match ahead {
            Ahead::Entry => {
                touch(&self.node_of, key as usize);
                // The hand's next stops.
                let h = if self.hand == NONE {
                    self.links.back(QUEUE)
                } else {
                    Some(self.hand)
                };
                if let Some(h) = h {
                    touch(&self.visited, h as usize);
                    self.links.prefetch(h, true);
                    touch(&self.node_of, self.key_of[h as usize] as usize);
                }
            }
            Ahead::Node => touch(&self.visited, self.node_of[key as usize] as usize),
            Ahead::Neighbours => {}
        }
    }
}
