//! Disaggregated serving in the cluster simulator: hand-worked transfers (when the KV arrives,
//! when decoding starts, the blocks each side holds before and after), a decode pool that cannot
//! take a request keeps it waiting and loses nothing, and conservation of requests, tokens and
//! blocks on both sides after every event of random workloads.

use crate::pd_common;

use pagedkv::sim::cluster::pd::{KvTransfer, Link, LocalPrefill, PdCore};
use pagedkv::sim::cluster::router::build;
use pagedkv::sim::cluster::{ClusterCore, RouterConfig, RouterKind};
use pagedkv::sim::engine::scheduler::{Plan, Scheduled};
use pagedkv::sim::engine::step_time::kv_bytes_per_token_per_gpu;
use pagedkv::sim::engine::{Clock, Engine, EngineConfig, Recording, Slo, System};
use pagedkv::workload::serving::{Prompt, ServingRequest};
use pd_common::{random_requests, run, step_model, tokens};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn req(id: &str, arrival: f64, prompt: u32, output_len: u32) -> ServingRequest {
    ServingRequest {
        id: id.into(),
        arrival,
        prompt: Prompt::Unique(prompt),
        output_len,
        priority: 0,
    }
}

/// P prefill and D decode instances of `cfg` on Llama-3.1-8B / H200, joined by `gbps`.
fn pd(
    cfg: &EngineConfig,
    p: usize,
    d: usize,
    gbps: f64,
    mode: KvTransfer,
    router: RouterKind,
    local: Option<LocalPrefill>,
) -> PdCore {
    let clock = Clock::Seconds(Box::new(step_model()));
    let rec = Recording {
        steps: true,
        timeline: false,
    };
    let prefill = ClusterCore::new(
        cfg,
        &clock,
        p,
        build(router, &RouterConfig::default(), p, cfg.block_size),
        rec,
        Slo::default(),
    )
    .unwrap();
    let decode = (0..d)
        .map(|_| Engine::open(cfg.clone(), clock.clone(), rec, Slo::default()).unwrap())
        .collect();
    let m = step_model().model;
    let link = Link {
        gbps,
        mode,
        bytes_per_token: kv_bytes_per_token_per_gpu(&m, 1),
        layers: m.layers as u32,
    };
    PdCore::new(prefill, decode, link, local).unwrap()
}

/// Runs `reqs` on `c` to the end, `each` called after every event (submission or step).
/// Seconds of a step that computes `tokens` new tokens after `context` for one request.
fn step(tokens: u32, context: u32) -> f64 {
    let plan = Plan {
        scheduled: vec![Scheduled {
            req: 0,
            tokens,
            context,
            samples: true,
        }],
        ..Plan::default()
    };
    step_model().step_seconds(&plan)
}

fn used(e: &Engine) -> usize {
    e.scheduler().kv.used_blocks()
}

#[test]
fn a_hand_worked_transfer_whole_and_layer_by_layer() {
    let cfg = EngineConfig {
        block_size: pagedkv::kv::BlockSize::of(16),
        num_gpu_blocks: 200,
        ..EngineConfig::default()
    };
    // Llama-3.1-8B's KV: 32 layers × 8 heads × 128 × 2 bytes × (K, V) = 131072 B a token; a
    // 1000-token prompt is 131.072 MB: 0.131072 s at 1 GB/s, 1.31072 ms at 100 GB/s.
    let bytes = 1000 * 131_072u64;
    let prefill_end = step(1000, 0);
    let (d1, d2) = (step(1, 1000), step(1, 1001));
    for (gbps, mode, start, end) in [
        (1.0, KvTransfer::Whole, prefill_end, prefill_end + 0.131072),
        // Layer by layer from the prefill's start: the link, not the last layer, ends it.
        (1.0, KvTransfer::Layerwise, 0.0, 0.131072),
        // A fast link: the last layer's share after the prefill's end.
        (
            100.0,
            KvTransfer::Layerwise,
            0.0,
            prefill_end + 1.31072e-3 / 32.0,
        ),
    ] {
        let mut c = pd(&cfg, 1, 1, gbps, mode, RouterKind::RoundRobin, None);
        let mut seen_in_flight = false;
        run(&mut c, &cfg, &[req("a", 0.0, 1000, 3)], |c| {
            let q = &c.requests[0];
            let (p, d) = (used(&c.prefill.engines[0]), used(&c.decode[0]));
            if q.prefill_end.is_finite() && !q.arrived {
                // Both sides hold the KV while it moves: 63 blocks of the prompt on the prefill
                // instance, 63 reserved for its 1001 tokens on the decode one.
                assert_eq!((p, d), (63, 63), "{mode:?}");
                seen_in_flight = true;
            }
            if q.arrived {
                assert_eq!(p, 0, "the prefill instance frees its blocks at the arrival");
            }
            c.check().unwrap();
        });
        assert!(seen_in_flight);
        let q = &c.requests[0];
        assert_eq!(q.kv_bytes, bytes);
        assert_eq!(q.prefill_end, prefill_end);
        assert_eq!(q.transfer_start, start, "{gbps} {mode:?}");
        assert!(
            (q.transfer_end - end).abs() < 1e-12,
            "{gbps} {mode:?}: {}",
            q.transfer_end
        );
        // The first token from the prefill instance; decoding starts when the KV has arrived.
        let r = c.decode[0].request(0);
        assert_eq!(r.first_token_time, prefill_end);
        assert!((r.finish_time - (q.transfer_end + d1 + d2)).abs() < 1e-12);
        // Mooncake's TBT, the mean of the longest ceil(2 / 10) = 1 of its 2 intervals: the first
        // (the move and one decode step).
        let tbt = r.gaps.tbt().unwrap();
        assert!(
            (tbt - (q.transfer_end + d1 - prefill_end)).abs() < 1e-12,
            "{tbt}"
        );
        assert_eq!((used(&c.prefill.engines[0]), used(&c.decode[0])), (0, 0));
        assert_eq!(c.stats.kv_bytes_moved, bytes);
    }
}

