//! LRU: evict the key used least recently. Keys are the nodes of one intrusive list, so a hit
//! moves the key's own links to the front, and a miss unlinks the back key and links the new one.

use super::links::Links;
use super::{Ahead, CachePolicy};

const LIST: usize = 0;

pub struct Lru {
    links: Links,
    capacity: usize,
}

impl Lru {
    /// Panics if `capacity` is 0.
    pub fn new(capacity: usize, key_space: usize) -> Self {
        assert!(capacity >= 1, "capacity must be at least 1");
        Lru {
            links: Links::new(1, key_space),
            capacity,
        }
    }

    /// Keys from most to least recently used (for tests).
    pub fn keys_by_recency(&self) -> Vec<u32> {
        self.links.iter(LIST).collect()
    }
}

impl CachePolicy for Lru {
    #[inline]
    fn access(&mut self, key: u32) -> bool {
        if self.links.is_linked(key) {
            self.links.move_to_front(LIST, LIST, key);
            return true;
        }
        if self.links.len(LIST) >= self.capacity {
            self.links.pop_back(LIST);
        }
        self.links.push_front(LIST, key);
        false
    }

    fn len(&self) -> usize {
        self.links.len(LIST)
    }

    fn contains(&self, key: u32) -> bool {
        self.links.is_linked(key)
    }

    fn grow_key_space(&mut self, key_space: usize) {
        if key_space > self.links.nodes() {
            self.links
                .grow(super::grown(self.links.nodes(), key_space), 1);
        }
    }

    #[inline(always)]
    fn prefetch(&self, key: u32, ahead: Ahead) {
        match ahead {
            Ahead::Entry => {
                self.links.prefetch(key, false);
                // The next miss unlinks the back.
                self.links.prefetch_back(LIST);
            }
            Ahead::Neighbours => self.links.prefetch(key, true),
        }
    }
}
