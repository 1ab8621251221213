//! vLLM's block pool (`block_pool.py`): reference counts, the free queue, and the prefix cache's
//! map from block hash to blocks.
//!
//! - Block 0 is the null block: taken at start, never handed out, never freed.
//! - A block with reference count 0 is free and sits in the free queue, hashed or not; a hashed free
//!   block still serves prefix hits ([`BlockPool::touch`] takes it back out of the queue) until
//!   [`BlockPool::get_new_blocks`] reuses it, which drops its hash.
//! - [`BlockPool::free_blocks`] takes blocks in eviction order: those without a hash (or all, with
//!   prefix caching off) go to the front of the queue, those with one to the back.
//! - Several blocks may hold the same hash (two requests computed the same block); a lookup returns
//!   the one cached first that is still cached.
//! - A block of a prompt unique to its request can only ever be found by that request (after a
//!   preemption): it is cached privately ([`BlockPool::cache_private`]), with its hash on the block
//!   but not in the shared map, and the request keeps its own list ([`super::request::Req`]). The
//!   answers are the same; a trace of lengths then costs no hash-map traffic.
//!
//! Why not [`crate::kv::BlockAllocator`]: its free list is a stack of anonymous blocks, with no
//! way to keep freed blocks' contents findable, to take a particular free block back out, or to
//! order reuse front/back by whether a block is cached; those are exactly the semantics that decide
//! which blocks vLLM evicts and which prefix hits survive, so the pool here stands beside it.

use super::free_queue::FreeQueue;
use super::hash::{BlockHash, HashMapOfHashes};

/// The null block's id.
pub const NULL_BLOCK: u32 = 0;

#[derive(Debug, Clone)]
enum Holders {
    One(u32),
    /// In the order they were cached.
    Many(Vec<u32>),
}

/// A block's state, kept together so one cache line serves a block's every lookup.
#[derive(Debug, Clone, Copy, Default)]
struct Meta {
    hash: Option<BlockHash>,
    ref_cnt: u32,
    /// Whether the hash is in the shared map (else cached privately).
    shared: bool,
}

#[derive(Debug, Clone)]
pub struct BlockPool {
    queue: FreeQueue,
    meta: Vec<Meta>,
    cached: HashMapOfHashes<Holders>,
    caching: bool,
    evict_first: Vec<u32>,
    evict_last: Vec<u32>,
    /// Hashes dropped by [`BlockPool::get_new_blocks`] since the last drain, when recording
    /// (a host tier takes them).
    evicted: Option<Vec<BlockHash>>,
}

impl BlockPool {
    /// `num_gpu_blocks` blocks, the null block among them (so one fewer usable).
    pub fn new(num_gpu_blocks: usize, caching: bool) -> Self {
        let mut queue = FreeQueue::new(num_gpu_blocks);
        assert_eq!(queue.pop_front(), Some(NULL_BLOCK), "at least one block");
        BlockPool {
            queue,
            meta: vec![Meta::default(); num_gpu_blocks],
            cached: HashMapOfHashes::default(),
            caching,
            evict_first: Vec::new(),
            evict_last: Vec::new(),
            evicted: None,
        }
    }

    /// Keeps the hashes of the cached blocks it evicts from now on, for [`BlockPool::drain_evicted`].
    pub fn record_evictions(&mut self) {
        self.evicted.get_or_insert_with(Vec::new);
    }

