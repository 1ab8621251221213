//! The cluster simulator: one replica steps exactly as `sim engine`; hand-computed routing on two
//! replicas (which replica each request lands on, and the prefix hits that follow); the host tier
//! (store-on-evict: a prefix evicted from the GPU comes back from host memory at the stated cost;
//! native and store-on-evict: a global tier lets another replica hit it); and conservation of requests and blocks on every replica after
//! every step of random workloads under every router.

use pagedkv::hw::gpu;
use pagedkv::sim::cache::Policy as TierPolicy;
use pagedkv::sim::cluster::router::build;
use pagedkv::sim::cluster::{ClusterCore, RouterConfig, RouterKind};
use pagedkv::sim::engine::host_tier::OffloadMode;
use pagedkv::sim::engine::{
    prepare, Clock, CpuOffload, Engine, EngineConfig, OffloadScope, Recording, Slo, StepModel,
    StepRecord, System,
};
use pagedkv::workload::serving::{Prompt, ServingRequest};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const ROUTERS: [RouterKind; 4] = [
    RouterKind::RoundRobin,
    RouterKind::LeastLoaded,
    RouterKind::PrefixAware,
    RouterKind::KvAware,
];

fn rec() -> Recording {
    Recording {
        steps: true,
        timeline: false,
    }
}

fn req(id: &str, arrival: f64, prompt: Prompt, output_len: u32) -> ServingRequest {
    ServingRequest {
        id: id.into(),
        arrival,
        prompt,
        output_len,
        priority: 0,
    }
}

fn model_clock(offload_gbps: Option<f64>) -> Clock {
    Clock::Seconds(Box::new(StepModel {
        cpu_overhead_s: 5e-4,
        overlap_cpu: false,
        swap_gbps: None,
        offload_gbps,
        ..StepModel::roofline(
            pagedkv::kv::model::preset("llama-3.1-8b").unwrap(),
            gpu("h200").unwrap(),
            1,
            0.8,
        )
    }))
}

/// Random requests: prompts drawn from a few shared prefixes plus a tail, some unique, arrivals
/// spread over `span` (steps or seconds).
fn random_requests(rng: &mut StdRng, n: usize, span: f64) -> Vec<ServingRequest> {
    let prefixes: Vec<Vec<u32>> = (0..4)
        .map(|p| (0..rng.random_range(4..24)).map(|t| p * 100 + t).collect())
        .collect();
    let mut arrivals: Vec<f64> = (0..n)
        .map(|_| (rng.random_range(0.0..span)).floor())
        .collect();
    arrivals.sort_by(f64::total_cmp);
    arrivals
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let prompt = if rng.random_bool(0.2) {
                Prompt::Unique(rng.random_range(1..30))
            } else {
                let mut t = prefixes[rng.random_range(0..4)].clone();
                t.extend((0..rng.random_range(0..12)).map(|_| rng.random_range(0..5u32)));
                Prompt::Tokens(t)
            };
            req(&format!("q{i}"), a, prompt, rng.random_range(1..8))
        })
        .collect()
}

fn small_cfg(rng: &mut StdRng, async_scheduling: bool) -> EngineConfig {
    EngineConfig {
        block_size: pagedkv::kv::BlockSize::new(rng.random_range(2..6) as u64).unwrap(),
        num_gpu_blocks: rng.random_range(30..60),
        max_num_seqs: rng.random_range(2..6),
        max_num_batched_tokens: rng.random_range(8..40),
        async_scheduling,
        ..EngineConfig::default()
    }
}

fn engine_log(e: &mut Engine) -> Vec<StepRecord> {
    let mut log = Vec::new();
    while e.step().unwrap() {
        log.extend(e.last_record().cloned());
    }
    log
}

