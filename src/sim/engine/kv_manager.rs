//! vLLM's KV cache manager for one full-attention group (`kv_cache_manager.py` over
//! `single_type_kv_cache_manager.py`'s `FullAttentionManager`): prefix lookups, slot allocation
//! with the admission gates (and the tokens a KV connector loads), block caching, and freeing in
//! eviction order. Block tables live in the requests ([`Req::blocks`]).

use super::block_pool::BlockPool;
use super::config::EngineConfig;
use super::request::{Req, Status};

#[derive(Debug, Clone)]
pub struct KvManager {
    pub pool: BlockPool,
    block_size: u32,
    caching: bool,
    max_model_len: u64,
    watermark_blocks: usize,
    new_blocks: Vec<u32>,
    /// Blocks handed to requests since the last [`KvManager::take_step_blocks`], when kept.
    step_blocks: Option<Vec<u32>>,
}

/// What an admission's allocation is asked to do (a running request passes no hit).
#[derive(Debug, Clone, Copy)]
pub struct Alloc<'a> {
    /// Tokens to compute this step.
    pub new_tokens: u32,
    /// Prefix-cache hit blocks and the tokens they hold.
    pub hit: &'a [u32],
    pub hit_tokens: u32,
    /// Tokens a KV connector loads after the hit (vLLM's `num_external_computed_tokens`).
    pub external_tokens: u32,
    /// Leave the blocks uncached until the load is done (vLLM's `delay_cache_blocks`).
    pub delay_cache: bool,
    /// Free blocks to leave for the prefills in flight (vLLM's `reserved_blocks`).
    pub reserved_blocks: usize,
    /// Admission gate: the whole sequence so far must fit.
    pub full_sequence_must_fit: bool,
    /// Some request is running: the watermark applies.
    pub has_scheduled_reqs: bool,
}

impl KvManager {
    pub fn new(cfg: &EngineConfig) -> Self {
        KvManager {
            pool: BlockPool::new(cfg.num_gpu_blocks, cfg.enable_prefix_caching),
            block_size: cfg.block_size.tokens(),
            caching: cfg.enable_prefix_caching,
            max_model_len: cfg.max_model_len as u64,
            watermark_blocks: cfg.watermark_blocks(),
            new_blocks: Vec::new(),
            step_blocks: None,
        }
    }

    /// Keeps the hashes of the cached blocks the pool evicts, for a store-on-evict host tier
    /// ([`super::block_pool::BlockPool::drain_evicted`]).
    pub fn record_evictions(&mut self) {
        self.pool.record_evictions();
    }

    /// Keeps the blocks handed to requests (new ones, and the hits an admission adopts): a
    /// native host tier flushes the stores that read blocks handed out again.
    pub fn keep_step_blocks(&mut self) {
        self.step_blocks.get_or_insert_with(Vec::new);
    }

