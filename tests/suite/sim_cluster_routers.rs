//! Each router through the whole cluster, on small scenarios worked by hand from the code each
//! router cites (src/sim/cluster/router/): 2 or 3 replicas, block size 4, a step clock, so that
//! when a router hears of a first token or a finish, and what each replica's cache holds, follow
//! from the engine's steps. Timing under this engine (budget 16 tokens a step): a prompt of at most
//! 16 tokens arriving at step a is computed in step a, its first token is out at a + 1 and its
//! last (output n) at a + n, when the router learns it finished. A prompt of 9 tokens leaves its
//! first two blocks (8 tokens) in its replica's cache.
//!
//! Where a router draws among equals, the test names the set and checks the draw is within it,
//! and that the rest follows from whichever it was.

use pagedkv::sim::cluster::router::build;
use pagedkv::sim::cluster::{ClusterCore, Reason, RouterConfig, RouterKind};
use pagedkv::sim::engine::{drive, prepare, Clock, EngineConfig, Recording, Slo};
use pagedkv::workload::serving::{Prompt, ServingRequest};

/// (id, arrival step, prompt tokens, outputs).
type Spec<'a> = (&'a str, f64, Vec<u32>, u32);

/// Where each request went (replica, reason, GPU prefix hit), in input order.
fn run(
    replicas: usize,
    router: RouterKind,
    cfg: RouterConfig,
    specs: &[Spec],
) -> Vec<(usize, Reason, u32)> {
    let reqs: Vec<ServingRequest> = specs
        .iter()
        .map(|(id, arrival, prompt, out)| ServingRequest {
            id: id.to_string(),
            arrival: *arrival,
            prompt: Prompt::Tokens(prompt.clone()),
            output_len: *out,
            priority: 0,
        })
        .collect();
    let engine = EngineConfig {
        block_size: pagedkv::kv::BlockSize::of(4),
        num_gpu_blocks: 64,
        max_num_seqs: 8,
        max_num_batched_tokens: 16,
        ..EngineConfig::default()
    };
    let p = prepare(&engine, &reqs).unwrap();
    let mut c = ClusterCore::new(
        &engine,
        &Clock::Steps,
        replicas,
        build(router, &cfg, replicas, pagedkv::kv::BlockSize::of(4)),
        Recording::default(),
        Slo::default(),
    )
    .unwrap();
    drive(&mut c, &p, &mut |_, _| Ok(()), |_, _| {}).unwrap();
    c.check().unwrap();
    (0..reqs.len() as u64)
        .map(|g| {
            let (p, r) = c.placed(g).unwrap();
            (p.replica as usize, p.choice.reason, r.first_hit.unwrap())
        })
        .collect()
}

fn seeded(seed: u64) -> RouterConfig {
    RouterConfig {
        seed,
        ..RouterConfig::default()
    }
}

/// P: 9 tokens (two full blocks and one more); Q: 9 tokens sharing none of P's.
fn p() -> Vec<u32> {
    (1..=9).collect()
}
fn q() -> Vec<u32> {
    (20..=28).collect()
}
fn cat(a: &[u32], b: &[u32]) -> Vec<u32> {
    [a, b].concat()
}

// ---- round-robin: the k-th request to k mod N, loads and caches unread

