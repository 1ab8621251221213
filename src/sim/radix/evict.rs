//! Eviction: remove unlocked leaves in policy order until enough tokens are freed. A parent whose
//! last child goes becomes a leaf and joins the candidates, so whole branches can go, leaves first.

use super::tree::{NodeId, NodeInfo, RadixError, RadixTree};
use crate::kv::BlockAllocator;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// What one eviction freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct EvictOutcome {
    pub requested_tokens: usize,
    /// Tokens freed: at least the request unless locks prevented it (it can exceed it by part of
    /// the last node, which goes whole).
    pub freed_tokens: usize,
    /// Tokens of the request that could not be freed because every remaining node is locked.
    pub shortfall_tokens: usize,
    pub nodes_removed: usize,
    /// Tokens held by locks after the eviction.
    pub locked_tokens: usize,
}

impl RadixTree {
    /// Frees at least `tokens` tokens (or all that no lock holds), returning the blocks to `alloc`.
    pub fn evict(
        &mut self,
        tokens: usize,
        alloc: &mut BlockAllocator,
    ) -> Result<EvictOutcome, RadixError> {
        self.evict_observed(tokens, alloc, |_| {})
    }

    /// [`Self::evict`], calling `on_remove` with each node just before it goes.
    pub fn evict_observed(
        &mut self,
        tokens: usize,
        alloc: &mut BlockAllocator,
        mut on_remove: impl FnMut(&NodeInfo),
    ) -> Result<EvictOutcome, RadixError> {
        let priority = |t: &RadixTree, id: NodeId| {
            let n = t.node(id);
            Reverse((t.policy.key(n.last_access, n.hits, n.created), id))
        };
        let mut heap: BinaryHeap<_> = self
            .evictable_leaves
            .iter()
            .map(|&id| priority(self, id))
            .collect();
        let mut outcome = EvictOutcome {
            requested_tokens: tokens,
            ..EvictOutcome::default()
        };
        let mut release_error = None;
        while outcome.freed_tokens < tokens {
            let Some(Reverse((_, id))) = heap.pop() else {
                break;
            };
            if let Some(info) = self.info(id) {
                on_remove(&info);
            }
            let parent = self.node(id).parent.expect("leaves have parents");
            let blocks = self.remove_leaf(id);
            outcome.freed_tokens += blocks.len() * self.page_size;
            outcome.nodes_removed += 1;
            for b in blocks {
                if let Err(e) = alloc.release_block(b) {
                    release_error.get_or_insert(e);
                }
            }
            if self.evictable_leaves.contains(&parent) {
                heap.push(priority(self, parent));
            }
        }
        if let Some(e) = release_error {
            return Err(e.into());
        }
        outcome.shortfall_tokens = tokens.saturating_sub(outcome.freed_tokens);
        outcome.locked_tokens = self.protected_tokens;
        Ok(outcome)
    }
}
