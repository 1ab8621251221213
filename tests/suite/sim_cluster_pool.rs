//! The KV pool across prefill nodes (Mooncake's global KVCache pool) behind the Conductor: a
//! prefix held only in another prefill node's host memory is fetched over the link (time and
//! bytes worked by hand), `kvcache_balancing_threshold` decides between the local and the
//! remote match, and requests, tokens, blocks and per-tier hits are conserved after every event
//! of random workloads with the pool on.

use crate::pd_common;

use pagedkv::sim::cluster::pd::run::tier_hits;
use pagedkv::sim::cluster::pd::{KvTransfer, Link, PdCore, Pool};
use pagedkv::sim::cluster::router::build;
use pagedkv::sim::cluster::{ClusterCore, RouterConfig, RouterKind};
use pagedkv::sim::engine::host_tier::OffloadMode;
use pagedkv::sim::engine::step_time::kv_bytes_per_token_per_gpu;
use pagedkv::sim::engine::{
    Clock, CpuOffload, Engine, EngineConfig, OffloadScope, Recording, Slo, Submission, System,
};
use pagedkv::workload::serving::{Prompt, ServingRequest};
use pd_common::{random_requests, run, step_model, tokens};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Llama-3.1-8B's KV: 32 layers × 8 KV heads × 128 × 2 bytes × (K, V).
const KV_BYTES_PER_TOKEN: u64 = 131_072;

fn tier(mode: OffloadMode, chunks: usize, blocks_per_chunk: usize) -> CpuOffload {
    CpuOffload {
        mode,
        chunks,
        blocks_per_chunk,
        policy: pagedkv::sim::cache::Policy::Lru,
        prompt_only: true,
        gbps: 10.0,
        scope: OffloadScope::Local,
    }
}

/// P prefill instances of `cfg` (each with its host tier) behind the Conductor, their tiers a
/// pool at `threshold`, and D decode instances without a tier; a 100 GB/s link.
fn pooled(cfg: &EngineConfig, p: usize, d: usize, threshold: f64, mode: KvTransfer) -> PdCore {
    let clock = Clock::Seconds(Box::new(step_model()));
    let rec = Recording::default();
    let router = build(
        RouterKind::Conductor,
        &RouterConfig::default(),
        p,
        cfg.block_size,
    );
    let prefill = ClusterCore::new(cfg, &clock, p, router, rec, Slo::default()).unwrap();
    let dcfg = EngineConfig {
        cpu_offload: None,
        ..cfg.clone()
    };
    let decode = (0..d)
        .map(|_| Engine::open(dcfg.clone(), clock.clone(), rec, Slo::default()).unwrap())
        .collect();
    let m = step_model().model;
    let link = Link {
        gbps: 100.0,
        mode,
        bytes_per_token: kv_bytes_per_token_per_gpu(&m, 1),
        layers: m.layers as u32,
    };
    assert_eq!(link.bytes_per_token, KV_BYTES_PER_TOKEN);
    PdCore::new(prefill, decode, link, None)
        .unwrap()
        .with_pool(Pool { threshold })
        .unwrap()
}

/// Runs `reqs` on `c` until every request is finished and every copy has landed, `each` called
/// after every event.
/// Steps `c` until its requests are finished and its copies landed, checking after each.
fn finish(c: &mut PdCore) {
    while c.finished() < c.requests.len() || c.copies_in_flight() {
        c.advance(&mut |_, _| Ok(())).unwrap();
        c.check().unwrap();
    }
}

fn submit(c: &mut PdCore, r: &ServingRequest, uid: u64) {
    let s = Submission {
        request: r,
        uid,
        predicted: 1.0,
        id_rank: 0,
    };
    c.submit(s, r.arrival).unwrap();
    c.check().unwrap();
}

fn cfg() -> EngineConfig {
    EngineConfig {
        block_size: pagedkv::kv::BlockSize::of(16),
        num_gpu_blocks: 4000,
        max_num_batched_tokens: 8192,
        cpu_offload: Some(tier(OffloadMode::Native, 1000, 1)),
        ..EngineConfig::default()
    }
}

/// X, 512 tokens (32 blocks), then a tail of 100 tokens of its own.
fn x_and_tail(x: &[u32], id: &str) -> ServingRequest {
    let mut t = x.to_vec();
    t.extend(100_000..100_100);
    tokens(id, 1.0, t, 2)
}

/// A request of 4000 unique tokens at t = 1 keeps instance 0 busy (both idle, a tie: the lowest
/// index).
fn busy() -> ServingRequest {
    ServingRequest {
        id: "busy".into(),
        arrival: 1.0,
        prompt: Prompt::Unique(4000),
        output_len: 1,
        priority: 0,
    }
}