#[test]
fn round_robin_takes_turns_whatever_the_load_or_the_cache() {
    // 1. Turns on two replicas; 2. a repeat of P lands on the other replica and hits nothing;
    // 3. a long output on replica 0 does not skip its turn.
    let got = run(
        2,
        RouterKind::RoundRobin,
        seeded(0),
        &[
            ("a", 0.0, p(), 30),
            ("b", 0.0, q(), 1),
            ("c", 5.0, p(), 1),
            ("d", 5.0, cat(&p(), &[7]), 1),
            ("e", 6.0, q(), 1),
        ],
    );
    let reps: Vec<usize> = got.iter().map(|g| g.0).collect();
    assert_eq!(reps, [0, 1, 0, 1, 0]);
    assert!(got.iter().all(|g| g.1 == Reason::Turn));
    // c repeats P on 0, where a computed it: 8 tokens hit. d (P + 1) on 1: nothing. e (Q) on 0:
    // nothing.
    let hits: Vec<u32> = got.iter().map(|g| g.2).collect();
    assert_eq!(hits, [0, 0, 8, 0, 0]);
    // 4. Three replicas rotate through all three; 5. one replica takes everything.
    let ids = ["r0", "r1", "r2", "r3", "r4", "r5", "r6"];
    let three: Vec<Spec> = (0..7u32)
        .map(|i| (ids[i as usize], f64::from(i), vec![100 + i], 1))
        .collect();
    let reps: Vec<usize> = run(3, RouterKind::RoundRobin, seeded(0), &three)
        .iter()
        .map(|g| g.0)
        .collect();
    assert_eq!(reps, [0, 1, 2, 0, 1, 2, 0]);
    let one = run(1, RouterKind::RoundRobin, seeded(0), &three);
    assert!(one.iter().all(|g| g.0 == 0));
}

// ---- least-loaded: the fewest requests in flight, drawn among equals

#[test]
fn least_loaded_counts_requests_until_their_finish_is_seen() {
    for seed in 0..8 {
        let got = run(
            2,
            RouterKind::LeastLoaded,
            seeded(seed),
            &[
                // 1. Two idle replicas: drawn, x.
                ("a", 0.0, p(), 2),
                // 2. At step 1, a (finishing at 2) is in flight on x: the other, alone at 0.
                ("b", 1.0, q(), 2),
                // 3. At step 2 a's finish is seen (x: 0), b's is not (finishes at 3): x.
                ("c", 2.0, q(), 20),
                // 4. At step 3 b's finish is seen: x has c, the other nothing: the other.
                ("d", 3.0, p(), 20),
                // 5. At step 4 both hold one long request: drawn between the two.
                ("e", 4.0, p(), 1),
            ],
        );
        let x = got[0].0;
        assert_eq!(got[0].1, Reason::LeastLoaded { load: 0, tied: 2 });
        let want = [
            (1 - x, Reason::LeastLoaded { load: 0, tied: 1 }),
            (x, Reason::LeastLoaded { load: 0, tied: 1 }),
            (1 - x, Reason::LeastLoaded { load: 0, tied: 1 }),
        ];
        for (i, w) in want.iter().enumerate() {
            assert_eq!(
                (got[i + 1].0, got[i + 1].1),
                *w,
                "seed {seed}, request {}",
                i + 1
            );
        }
        assert_eq!(got[4].1, Reason::LeastLoaded { load: 1, tied: 2 });
    }
}

// ---- prefix-aware: SGLang's cache-aware policy, launcher defaults (0.3; 64 / 1.5)

#[test]
fn prefix_aware_follows_exact_repeats_and_partial_matches_above_the_threshold() {
    for seed in 0..8 {
        let got = run(
            2,
            RouterKind::PrefixAware,
            seeded(seed),
            &[
                // 1. The empty tree: a miss, drawn between idle replicas: x.
                ("a", 0.0, p(), 2),
                // 2. Q shares no token with P: a miss, to the idle replica (x holds a).
                ("b", 0.0, q(), 2),
                // 3. An exact repeat of P at step 5: 9 of 9 match, x's text: x, 8 tokens hit.
                ("c", 5.0, p(), 2),
                // 4. 3 of P's tokens then 7 others: 3/10 = 0.3 is not above 0.3: a miss; both
                //    idle again at step 10: drawn.
                ("d", 10.0, cat(&p()[..3], &[60, 61, 62, 63, 64, 65, 66]), 2),
                // 5. 4 of P's tokens then 8 others: 4/12 > 0.3: x's text (tokens 1..4 hang under
                //    the node a created, split) — whatever d drew.
                (
                    "e",
                    20.0,
                    cat(&p()[..4], &[70, 71, 72, 73, 74, 75, 76, 77]),
                    2,
                ),
            ],
        );
        let x = got[0].0;
        assert!(matches!(
            got[0].1,
            Reason::Miss {
                matched: 0,
                tied: 2,
                ..
            }
        ));
        assert_eq!(
            (got[1].0, got[1].1),
            (
                1 - x,
                Reason::Miss {
                    matched: 0,
                    of: 9,
                    load: 0,
                    tied: 1
                }
            )
        );
        assert_eq!(
            (got[2].0, got[2].1, got[2].2),
            (x, Reason::Match { matched: 9, of: 9 }, 8)
        );
        assert!(matches!(
            got[3].1,
            Reason::Miss {
                matched: 3,
                of: 10,
                tied: 2,
                ..
            }
        ));
        // e matches d's 3 tokens and a's 4th: the split node "1 2 3" was created by a's insert.
        assert_eq!(
            (got[4].0, got[4].1),
            (x, Reason::Match { matched: 4, of: 12 })
        );
    }
}