#[test]
fn a_full_decode_pool_keeps_the_request_waiting_and_loses_nothing() {
    // 99 usable blocks: a's 1000-token prompt and 400 outputs take up to 88; b's 63 cannot be
    // reserved beside it, so b's KV waits on the prefill instance until a finishes.
    let cfg = EngineConfig {
        block_size: pagedkv::kv::BlockSize::of(16),
        num_gpu_blocks: 100,
        ..EngineConfig::default()
    };
    let mut c = pd(
        &cfg,
        1,
        1,
        1.0,
        KvTransfer::Whole,
        RouterKind::RoundRobin,
        None,
    );
    let reqs = [req("a", 0.0, 1000, 400), req("b", 0.5, 1000, 3)];
    run(&mut c, &cfg, &reqs, |c| c.check().unwrap());
    let a_finish = c.decode[0].request(0).finish_time;
    let b = &c.requests[1];
    assert!(b.prefill_end < a_finish, "b prefilled while a decoded");
    assert!(b.waited_for_decode);
    assert_eq!(b.transfer_start, a_finish);
    assert!((b.transfer_end - (a_finish + 0.131072)).abs() < 1e-12);
    assert_eq!(c.stats.waited_for_decode, 1);
    assert_eq!(c.stats.moved, 2);
    assert_eq!(c.decode[0].request(1).num_output, 3);
}

#[test]
fn one_output_token_never_moves() {
    let cfg = EngineConfig {
        block_size: pagedkv::kv::BlockSize::of(16),
        num_gpu_blocks: 200,
        ..EngineConfig::default()
    };
    let mut c = pd(
        &cfg,
        1,
        1,
        1.0,
        KvTransfer::Layerwise,
        RouterKind::RoundRobin,
        None,
    );
    run(&mut c, &cfg, &[req("a", 0.0, 1000, 1)], |c| {
        c.check().unwrap()
    });
    assert_eq!(c.requests[0].decode, None);
    assert_eq!((c.stats.moved, c.stats.kv_bytes_moved), (0, 0));
    assert!(c.prefill.engines[0].request(0).is_finished());
}

