//! Worked examples, each worked out by hand in its comments.

use pagedkv::kv::BlockAllocator;
use pagedkv::sim::radix::workload::{multiturn, MultiTurnConfig};
use pagedkv::sim::radix::{
    dedup_stats, render_tree, simulate, simulate_capacity, EvictionPolicy, RadixError, RadixTree,
    SimConfig,
};

fn path_lengths(tree: &RadixTree) -> Vec<(Vec<u32>, usize)> {
    let mut v: Vec<(Vec<u32>, usize)> = tree
        .node_ids()
        .into_iter()
        .map(|id| (tree.path_tokens(id), tree.info(id).unwrap().tokens.len()))
        .collect();
    v.sort();
    v
}

#[test]
fn insert_splits_where_keys_diverge_and_match_splits_where_it_stops() {
    let mut t = RadixTree::new(1, EvictionPolicy::Lru).unwrap();
    let a = t.insert(&[1, 2, 3], &[10, 11, 12]).unwrap();
    assert_eq!((a.prefix_len, a.new_tokens), (0, 3));
    // [1 2 4 5] shares [1 2]: the node [1 2 3] splits into [1 2] -> [3], and [4 5] hangs off [1 2].
    let b = t.insert(&[1, 2, 4, 5], &[90, 91, 22, 23]).unwrap();
    assert_eq!((b.prefix_len, b.new_tokens), (2, 2));
    assert_eq!(
        path_lengths(&t),
        vec![(vec![1, 2], 2), (vec![1, 2, 3], 1), (vec![1, 2, 4, 5], 2)]
    );
    assert_eq!((t.total_tokens(), t.node_count()), (5, 3));
    // Matching [1 2 4 9] stops inside [4 5]: three tokens, blocks of the first insert for [1 2]
    // (90 and 91 were duplicates the caller keeps), and [4 5] splits into [4] -> [5].
    let m = t.match_prefix(&[1, 2, 4, 9]);
    assert_eq!((m.len, m.blocks.clone()), (3, vec![10, 11, 22]));
    assert_eq!(t.path_tokens(m.node), vec![1, 2, 4]);
    assert_eq!((t.total_tokens(), t.node_count()), (5, 4));
    let miss = t.match_prefix(&[7, 1, 2]);
    assert_eq!((miss.len, miss.node), (0, t.root()));
    t.check_invariants().unwrap();
}

#[test]
fn with_pages_of_two_only_whole_pages_are_stored_and_matched() {
    let mut t = RadixTree::new(2, EvictionPolicy::Lru).unwrap();
    // Five tokens are two whole pages [1 2][3 4]; the 5 is never cached.
    let r = t.insert(&[1, 2, 3, 4, 5], &[7, 8]).unwrap();
    assert_eq!(r.new_tokens, 4);
    assert_eq!(
        t.insert(&[1, 2, 3, 4, 5], &[7]),
        Err(RadixError::BlockCountMismatch {
            pages: 2,
            blocks: 1
        })
    );
    // [3 9] differs from the page [3 4] although its first token agrees: one page matches.
    assert_eq!(t.match_prefix(&[1, 2, 3, 9]).len, 2);
    // [1 2 3] is one whole page and a partial one.
    let m = t.match_prefix(&[1, 2, 3]);
    assert_eq!(m.blocks, vec![7]);
    // Block 7 of size 2 holds slots 14 and 15.
    assert_eq!(m.slots(2), vec![14, 15]);
    // [3 5] hangs beside [3 4] under [1 2]: siblings differ in their first page, not first token.
    let r = t.insert(&[1, 2, 3, 5], &[70, 9]).unwrap();
    assert_eq!((r.prefix_len, r.new_tokens), (2, 2));
    assert_eq!(
        path_lengths(&t),
        vec![
            (vec![1, 2], 2),
            (vec![1, 2, 3, 4], 2),
            (vec![1, 2, 3, 5], 2)
        ]
    );
    assert_eq!(t.match_prefix(&[1, 2, 3, 5, 6]).blocks, vec![7, 9]);
    t.check_invariants().unwrap();
}

/// Inserts keys with blocks from `alloc`, as a cache would.
fn insert_all(t: &mut RadixTree, alloc: &mut BlockAllocator, keys: &[&[u32]]) {
    for k in keys {
        let hit = t.match_prefix(k);
        let mut blocks = hit.blocks;
        blocks.extend(alloc.allocate_blocks(k.len() - hit.len).unwrap());
        t.insert(k, &blocks).unwrap();
    }
}

