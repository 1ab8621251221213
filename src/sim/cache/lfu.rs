//! LFU: evict the key with the fewest hits since it entered the cache; among keys with equally few,
//! the one used least recently. Counts start at 1 on admission and are forgotten on eviction
//! (in-cache LFU, no aging).
//!
//! O(1) per request (Shah, Mitra and Matani, 2010): keys sit in buckets of equal count, buckets in a
//! list ordered by count. A hit moves the key to the bucket for count + 1, created right behind its
//! own if missing; the victim is the back (least recent) key of the front (lowest) bucket. A key
//! enters a bucket only when it is used, so within a bucket the front-to-back order is recency.
//!
//! Keys are the item lists' nodes, so a hit finds the key's links and bucket without a lookup.

use super::links::{Links, NONE};
use super::prefetch::touch;
use super::{Ahead, CachePolicy};

const ORDER: usize = 0;

pub struct Lfu {
    /// One list per bucket (list id = bucket id) over the keys.
    items: Links,
    /// The live buckets by count, lowest first; bucket `b` is node `b`.
    order: Links,
    count: Vec<u64>,
    free_buckets: Vec<u32>,
    /// The bucket of each key held, `NONE` for the others.
    bucket_of: Vec<u32>,
    len: usize,
    capacity: usize,
}

/// Live buckets are non-empty, plus one being created before the old one empties.
fn buckets_for(capacity: usize, key_space: usize) -> usize {
    capacity.min(key_space) + 1
}

impl Lfu {
    /// Panics if `capacity` is 0.
    pub fn new(capacity: usize, key_space: usize) -> Self {
        assert!(capacity >= 1, "capacity must be at least 1");
        let buckets = buckets_for(capacity, key_space);
        Lfu {
            items: Links::new(buckets, key_space),
            order: Links::new(1, buckets),
            count: vec![0; buckets],
            free_buckets: (0..buckets as u32).rev().collect(),
            bucket_of: vec![NONE; key_space],
            len: 0,
            capacity,
        }
    }

    fn new_bucket(&mut self, count: u64) -> u32 {
        let b = self
            .free_buckets
            .pop()
            .expect("at most capacity + 1 live buckets");
        self.count[b as usize] = count;
        b
    }

    fn drop_if_empty(&mut self, b: u32) {
        if self.items.is_empty(b as usize) {
            self.order.unlink(ORDER, b);
            self.free_buckets.push(b);
        }
    }

    /// (count, key) pairs from the next victim onward, for tests.
    pub fn eviction_order(&self) -> Vec<(u64, u32)> {
        self.order
            .iter(ORDER)
            .flat_map(|b| {
                let mut keys: Vec<(u64, u32)> = self
                    .items
                    .iter(b as usize)
                    .map(|k| (self.count[b as usize], k))
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
        let b = self.bucket_of[key as usize];
        if b != NONE {
            let c = self.count[b as usize];
            let target = match self.order.toward_back(b) {
                Some(nb) if self.count[nb as usize] == c + 1 => nb,
                _ => {
                    let t = self.new_bucket(c + 1);
                    self.order.insert_behind(ORDER, b, t);
                    t
                }
            };
            self.items.move_to_front(b as usize, target as usize, key);
            self.bucket_of[key as usize] = target;
            self.drop_if_empty(b);
            return true;
        }
        if self.len < self.capacity {
            self.len += 1;
        } else {
            let lowest = self.order.front(ORDER).expect("a full cache has buckets");
            let victim = self
                .items
                .pop_back(lowest as usize)
                .expect("live buckets hold keys");
            self.bucket_of[victim as usize] = NONE;
            self.drop_if_empty(lowest);
        }
        let b = match self.order.front(ORDER) {
            Some(f) if self.count[f as usize] == 1 => f,
            _ => {
                let b = self.new_bucket(1);
                self.order.push_front(ORDER, b);
                b
            }
        };
        self.items.push_front(b as usize, key);
        self.bucket_of[key as usize] = b;
        false
    }

    fn len(&self) -> usize {
        self.len
    }

    fn contains(&self, key: u32) -> bool {
        self.bucket_of[key as usize] != NONE
    }

    fn grow_key_space(&mut self, key_space: usize) {
        if key_space <= self.items.nodes() {
            return;
        }
        let nodes = super::grown(self.items.nodes(), key_space);
        let (old, buckets) = (self.count.len(), buckets_for(self.capacity, nodes));
        self.items.grow(nodes, buckets);
        self.order.grow(buckets, 1);
        self.count.resize(buckets, 0);
        self.free_buckets.extend((old as u32..buckets as u32).rev());
        self.bucket_of.resize(nodes, NONE);
    }

    #[inline(always)]
    fn prefetch(&self, key: u32, ahead: Ahead) {
        match ahead {
            Ahead::Entry => {
                touch(&self.bucket_of, key as usize);
                self.items.prefetch(key, false);
                // The next miss evicts the back of the lowest bucket.
                if let Some(f) = self.order.front(ORDER) {
                    self.items.prefetch_back(f as usize);
                    if let Some(v) = self.items.back(f as usize) {
                        touch(&self.bucket_of, v as usize);
                    }
                }
            }
            Ahead::Neighbours => {
                self.items.prefetch(key, true);
                if let Some(&b) = self.bucket_of.get(key as usize).filter(|&&b| b != NONE) {
                    self.order.prefetch(b, true);
                    touch(&self.count, b as usize);
                }
            }
        }
    }
}
