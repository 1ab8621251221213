//! FIFO: evict the key that entered first; hits change nothing. Not a stack algorithm: a larger
//! FIFO cache can miss more (Belady's anomaly).

use super::prefetch::touch;
use super::{Ahead, CachePolicy};

pub struct Fifo {
    /// Keys in arrival order, as a ring once full; `oldest` is the next to go.
    ring: Vec<u32>,
    oldest: usize,
    slots: usize,
    capacity: usize,
    resident: Vec<bool>,
}

impl Fifo {
    /// Panics if `capacity` is 0.
    pub fn new(capacity: usize, key_space: usize) -> Self {
        assert!(capacity >= 1, "capacity must be at least 1");
        let slots = capacity.min(key_space);
        Fifo {
            ring: Vec::with_capacity(slots),
            oldest: 0,
            slots,
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
        if self.ring.len() < self.slots {
            self.ring.push(key);
        } else {
            let out = std::mem::replace(&mut self.ring[self.oldest], key);
            self.resident[out as usize] = false;
            self.oldest = if self.oldest + 1 == self.slots {
                0
            } else {
                self.oldest + 1
            };
        }
        self.resident[key as usize] = true;
        false
    }

    fn grow_key_space(&mut self, key_space: usize) {
        if key_space <= self.resident.len() {
            return;
        }
        self.resident.resize(key_space, false);
        // Fewer slots than the capacity means every key fits: the ring has not wrapped yet.
        self.slots = self.capacity.min(key_space);
    }

    fn len(&self) -> usize {
        self.ring.len()
    }

    fn contains(&self, key: u32) -> bool {
        self.resident[key as usize]
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
