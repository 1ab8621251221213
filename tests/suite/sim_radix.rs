//! The radix tree against independent models on random workloads (fixed seeds):
//! - without eviction, a naive map from every cached page-aligned prefix to the block of its last
//!   page: same matches (lengths and blocks), same insert prefixes, same stored-token count;
//! - with eviction, a mirror of the tree's nodes: each removed node is, at its removal, an unlocked
//!   node without children and first in policy order; locked paths survive; no block leaks.

use pagedkv::kv::BlockAllocator;
use pagedkv::sim::radix::{EvictionPolicy, NodeId, NodeInfo, RadixTree};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;

/// Every cached prefix that ends on a page boundary, with the block holding its last page.
#[derive(Default)]
struct NaiveCache {
    page: usize,
    pages: HashMap<Vec<u32>, u32>,
}

impl NaiveCache {
    fn matched(&self, key: &[u32]) -> (usize, Vec<u32>) {
        let mut blocks = Vec::new();
        for k in 1..=key.len() / self.page {
            match self.pages.get(&key[..k * self.page]) {
                Some(&b) => blocks.push(b),
                None => break,
            }
        }
        (blocks.len() * self.page, blocks)
    }

    /// Returns how many tokens were already cached.
    fn insert(&mut self, key: &[u32], blocks: &[u32]) -> usize {
        let already = self.matched(key).0;
        for k in 1..=key.len() / self.page {
            self.pages
                .entry(key[..k * self.page].to_vec())
                .or_insert(blocks[k - 1]);
        }
        already
    }

    fn stored_tokens(&self) -> usize {
        self.pages.len() * self.page
    }
}

/// Checks the tree against the naive model over a sequence of inserts and matches.
fn replay_against_naive(page: usize, ops: &[(bool, Vec<u32>)]) -> Result<(), TestCaseError> {
    let mut tree = RadixTree::new(page, EvictionPolicy::Lru).unwrap();
    let mut naive = NaiveCache {
        page,
        ..NaiveCache::default()
    };
    let mut next_block = 0u32;
    for (insert, key) in ops {
        if *insert {
            let n = key.len() / page;
            let blocks: Vec<u32> = (next_block..next_block + n as u32).collect();
            next_block += n as u32;
            let got = tree.insert(key, &blocks).unwrap();
            let want = naive.insert(key, &blocks);
            prop_assert_eq!(got.prefix_len, want, "insert {:?}", key);
            prop_assert_eq!(got.new_tokens, n * page - want);
        } else {
            let got = tree.match_prefix(key);
            let (len, blocks) = naive.matched(key);
            prop_assert_eq!(got.len, len, "match {:?}", key);
            prop_assert_eq!(got.blocks, blocks);
            prop_assert_eq!(tree.path_tokens(got.node), key[..len].to_vec());
        }
        prop_assert_eq!(tree.total_tokens(), naive.stored_tokens());
        prop_assert_eq!(tree.check_invariants(), Ok(()));
    }
    Ok(())
}

fn fixed(cases: u32, seed: u64) -> Config {
    Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(fixed(96, 9))]

    /// Small alphabets and short keys make shared prefixes, splits and partial pages common.
    #[test]
    fn tree_matches_naive_model(
        page in 1usize..=4,
        ops in prop::collection::vec(
            (any::<bool>(), prop::collection::vec(0u32..3, 0..14)),
            1..60,
        ),
    ) {
        replay_against_naive(page, &ops)?;
    }
}

/// The same comparison on longer seeded workloads: a few base prompts extended at random.
#[test]
fn tree_matches_naive_model_on_long_prefix_sharing_workloads() {
    for seed in 0..6u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let page = [1, 2, 4, 16][seed as usize % 4];
        let bases: Vec<Vec<u32>> = (0..5)
            .map(|_| {
                (0..rng.random_range(0..80))
                    .map(|_| rng.random_range(0..4))
                    .collect()
            })
            .collect();
        let ops: Vec<(bool, Vec<u32>)> = (0..400)
            .map(|_| {
                let mut key = bases[rng.random_range(0..bases.len())].clone();
                key.truncate(rng.random_range(0..=key.len()));
                key.extend((0..rng.random_range(0..40)).map(|_| rng.random_range(0..4)));
                (rng.random_bool(0.6), key)
            })
            .collect();
        replay_against_naive(page, &ops).unwrap();
    }
}

/// Mirror of the tree's nodes taken before an eviction, updated as nodes go.
struct Mirror {
    nodes: HashMap<NodeId, NodeInfo>,
}

impl Mirror {
    fn of(tree: &RadixTree) -> Self {
        let nodes = tree
            .node_ids()
            .into_iter()
            .map(|id| (id, tree.info(id).unwrap()))
            .collect();
        Mirror { nodes }
    }

    fn candidates(&self) -> impl Iterator<Item = &NodeInfo> {
        self.nodes
            .values()
            .filter(|n| n.lock_ref == 0 && n.children == 0)
    }

