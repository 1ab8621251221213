//! LFU: evict the key with the fewest hits since it entered the cache; among keys with equally few,
//! the one used least recently. Counts start at 1 on admission and are forgotten on eviction
//! (in-cache LFU, no aging).
//!
//! O(1) per request (Shah, Mitra and Matani, 2010): keys sit in buckets of equal count, buckets in a
//! list ordered by count. A hit moves the key to the bucket for count + 1, created right behind its
//! own if missing; the victim is the back (least recent) key of the front (lowest) bucket. A key
//! enters a bucket only when it is used, so within a bucket the front-to-back order is recency.

use super::links::{Links, NONE};
use super::prefetch::touch;
use super::{Ahead, CachePolicy};

const ORDER: usize = 0;

pub struct Lfu {
    /// One list per bucket (list id = bucket id) over the item nodes.
    items: Links,
    /// The live buckets by count, lowest first; bucket `b` is node `1 + b`.
    order: Links,
    count: Vec<u64>,
    free_buckets: Vec<u32>,
    bucket_of: Vec<u32>,
    key_of: Vec<u32>,
    node_of: Vec<u32>,
    len: usize,
    slots: usize,
    capacity: usize,
}

impl Lfu {
    /// Panics if `capacity` is 0.
    pub fn new(capacity: usize, key_space: usize) -> Self {
        assert!(capacity >= 1, "capacity must be at least 1");
        let slots = capacity.min(key_space);
        // Live buckets are non-empty, plus one being created before the old one empties.
        let buckets = slots + 1;
        let nodes = buckets + slots;
        Lfu {
            items: Links::new(buckets, slots),
            order: Links::new(1, buckets),
            count: vec![0; buckets],
            free_buckets: (0..buckets as u32).rev().collect(),
            bucket_of: vec![NONE; nodes],
            key_of: vec![NONE; nodes],
            node_of: vec![NONE; key_space],
            len: 0,
            slots,
            capacity,
        }
    }

    fn new_bucket(&mut self, count: u64) -> u32 {
        let b = self
            .free_buckets
            .pop()
            .expect("at most slots + 1 live buckets");
        self.count[b as usize] = count;
        b
    }

    fn drop_if_empty(&mut self, b: u32) {
        if self.items.is_empty(b as usize) {
            self.order.unlink(ORDER, 1 + b);
            self.free_buckets.push(b);
        }
    }

    /// (count, key) pairs from the next victim onward, for tests.
    pub fn eviction_order(&self) -> Vec<(u64, u32)> {
        self.order
            .iter(ORDER)
            .flat_map(|bn| {
                let b = (bn - 1) as usize;
                let mut keys: Vec<(u64, u32)> = self
                    .items
                    .iter(b)
                    .map(|n| (self.count[b], self.key_of[n as usize]))
                    .collect();
                keys.reverse();
                keys
            })
            .collect()
    }
}

impl CachePolicy for Lfu {
    #[inline]
    fn access(&mut self, key: u32) -> bool {
        let n = self.node_of[key as usize];
        if n != NONE {
            let b = self.bucket_of[n as usize];
            let c = self.count[b as usize];
            let target = match self.order.toward_back(ORDER, 1 + b) {
                Some(nb) if self.count[(nb - 1) as usize] == c + 1 => nb - 1,
                _ => {
                    let t = self.new_bucket(c + 1);
                    self.order.insert_behind(ORDER, 1 + b, 1 + t);
                    t
                }
            };
            self.items.unlink(b as usize, n);
            self.items.push_front(target as usize, n);
            self.bucket_of[n as usize] = target;
            self.drop_if_empty(b);
            return true;
        }
        let n = if self.len < self.slots {
            self.len += 1;
            self.items.first_node() + (self.len - 1) as u32
        } else {
            let lowest = self.order.front(ORDER).expect("a full cache has buckets") - 1;
            let victim = self
                .items
                .pop_back(lowest as usize)
                .expect("live buckets hold keys");
            self.node_of[self.key_of[victim as usize] as usize] = NONE;
            self.drop_if_empty(lowest);
            victim
        };
        let b = match self.order.front(ORDER) {
            Some(f) if self.count[(f - 1) as usize] == 1 => f - 1,
            _ => {
                let b = self.new_bucket(1);
                self.order.push_front(ORDER, 1 + b);
                b
            }
        };
        self.items.push_front(b as usize, n);
        self.bucket_of[n as usize] = b;
        self.key_of[n as usize] = key;
        self.node_of[key as usize] = n;
        false
    }

    fn grow_key_space(&mut self, key_space: usize) {
        if key_space <= self.node_of.len() {
            return;
        }
        if self.capacity.min(key_space) == self.slots {
            self.node_of.resize(key_space, NONE);
            return;
        }
        // More slots means more buckets, which renumbers every node: rebuild the same buckets,
        // lowest count first, each back (least recent) to front.
        let mut grown = Lfu::new(self.capacity, key_space);
        let mut bucket = None;
        for (count, key) in self.eviction_order() {
            let b = match bucket {
                Some((c, b)) if c == count => b,
                _ => {
                    let b = grown.new_bucket(count);
                    grown.order.push_back(ORDER, 1 + b);
                    bucket = Some((count, b));
                    b
                }
            };
            grown.len += 1;
            let n = grown.items.first_node() + (grown.len - 1) as u32;
            grown.items.push_front(b as usize, n);
            grown.bucket_of[n as usize] = b;
            grown.key_of[n as usize] = key;
            grown.node_of[key as usize] = n;
        }
        *self = grown;
    }

    fn len(&self) -> usize {
        self.len
    }

    fn contains(&self, key: u32) -> bool {
        self.node_of[key as usize] != NONE
    }

    #[inline(always)]
    fn prefetch(&self, key: u32, ahead: Ahead) {
        let n = self.node_of[key as usize];
        match ahead {
            Ahead::Entry => {
                touch(&self.node_of, key as usize);
                // The next miss evicts the back of the lowest bucket.
                if let Some(f) = self.order.front(ORDER) {
                    if let Some(v) = self.items.back((f - 1) as usize) {
                        self.items.prefetch(v, true);
                        touch(&self.node_of, self.key_of[v as usize] as usize);
                    }
                }
            }
            Ahead::Node => {
                self.items.prefetch(n, false);
                touch(&self.bucket_of, n as usize);
            }
            Ahead::Neighbours => {
                self.items.prefetch(n, true);
                if let Some(&b) = self.bucket_of.get(n as usize).filter(|&&b| b != NONE) {
                    self.order.prefetch(1 + b, true);
                    touch(&self.count, b as usize);
                }
            }
        }
    }
}
