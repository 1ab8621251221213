//! CLOCK (second chance): frames in a circle with one reference bit each. A hit sets the bit; on a
//! miss the hand clears set bits as it passes and replaces the first frame whose bit is clear. New
//! keys enter with the bit clear, as in FIFO-reinsertion. Each bit the hand clears was set by a hit,
//! so a request costs O(1) amortised.

use super::links::NONE;
use super::prefetch::touch;
use super::{Ahead, CachePolicy};

pub struct Clock {
    keys: Vec<u32>,
    referenced: Vec<bool>,
    frame_of: Vec<u32>,
    hand: usize,
    slots: usize,
    capacity: usize,
}

impl Clock {
    /// Panics if `capacity` is 0.
    pub fn new(capacity: usize, key_space: usize) -> Self {
        assert!(capacity >= 1, "capacity must be at least 1");
        let slots = capacity.min(key_space);
        Clock {
            keys: Vec::with_capacity(slots),
            referenced: Vec::with_capacity(slots),
            frame_of: vec![NONE; key_space],
            hand: 0,
            slots,
            capacity,
        }
    }
}

impl CachePolicy for Clock {
    #[inline]
    fn access(&mut self, key: u32) -> bool {
        let f = self.frame_of[key as usize];
        if f != NONE {
            self.referenced[f as usize] = true;
            return true;
        }
        if self.keys.len() < self.slots {
            self.frame_of[key as usize] = self.keys.len() as u32;
            self.keys.push(key);
            self.referenced.push(false);
            return false;
        }
        while std::mem::replace(&mut self.referenced[self.hand], false) {
            self.hand = if self.hand + 1 == self.slots {
                0
            } else {
                self.hand + 1
            };
        }
        let out = std::mem::replace(&mut self.keys[self.hand], key);
        self.frame_of[out as usize] = NONE;
        self.frame_of[key as usize] = self.hand as u32;
        self.hand = if self.hand + 1 == self.slots {
            0
        } else {
            self.hand + 1
        };
        false
    }

    fn grow_key_space(&mut self, key_space: usize) {
        if key_space <= self.frame_of.len() {
            return;
        }
        self.frame_of.resize(key_space, NONE);
        // Fewer slots than the capacity means every key fits: the hand has not moved yet.
        self.slots = self.capacity.min(key_space);
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    fn contains(&self, key: u32) -> bool {
        self.frame_of[key as usize] != NONE
    }

    #[inline(always)]
    fn prefetch(&self, key: u32, ahead: Ahead) {
        match ahead {
            Ahead::Entry => {
                touch(&self.frame_of, key as usize);
                if let Some(&k) = self.keys.get(self.hand) {
                    touch(&self.frame_of, k as usize);
                }
            }
            Ahead::Node => touch(&self.referenced, self.frame_of[key as usize] as usize),
            Ahead::Neighbours => {}
        }
    }
}