    /// The blocks handed out since the last call (empty unless kept).
    pub fn take_step_blocks(&mut self) -> Vec<u32> {
        self.step_blocks
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Blocks `r` still needs to hold its whole sequence (vLLM's `_request_remaining_blocks`).
    pub fn remaining_blocks(&self, r: &Req) -> usize {
        let full = u64::from(r.num_tokens()).min(self.max_model_len);
        (full.div_ceil(u64::from(self.block_size)) as usize).saturating_sub(r.blocks.len())
    }

    pub fn caching(&self) -> bool {
        self.caching
    }

    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// The longest run of cached full blocks from the start of `r`'s sequence, at most
    /// `num_tokens - 1` tokens (the last token is always computed, for its logits). Pushes the
    /// blocks into `out` and returns the tokens they hold.
    pub fn get_computed_blocks(&self, r: &mut Req, out: &mut Vec<u32>) -> u32 {
        out.clear();
        if !self.caching {
            return 0;
        }
        let max_blocks = (r.num_tokens() - 1) / self.block_size;
        for j in 0..max_blocks {
            let h = r.block_hash(j, self.block_size);
            let found = if r.has_tokens() {
                self.pool.get_cached(h)
            } else {
                r.home(j, |b| self.pool.hash_of(b) == Some(h))
            };
            match found {
                Some(b) => out.push(b),
                None => break,
            }
        }
        out.len() as u32 * self.block_size
    }

    /// Blocks a request of `r`'s state needs taken from the free queue to hold `num_tokens`
    /// (vLLM's `get_num_blocks_to_allocate`): new blocks, plus hit blocks that are free now.
    fn blocks_to_allocate(&self, r: &Req, num_tokens: u64, hit: &[u32]) -> usize {
        let required = num_tokens.div_ceil(u64::from(self.block_size)) as usize;
        if r.num_cached_block.is_some() {
            return required.saturating_sub(r.blocks.len());
        }
        let local = hit.len() + r.blocks.len();
        let evictable = hit.iter().filter(|&&b| self.pool.ref_cnt(b) == 0).count();
        required.saturating_sub(local) + evictable
    }

    /// vLLM's `allocate_slots`: on success the request holds blocks for its computed tokens, the
    /// hit, the external tokens and `new_tokens` more, and its full blocks are cached (unless
    /// delayed); on failure nothing changed.
    pub fn allocate_slots(&mut self, r: &mut Req, a: Alloc) -> bool {
        let local_computed = u64::from(r.num_computed + a.hit_tokens);
        let total_computed =
            (local_computed + u64::from(a.external_tokens)).min(self.max_model_len);
        let watermark =
            if a.has_scheduled_reqs && matches!(r.status, Status::Waiting | Status::Preempted) {
                self.watermark_blocks
            } else {
                0
            };
        if a.full_sequence_must_fit {
            let full = u64::from(r.num_tokens()).min(self.max_model_len);
            if self.blocks_to_allocate(r, full, a.hit) + watermark > self.pool.num_free() {
                return false;
            }
        }
        let need_slot = (total_computed + u64::from(a.new_tokens)).min(self.max_model_len);
        let available = self.pool.num_free().saturating_sub(a.reserved_blocks);
        if self.blocks_to_allocate(r, need_slot, a.hit) + watermark > available {
            return false;
        }
        if r.num_cached_block.is_none() && (!a.hit.is_empty() || a.hit_tokens > 0) {
            // A first allocation that adopts cached blocks (running requests have no new hits).
            debug_assert!(r.blocks.is_empty());
            self.pool.touch(a.hit);
            r.blocks.extend_from_slice(a.hit);
            r.num_cached_block = Some(r.blocks.len() as u32);
            if let Some(v) = &mut self.step_blocks {
                v.extend_from_slice(a.hit);
            }
        }
        let required = need_slot.div_ceil(u64::from(self.block_size)) as usize;
        if required > r.blocks.len() {
            self.new_blocks.clear();
            self.pool
                .get_new_blocks(required - r.blocks.len(), &mut self.new_blocks);
            r.blocks.extend_from_slice(&self.new_blocks);
            if let Some(v) = &mut self.step_blocks {
                v.extend_from_slice(&self.new_blocks);
            }
        }
        if self.caching && !a.delay_cache {
            let to_cache =
                (total_computed + u64::from(a.new_tokens)).min(u64::from(r.num_tokens()));
            self.cache_blocks(r, to_cache as u32);
        }
        true
    }

    /// Caches `r`'s full blocks up to `num_tokens` tokens (vLLM's `cache_blocks`).
    pub fn cache_blocks(&mut self, r: &mut Req, num_tokens: u32) {
        let done = r.num_cached_block.unwrap_or(0);
        let full = num_tokens.min(r.num_tokens()) / self.block_size;
        if done >= full {
            return;
        }
        for j in done..full {
            let h = r.block_hash(j, self.block_size);
            let b = r.blocks[j as usize];
            if r.has_tokens() {
                self.pool.cache(b, h);
            } else if self.pool.hash_of(b) != Some(h) {
                self.pool.cache_private(b, h);
                let pool = &self.pool;
                r.add_home(j, b, |x| pool.hash_of(x) == Some(h));
            }
        }
        r.num_cached_block = Some(full);
    }

    /// Frees `r`'s blocks, tail first (so a chain's tail is evicted before its head).
    pub fn free(&mut self, r: &mut Req) {
        self.pool.free_blocks(r.blocks.iter().rev().copied());
        r.blocks.clear();
        r.num_cached_block = None;
    }

    /// Blocks in use (not in the free queue), the null block excluded.
    pub fn used_blocks(&self) -> usize {
        self.pool.num_blocks() - 1 - self.pool.num_free()
    }

    /// Checks the pool against the requests' block tables, and each table against its request.
    pub fn check(&self, reqs: &[Req]) -> Result<(), String> {
        let mut holders = vec![0u32; self.pool.num_blocks()];
        for r in reqs {
            // Running, loading from a host tier, receiving its KV, or loaded and not admitted
            // yet; finished with its KV still to be read by another instance.
            let holds = match r.status {
                Status::Running | Status::LoadingKv | Status::Receiving => true,
                Status::Finished => r.hold_kv,
                Status::Waiting | Status::Preempted => r.num_computed > 0,
                _ => false,
            };
            if !holds {
                if !r.blocks.is_empty() {
                    return Err(format!("{} ({:?}) holds blocks", r.id, r.status));
                }
                continue;
            }
            let mut seen = std::collections::HashSet::new();
            for &b in &r.blocks {
                if b == 0 || b as usize >= holders.len() {
                    return Err(format!("{} holds block {b}", r.id));
                }
                if !seen.insert(b) {
                    return Err(format!("{} holds block {b} twice", r.id));
                }
                holders[b as usize] += 1;
            }
            let need = u64::from(r.num_computed).div_ceil(u64::from(self.block_size)) as usize;
            if r.blocks.len() < need {
                return Err(format!(
                    "{}: {} blocks for {} computed tokens",
                    r.id,
                    r.blocks.len(),
                    r.num_computed
                ));
            }
            if let Some(c) = r.num_cached_block {
                if c as usize > r.blocks.len() {
                    return Err(format!("{}: {c} cached blocks of {}", r.id, r.blocks.len()));
                }
            }
        }
        self.pool.check(&holders)
    }
}
