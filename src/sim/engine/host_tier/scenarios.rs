//! The scheduler-level scenarios of the offloading spec (`/work/notes/vllm-offloading.md` §7: A,
//! B, C and E's variant), step by step through the engine under a step clock, where every copy is
//! reported in the next step's output. The spec numbers steps from 1, the step log from 0.

use super::manager::{ChunkKey, Lookup, Manager};
use super::{HostTier, OffloadMode};
use crate::hw::gpu;
use crate::sim::cache::Policy;
use crate::sim::engine::request::Req;
use crate::sim::engine::step_log::{Ordered, StepRecord};
use crate::sim::engine::step_time::StepModel;
use crate::sim::engine::{Clock, CpuOffload, Engine, EngineConfig, OffloadScope, Recording, Slo};
use crate::workload::serving::{Prompt, ServingRequest};

fn cfg(chunks: usize, policy: Policy, blocks_per_chunk: usize, prompt_only: bool) -> EngineConfig {
    EngineConfig {
        block_size: crate::kv::BlockSize::of(4),
        num_gpu_blocks: 32,
        max_num_seqs: 8,
        max_num_batched_tokens: 64,
        cpu_offload: Some(CpuOffload {
            mode: OffloadMode::Native,
            chunks,
            blocks_per_chunk,
            policy,
            prompt_only,
            gbps: 10.0,
            scope: OffloadScope::Local,
        }),
        ..EngineConfig::default()
    }
}

fn req(id: &str, arrival: f64, tokens: Vec<u32>, output_len: u32) -> ServingRequest {
    ServingRequest {
        id: id.into(),
        arrival,
        prompt: Prompt::Tokens(tokens),
        output_len,
        priority: 0,
    }
}

/// The hash of full block `j` of `tokens` (what the engine keys the block by).
fn block_key(tokens: &[u32], j: u32) -> u64 {
    Req::new(&req("k", 0.0, tokens.to_vec(), 1), 0.0, 0, 0).block_hash(j, 4)
}

fn tier(e: &mut Engine) -> &mut Manager {
    e.host_tier_mut().and_then(HostTier::native).unwrap()
}

/// Puts chunks (key, end token) in the tier, stored and ready, as an earlier request would.
fn preload(e: &mut Engine, chunks: &[(u64, u32)]) {
    let t = tier(e);
    let keys: Vec<ChunkKey> = chunks
        .iter()
        .map(|&(key, end)| ChunkKey { key, end })
        .collect();
    t.prepare_store(&keys, 1 << 40).unwrap();
    t.complete_store(&chunks.iter().map(|c| c.0).collect::<Vec<_>>());
    t.on_request_finished(1 << 40);
}

fn engine(cfg: EngineConfig, reqs: &[ServingRequest], clock: Clock) -> Engine {
    let rec = Recording {
        steps: true,
        timeline: false,
    };
    Engine::new(cfg, reqs, clock, rec, Slo::default()).unwrap()
}

/// Steps to the end, checking every invariant after every step.
fn run(e: &mut Engine) -> Vec<StepRecord> {
    let mut log = Vec::new();
    while e.step().unwrap() {
        e.check().unwrap();
        tier_check(e);
        log.extend(e.last_record().cloned());
    }
    log
}

fn tier_check(e: &mut Engine) {
    if let Some(t) = e.host_tier_mut().and_then(HostTier::native) {
        t.check().unwrap();
    }
}

fn o(pairs: &[(&str, u32)]) -> Ordered {
    Ordered(pairs.iter().map(|&(k, v)| (k.into(), v)).collect())
}

/// (scheduled, prefix hit tokens, load tokens, store chunks) of a step.
fn step(r: &StepRecord) -> (Ordered, Ordered, Ordered, Ordered) {
    (
        r.scheduled.clone(),
        r.prefix_hit_tokens.clone(),
        r.kv_load_tokens.clone(),
        r.kv_store_chunks.clone(),
    )
}

