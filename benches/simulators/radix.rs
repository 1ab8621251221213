//! Radix-tree insert and match throughput in prompt tokens per second, on the default multi-turn
//! workload (every request inserted into, or matched against, a tree holding them all).

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput};
use pagedkv::sim::radix::workload::{multiturn, MultiTurnConfig};
use pagedkv::sim::radix::{EvictionPolicy, RadixTree};
use std::hint::black_box;

const REQUESTS: usize = 1000;

fn requests() -> (Vec<Vec<u32>>, u64) {
    let reqs = multiturn(&MultiTurnConfig::default(), REQUESTS, 0).expect("valid config");
    let tokens = reqs.iter().map(|r| r.len() as u64).sum();
    (reqs, tokens)
}

/// Block ids for every page of the longest request: the tree stores whatever ids it is given.
fn block_ids(reqs: &[Vec<u32>], page: usize) -> Vec<u32> {
    let most = reqs.iter().map(Vec::len).max().unwrap_or(0) / page;
    (0..most as u32).collect()
}

fn filled_tree(reqs: &[Vec<u32>], page: usize, blocks: &[u32]) -> RadixTree {
    let mut tree = RadixTree::new(page, EvictionPolicy::Lru).expect("page size > 0");
    for r in reqs {
        tree.insert(r, &blocks[..r.len() / page])
            .expect("block count");
    }
    tree
}

pub fn insert(c: &mut Criterion) {
    let (reqs, tokens) = requests();
    let mut g = c.benchmark_group("radix/insert");
    g.throughput(Throughput::Elements(tokens)).sample_size(10);
    for page in [1usize, 16] {
        let blocks = block_ids(&reqs, page);
        g.bench_with_input(BenchmarkId::new("page", page), &page, |b, &page| {
            b.iter_batched(
                || RadixTree::new(page, EvictionPolicy::Lru).expect("page size > 0"),
                |mut tree| {
                    for r in &reqs {
                        black_box(tree.insert(r, &blocks[..r.len() / page]).expect("blocks"));
                    }
                    tree
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

pub fn match_prefix(c: &mut Criterion) {
    let (reqs, tokens) = requests();
    let mut g = c.benchmark_group("radix/match");
    g.throughput(Throughput::Elements(tokens)).sample_size(10);
    for page in [1usize, 16] {
        let blocks = block_ids(&reqs, page);
        let mut tree = filled_tree(&reqs, page, &blocks);
        g.bench_with_input(BenchmarkId::new("page", page), &page, |b, _| {
            b.iter(|| {
                for r in &reqs {
                    black_box(tree.match_prefix(r));
                }
            })
        });
    }
    g.finish();
}