#[test]
fn conditional_disaggregation_prefills_short_prompts_and_overflow_locally() {
    let cfg = EngineConfig {
        block_size: pagedkv::kv::BlockSize::of(16),
        num_gpu_blocks: 2000,
        ..EngineConfig::default()
    };
    let reqs: Vec<ServingRequest> = (0..8)
        .map(|i| {
            req(
                &format!("r{i}"),
                0.0,
                if i % 2 == 0 { 100 } else { 3000 },
                4,
            )
        })
        .collect();
    // The length alone (no queue limit): the 100-token prompts stay on their decode instance.
    let by_length = LocalPrefill {
        max_local_prefill_length: 100,
        max_prefill_queue_size: usize::MAX,
    };
    let mut c = pd(
        &cfg,
        1,
        2,
        100.0,
        KvTransfer::Layerwise,
        RouterKind::LeastLoaded,
        Some(by_length),
    );
    run(&mut c, &cfg, &reqs, |c| c.check().unwrap());
    let local: Vec<bool> = c.requests.iter().map(|q| q.local).collect();
    assert_eq!(local, [true, false, true, false, true, false, true, false]);
    assert_eq!(c.stats.local_prefills, 4);
    // The queue alone: all arrive at once, so after 2 wait for a prefill to begin the rest stay.
    let by_queue = LocalPrefill {
        max_local_prefill_length: 0,
        max_prefill_queue_size: 2,
    };
    let mut c = pd(
        &cfg,
        1,
        2,
        100.0,
        KvTransfer::Layerwise,
        RouterKind::LeastLoaded,
        Some(by_queue),
    );
    run(&mut c, &cfg, &reqs, |c| c.check().unwrap());
    let local: Vec<bool> = c.requests.iter().map(|q| q.local).collect();
    assert_eq!(local, [false, false, true, true, true, true, true, true]);
}

#[test]
fn requests_tokens_and_blocks_are_conserved_on_both_sides_after_every_event() {
    let mut waited = 0;
    for seed in 0..6u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let cfg = EngineConfig {
            block_size: pagedkv::kv::BlockSize::new([4, 16][rng.random_range(0..2)] as u64)
                .unwrap(),
            num_gpu_blocks: rng.random_range(250..600),
            max_num_seqs: rng.random_range(4..32),
            max_num_batched_tokens: 2048,
            async_scheduling: rng.random_bool(0.5),
            ..EngineConfig::default()
        };
        let reqs = random_requests(&mut rng, 60, 2.0);
        let mode = [KvTransfer::Layerwise, KvTransfer::Whole][seed as usize % 2];
        let router = [
            RouterKind::KvAware,
            RouterKind::PrefixAware,
            RouterKind::LeastLoaded,
        ][seed as usize % 3];
        let local = (seed % 3 == 2).then_some(LocalPrefill {
            max_local_prefill_length: 150,
            max_prefill_queue_size: 4,
        });
        let (p, d) = (rng.random_range(1..4), rng.random_range(1..4));
        let mut c = pd(&cfg, p, d, rng.random_range(0.5..50.0), mode, router, local);
        run(&mut c, &cfg, &reqs, |c| {
            if let Err(m) = c.check() {
                panic!("seed {seed}: {m}");
            }
        });
        // Every request finished once, with every token it asked for, and every block is back.
        for (k, q) in c.requests.iter().enumerate() {
            let out = reqs
                .iter()
                .find(|r| r.id == c.requests[k].id())
                .unwrap()
                .output_len;
            let last = c.decode_req(k).or(c.prefill_req(k)).unwrap();
            assert!(last.is_finished(), "seed {seed}: {}", q.id());
            assert_eq!(last.num_output, out, "seed {seed}: {}", q.id());
        }
        for e in c.prefill.engines.iter().chain(&c.decode) {
            assert_eq!(used(e), 0, "seed {seed}");
        }
        waited += c.stats.waited_for_decode;
    }
    assert!(waited > 0, "some decode pool was full at some point");
}

/// Seconds of one step computing `entries` ((new tokens, tokens computed) per request).
fn steps(entries: &[(u32, u32)]) -> f64 {
    let plan = Plan {
        scheduled: entries
            .iter()
            .map(|&(tokens, context)| Scheduled {
                req: 0,
                tokens,
                context,
                samples: true,
            })
            .collect(),
        ..Plan::default()
    };
    step_model().step_seconds(&plan)
}

/// P prefill instances behind Mooncake's Conductor and D decode instances, under `slo`, joined
/// by 100 GB/s layer by layer.
fn conductor(cfg: &EngineConfig, p: usize, d: usize, slo: Slo) -> PdCore {
    let clock = Clock::Seconds(Box::new(step_model()));
    let rec = Recording::default();
    let router = build(
        RouterKind::Conductor,
        &RouterConfig::default(),
        p,
        cfg.block_size,
    );
    let prefill = ClusterCore::new(cfg, &clock, p, router, rec, slo).unwrap();
    let decode = (0..d)
        .map(|_| Engine::open(cfg.clone(), clock.clone(), rec, slo).unwrap())
        .collect();
    let m = step_model().model;
    let link = Link {
        gbps: 100.0,
        mode: KvTransfer::Layerwise,
        bytes_per_token: kv_bytes_per_token_per_gpu(&m, 1),
        layers: m.layers as u32,
    };
    PdCore::new(prefill, decode, link, None).unwrap()
}