#[test]
fn lru_eviction_frees_leaves_then_parents_and_reports_the_shortfall() {
    let mut alloc = BlockAllocator::new(10, 1);
    let mut t = RadixTree::new(1, EvictionPolicy::Lru).unwrap();
    // Clock: each insert_all key costs a match and an insert (ticks 1-6), then a match (tick 7).
    // Tree: [1 2] -> {[3] (used at 2, then 7), [4] (used at 4)}, [5 6] (used at 6).
    insert_all(&mut t, &mut alloc, &[&[1, 2, 3], &[1, 2, 4], &[5, 6]]);
    t.match_prefix(&[1, 2, 3]);
    assert_eq!(alloc.free_blocks(), 10 - 6);
    // One token: [4], the least recent leaf.
    let out = t.evict(1, &mut alloc).unwrap();
    assert_eq!((out.freed_tokens, out.nodes_removed), (1, 1));
    assert_eq!(t.match_prefix(&[1, 2, 4]).len, 2);
    // That match used [1 2] at tick 8; leaves now: [3] (7), [5 6] (6). Three tokens: [5 6]
    // (two), then [3] (one more); [1 2] then becomes a leaf but enough is freed.
    let mut gone = Vec::new();
    let out = t
        .evict_observed(3, &mut alloc, |n| gone.push(n.tokens.clone()))
        .unwrap();
    assert_eq!(gone, vec![vec![5, 6], vec![3]]);
    assert_eq!((out.freed_tokens, out.shortfall_tokens), (3, 0));
    assert_eq!(path_lengths(&t), vec![(vec![1, 2], 2)]);
    // Ten tokens: only two are left, so eight fall short.
    let out = t.evict(10, &mut alloc).unwrap();
    assert_eq!((out.freed_tokens, out.shortfall_tokens), (2, 8));
    assert_eq!((t.total_tokens(), alloc.free_blocks()), (0, 10));
    t.check_invariants().unwrap();
}

#[test]
fn locked_paths_stay_until_unlocked() {
    let mut alloc = BlockAllocator::new(10, 1);
    let mut t = RadixTree::new(1, EvictionPolicy::Lru).unwrap();
    insert_all(&mut t, &mut alloc, &[&[1, 2, 3], &[1, 2, 4], &[5, 6]]);
    let hit = t.match_prefix(&[1, 2, 3]);
    t.lock(hit.node).unwrap();
    t.lock(hit.node).unwrap();
    assert_eq!((t.protected_tokens(), t.evictable_tokens()), (3, 3));
    // [4] and [5 6] can go; [1 2] -> [3] cannot: 3 of the 6 requested fall short.
    let out = t.evict(6, &mut alloc).unwrap();
    assert_eq!(
        (out.freed_tokens, out.shortfall_tokens, out.locked_tokens),
        (3, 3, 3)
    );
    assert_eq!(t.match_prefix(&[1, 2, 3, 9]).len, 3);
    t.unlock(hit.node).unwrap();
    assert_eq!(t.evict(1, &mut alloc).unwrap().freed_tokens, 0);
    t.unlock(hit.node).unwrap();
    assert_eq!(t.unlock(hit.node), Err(RadixError::NotLocked(hit.node)));
    assert_eq!(t.evict(1, &mut alloc).unwrap().freed_tokens, 1);
    assert_eq!(t.evict(9, &mut alloc).unwrap().freed_tokens, 2);
    assert_eq!(alloc.free_blocks(), 10);
    t.check_invariants().unwrap();
}

#[test]
fn lfu_and_fifo_orders() {
    // Insert [1], [2], [3] (one match + one insert each: created at ticks 2, 4, 6), then match [1]
    // twice (ticks 7, 8) and [3] once (tick 9). Hits: [1] 2, [2] 0, [3] 1.
    let order = |policy| {
        let mut alloc = BlockAllocator::new(3, 1);
        let mut t = RadixTree::new(1, policy).unwrap();
        insert_all(&mut t, &mut alloc, &[&[1], &[2], &[3]]);
        for k in [[1], [1], [3]] {
            t.match_prefix(&k);
        }
        let mut gone = Vec::new();
        t.evict_observed(3, &mut alloc, |n| gone.push(n.tokens[0]))
            .unwrap();
        gone
    };
    assert_eq!(order(EvictionPolicy::Lfu), vec![2, 3, 1]);
    assert_eq!(order(EvictionPolicy::Fifo), vec![1, 2, 3]);
    // LRU: [2] last used at 4, [1] at 8, [3] at 9.
    assert_eq!(order(EvictionPolicy::Lru), vec![2, 1, 3]);
}