#[test]
fn prefix_aware_sends_a_prefix_in_flight_to_its_replica_until_loads_are_imbalanced() {
    let mut cfg = seeded(3);
    cfg.prefix_aware.balance_abs_threshold = 2;
    cfg.prefix_aware.balance_rel_threshold = 1.5;
    let got = run(
        2,
        RouterKind::PrefixAware,
        cfg,
        &[
            // 1. P with a long output: a miss, drawn: x.
            ("a", 0.0, p(), 40),
            // 2., 3. P's continuations while a runs: loads (1, 0) and (2, 0) are balanced (a
            //    difference of at most 2); each matches 9 of 10 on x, busy as it is.
            ("b", 1.0, cat(&p(), &[50]), 40),
            ("c", 2.0, cat(&p(), &[51]), 40),
            // 4. Loads (3, 0): 3 - 0 > 2 and 3 > 0 × 1.5: imbalanced, the idle replica.
            ("d", 3.0, cat(&p(), &[52]), 40),
            // 5. Loads (3, 1): 2 is not above 2: balanced again; the match is on x.
            ("e", 4.0, cat(&p(), &[53]), 40),
        ],
    );
    let x = got[0].0;
    for (i, g) in got[1..3].iter().enumerate() {
        assert_eq!(
            (g.0, g.1, g.2),
            (x, Reason::Match { matched: 9, of: 10 }, 8),
            "request {}",
            i + 1
        );
    }
    assert_eq!(
        (got[3].0, got[3].1),
        (
            1 - x,
            Reason::Imbalanced {
                min: 0,
                max: 3,
                tied: 1
            }
        )
    );
    // d's text went to the other replica, but the tree's node for P (and "P 52" under it) still
    // names x as the creator of P: e matches 9 of 10 into P's node, x.
    assert_eq!(
        (got[4].0, got[4].1),
        (x, Reason::Match { matched: 9, of: 10 })
    );
}

#[test]
fn prefix_aware_forgets_what_its_tree_evicted() {
    // A tree of 8 characters (2 tokens) per replica, evicted every 5 steps.
    let mut cfg = seeded(1);
    cfg.prefix_aware.max_tree_size = 8;
    cfg.prefix_aware.eviction_interval = 5.0;
    let got = run(
        2,
        RouterKind::PrefixAware,
        cfg,
        &[
            ("a", 0.0, p(), 2),
            // At step 3 (before the first eviction, at 5) P still matches: x.
            ("b", 3.0, p(), 2),
            // At step 6 the tree has cut x to 2 tokens of its 9: P's node was its only leaf, so
            // it went whole; the match is 0: a miss, drawn between idle replicas.
            ("c", 6.0, p(), 2),
        ],
    );
    let x = got[0].0;
    assert_eq!(
        (got[1].0, got[1].1),
        (x, Reason::Match { matched: 9, of: 9 })
    );
    assert!(matches!(
        got[2].1,
        Reason::Miss {
            matched: 0,
            tied: 2,
            ..
        }
    ));
}