/// A cluster of `replicas` replicas behind `router` that has run `reqs` to the end, checking every
/// invariant after every step, and every step it took as (replica, record).
fn run_cluster(
    cfg: &EngineConfig,
    clock: &Clock,
    replicas: usize,
    router: RouterKind,
    router_cfg: RouterConfig,
    reqs: &[ServingRequest],
) -> (ClusterCore, Vec<(usize, StepRecord)>) {
    let p = prepare(cfg, reqs).unwrap();
    let mut c = ClusterCore::new(
        cfg,
        clock,
        replicas,
        build(router, &router_cfg, replicas, cfg.block_size),
        rec(),
        Slo::default(),
    )
    .unwrap();
    let mut log = Vec::new();
    let mut next = 0;
    // The run loop of `drive`, with the invariants checked after every step.
    while c.finished() < reqs.len() {
        let t = c.next_event_time();
        match p.arrival(next) {
            Some(a) if t.is_none_or(|t| a <= t) => {
                c.submit(p.submission(next), a).unwrap();
                next += 1;
            }
            _ => {
                assert!(t.is_some(), "nothing to run with requests unfinished");
                c.advance(&mut |r, s| {
                    log.push((r, s.clone()));
                    Ok(())
                })
                .unwrap();
                c.check().unwrap();
            }
        }
    }
    (c, log)
}

#[test]
fn one_replica_steps_exactly_as_the_engine_under_every_router() {
    let mut rng = StdRng::seed_from_u64(25);
    for case in 0..24 {
        let async_scheduling = case % 2 == 1;
        let seconds = case % 3 == 0;
        let cfg = small_cfg(&mut rng, async_scheduling);
        let span = if seconds { 0.5 } else { 30.0 };
        let reqs = random_requests(&mut rng, 40, span);
        let clock = if seconds {
            model_clock(None)
        } else {
            Clock::Steps
        };
        let mut e = Engine::new(cfg.clone(), &reqs, clock.clone(), rec(), Slo::default()).unwrap();
        let want = engine_log(&mut e);
        assert!(want.len() > 10);
        for router in ROUTERS {
            let (c, log) = run_cluster(&cfg, &clock, 1, router, RouterConfig::default(), &reqs);
            let got: Vec<StepRecord> = log
                .into_iter()
                .map(|(replica, record)| {
                    assert_eq!(replica, 0);
                    record
                })
                .collect();
            assert_eq!(got, want, "case {case}, {router}");
            assert_eq!(c.engines[0].report(), e.report(), "case {case}, {router}");
        }
    }
}

fn tokens(v: &[u32]) -> Prompt {
    Prompt::Tokens(v.to_vec())
}

/// Two replicas, block size 4, a step clock. P and Q are 9-token prompts (two full blocks each);
/// at step 10 and 20 their continuations arrive.
fn routed(router: RouterKind, seed: u64) -> (Vec<usize>, Vec<u32>) {
    let p: Vec<u32> = (1..=9).collect();
    let q: Vec<u32> = (20..=28).collect();
    let cat = |a: &[u32], b: &[u32]| tokens(&[a, b].concat());
    let reqs = vec![
        req("r0", 0.0, tokens(&p), 2),
        req("r1", 0.0, tokens(&q), 2),
        req("r2", 10.0, cat(&p, &[50]), 2),
        req("r3", 10.0, cat(&q, &[60]), 2),
        req("r4", 20.0, cat(&q, &[70, 71]), 2),
    ];
    let cfg = EngineConfig {
        block_size: pagedkv::kv::BlockSize::of(4),
        num_gpu_blocks: 40,
        max_num_seqs: 4,
        max_num_batched_tokens: 16,
        ..EngineConfig::default()
    };
    let router_cfg = RouterConfig {
        seed,
        ..RouterConfig::default()
    };
    let (c, _) = run_cluster(&cfg, &Clock::Steps, 2, router, router_cfg, &reqs);
    (0..reqs.len() as u64)
        .map(|g| {
            let (p, r) = c.placed(g).unwrap();
            (p.replica as usize, r.first_hit.unwrap())
        })
        .unzip()
}

