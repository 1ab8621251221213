//! FIFO: evict the key that entered first; hits change nothing. Not a stack algorithm: a larger
//! FIFO cache can miss more (Belady's anomaly).

use super::prefetch::touch;
use super::{Ahead, CachePolicy};

pub struct Fifo {
    /// Keys in arrival order, as a ring once full; `oldest` is the next to go.
    ring: Vec<u32>,
    oldest: usize,
    capacity: usize,
    /// One byte per key (not a bit): a hit is one load, into a table of a megabyte per million
    /// keys.
    resident: Vec<bool>,
}

impl Fifo {
    /// Panics if `capacity` is 0.
    pub fn new(capacity: usize, key_space: usize) -> Self {
        assert!(capacity >= 1, "capacity must be at least 1");
        Fifo {
            ring: Vec::with_capacity(capacity.min(key_space)),
            oldest: 0,
            capacity,
            resident: vec![false; key_space],
        }
    }
}

impl CachePolicy for Fifo {
    #[inline]
    fn access(&mut self, key: u32) -> bool {
        if self.resident[key as usize] {
            return true;
        }
        if self.ring.len() < self.capacity {
            self.ring.push(key);
        } else {
            let out = std::mem::replace(&mut self.ring[self.oldest], key);
            self.resident[out as usize] = false;
            self.oldest += 1;
            if self.oldest == self.capacity {
                self.oldest = 0;
            }
        }
        self.resident[key as usize] = true;
        false
    }

    fn len(&self) -> usize {
        self.ring.len()
    }

    fn contains(&self, key: u32) -> bool {
        self.resident[key as usize]
    }

    fn grow_key_space(&mut self, key_space: usize) {
        if key_space > self.resident.len() {
            self.resident.resize(key_space, false);
        }
    }

    #[inline(always)]
    fn prefetch(&self, key: u32, ahead: Ahead) {
        if ahead == Ahead::Entry {
            touch(&self.resident, key as usize);
            if let Some(&k) = self.ring.get(self.oldest) {
                touch(&self.resident, k as usize);
            }
        }
    }
}