#[test]
fn a_prefix_only_another_prefill_node_holds_is_fetched_over_the_link() {
    let cfg = cfg();
    let mut c = pooled(&cfg, 2, 1, 1.0, KvTransfer::Layerwise);
    let x: Vec<u32> = (1..=512).collect();
    // A computes X on instance 0, whose host tier stores its 32 chunks (write-through).
    run(&mut c, &cfg, &[tokens("a", 0.0, x.clone(), 1)], |c| {
        c.check().unwrap()
    });
    assert_eq!(c.requests[0].prefill.unwrap().0, 0);
    let b = x_and_tail(&x, "b");
    submit(&mut c, &busy(), 100);
    assert_eq!(c.requests[1].prefill.unwrap().0, 0);
    // Instance 1 holds nothing of B; instance 0 holds X on its GPU and in its host tier.
    let est = c.conductor_estimates(&b, 101, 1.0).unwrap();
    // By hand: 512 tokens × 131072 B = 67108864 B over 100 GB/s = 0.67108864 ms.
    let bytes = 512 * KV_BYTES_PER_TOKEN;
    assert_eq!(bytes, 67_108_864);
    let fetch = bytes as f64 / 100e9;
    assert!((est[1].fetch - fetch).abs() < 1e-15, "{:?}", est[1]);
    assert_eq!(est[1].hit_tokens, 512);
    // Instance 0 needs no fetch (its own cache), but waits behind 4000 tokens.
    assert_eq!((est[0].fetch, est[0].hit_tokens), (0.0, 512));
    assert!((est[0].prefill - est[1].prefill).abs() < 1e-15);
    assert!(est[1].ttft() < est[0].ttft(), "{est:?}");
    submit(&mut c, &b, 101);
    let q = &c.requests[2];
    let f = q.fetch.expect("B fetches X from the pool");
    assert_eq!((f.from, f.to, f.bytes, f.start), (0, 32, bytes, 1.0));
    assert!((f.end - (1.0 + fetch)).abs() < 1e-15);
    assert!(
        q.prefill.is_none(),
        "not on its instance before the fetch ends"
    );
    finish(&mut c);
    let q = &c.requests[2];
    let f = q.fetch.unwrap();
    assert!(f.stored);
    assert_eq!(q.prefill.unwrap().0, 1);
    let pre = c.prefill_req(2).unwrap();
    // It reached instance 1 when the fetch ended, and loaded X from its host tier there.
    assert_eq!(pre.arrival, f.end);
    assert_eq!((pre.first_hit, pre.first_offload_hit), (Some(0), Some(512)));
    assert!(pre.first_token_time > f.end);
    assert_eq!(f.used_tokens(pre, c.block_size()), 512);
    let h = tier_hits(&c);
    assert_eq!(h.prompt_tokens, 512 + 4000 + 612);
    assert_eq!(
        (
            h.gpu_hit_tokens,
            h.local_host_hit_tokens,
            h.remote_hit_tokens
        ),
        (0, 0, 512)
    );
    assert_eq!(
        (h.fetches, h.fetched_tokens, h.pool_bytes_moved),
        (1, 512, bytes)
    );
    // Apart from the pool's bytes: B's whole prompt to the decode instance.
    assert_eq!(c.stats.kv_bytes_moved, 612 * KV_BYTES_PER_TOKEN);
}

#[test]
fn the_balancing_threshold_keeps_a_close_local_match_and_fetches_a_far_better_one() {
    let cfg = cfg();
    let x: Vec<u32> = (1..=512).collect();
    // A: X on instance 0; E: X's first 256 tokens on instance 1 (instance 0 has A queued).
    let warm = [
        tokens("a", 0.0, x.clone(), 1),
        tokens("e", 0.0, x[..256].to_vec(), 1),
    ];
    let b = x_and_tail(&x, "b");
    // For B on instance 1: local 16 blocks (its GPU), the pool 16 more (blocks 16..32 on
    // instance 0's host tier): best / local = 32 / 16 = 2.
    for (threshold, fetches) in [(2.5, false), (2.0, true), (1.5, true)] {
        let mut c = pooled(&cfg, 2, 1, threshold, KvTransfer::Whole);
        run(&mut c, &cfg, &warm, |c| c.check().unwrap());
        let on: Vec<u32> = c.requests.iter().map(|q| q.prefill.unwrap().0).collect();
        assert_eq!(on, [0, 1]);
        submit(&mut c, &busy(), 100);
        let est = c.conductor_estimates(&b, 101, 1.0).unwrap();
        let e = est[1];
        if fetches {
            // 256 tokens over 100 GB/s, and B's prefill past 512 tokens.
            let secs = (256 * KV_BYTES_PER_TOKEN) as f64 / 100e9;
            assert!((e.fetch - secs).abs() < 1e-15, "{threshold}: {e:?}");
            assert_eq!(e.hit_tokens, 512, "{threshold}");
        } else {
            assert_eq!((e.fetch, e.hit_tokens), (0.0, 256), "{threshold}");
        }
        submit(&mut c, &b, 101);
        finish(&mut c);
        let q = &c.requests[3];
        assert_eq!(q.prefill.unwrap().0, 1, "{threshold}");
        let pre = c.prefill_req(3).unwrap();
        assert_eq!(pre.first_hit, Some(256), "{threshold}");
        let h = tier_hits(&c);
        if fetches {
            let f = q.fetch.unwrap();
            assert_eq!((f.from, f.to), (16, 32));
            assert_eq!(pre.first_offload_hit, Some(256));
            assert_eq!(
                (h.remote_hit_tokens, h.pool_bytes_moved),
                (256, 256 * KV_BYTES_PER_TOKEN)
            );
        } else {
            assert!(q.fetch.is_none());
            assert_eq!(pre.first_offload_hit, Some(0));
            assert_eq!((h.remote_hit_tokens, h.pool_bytes_moved), (0, 0));
        }
    }
}