    /// The hashes evicted since the last call, in eviction order.
    pub fn drain_evicted(&mut self) -> impl Iterator<Item = BlockHash> + '_ {
        self.evicted.iter_mut().flat_map(|v| v.drain(..))
    }

    pub fn num_blocks(&self) -> usize {
        self.meta.len()
    }

    /// Free blocks, cached ones included (vLLM's `get_num_free_blocks`).
    pub fn num_free(&self) -> usize {
        self.queue.len()
    }

    pub fn ref_cnt(&self, b: u32) -> u32 {
        self.meta[b as usize].ref_cnt
    }

    pub fn hash_of(&self, b: u32) -> Option<BlockHash> {
        self.meta[b as usize].hash
    }

    /// The block first cached under `h` that still holds it.
    pub fn get_cached(&self, h: BlockHash) -> Option<u32> {
        match self.cached.get(&h)? {
            Holders::One(b) => Some(*b),
            Holders::Many(v) => v.first().copied(),
        }
    }

    /// Takes `n` blocks from the front of the free queue (dropping their hashes) into `out`, each
    /// with reference count 1. The caller has checked that `n` are free.
    pub fn get_new_blocks(&mut self, n: usize, out: &mut Vec<u32>) {
        assert!(
            n <= self.num_free(),
            "{n} blocks asked, {} free",
            self.num_free()
        );
        for _ in 0..n {
            let b = self.queue.pop_front().expect("checked above");
            if let (Some(h), Some(log)) = (self.uncache(b), self.evicted.as_mut()) {
                log.push(h);
            }
            debug_assert_eq!(self.meta[b as usize].ref_cnt, 0);
            self.meta[b as usize].ref_cnt = 1;
            out.push(b);
        }
    }

    /// One more reference to each block (a prefix hit); free ones leave the queue.
    pub fn touch(&mut self, blocks: &[u32]) {
        for &b in blocks {
            if b == NULL_BLOCK {
                continue;
            }
            if self.meta[b as usize].ref_cnt == 0 {
                self.queue.remove(b);
            }
            self.meta[b as usize].ref_cnt += 1;
        }
    }

    /// Drops one reference to each block, `ordered` first-to-evict first.
    pub fn free_blocks(&mut self, ordered: impl Iterator<Item = u32>) {
        self.evict_first.clear();
        self.evict_last.clear();
        for b in ordered {
            if b == NULL_BLOCK {
                continue;
            }
            let m = &mut self.meta[b as usize];
            debug_assert!(m.ref_cnt > 0, "block {b} freed twice");
            m.ref_cnt -= 1;
            if m.ref_cnt == 0 {
                if m.hash.is_none() || !self.caching {
                    self.evict_first.push(b);
                } else {
                    self.evict_last.push(b);
                }
            }
        }
        self.queue.push_front_all(&self.evict_first);
        for &b in &self.evict_last {
            self.queue.push_back(b);
        }
    }

    /// Makes `b` findable under `h` (vLLM's `_insert_block_hash` for a newly full block).
    pub fn cache(&mut self, b: u32, h: BlockHash) {
        if self.meta[b as usize].hash == Some(h) {
            return;
        }
        debug_assert!(
            self.meta[b as usize].hash.is_none(),
            "block {b} is already cached under another hash"
        );
        self.meta[b as usize].hash = Some(h);
        self.meta[b as usize].shared = true;
        match self.cached.get_mut(&h) {
            None => {
                self.cached.insert(h, Holders::One(b));
            }
            Some(slot) => match slot {
                Holders::One(first) => *slot = Holders::Many(vec![*first, b]),
                Holders::Many(v) => v.push(b),
            },
        }
    }

    /// Marks `b` cached under `h` without listing it (a unique prompt's block: only its own
    /// request can look for it, and does so through its own list).
    pub fn cache_private(&mut self, b: u32, h: BlockHash) {
        debug_assert!(self.meta[b as usize].hash.is_none_or(|x| x == h));
        self.meta[b as usize].hash = Some(h);
    }

    /// Drops `b`'s hash (eviction from the prefix cache) and returns it.
    fn uncache(&mut self, b: u32) -> Option<BlockHash> {
        let h = self.meta[b as usize].hash.take()?;
        if !std::mem::take(&mut self.meta[b as usize].shared) {
            return Some(h);
        }
        let empty = match self.cached.get_mut(&h) {
            Some(Holders::One(x)) => *x == b,
            Some(Holders::Many(v)) => {
                v.retain(|&x| x != b);
                v.is_empty()
            }
            None => false,
        };
        if empty {
            self.cached.remove(&h);
        }
        Some(h)
    }

    /// Blocks in the free queue, front first.
    pub fn free_queue(&self) -> impl Iterator<Item = u32> + '_ {
        self.queue.iter()
    }

    /// Checks the pool against `holders[b]`, the number of request block tables that hold `b`.
    pub fn check(&self, holders: &[u32]) -> Result<(), String> {
        let n = self.num_blocks();
        if self.queue.contains(NULL_BLOCK) || self.meta[0].hash.is_some() {
            return Err("the null block is free or cached".into());
        }
        let mut queued = vec![false; n];
        for b in self.queue.iter() {
            if std::mem::replace(&mut queued[b as usize], true) {
                return Err(format!("block {b} twice in the free queue"));
            }
        }
        for b in 1..n {
            if self.meta[b].ref_cnt != holders[b] {
                return Err(format!(
                    "block {b}: reference count {} but {} holders",
                    self.meta[b].ref_cnt, holders[b]
                ));
            }
            if queued[b] != (self.meta[b].ref_cnt == 0) {
                return Err(format!(
                    "block {b}: in the free queue {} with reference count {}",
                    queued[b], self.meta[b].ref_cnt
                ));
            }
            if let Some(h) = self.meta[b].hash {
                let listed = match self.cached.get(&h) {
                    Some(Holders::One(x)) => *x as usize == b,
                    Some(Holders::Many(v)) => v.contains(&(b as u32)),
                    None => false,
                };
                if listed != self.meta[b].shared {
                    return Err(format!(
                        "block {b} holds hash {h:#x}, shared {} but listed {listed}",
                        self.meta[b].shared
                    ));
                }
            } else if self.meta[b].shared {
                return Err(format!("block {b} is marked shared without a hash"));
            }
        }
        for (h, holders) in &self.cached {
            let list = match holders {
                Holders::One(b) => std::slice::from_ref(b),
                Holders::Many(v) => v.as_slice(),
            };
            if list.is_empty() {
                return Err(format!("hash {h:#x} has an empty holder list"));
            }
            for &b in list {
                if self.meta[b as usize].hash != Some(*h) || !self.meta[b as usize].shared {
                    return Err(format!(
                        "hash {h:#x} lists block {b}, which does not hold it"
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_order_hits_and_eviction_follow_vllm() {
        let mut p = BlockPool::new(6, true);
        p.record_evictions();
        assert_eq!(p.num_free(), 5);
        let mut a = Vec::new();
        p.get_new_blocks(3, &mut a);
        assert_eq!(a, [1, 2, 3]);
        p.cache(1, 11);
        p.cache(2, 22);
        // Freed tail first: 3 has no hash and goes to the front; 2, then 1, to the back.
        p.free_blocks(a.iter().rev().copied());
        assert_eq!(p.free_queue().collect::<Vec<_>>(), [3, 4, 5, 2, 1]);
        assert_eq!(p.get_cached(22), Some(2));
        // A hit takes block 2 out of the queue.
        p.touch(&[2]);
        assert_eq!((p.ref_cnt(2), p.num_free()), (1, 4));
        let mut b = Vec::new();
        p.get_new_blocks(4, &mut b);
        assert_eq!(b, [3, 4, 5, 1]);
        // Reusing block 1 evicted its hash.
        assert_eq!((p.get_cached(11), p.hash_of(1)), (None, None));
        assert_eq!(p.drain_evicted().collect::<Vec<_>>(), [11]);
        assert_eq!(p.drain_evicted().count(), 0);
        let mut holders = vec![0; 6];
        for &x in b.iter().chain([2].iter()) {
            holders[x as usize] += 1;
        }
        p.check(&holders).unwrap();
        holders[2] = 0;
        assert!(p.check(&holders).is_err());
    }

    #[test]
    fn duplicate_hashes_answer_with_the_first_cached_and_survive_its_eviction() {
        let mut p = BlockPool::new(4, true);
        let mut a = Vec::new();
        p.get_new_blocks(2, &mut a);
        p.cache(1, 7);
        p.cache(2, 7);
        p.cache(2, 7);
        assert_eq!(p.get_cached(7), Some(1));
        p.free_blocks([1].into_iter());
        let mut b = Vec::new();
        p.get_new_blocks(2, &mut b); // 3, then 1 (evicting it)
        assert_eq!(b, [3, 1]);
        assert_eq!(p.get_cached(7), Some(2));
        p.free_blocks([2, 3, 1].into_iter());
        assert_eq!(p.free_queue().collect::<Vec<_>>(), [3, 1, 2]);
        p.check(&[0; 4]).unwrap();
    }

    #[test]
    fn without_caching_every_freed_block_goes_to_the_front() {
        let mut p = BlockPool::new(4, false);
        let mut a = Vec::new();
        p.get_new_blocks(3, &mut a);
        p.free_blocks([3, 2, 1].into_iter());
        assert_eq!(p.free_queue().collect::<Vec<_>>(), [3, 2, 1]);
    }
}