// ---- kv-aware: Dynamo's cost; its booking of prefill tokens and blocks

#[test]
fn kv_aware_follows_cached_blocks_and_its_bookings() {
    for seed in 0..8 {
        let got = run(
            2,
            RouterKind::KvAware,
            seeded(seed),
            &[
                // 1. Idle, nothing cached: 9/4 + 2 blocks = 4.25 on both: drawn, x.
                ("a", 0.0, p(), 30),
                // 2. Same step: x has a's 9 prefill tokens and 2 blocks booked:
                //    (9 + 9)/4 + 2 + 2 = 8.5 against 4.25.
                ("b", 0.0, q(), 1),
                // 3. At step 3: a's first token came (step 1): x's cost for P + [50] (2 full
                //    blocks, both booked and cached on x): 10/4 - 2 + 2 + 0 = 2.5; the other
                //    (b finished at 1): 10/4 + 0 + 2 = 4.5.
                ("c", 3.0, cat(&p(), &[50]), 1),
                // 4. An exact repeat of Q at step 5 on Q's replica: 9/4 - 2 + 0 + 2 = 2.25;
                //    on x: 9/4 + 2 (a's blocks; c finished at 4) + 2 = 6.25.
                ("d", 5.0, q(), 1),
                // 5. A long new prompt (12 tokens, 3 blocks) at step 10: x has a's 2 blocks
                //    booked (a runs to step 30): 12/4 + 2 + 3 = 8; the other is idle: 3 + 3 = 6.
                ("e", 10.0, (40..52).collect(), 1),
            ],
        );
        let x = got[0].0;
        let cost = |c: f64| Reason::Cost { cost: c, tied: 1 };
        assert_eq!(
            got[0].1,
            Reason::Cost {
                cost: 4.25,
                tied: 2
            }
        );
        assert_eq!((got[1].0, got[1].1), (1 - x, cost(4.25)), "seed {seed}");
        assert_eq!(
            (got[2].0, got[2].1, got[2].2),
            (x, cost(2.5), 8),
            "seed {seed}"
        );
        assert_eq!(
            (got[3].0, got[3].1, got[3].2),
            (1 - x, cost(2.25), 8),
            "seed {seed}"
        );
        assert_eq!((got[4].0, got[4].1), (1 - x, cost(6.0)), "seed {seed}");
    }
}

#[test]
fn kv_aware_charges_a_prefill_until_its_first_token_comes() {
    // a: a 40-token prompt, computed in steps 0, 1 and 2 (16 + 16 + 8): its first token is out
    // at 3, and after step 1 its first 8 blocks are cached. b: Q on the other replica, decoding
    // from step 1. c: a's first 32 tokens and one more (8 full blocks), at step 2 or 3.
    let long: Vec<u32> = (100..140).collect();
    let c_prompt = cat(&long[..32], &[999]);
    for (at, to_a, cost, hit) in [(2.0, false, 18.25, 0), (3.0, true, 10.25, 32)] {
        let got = run(
            2,
            RouterKind::KvAware,
            seeded(5),
            &[
                ("a", 0.0, long.clone(), 50),
                ("b", 0.0, q(), 40),
                ("c", at, c_prompt.clone(), 1),
            ],
        );
        let (xa, xb) = (got[0].0, got[1].0);
        assert_ne!(xa, xb);
        // On a's replica c's 8 blocks are cached and booked (D = M = 8): at step 2 a's 40
        // prefill tokens are still booked, (40 + 33)/4 - 8 + 10 + 0 = 20.25; at step 3 they are
        // not, 33/4 - 8 + 10 = 10.25. On b's: 33/4 + 2 + 8 = 18.25. The first token flips it.
        let want = if to_a { xa } else { xb };
        assert_eq!(
            (got[2].0, got[2].1, got[2].2),
            (want, Reason::Cost { cost, tied: 1 }, hit),
            "c at step {at}"
        );
    }
}