#[test]
fn a_stores_write_through_prompt_chunks_only_and_skips_held_ones() {
    let a: Vec<u32> = (1..=10).collect();
    let b = [&a[..8], &[91, 92, 93, 94]].concat();
    let reqs = [req("r1", 0.0, a.clone(), 3), req("r2", 4.0, b.clone(), 2)];
    let mut e = engine(cfg(8, Policy::Lru, 1, true), &reqs, Clock::Steps);
    let log = run(&mut e);
    let none = o(&[]);
    // Step 1: the prefill completes A1 and A2, stored in the same step.
    assert_eq!(
        step(&log[0]),
        (
            o(&[("r1", 10)]),
            o(&[("r1", 0)]),
            none.clone(),
            o(&[("r1", 2)])
        )
    );
    // Steps 2-3: decode; A3 (completed by an output token) is not stored. R1 finishes in step 3.
    for s in &log[1..=3] {
        assert_eq!(s.kv_store_chunks, none);
    }
    assert_eq!(log[2].finished, ["r1"]);
    let (a1, a2, b3) = (block_key(&a, 0), block_key(&a, 1), block_key(&b, 2));
    // Step 5: R2 hits A1 A2 on the GPU, misses B3 in the tier, computes 4 tokens, and offers A1
    // A2 B3 again: A1 and A2 are held already, B3 is stored.
    assert_eq!(
        step(&log[4]),
        (
            o(&[("r2", 4)]),
            o(&[("r2", 8)]),
            none.clone(),
            o(&[("r2", 1)])
        )
    );
    let t = tier(&mut e);
    assert_eq!((t.stats.stored_chunks, t.stats.loaded_chunks), (3, 0));
    assert!([a1, a2, b3].iter().all(|&k| t.lookup(k) == Lookup::Hit));
    // R1's finish ranked A2 (2, 0) and A1 (3, 0); R2 (request rank 4) reused them, and its
    // finish ranks its chunks again, tail first.
    assert_eq!(
        [t.lru_rank(b3), t.lru_rank(a2), t.lru_rank(a1)],
        [Some((5, 0)), Some((6, 0)), Some((7, 0))]
    );
    let r = e.report();
    // vLLM's external prefix cache: tokens past the GPU hit, none found in the tier.
    assert_eq!(
        (
            r.offload.external_prefix_cache_queries,
            r.offload.external_prefix_cache_hits
        ),
        (10 + 4, 0)
    );
    assert_eq!(r.prefix_cache.prefix_cache_hit_tokens, 8);

    // offload_prompt_only=false: A3 is stored in step 3, when the scheduled token completes it.
    let mut e = engine(cfg(8, Policy::Lru, 1, false), &reqs, Clock::Steps);
    let log = run(&mut e);
    assert_eq!(log[2].kv_store_chunks, o(&[("r1", 1)]));
}

#[test]
fn b_loads_asynchronously_waits_on_chunks_in_flight_and_recomputes_a_whole_prompt_s_last_token() {
    let a: Vec<u32> = (1..=8).collect();
    let r2 = [&a[..], &[31, 32, 33, 34, 35]].concat();
    let reqs = [req("r2", 0.0, r2, 3), req("r3", 0.0, a.clone(), 2)];
    let mut e = engine(cfg(16, Policy::Lru, 1, true), &reqs, Clock::Steps);
    preload(&mut e, &[(block_key(&a, 0), 4), (block_key(&a, 1), 8)]);
    let log = run(&mut e);
    let none = o(&[]);
    // Step k: R2 loads A1 A2 (8 tokens) and waits without budget; R3 would load A1, which R2
    // is loading: it waits too.
    assert_eq!(
        step(&log[0]),
        (none.clone(), none.clone(), o(&[("r2", 8)]), none.clone())
    );
    // Step k+1: nothing; R2's load is reported in this step's output.
    assert_eq!(
        step(&log[1]),
        (none.clone(), none.clone(), none.clone(), none.clone())
    );
    // Step k+2: R2 computes its last 5 tokens and stores B3; R3 hits A1 on the GPU (R2's block,
    // cached now) and loads A2 into a block of its own.
    assert_eq!(
        step(&log[2]),
        (
            o(&[("r2", 5)]),
            o(&[("r2", 8)]),
            o(&[("r3", 4)]),
            o(&[("r2", 1)])
        )
    );
    // Step k+4: R3 holds its whole prompt and computes its last token again.
    assert_eq!(step(&log[4]).0, o(&[("r2", 1), ("r3", 1)]));
    assert_eq!(step(&log[4]).1, o(&[("r3", 7)]));
    let r = e.report();
    assert_eq!(
        (
            r.offload.external_prefix_cache_queries,
            r.offload.external_prefix_cache_hits
        ),
        (13 + 4, 8 + 4)
    );
    assert_eq!(
        (
            r.prefix_cache.prefix_cache_hit_tokens,
            r.offload.offload_hit_tokens
        ),
        (4, 12)
    );
    assert_eq!(r.preemption.recomputed_tokens, 0);
    let t = tier(&mut e);
    assert_eq!((t.stats.loaded_chunks, t.stats.loaded_blocks), (3, 3));
}