/// docs/cluster.md's worked example (tests/data/cluster/worked_example.scenario.json), over seeds:
/// where a router draws among equals, the first replica `x` is either, and the rest follow it.
#[test]
fn routers_place_requests_as_computed_by_hand() {
    let mut firsts = std::collections::HashMap::new();
    for seed in 0..16 {
        // Round-robin alternates whatever the seed.
        assert_eq!(
            routed(RouterKind::RoundRobin, seed),
            (vec![0, 1, 0, 1, 0], vec![0, 0, 8, 8, 0])
        );
        // Least-loaded: r0 drawn between two idle replicas, r1 to the other (r0 is in flight);
        // at steps 10 and 20 both are idle again: every later pick is drawn, so only r1 is fixed.
        let (ll, _) = routed(RouterKind::LeastLoaded, seed);
        assert_eq!(ll[1], 1 - ll[0], "seed {seed}");
        // Prefix-aware (SGLang): r0 misses the empty tree, drawn; r1 misses too (Q shares no
        // token with P) and goes to the idle replica; r2 matches all 9 tokens of P of its 10
        // (0.9 > 0.3) on P's replica x, r3 likewise Q's; r4 matches Q's 9 of 11 on Q's.
        // Kv-aware (Dynamo): r0 costs 9/4 + 2 blocks on both, drawn; r1 costs (9 + 9)/4 + 2 + 2
        // on x (r0's prefill and blocks booked) against 9/4 + 2; r2 costs 10/4 - 2 + 2 on x (P's
        // two blocks cached) against 10/4 + 2; r3 then (2 + 10)/4 + 2 + 2 on x (r2's 2
        // uncached tokens and 2 blocks booked) against 10/4 - 2 + 2; r4 11/4 + 2 against
        // 11/4 - 2 + 2 on Q's replica.
        for router in [RouterKind::PrefixAware, RouterKind::KvAware] {
            let (reps, hits) = routed(router, seed);
            let x = reps[0];
            assert_eq!(reps, [x, 1 - x, x, 1 - x, 1 - x], "{router}, seed {seed}");
            assert_eq!(hits, [0, 0, 8, 8, 8], "{router}, seed {seed}");
            *firsts.entry((router, x)).or_insert(0) += 1;
        }
    }
    // The draws are random: over 16 seeds each router started on both replicas.
    assert_eq!(firsts.len(), 4, "{firsts:?}");
}

fn tier(blocks: usize, gbps: f64, scope: OffloadScope) -> Option<CpuOffload> {
    Some(CpuOffload {
        mode: OffloadMode::StoreOnEvict,
        chunks: blocks,
        blocks_per_chunk: 1,
        policy: TierPolicy::Lru,
        prompt_only: true,
        gbps,
        scope,
    })
}

/// P (two full blocks) on replica 0, then a long unique prompt there that evicts P's blocks from
/// its GPU cache, then P again (with one more token) on the last replica. Returns each request's
/// (replica, GPU hit, host hit, first token time).
fn evict_and_return(
    replicas: usize,
    offload: Option<CpuOffload>,
    gbps: Option<f64>,
) -> Vec<(usize, u32, u32, f64)> {
    let p: Vec<u32> = (1..=9).collect();
    let again = tokens(&[&p[..], &[77]].concat());
    // The filler's 44 tokens need all 11 usable blocks: P's cached blocks are evicted.
    let reqs = if replicas == 1 {
        vec![
            req("p", 0.0, tokens(&p), 1),
            req("filler", 0.1, Prompt::Unique(44), 1),
            req("p again", 0.2, again, 1),
        ]
    } else {
        // Round-robin: P and the filler on replica 0, P's return on replica 1.
        vec![
            req("p", 0.0, tokens(&p), 1),
            req("f1", 0.05, Prompt::Unique(4), 1),
            req("filler", 0.1, Prompt::Unique(44), 1),
            req("p again", 0.2, again, 1),
        ]
    };
    let cfg = EngineConfig {
        block_size: pagedkv::kv::BlockSize::of(4),
        // 11 usable blocks.
        num_gpu_blocks: 12,
        max_num_seqs: 4,
        max_num_batched_tokens: 64,
        cpu_offload: offload,
        ..EngineConfig::default()
    };
    let (c, _) = run_cluster(
        &cfg,
        &model_clock(gbps),
        replicas,
        RouterKind::RoundRobin,
        RouterConfig::default(),
        &reqs,
    );
    (0..reqs.len() as u64)
        .map(|g| {
            let (p, r) = c.placed(g).unwrap();
            (
                p.replica as usize,
                r.first_hit.unwrap(),
                r.first_offload_hit.unwrap(),
                r.first_token_time - r.arrival,
            )
        })
        .collect()
}