#[test]
fn the_conductor_weighs_a_longer_queue_against_a_better_prefix_match() {
    let cfg = EngineConfig {
        block_size: pagedkv::kv::BlockSize::of(16),
        num_gpu_blocks: 4000,
        max_num_batched_tokens: 8192,
        ..EngineConfig::default()
    };
    let mut c = conductor(&cfg, 2, 1, Slo::default());
    // A shared prefix X of 2048 tokens (128 blocks) lands on instance 1: the first request goes
    // to instance 0 (both idle: a tie, the lowest index), the second finds it queued there.
    let x: Vec<u32> = (1..=2048).collect();
    let warm = [
        req("warm-a", 0.0, 1000, 1),
        tokens("warm-b", 0.0, x.clone(), 1),
    ];
    run(&mut c, &cfg, &warm, |c| c.check().unwrap());
    let on = |c: &PdCore, k: usize| c.requests[k].prefill.unwrap().0;
    assert_eq!((on(&c, 0), on(&c, 1)), (0, 1));
    // At t = 1 both are idle; three requests share X, with tails of 1024, 1024 and 64 tokens.
    let with_tail = |id: &str, base: u32, n: u32| {
        let mut t = x.clone();
        t.extend(base..base + n);
        tokens(id, 1.0, t, 2)
    };
    let rs = [
        with_tail("r1", 100_000, 1024),
        with_tail("r2", 200_000, 1024),
        with_tail("r3", 300_000, 64),
    ];
    // Each moves its whole prompt to the empty decode instance: its tail past the prefill's
    // end is the last layer's share (the prefill outlasts the link's 2.7-4 ms).
    let tail = |prompt: u64| prompt as f64 * 131_072.0 / 100e9 / 32.0;
    let hand = [
        // r1: instance 0 computes all 3072 tokens; instance 1, idle, the 1024 past X.
        [(0.0, steps(&[(3072, 0)])), (0.0, steps(&[(1024, 2048)]))],
        // r2: instance 1 has r1's 1024 tokens queued (past X) before its own.
        [
            (0.0, steps(&[(3072, 0)])),
            (steps(&[(1024, 2048)]), steps(&[(1024, 2048)])),
        ],
        // r3: instance 1's queue is r1's and r2's tails in one step (2048 ≤ 8192 tokens);
        // instance 0 computes all 2112 tokens at once, which is now the shorter wait.
        [
            (0.0, steps(&[(2112, 0)])),
            (steps(&[(1024, 2048), (1024, 2048)]), steps(&[(64, 2048)])),
        ],
    ];
    let want = [1, 1, 0];
    for (j, r) in rs.iter().enumerate() {
        let uid = 10 + j as u64;
        let est = c.conductor_estimates(r, uid, 1.0).unwrap();
        for p in 0..2 {
            let (queue, prefill) = hand[j][p];
            let e = est[p];
            assert!(
                (e.queue - queue).abs() < 1e-12 && (e.prefill - prefill).abs() < 1e-12,
                "{} on {p}: {e:?}, by hand queue {queue} prefill {prefill}",
                r.id
            );
            assert_eq!(e.hit_tokens, if p == 1 { 2048 } else { 0 });
            let t = tail(r.prompt.len() as u64);
            assert!((e.transfer - t).abs() < 1e-12, "{e:?} vs tail {t}");
        }
        let ttft = |p: usize| hand[j][p].0 + hand[j][p].1;
        assert!(
            ttft(want[j]) < ttft(1 - want[j]),
            "{}: by hand {} vs {}",
            r.id,
            ttft(0),
            ttft(1)
        );
        let s = pagedkv::sim::engine::Submission {
            request: r,
            uid,
            predicted: 1.0,
            id_rank: 0,
        };
        c.submit(s, 1.0).unwrap();
        assert_eq!(on(&c, 2 + j), want[j] as u32, "{}", r.id);
        c.check().unwrap();
    }
    // Roughly: r3 waits 36 + 4 ms behind instance 1's queue, or 36 ms alone on instance 0.
    assert!((0.030..0.040).contains(&hand[2][0].1), "{}", hand[2][0].1);
    while c.finished() < 5 {
        c.advance(&mut |_, _| Ok(())).unwrap();
        c.check().unwrap();
    }
}

