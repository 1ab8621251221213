//! SGLang's router state for its cache-aware policy (`sgl-router/src/tree.rs`): one approximate
//! prefix tree of the prompts the router sent, each node tagged with the replicas ("tenants") it
//! was sent to and when. Here a node is a full block of the engine's block size named by its
//! block hash, which chains the whole prefix, so a map from hash to node is the tree; SGLang's
//! tree holds characters, so its matches are finer than a block.
//!
//! Eviction as SGLang's background thread does it: every `eviction_interval`, each tenant that
//! holds more than `max_size` tokens loses its least recently used leaves until it fits.

use crate::sim::engine::hash::{BlockHash, HashMapOfHashes};
use std::collections::VecDeque;

#[derive(Debug, Clone, Default)]
struct Node {
    /// (tenant, last access) for every tenant the prefix was sent to.
    tenants: Vec<(u32, f64)>,
}

#[derive(Debug, Clone)]
pub struct ApproxTree {
    nodes: HashMapOfHashes<Node>,
    /// Tokens each tenant holds.
    size: Vec<u64>,
    /// Per tenant, its touches in time order, leaves before their parents among equal times
    /// (stale entries, touched again since, are skipped when evicting).
    touches: Vec<VecDeque<(f64, BlockHash)>>,
    block_size: u32,
}

impl ApproxTree {
    pub fn new(tenants: usize, block_size: u32) -> Self {
        ApproxTree {
            nodes: HashMapOfHashes::default(),
            size: vec![0; tenants],
            touches: vec![VecDeque::new(); tenants],
            block_size,
        }
    }

    /// The longest run of `hashes` from the start that some tenant holds: (blocks, the lowest
    /// tenant holding all of them); `(0, None)` when none holds the first.
    pub fn prefix_match(&self, hashes: &[BlockHash]) -> (usize, Option<u32>) {
        let mut best = (0, None);
        for (j, h) in hashes.iter().enumerate() {
            match self
                .nodes
                .get(h)
                .and_then(|n| n.tenants.iter().map(|t| t.0).min())
            {
                Some(t) => best = (j + 1, Some(t)),
                None => break,
            }
        }
        best
    }

    /// The tenant holding the fewest tokens (the lowest of equals).
    pub fn smallest_tenant(&self) -> u32 {
        (0..self.size.len())
            .min_by_key(|&t| (self.size[t], t))
            .unwrap_or(0) as u32
    }

    pub fn tenant_tokens(&self, tenant: u32) -> u64 {
        self.size[tenant as usize]
    }

    /// Records that a prompt with these block hashes went to `tenant` at `now`.
    pub fn insert(&mut self, hashes: &[BlockHash], tenant: u32, now: f64) {
        for h in hashes {
            let node = self.nodes.entry(*h).or_default();
            match node.tenants.iter_mut().find(|t| t.0 == tenant) {
                Some(t) => t.1 = now,
                None => {
                    node.tenants.push((tenant, now));
                    self.size[tenant as usize] += u64::from(self.block_size);
                }
            }
        }
        // Deepest first, so that among equal times a leaf goes before its parent.
        let q = &mut self.touches[tenant as usize];
        q.extend(hashes.iter().rev().map(|&h| (now, h)));
    }

    /// Evicts each tenant's least recently used leaves until it holds at most `max_tokens`.
    pub fn evict(&mut self, max_tokens: u64) {
        for t in 0..self.size.len() {
            while self.size[t] > max_tokens {
                let Some((time, h)) = self.touches[t].pop_front() else {
                    break;
                };
                let Some(node) = self.nodes.get_mut(&h) else {
                    continue;
                };
                let Some(pos) = node.tenants.iter().position(|x| x.0 == t as u32) else {
                    continue;
                };
                if node.tenants[pos].1 != time {
                    continue; // touched again since: a later entry stands for it
                }
                node.tenants.swap_remove(pos);
                self.size[t] -= u64::from(self.block_size);
                if node.tenants.is_empty() {
                    self.nodes.remove(&h);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_longest_prefix_and_evicts_least_recent_leaves_first() {
        let mut t = ApproxTree::new(3, 16);
        t.insert(&[1, 2, 3], 2, 0.0);
        t.insert(&[1, 2], 1, 1.0);
        assert_eq!(t.prefix_match(&[1, 2, 9]), (2, Some(1)));
        assert_eq!(t.prefix_match(&[1, 2, 3, 4]), (3, Some(2)));
        assert_eq!(t.prefix_match(&[7]), (0, None));
        assert_eq!(t.smallest_tenant(), 0);
        assert_eq!((t.tenant_tokens(1), t.tenant_tokens(2)), (32, 48));
        t.insert(&[5], 0, 2.0);
        t.insert(&[6], 1, 2.0);
        assert_eq!(t.smallest_tenant(), 0);
        // Tenant 2 keeps 16 tokens: its leaf 3 and then 2 go, its root 1 stays.
        t.insert(&[1], 2, 3.0);
        t.evict(16);
        assert_eq!(t.prefix_match(&[1, 2, 3]), (1, Some(2)));
        assert_eq!(t.tenant_tokens(2), 16);
        // Tenant 1 (blocks 1, 2 at time 1, block 6 at time 2) keeps only block 6.
        assert_eq!(t.tenant_tokens(1), 16);
        assert_eq!(t.prefix_match(&[6]), (1, Some(1)));
        assert_eq!(t.prefix_match(&[1, 2]), (1, Some(2)));
    }
}