#[test]
fn a_prefix_evicted_from_the_gpu_comes_back_from_the_host_at_the_link_cost() {
    let none = evict_and_return(1, None, None);
    assert_eq!(
        (none[2].1, none[2].2),
        (0, 0),
        "without a tier P is recomputed"
    );
    let no_room = evict_and_return(1, tier(1, 1.0, OffloadScope::Local), Some(1.0));
    // A one-block tier keeps the last block stored: P's first (the GPU evicts a chain's tail
    // first), so one block loads and the second is computed.
    assert_eq!(no_room[2].2, 4);
    let slow = evict_and_return(1, tier(16, 1.0, OffloadScope::Local), Some(1.0));
    let fast = evict_and_return(1, tier(16, 2.0, OffloadScope::Local), Some(2.0));
    assert_eq!(
        (slow[2].1, slow[2].2),
        (0, 8),
        "two blocks loaded from the host"
    );
    assert_eq!(fast[2].2, 8);
    // Only the load differs: 8 tokens × 128 KiB of KV over 1 and 2 GB/s.
    let kv = 8.0 * 131_072.0;
    let want = kv / 1e9 - kv / 2e9;
    let got = slow[2].3 - fast[2].3;
    assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    // The first two requests never touch the link (stores overlap the compute).
    assert_eq!(slow[0].3, fast[0].3);
}

#[test]
fn a_global_store_on_evict_tier_serves_what_another_replica_stored() {
    for (mode, scope, want) in [
        (OffloadMode::StoreOnEvict, OffloadScope::Local, 0),
        (OffloadMode::StoreOnEvict, OffloadScope::Global, 8),
        (OffloadMode::Native, OffloadScope::Local, 0),
    ] {
        let t = tier(64, 10.0, scope).map(|t| CpuOffload { mode, ..t });
        let r = evict_and_return(2, t, Some(10.0));
        let replicas: Vec<usize> = r.iter().map(|x| x.0).collect();
        assert_eq!(replicas, [0, 1, 0, 1], "{mode} {scope}");
        let last = r[3];
        assert_eq!((last.1, last.2), (0, want), "{mode} {scope}");
    }
    // vLLM's native tier serves one engine: shared by two replicas it is refused.
    let cfg = EngineConfig {
        cpu_offload: tier(64, 10.0, OffloadScope::Global).map(|t| CpuOffload {
            mode: OffloadMode::Native,
            ..t
        }),
        ..EngineConfig::default()
    };
    let router = build(
        RouterKind::RoundRobin,
        &RouterConfig::default(),
        2,
        cfg.block_size,
    );
    let c = ClusterCore::new(&cfg, &Clock::Steps, 2, router, rec(), Slo::default());
    assert!(c.is_err_and(|e| e.to_string().contains("store-on-evict mode only")));
}

