//! CLOCK (second chance): frames in a circle with one reference bit each. A hit sets the bit; on a
//! miss the hand clears set bits as it passes and replaces the first frame whose bit is clear. New
//! keys enter with the bit clear, as in FIFO-reinsertion. Each bit the hand clears was set by a hit,
//! so a request costs O(1) amortised. It is libCacheSim's `Clock` at its defaults (a one-bit
//! counter, `n-bit-counter=1`, and new keys at `init-freq=0`): the same hits on the same trace.
//!
//! The bits live in one byte per key (resident, referenced) rather than per frame: a hit is one
//! load and one store into a table of a megabyte per million keys (it stays in the core's caches
//! where 4-byte frame numbers would not), and needs no key → frame lookup.

use super::prefetch::touch;
use super::{Ahead, CachePolicy};

const RESIDENT: u8 = 1;
const REFERENCED: u8 = 2;

pub struct Clock {
    /// The key in each frame; frames fill in order, then the hand goes round.
    frames: Vec<u32>,
    state: Vec<u8>,
    hand: usize,
    capacity: usize,
}

impl Clock {
    /// Panics if `capacity` is 0.
    pub fn new(capacity: usize, key_space: usize) -> Self {
        assert!(capacity >= 1, "capacity must be at least 1");
        Clock {
            frames: Vec::with_capacity(capacity.min(key_space)),
            state: vec![0; key_space],
            hand: 0,
            capacity,
        }
    }

    fn advance(&mut self) {
        self.hand += 1;
        if self.hand == self.capacity {
            self.hand = 0;
        }
    }
}

impl CachePolicy for Clock {
    #[inline]
    fn access(&mut self, key: u32) -> bool {
        let s = &mut self.state[key as usize];
        if *s != 0 {
            *s = RESIDENT | REFERENCED;
            return true;
        }
        *s = RESIDENT;
        if self.frames.len() < self.capacity {
            self.frames.push(key);
            return false;
        }
        loop {
            let k = self.frames[self.hand];
            let s = &mut self.state[k as usize];
            if *s & REFERENCED == 0 {
                *s = 0;
                break;
            }
            *s = RESIDENT;
            self.advance();
        }
        self.frames[self.hand] = key;
        self.advance();
        false
    }

    fn len(&self) -> usize {
        self.frames.len()
    }

    fn contains(&self, key: u32) -> bool {
        self.state[key as usize] != 0
    }

    fn grow_key_space(&mut self, key_space: usize) {
        if key_space > self.state.len() {
            self.state.resize(key_space, 0);
        }
    }

    #[inline(always)]
    fn prefetch(&self, key: u32, ahead: Ahead) {
        if ahead == Ahead::Entry {
            touch(&self.state, key as usize);
            // The hand's next stops.
            for f in self.frames.iter().skip(self.hand).take(2) {
                touch(&self.state, *f as usize);
            }
        }
    }
}