    /// Checks that `gone` may go now, then removes it.
    fn remove(&mut self, gone: &NodeInfo, policy: EvictionPolicy) {
        let mine = &self.nodes[&gone.id];
        assert_eq!(
            mine.children, 0,
            "{:?} removed before its children",
            gone.id
        );
        assert_eq!(mine.lock_ref, 0, "{:?} removed while locked", gone.id);
        let order = |n: &NodeInfo| (policy.key(n.last_access, n.hits, n.created), n.id);
        let first = self.candidates().map(order).min().unwrap();
        assert_eq!(
            order(gone),
            first,
            "{:?} removed out of {policy:?} order",
            gone.id
        );
        self.nodes.remove(&gone.id);
        if let Some(p) = gone.parent.and_then(|p| self.nodes.get_mut(&p)) {
            p.children -= 1;
        }
    }
}

#[test]
fn eviction_goes_leaves_first_in_policy_order_and_spares_locked_paths() {
    for policy in [
        EvictionPolicy::Lru,
        EvictionPolicy::Lfu,
        EvictionPolicy::Fifo,
    ] {
        for seed in 0..4u64 {
            let mut rng = StdRng::seed_from_u64(seed * 31 + policy as u64);
            let page = [1, 2, 4][seed as usize % 3];
            let total_blocks = 120;
            let mut alloc = BlockAllocator::new(total_blocks, page);
            let mut tree = RadixTree::new(page, policy).unwrap();
            // Locked requests: the key and the node that holds its lock.
            let mut locked: Vec<(Vec<u32>, NodeId)> = Vec::new();
            for step in 0..300 {
                let key: Vec<u32> = (0..rng.random_range(0..30))
                    .map(|_| rng.random_range(0..3))
                    .collect();
                match rng.random_range(0..10) {
                    0..=3 => {
                        // A request: match, lock, make room, insert, maybe keep the lock.
                        let hit = tree.match_prefix(&key);
                        tree.lock(hit.node).unwrap();
                        let need = key.len() / page - hit.len / page;
                        if alloc.free_blocks() < need {
                            let want = (need - alloc.free_blocks()) * page;
                            let mut mirror = Mirror::of(&tree);
                            let out = tree
                                .evict_observed(want, &mut alloc, |n| mirror.remove(n, policy))
                                .unwrap();
                            assert!(out.freed_tokens >= want || mirror.candidates().count() == 0);
                            assert_eq!(out.shortfall_tokens, want.saturating_sub(out.freed_tokens));
                        }
                        let fit = need.min(alloc.free_blocks());
                        let mut blocks = hit.blocks.clone();
                        blocks.extend(alloc.allocate_blocks(fit).unwrap());
                        let ins = tree.insert(&key[..hit.len + fit * page], &blocks).unwrap();
                        assert_eq!(ins.prefix_len, hit.len);
                        if rng.random_bool(0.5) {
                            locked.push((key[..hit.len].to_vec(), hit.node));
                        } else {
                            tree.unlock(hit.node).unwrap();
                        }
                    }
                    4..=6 => {
                        tree.match_prefix(&key);
                    }
                    7 => {
                        if !locked.is_empty() {
                            let (_, node) = locked.swap_remove(rng.random_range(0..locked.len()));
                            tree.unlock(node).unwrap();
                        }
                    }
                    _ => {
                        let want = rng.random_range(0..=tree.total_tokens() + page);
                        let mut mirror = Mirror::of(&tree);
                        tree.evict_observed(want, &mut alloc, |n| mirror.remove(n, policy))
                            .unwrap();
                    }
                }
                for (key, node) in &locked {
                    assert_eq!(
                        tree.path_tokens(*node),
                        *key,
                        "step {step}: locked path changed"
                    );
                    assert_eq!(tree.match_prefix(key).len, key.len(), "step {step}");
                }
                tree.check_invariants().unwrap();
                alloc.check_invariants().unwrap();
                assert_eq!(
                    alloc.free_blocks() * page + tree.total_tokens(),
                    total_blocks * page,
                    "blocks leaked or double-held"
                );
                let locked_tokens: usize = tree
                    .node_ids()
                    .iter()
                    .map(|&id| tree.info(id).unwrap())
                    .filter(|n| n.lock_ref > 0)
                    .map(|n| n.tokens.len())
                    .sum();
                assert_eq!(tree.protected_tokens(), locked_tokens);
            }
            // Everything unlocked can go; what remains afterwards is exactly the locked paths.
            let out = tree.evict(usize::MAX, &mut alloc).unwrap();
            assert_eq!(tree.total_tokens(), tree.protected_tokens());
            assert_eq!(out.locked_tokens, tree.protected_tokens());
            for (_, node) in locked.drain(..) {
                tree.unlock(node).unwrap();
            }
            tree.evict(usize::MAX, &mut alloc).unwrap();
            assert_eq!((tree.total_tokens(), tree.node_count()), (0, 0));
            assert_eq!(alloc.free_blocks(), total_blocks);
        }
    }
}