#[test]
fn requests_and_blocks_are_conserved_on_every_replica_after_every_step() {
    let mut rng = StdRng::seed_from_u64(7);
    for case in 0..16 {
        let cfg = EngineConfig {
            cpu_offload: (case % 2 == 0).then(|| CpuOffload {
                // Native (vLLM's lru or arc, chunks of 1 or 2 blocks) or store-on-evict.
                mode: [OffloadMode::Native, OffloadMode::StoreOnEvict][case / 2 % 2],
                chunks: rng.random_range(1..40),
                blocks_per_chunk: if case / 2 % 2 == 0 {
                    1 + case / 4 % 2
                } else {
                    1
                },
                policy: [TierPolicy::Lru, TierPolicy::Arc][case / 4 % 2],
                prompt_only: case % 8 != 0,
                gbps: 50.0,
                scope: if case % 4 == 0 {
                    OffloadScope::Global
                } else {
                    OffloadScope::Local
                },
            }),
            ..small_cfg(&mut rng, case % 3 == 0)
        };
        let reqs = random_requests(&mut rng, 60, 25.0);
        for router in ROUTERS {
            let replicas = 1 + case % 4;
            let mut router_cfg = RouterConfig::default();
            router_cfg.prefix_aware.balance_abs_threshold = 2;
            router_cfg.prefix_aware.max_tree_size = 40;
            router_cfg.prefix_aware.eviction_interval = 3.0;
            router_cfg.seed = case as u64;
            // Checks every replica after every step.
            let (c, log) = run_cluster(&cfg, &Clock::Steps, replicas, router, router_cfg, &reqs);
            assert_eq!(c.finished(), reqs.len());
            let per: Vec<usize> = c.engines.iter().map(|e| e.report().requests).collect();
            assert_eq!(per.iter().sum::<usize>(), reqs.len(), "{router}");
            assert_eq!(per, c.stats.per_replica, "{router}");
            // Every request finished exactly once, in the log of the replica it was sent to.
            let mut finished = std::collections::HashMap::new();
            for (replica, record) in &log {
                for id in &record.finished {
                    assert!(finished.insert(id.clone(), *replica).is_none(), "{id}");
                }
            }
            for (g, r) in reqs.iter().enumerate() {
                let (p, _) = c.placed(g as u64).unwrap();
                assert_eq!(finished[&r.id], p.replica as usize, "{router}");
            }
        }
    }
}

#[test]
fn replicas_idle_until_a_distant_arrival_skip_their_idle_steps_together() {
    let cfg = EngineConfig {
        block_size: pagedkv::kv::BlockSize::of(4),
        num_gpu_blocks: 64,
        ..EngineConfig::default()
    };
    let far = 1e12;
    let reqs = [
        req("a", 0.0, tokens(&[1, 2, 3]), 3),
        req("b", far, tokens(&[4, 5, 6]), 2),
        req("c", far + 5.0, tokens(&[7, 8, 9]), 2),
    ];
    for router in ROUTERS {
        let (c, log) = run_cluster(
            &cfg,
            &Clock::Steps,
            2,
            router,
            RouterConfig::default(),
            &reqs,
        );
        // A step per replica for a's 3 steps, each idle spell's first and last, b's and c's
        // steps: a few dozen lines, not 10^12.
        assert!(log.len() < 60, "{router}: {} step records", log.len());
        // The replicas stay in step: each step index is logged by both.
        for pair in log.chunks(2) {
            assert_eq!((pair[0].0, pair[1].0), (0, 1), "{router}");
            assert_eq!(pair[0].1.step, pair[1].1.step, "{router}");
        }
        // b enters at step 10^12 and has its first token out one step later, as without the skip.
        let (_, b) = c.placed(1).unwrap();
        assert_eq!(b.first_token_time, far + 1.0, "{router}");
        let steps: Vec<u64> = log.iter().map(|(_, r)| r.step).collect();
        assert!(steps.contains(&(far as u64 - 1)) && steps.contains(&(far as u64)));
    }
}