#[test]
fn c_a_load_needs_one_whole_offloaded_chunk_past_the_gpu_hit() {
    let t: Vec<u32> = (1..=20).collect();
    // P0 leaves the first block in the GPU cache: R's GPU hit is 4 tokens, inside chunk K1.
    let reqs = [
        req("p0", 0.0, t[..5].to_vec(), 1),
        req("r", 2.0, t.clone(), 1),
    ];
    let (k1, k2) = ((block_key(&t, 1), 8), (block_key(&t, 3), 16));
    let none = o(&[]);

    let mut e = engine(cfg(8, Policy::Lru, 2, true), &reqs, Clock::Steps);
    preload(&mut e, &[k1, k2]);
    let log = run(&mut e);
    // K1's second half and K2: 12 tokens, 3 GPU blocks.
    assert_eq!(log[2].kv_load_tokens, o(&[("r", 12)]));
    assert_eq!(
        step(&log[4]),
        (o(&[("r", 4)]), o(&[("r", 16)]), none.clone(), none.clone())
    );
    let s = tier(&mut e).stats;
    assert_eq!((s.loaded_chunks, s.loaded_blocks), (2, 3));

    // Only K1 held: 4 tokens past the hit, less than a chunk: no load; K2 is stored.
    let mut e = engine(cfg(8, Policy::Lru, 2, true), &reqs, Clock::Steps);
    preload(&mut e, &[k1]);
    let log = run(&mut e);
    assert_eq!(
        step(&log[2]),
        (
            o(&[("r", 16)]),
            o(&[("r", 4)]),
            none.clone(),
            o(&[("r", 1)])
        )
    );
    let s = tier(&mut e).stats;
    assert_eq!(
        (s.loaded_chunks, s.stored_chunks, s.stored_blocks),
        (0, 1, 2)
    );
    assert_eq!(tier(&mut e).lookup(k2.0), Lookup::Hit);
}

#[test]
fn e_a_store_refused_is_retried_when_the_request_comes_by_again_and_a_finish_gets_one_try() {
    let a: Vec<u32> = (1..=8).collect();
    let b: Vec<u32> = (21..=24).collect();
    let (a1, a2, b1) = (block_key(&a, 0), block_key(&a, 1), block_key(&b, 0));
    for (policy, evicted) in [(Policy::Lru, a2), (Policy::Arc, a1)] {
        let reqs = [req("r1", 0.0, a.clone(), 3), req("r2", 0.0, b.clone(), 3)];
        let mut e = engine(cfg(2, policy, 1, true), &reqs, Clock::Steps);
        let log = run(&mut e);
        // Step 1: A1 A2 pending fill the tier, B1 is refused; step 2: still pending, refused.
        assert_eq!(log[0].kv_store_chunks, o(&[("r1", 2)]));
        assert_eq!(log[1].kv_store_chunks, o(&[]));
        // Step 3: one of R1's chunks is idle and goes.
        assert_eq!(log[2].kv_store_chunks, o(&[("r2", 1)]), "{policy}");
        let t = tier(&mut e);
        assert_eq!(t.lookup(evicted), Lookup::Miss, "{policy}");
        assert_eq!(t.lookup(b1), Lookup::Hit);
        assert_eq!((t.stats.store_failures, t.stats.evicted_chunks), (2, 1));

        // R2 with one output finishes in step 1; its only retry (step 2) is refused.
        let reqs = [req("r1", 0.0, a.clone(), 3), req("r2", 0.0, b.clone(), 1)];
        let mut e = engine(cfg(2, policy, 1, true), &reqs, Clock::Steps);
        run(&mut e);
        let t = tier(&mut e);
        assert_eq!(t.lookup(b1), Lookup::Miss, "{policy}");
        assert_eq!(t.stats.store_failures, 2);
    }
}

#[test]
fn a_load_takes_its_bytes_over_the_link_before_the_request_computes() {
    let a: Vec<u32> = (1..=64).collect();
    let ttft = |gbps: f64| {
        let reqs = [req("r", 0.0, [&a[..], &[99]].concat(), 2)];
        let mut c = cfg(64, Policy::Lru, 1, true);
        c.cpu_offload.as_mut().unwrap().gbps = gbps;
        let clock = Clock::Seconds(Box::new(StepModel {
            cpu_overhead_s: 5e-4,
            overlap_cpu: false,
            swap_gbps: None,
            offload_gbps: Some(gbps),
            ..StepModel::roofline(
                crate::kv::model::preset("llama-3.1-8b").unwrap(),
                gpu("h200").unwrap(),
                1,
                0.8,
            )
        }));
        let mut e = engine(c, &reqs, clock);
        let keys: Vec<(u64, u32)> = (0..16).map(|j| (block_key(&a, j), 4 * (j + 1))).collect();
        preload(&mut e, &keys);
        run(&mut e);
        assert_eq!(e.request(0).first_offload_hit, Some(64));
        e.request(0).first_token_time
    };
    // 16 blocks of 4 tokens × 128 KiB over 1 and 2 GB/s; the request waits for the whole load.
    let bytes = 64.0 * 131_072.0;
    let got = ttft(1.0) - ttft(2.0);
    let want = bytes / 1e9 - bytes / 2e9;
    assert!((got - want).abs() < 1e-12, "{got} vs {want}");
}
