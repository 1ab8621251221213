//! LRU: evict the key used least recently. A hit moves the key to the front of one intrusive list;
//! a miss reuses the back node for the new key.

use super::links::{Links, NONE};
use super::prefetch::touch;
use super::{Ahead, CachePolicy};

const LIST: usize = 0;

pub struct Lru {
    links: Links,
    key_of: Vec<u32>,
    node_of: Vec<u32>,
    slots: usize,
    capacity: usize,
}

impl Lru {
    /// Panics if `capacity` is 0.
    pub fn new(capacity: usize, key_space: usize) -> Self {
        assert!(capacity >= 1, "capacity must be at least 1");
        let slots = capacity.min(key_space);
        Lru {
            links: Links::new(1, slots),
            key_of: vec![NONE; 1 + slots],
            node_of: vec![NONE; key_space],
            slots,
            capacity,
        }
    }

    /// Keys from most to least recently used (for tests).
    pub fn keys_by_recency(&self) -> Vec<u32> {
        self.links
            .iter(LIST)
            .map(|n| self.key_of[n as usize])
            .collect()
    }
}

impl CachePolicy for Lru {
    #[inline]
    fn access(&mut self, key: u32) -> bool {
        let n = self.node_of[key as usize];
        if n != NONE {
            if self.links.front(LIST) != Some(n) {
                self.links.move_to_front(LIST, n);
            }
            return true;
        }
        let len = self.links.len(LIST);
        let n = if len < self.slots {
            self.links.first_node() + len as u32
        } else {
            let n = self.links.pop_back(LIST).expect("a full cache has a back");
            self.node_of[self.key_of[n as usize] as usize] = NONE;
            n
        };
        self.key_of[n as usize] = key;
        self.node_of[key as usize] = n;
        self.links.push_front(LIST, n);
        false
    }

    fn grow_key_space(&mut self, key_space: usize) {
        if key_space <= self.node_of.len() {
            return;
        }
        self.node_of.resize(key_space, NONE);
        let slots = self.capacity.min(key_space);
        // Nodes are handed out in order while the list is short, so new ones go at the end.
        self.links.grow(slots - self.slots);
        self.key_of.resize(1 + slots, NONE);
        self.slots = slots;
    }

    fn len(&self) -> usize {
        self.links.len(LIST)
    }

    fn contains(&self, key: u32) -> bool {
        self.node_of[key as usize] != NONE
    }

    #[inline(always)]
    fn prefetch(&self, key: u32, ahead: Ahead) {
        match ahead {
            Ahead::Entry => {
                touch(&self.node_of, key as usize);
                // The next miss evicts the back: its links, key and table entry.
                if let Some(b) = self.links.back(LIST) {
                    self.links.prefetch(b, true);
                    touch(&self.node_of, self.key_of[b as usize] as usize);
                }
            }
            Ahead::Node => self.links.prefetch(self.node_of[key as usize], false),
            Ahead::Neighbours => self.links.prefetch(self.node_of[key as usize], true),
        }
    }
}