#[test]
fn requests_tokens_blocks_and_tier_hits_are_conserved_with_the_pool_on() {
    let mut fetched = 0;
    for seed in 0..6u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mode = [OffloadMode::Native, OffloadMode::StoreOnEvict][seed as usize % 2];
        let per_chunk = if mode == OffloadMode::Native {
            rng.random_range(1..3)
        } else {
            1
        };
        let cfg = EngineConfig {
            block_size: pagedkv::kv::BlockSize::new([4, 16][rng.random_range(0..2)] as u64)
                .unwrap(),
            num_gpu_blocks: rng.random_range(250..600),
            max_num_seqs: rng.random_range(4..32),
            max_num_batched_tokens: 2048,
            async_scheduling: rng.random_bool(0.5),
            cpu_offload: Some(tier(mode, rng.random_range(20..300), per_chunk)),
            ..EngineConfig::default()
        };
        let reqs = random_requests(&mut rng, 60, 2.0);
        let transfer = [KvTransfer::Layerwise, KvTransfer::Whole][rng.random_range(0..2)];
        let threshold = [1.0, 1.5, 3.0][seed as usize % 3];
        let (p, d) = (rng.random_range(2..5), rng.random_range(1..3));
        let mut c = pooled(&cfg, p, d, threshold, transfer);
        run(&mut c, &cfg, &reqs, |c| {
            if let Err(m) = c.check() {
                panic!("seed {seed}: {m}");
            }
        });
        let mut hit = 0u64;
        for (k, q) in c.requests.iter().enumerate() {
            let out = reqs.iter().find(|r| r.id == q.id()).unwrap().output_len;
            let last = c.decode_req(k).or(c.prefill_req(k)).unwrap();
            assert!(last.is_finished(), "seed {seed}: {}", q.id());
            assert_eq!(last.num_output, out, "seed {seed}: {}", q.id());
            let pre = c.prefill_req(k).unwrap();
            hit += u64::from(pre.first_hit.unwrap() + pre.first_offload_hit.unwrap());
            if let Some(f) = q.fetch {
                // It reached its instance when its fetch ended, the bytes as its tokens say.
                assert_eq!(pre.arrival, f.end, "seed {seed}");
                let tokens = u64::from((f.to - f.from) * cfg.block_size.tokens());
                assert_eq!(f.bytes, tokens * KV_BYTES_PER_TOKEN, "seed {seed}");
                assert!(f.to as usize * cfg.block_size.get() < q_len(&reqs, q.id()));
            }
        }
        for e in c.prefill.engines.iter().chain(&c.decode) {
            assert_eq!(e.scheduler().kv.used_blocks(), 0, "seed {seed}");
        }
        // Every prompt token hit is in exactly one tier, none past the prompts.
        let h = tier_hits(&c);
        let prompts: u64 = reqs.iter().map(|r| r.prompt.len() as u64).sum();
        assert_eq!(h.prompt_tokens, prompts, "seed {seed}");
        assert_eq!(
            h.gpu_hit_tokens + h.local_host_hit_tokens + h.remote_hit_tokens,
            hit,
            "seed {seed}"
        );
        assert!(
            hit < prompts && h.remote_hit_tokens <= h.fetched_tokens,
            "seed {seed}"
        );
        assert_eq!(
            h.pool_bytes_moved,
            h.fetched_tokens * KV_BYTES_PER_TOKEN,
            "seed {seed}"
        );
        fetched += h.fetches;
    }
    assert!(fetched > 0, "some request fetched from the pool");
}

fn q_len(reqs: &[ServingRequest], id: &str) -> usize {
    reqs.iter().find(|r| r.id == id).unwrap().prompt.len()
}