#[test]
fn the_conductor_rejects_early_what_would_miss_the_slos() {
    let cfg = EngineConfig {
        block_size: pagedkv::kv::BlockSize::of(16),
        num_gpu_blocks: 1000,
        max_num_batched_tokens: 8192,
        ..EngineConfig::default()
    };
    // TTFT ≤ 10 ms: a 1000-token prefill takes ~17 ms, a 100-token one ~4 ms (the weights'
    // read, 16 GB at 4.8 TB/s, bounds it).
    assert!(steps(&[(1000, 0)]) > 0.010 && steps(&[(100, 0)]) < 0.010);
    let slo = Slo {
        ttft: Some(0.010),
        ..Slo::default()
    };
    let mut c = conductor(&cfg, 1, 1, slo);
    let reqs = [req("long", 0.0, 1000, 4), req("short", 0.0, 100, 4)];
    run(&mut c, &cfg, &reqs, |c| c.check().unwrap());
    let long = c.requests[0].rejected.expect("long is rejected");
    let t = steps(&[(1000, 0)]) + 1000.0 * 131_072.0 / 100e9 / 32.0;
    match long {
        pagedkv::sim::cluster::pd::conductor::Rejection::Ttft { estimate, slo } => {
            assert!((estimate - t).abs() < 1e-12 && slo == 0.010, "{long:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(c.requests[0].prefill.is_none() && c.requests[0].decode.is_none());
    assert!(c.requests[1].rejected.is_none());
    assert_eq!(c.decode_req(1).unwrap().num_output, 4);
    assert_eq!((c.stats.rejected_ttft, c.stats.rejected_tbt), (1, 0));
    // TBT ≤ 3 ms: a decode step reads the 16 GB of weights, 3.3 ms, so every request that
    // decodes is rejected; one that asks for a single token never decodes and runs.
    let slo = Slo {
        tbt: Some(0.003),
        ..Slo::default()
    };
    let mut c = conductor(&cfg, 1, 1, slo);
    let reqs = [req("decodes", 0.0, 100, 4), req("one-token", 0.0, 100, 1)];
    run(&mut c, &cfg, &reqs, |c| c.check().unwrap());
    match c.requests[0].rejected {
        Some(pagedkv::sim::cluster::pd::conductor::Rejection::Tbt { estimate, .. }) => {
            assert!((estimate - step(1, 100)).abs() < 1e-12, "{estimate}");
        }
        other => panic!("{other:?}"),
    }
    assert!(c.requests[1].rejected.is_none());
    assert!(c.prefill_req(1).unwrap().is_finished());
    assert_eq!((c.stats.rejected_ttft, c.stats.rejected_tbt), (0, 1));
}

#[test]
fn rejected_and_finished_requests_add_up_to_those_submitted() {
    let mut rejected = 0;
    for seed in 0..3u64 {
        let mut rng = StdRng::seed_from_u64(100 + seed);
        let cfg = EngineConfig {
            block_size: pagedkv::kv::BlockSize::of(16),
            num_gpu_blocks: rng.random_range(250..600),
            max_num_seqs: rng.random_range(4..32),
            max_num_batched_tokens: 512,
            ..EngineConfig::default()
        };
        // 60 requests in 0.2 s queue up: a TTFT SLO of 40 ms turns some away, not all.
        let reqs = random_requests(&mut rng, 60, 0.2);
        let slo = Slo {
            ttft: Some(0.040),
            ..Slo::default()
        };
        let (p, d) = (rng.random_range(1..4), rng.random_range(1..3));
        let mut c = conductor(&cfg, p, d, slo);
        run(&mut c, &cfg, &reqs, |c| {
            if let Err(m) = c.check() {
                panic!("seed {seed}: {m}");
            }
        });
        let mut finished = 0;
        for (k, q) in c.requests.iter().enumerate() {
            if q.rejected.is_some() {
                assert!(c.prefill_req(k).is_none() && c.decode_req(k).is_none());
                continue;
            }
            let last = c.decode_req(k).or(c.prefill_req(k)).unwrap();
            assert!(last.is_finished(), "seed {seed}: {}", q.id());
            finished += 1;
        }
        assert_eq!(finished + c.stats.rejected(), reqs.len(), "seed {seed}");
        assert!(finished > 0, "seed {seed}: all rejected");
        for e in c.prefill.engines.iter().chain(&c.decode) {
            assert_eq!(used(e), 0, "seed {seed}");
        }
        rejected += c.stats.rejected();
    }
    assert!(rejected > 0, "the SLO turned some request away");
}