#[test]
fn simulator_hit_ratios_by_hand() {
    let reqs = vec![vec![1, 2, 3, 4], vec![1, 2, 3, 5], vec![1, 2, 3, 4]];
    let cfg = SimConfig::new(1, EvictionPolicy::Lru, vec![100, 5, 4]);
    let rows = simulate(&reqs, &cfg).unwrap();
    // 100 and 5 tokens hold everything: radix hits 0 + 3 + 4 of 12 tokens. The whole-prompt
    // cache hits the third request at 100; at 5 it holds one 4-token prompt, so the second
    // request pushes out the first and the third misses.
    assert_eq!(
        rows.iter()
            .map(|r| (r.prefix_hit_tokens, r.whole_match_hit_tokens))
            .collect::<Vec<_>>(),
        vec![(7, 4), (7, 0), (6, 0)]
    );
    // At 4: the second request locks [1 2 3] and evicts [4] to store [5]; the third matches
    // [1 2 3] and evicts [5] to store [4] again: 0 + 3 + 3.
    assert_eq!(rows[2].evicted_tokens, 2);
    assert_eq!(rows[2].tokens_stored, 4);
    assert!((rows[0].prefix_hit_ratio - 7.0 / 12.0).abs() < 1e-12);
    assert!((rows[0].whole_match_hit_ratio - 4.0 / 12.0).abs() < 1e-12);
    let (d, tree) = dedup_stats(&reqs, 1, EvictionPolicy::Lru).unwrap();
    // Nodes [1 2 3] -> {[4], [5]}: 5 tokens stored for 12.
    assert_eq!((d.tokens_naive, d.tokens_stored, d.nodes), (12, 5, 3));
    assert!((d.avg_tokens_per_node - 5.0 / 3.0).abs() < 1e-12);
    let text = render_tree(&tree, None, 8);
    assert_eq!(
        text,
        "root: 5 tokens in 3 nodes (page size 1)\n  [3] 1 2 3\n    [1] 4\n    [1] 5\n"
    );
}

#[test]
fn bounded_caches_never_beat_the_unbounded_one() {
    // A bounded tree only ever holds a subset of what the unbounded tree holds, so its prefix
    // hits cannot exceed the ceiling.
    let cfg = MultiTurnConfig {
        active: 8,
        ..MultiTurnConfig::default()
    };
    let reqs = multiturn(&cfg, 300, 3).unwrap();
    for page in [1, 16] {
        let (d, _) = dedup_stats(&reqs, page, EvictionPolicy::Lru).unwrap();
        let cfg = SimConfig::new(page, EvictionPolicy::Lru, vec![1024, 4096, 16384, 1 << 22]);
        for r in simulate(&reqs, &cfg).unwrap() {
            assert!(r.prefix_hit_ratio <= d.prefix_hit_ratio + 1e-12);
            assert!(r.tokens_stored <= r.capacity);
        }
        assert!(d.tokens_stored < d.tokens_naive);
    }
}

#[test]
fn requests_in_flight_pin_their_prompts() {
    let reqs = vec![
        vec![1, 2, 3, 4],
        vec![5, 6, 7, 8],
        vec![1, 2, 3, 4],
        vec![5, 6, 7, 8],
    ];
    let mut cfg = SimConfig::new(1, EvictionPolicy::Lru, vec![6]);
    // One at a time in 6 slots: the second request evicts two of the first's four tokens (the
    // leaf goes whole: all four), so every request misses and all evict: 4 + 4 + 4 tokens.
    let (r, _) = simulate_capacity(&reqs, &cfg, 6).unwrap();
    assert_eq!(
        (r.prefix_hit_tokens, r.evicted_tokens, r.uncached_tokens),
        (0, 12, 0)
    );
    // Two in flight: the first request still runs when the second arrives, so its four tokens are
    // locked; only two slots are free and two tokens of the second stay uncached. The third finds
    // [1 2 3 4] (the first has finished, nothing was evicted); the fourth finds [5 6] but again
    // cannot store [7 8], since the third still runs.
    cfg.in_flight = 2;
    let (r, tree) = simulate_capacity(&reqs, &cfg, 6).unwrap();
    assert_eq!((r.uncached_tokens, r.evictions_short), (2 + 2, 2));
    assert_eq!(r.prefix_hit_tokens, 4 + 2);
    // Every lock was released at the end.
    assert_eq!(tree.protected_tokens(), 0);
    cfg.in_flight = 0;
    assert!(simulate_capacity(&reqs, &cfg, 6).is_err());
}
