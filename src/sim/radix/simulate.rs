//! Replays requests, one at a time, against a radix cache and a whole-prompt cache of the same
//! capacity, and measures how many prompt tokens each finds already cached.
//!
//! For each request the radix cache matches the longest cached prefix, locks it (so that making
//! room cannot evict it), takes blocks for the prompt's remaining whole pages from the allocator,
//! evicting other branches when the pool is full, inserts the prompt and unlocks. A prompt whose
//! new pages do not all fit even after evicting everything unlocked is cached only in part.
//!
//! With `in_flight` K > 1, each request keeps its whole prompt locked (as a running request keeps
//! its KV) until K - 1 later requests have arrived, so locks can leave eviction short of room.

use super::policy::EvictionPolicy;
use super::tree::{RadixError, RadixTree};
use super::whole::WholePromptCache;
use crate::kv::{AllocError, BlockAllocator};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::VecDeque;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum SimError {
    #[error("no requests to replay")]
    NoRequests,
    #[error("no capacities given")]
    NoCapacities,
    #[error("page size must be at least 1")]
    ZeroPageSize,
    #[error("requests in flight must be at least 1")]
    ZeroInFlight,
    #[error("capacity {capacity} tokens is less than one page of {page_size} tokens")]
    CapacityBelowPage { capacity: usize, page_size: usize },
    #[error(transparent)]
    Radix(#[from] RadixError),
    #[error("block allocator: {0}")]
    Alloc(#[from] AllocError),
}

#[derive(Debug, Clone, Serialize)]
pub struct SimConfig {
    pub page_size: usize,
    pub policy: EvictionPolicy,
    /// Cache capacities in tokens; each is rounded down to whole pages.
    pub capacities: Vec<usize>,
    /// Requests running at once, each holding a lock on its prompt (1: one at a time).
    pub in_flight: usize,
}

impl SimConfig {
    /// One capacity, one request at a time.
    pub fn new(page_size: usize, policy: EvictionPolicy, capacities: Vec<usize>) -> Self {
        SimConfig {
            page_size,
            policy,
            capacities,
            in_flight: 1,
        }
    }
}

/// One capacity's results.
#[derive(Debug, Clone, Serialize)]
pub struct CapacityResult {
    pub capacity: usize,
    pub requests: usize,
    /// Prompt tokens over all requests: the denominator of both hit ratios.
    pub prompt_tokens: usize,
    /// Cacheable tokens (whole pages) if every request were stored on its own.
    pub tokens_naive: usize,
    /// Tokens in the radix tree at the end.
    pub tokens_stored: usize,
    pub nodes: usize,
    pub avg_tokens_per_node: f64,
    pub prefix_hit_tokens: usize,
    pub prefix_hit_ratio: f64,
    /// Requests whose identical prompt was in the whole-prompt cache.
    pub whole_match_hits: usize,
    pub whole_match_hit_tokens: usize,
    pub whole_match_hit_ratio: f64,
    pub evicted_tokens: usize,
    pub evictions_short: usize,
    /// Tokens of new pages that did not fit even after evicting everything unlocked.
    pub uncached_tokens: usize,
}

/// What sharing saves: every request stored alone against the tree holding them all.
#[derive(Debug, Clone, Serialize)]
pub struct DedupStats {
    pub requests: usize,
    pub tokens_naive: usize,
    pub tokens_stored: usize,
    pub nodes: usize,
    pub avg_tokens_per_node: f64,
    /// `tokens_naive / tokens_stored`.
    pub dedup_ratio: f64,
    /// Hit ratios with room for everything: the ceiling for any capacity.
    pub prefix_hit_ratio: f64,
    pub whole_match_hit_ratio: f64,
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Replays `requests` against both caches at `capacity` tokens; returns the results and the tree.
pub fn simulate_capacity(
    requests: &[Vec<u32>],
    cfg: &SimConfig,
    capacity: usize,
) -> Result<(CapacityResult, RadixTree), SimError> {
    let (page_size, policy) = (cfg.page_size, cfg.policy);
    if cfg.in_flight == 0 {
        return Err(SimError::ZeroInFlight);
    }
    if requests.is_empty() {
        return Err(SimError::NoRequests);
    }
    if page_size == 0 {
        return Err(SimError::ZeroPageSize);
    }
    if capacity < page_size {
        return Err(SimError::CapacityBelowPage {
            capacity,
            page_size,
        });
    }
    let p = page_size;
    // More blocks than every request's pages together would never be used: cap the pool there,
    // so that an enormous capacity costs no memory (and cannot overflow the allocator's ids).
    let useful: usize = requests.iter().map(|r| r.len() / p).sum();
    let mut alloc = BlockAllocator::new((capacity / p).min(useful.max(1)), p);
    let mut tree = RadixTree::new(p, policy)?;
    let mut whole = WholePromptCache::new(capacity, p);
    // Nodes locked by requests still running, oldest first.
    let mut running: VecDeque<_> = VecDeque::new();
    let mut r = CapacityResult {
        capacity,
        requests: requests.len(),
        prompt_tokens: 0,
        tokens_naive: 0,
        tokens_stored: 0,
        nodes: 0,
        avg_tokens_per_node: 0.0,
        prefix_hit_tokens: 0,
        prefix_hit_ratio: 0.0,
        whole_match_hits: 0,
        whole_match_hit_tokens: 0,
        whole_match_hit_ratio: 0.0,
        evicted_tokens: 0,
        evictions_short: 0,
        uncached_tokens: 0,
    };
    for req in requests {
        let pages = req.len() / p;
        r.prompt_tokens += req.len();
        r.tokens_naive += pages * p;
        if whole.access(req) {
            r.whole_match_hits += 1;
            r.whole_match_hit_tokens += req.len();
        }
        let hit = tree.match_prefix(req);
        r.prefix_hit_tokens += hit.len;
        tree.lock(hit.node)?;
        let need = pages - hit.len / p;
        if alloc.free_blocks() < need {
            let out = tree.evict((need - alloc.free_blocks()) * p, &mut alloc)?;
            r.evicted_tokens += out.freed_tokens;
            r.evictions_short += usize::from(out.shortfall_tokens > 0);
        }
        let fit = need.min(alloc.free_blocks());
        let mut blocks = hit.blocks;
        blocks.extend(alloc.allocate_blocks(fit)?);
        let stored = tree.insert(&req[..hit.len + fit * p], &blocks)?;
        // The matched prefix was locked, so nothing of ours was already there; were it otherwise
        // the duplicate new blocks would be ours to give back.
        for &b in &blocks[hit.len / p..stored.prefix_len / p] {
            alloc.release_block(b)?;
        }
        // The request now holds all of its cached prompt, not just the prefix it found.
        tree.lock(stored.node)?;
        tree.unlock(hit.node)?;
        running.push_back(stored.node);
        while running.len() >= cfg.in_flight {
            tree.unlock(running.pop_front().expect("not empty"))?;
        }
        r.uncached_tokens += (need - fit) * p;
    }
    for node in running {
        tree.unlock(node)?;
    }
    r.tokens_stored = tree.total_tokens();
    r.nodes = tree.node_count();
    r.avg_tokens_per_node = ratio(r.tokens_stored, r.nodes);
    r.prefix_hit_ratio = ratio(r.prefix_hit_tokens, r.prompt_tokens);
    r.whole_match_hit_ratio = ratio(r.whole_match_hit_tokens, r.prompt_tokens);
    Ok((r, tree))
}

/// Deduplication with room for every request, and the tree that holds them all.
pub fn dedup_stats(
    requests: &[Vec<u32>],
    page_size: usize,
    policy: EvictionPolicy,
) -> Result<(DedupStats, RadixTree), SimError> {
    if page_size == 0 {
        return Err(SimError::ZeroPageSize);
    }
    // Room for every prompt in either cache (the whole-prompt cache also stores partial pages).
    let pages: usize = requests.iter().map(|r| r.len().div_ceil(page_size)).sum();
    let capacity = pages.max(1) * page_size;
    let cfg = SimConfig::new(page_size, policy, vec![capacity]);
    let (r, tree) = simulate_capacity(requests, &cfg, capacity)?;
    let stats = DedupStats {
        requests: r.requests,
        tokens_naive: r.tokens_naive,
        tokens_stored: r.tokens_stored,
        nodes: r.nodes,
        avg_tokens_per_node: r.avg_tokens_per_node,
        dedup_ratio: ratio(r.tokens_naive, r.tokens_stored),
        prefix_hit_ratio: r.prefix_hit_ratio,
        whole_match_hit_ratio: r.whole_match_hit_ratio,
    };
    Ok((stats, tree))
}

/// The bytes a run over prompts of `tokens` tokens in all, `pages` pages, holds at once, for a
/// check before anything is built: the prompts (4 bytes a token), the whole-prompt cache with room
/// for everything (each prompt twice, as key and in its age order: 8), the dedup tree's copy of
/// the tokens (4) and per page its block (4) and the allocator's four words (16). A run at page
/// size 1 measured 38-40 bytes a token against these 36.
pub fn bytes_needed(tokens: u64, pages: u64) -> u64 {
    tokens
        .saturating_mul(16)
        .saturating_add(pages.saturating_mul(20))
}

/// One result per capacity, in the order given (capacities run in parallel).
pub fn simulate(requests: &[Vec<u32>], cfg: &SimConfig) -> Result<Vec<CapacityResult>, SimError> {
    if cfg.capacities.is_empty() {
        return Err(SimError::NoCapacities);
    }
    cfg.capacities
        .par_iter()
        .map(|&c| simulate_capacity(requests, cfg, c).map(|(r, _)| r))
        .collect()
}
