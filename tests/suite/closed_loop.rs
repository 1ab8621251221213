//! Closed-loop clients (`--max-concurrency N`, [`pagedkv::sim::engine::clients`]): cases worked by
//! hand under a step clock (one client: each request sent when the last one finished; two
//! clients with known lengths), N at least the number of requests equal to the open loop, and on
//! random workloads in seconds — one engine (synchronous and async), a cluster behind a router,
//! prefill and decode apart — three checks that hold whatever the seed: at most N in flight, each
//! send recomputed from the run's own finishes by the semaphore's rule, and the run equal, float
//! for float, to an open-loop run whose arrivals are the sends.

use pagedkv::hw::gpu;
use pagedkv::kv::{model, BlockSize};
use pagedkv::sim::cluster::pd::{Disagg, KvTransfer, LinkSharing};
use pagedkv::sim::cluster::{ClusterSpec, RequestLine, RouterConfig, RouterKind};
use pagedkv::sim::engine::{
    drive_clients, prepare, ClientReport, Clients, Clock, Engine, EngineConfig, Profile, Recording,
    RunSettings, Slo,
};
use pagedkv::sim::latency::{choose, StepTimes};
use pagedkv::workload::serving::{Prompt, ServingRequest};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SIXTEEN: BlockSize = BlockSize::of(16);

fn req(id: &str, arrival: f64, prompt: u32, output_len: u32) -> ServingRequest {
    ServingRequest {
        id: id.into(),
        arrival,
        prompt: Prompt::Unique(prompt),
        output_len,
        priority: 0,
    }
}

/// A small engine: blocks of 4, room for every case here, a budget no prompt here fills.
fn small() -> EngineConfig {
    EngineConfig {
        block_size: pagedkv::kv::BlockSize::of(4),
        num_gpu_blocks: 256,
        max_num_seqs: 16,
        max_num_batched_tokens: 256,
        ..EngineConfig::default()
    }
}

/// (send, first token, finish) per request in input order, and the clients' report, of `reqs`
/// on one engine of `cfg` under a step clock.
fn steps_run(
    cfg: &EngineConfig,
    reqs: &[ServingRequest],
    clients: Clients,
) -> (Vec<(f64, f64, f64)>, Option<ClientReport>) {
    let p = prepare(cfg, reqs).unwrap();
    let mut e = Engine::open(
        cfg.clone(),
        Clock::Steps,
        Recording::default(),
        Slo::default(),
    )
    .unwrap();
    let report = drive_clients(&mut e, &p, clients, &mut |_, _| Ok(()), |_, _| {}).unwrap();
    e.check().unwrap();
    let mut out = vec![(f64::NAN, f64::NAN, f64::NAN); reqs.len()];
    for r in &e.scheduler().reqs {
        out[r.uid as usize] = (r.arrival, r.first_token_time, r.finish_time);
    }
    (out, report)
}

fn closed(n: usize) -> Clients {
    Clients::Closed { max_concurrency: n }
}

#[test]
fn one_client_sends_each_request_when_the_last_one_finished() {
    // A prompt computed in the step it arrives in has its first token at the step's end (+1) and
    // its n-th at +n: r0 runs 0..3; r1 (ready at 0) is sent at 3 and finishes at 4; r2 (ready at
    // 2) waits to 4 and finishes at 8; r3 arrives at 20, after r2 finished: sent at 20.
    let reqs = [
        req("r0", 0.0, 5, 3),
        req("r1", 0.0, 6, 1),
        req("r2", 2.0, 3, 4),
        req("r3", 20.0, 4, 2),
    ];
    let (got, report) = steps_run(&small(), &reqs, closed(1));
    assert_eq!(
        got,
        [
            (0.0, 1.0, 3.0),
            (3.0, 4.0, 4.0),
            (4.0, 5.0, 8.0),
            (20.0, 21.0, 22.0)
        ]
    );
    // Strictly one after another: each send is the previous finish or the request's arrival.
    for w in got.windows(2) {
        assert!(w[1].0 >= w[0].2, "{got:?}");
    }
    let c = report.unwrap();
    assert_eq!((c.max_concurrency, c.peak_in_flight), (1, 1));
    assert!(!c.all_at_once);
    // In flight 3 + 1 + 4 + 2 = 10 of the 22 steps from the first send to the last finish.
    assert!((c.mean_in_flight - 10.0 / 22.0).abs() < 1e-12, "{c:?}");
    let q = c.client_queue.unwrap();
    assert_eq!((q.mean, q.max), (5.0 / 4.0, 3.0)); // waits 0, 3, 2, 0
    let e2e = c.e2e_with_client_queue.unwrap();
    assert_eq!((e2e.mean, e2e.max), ((3.0 + 4.0 + 6.0 + 2.0) / 4.0, 6.0));
}

#[test]
fn two_clients_with_known_lengths() {
    // All ready at 0. r0 (3 outputs) and r1 (5) are sent at once; r0 finishes at 3 and its
    // client sends r2 (2 outputs) then, which finishes at 5 as r1 does; r3 (4) goes at 5, done
    // at 9. Every prompt is computed in the step it arrives in: TTFT one step each.
    let reqs = [
        req("r0", 0.0, 4, 3),
        req("r1", 0.0, 4, 5),
        req("r2", 0.0, 4, 2),
        req("r3", 0.0, 4, 4),
    ];
    let (got, report) = steps_run(&small(), &reqs, closed(2));
    assert_eq!(
        got,
        [
            (0.0, 1.0, 3.0),
            (0.0, 1.0, 5.0),
            (3.0, 4.0, 5.0),
            (5.0, 6.0, 9.0)
        ]
    );
    let c = report.unwrap();
    assert!(c.all_at_once);
    assert_eq!((c.max_concurrency, c.peak_in_flight), (2, 2));
    // 3 + 5 + 2 + 4 = 14 request-steps over 9 steps.
    assert!((c.mean_in_flight - 14.0 / 9.0).abs() < 1e-12, "{c:?}");
    let q = c.client_queue.unwrap();
    assert_eq!((q.mean, q.max), (2.0, 5.0)); // waits 0, 0, 3, 5
    let e2e = c.e2e_with_client_queue.unwrap();
    assert_eq!((e2e.mean, e2e.max), (5.5, 9.0));
}

#[test]
fn as_many_clients_as_requests_is_the_open_loop() {
    let reqs: Vec<ServingRequest> = (0..12)
        .map(|k| req(&format!("r{k}"), f64::from(k % 3), 3 + 2 * k, 1 + k % 5))
        .collect();
    let at_once: Vec<ServingRequest> = reqs
        .iter()
        .map(|r| ServingRequest {
            arrival: 0.0,
            ..r.clone()
        })
        .collect();
    for w in [&reqs, &at_once] {
        let (open, none) = steps_run(&small(), w, Clients::Open);
        assert!(none.is_none());
        for n in [w.len(), w.len() + 1, 1 << 40] {
            let (got, report) = steps_run(&small(), w, closed(n));
            assert_eq!(got, open, "{n} clients");
            let c = report.unwrap();
            assert_eq!(c.max_concurrency, n);
            assert_eq!(c.client_queue.unwrap().max, 0.0, "nobody waits");
        }
    }
}

/// Llama 3.1 8B on an H200 (the default step times: the measured tables), a pool of `blocks`.
fn settings(blocks: usize, async_scheduling: bool, clients: Clients) -> RunSettings {
    let model = model::preset("llama-3.1-8b").unwrap();
    let gpu = gpu("h200").unwrap();
    let step_times = choose(StepTimes::Auto, None, &model, &gpu, 1).unwrap();
    RunSettings {
        engine: EngineConfig {
            max_num_seqs: 32,
            async_scheduling,
            ..EngineConfig::default()
        },
        num_gpu_blocks_override: Some(blocks),
        gpu_memory_utilization: 0.9,
        model,
        gpu,
        tp: 1,
        profile: Profile::h200_assumed(),
        efficiency_scale: 1.0,
        step_times,
        cpu_overhead_s: 0.0005,
        swap_gbps: None,
        clock_steps: false,
        slo: Slo::default(),
        clients,
    }
}

/// Poisson-ish arrivals at about `rate` a second, prompts sharing four prefixes.
fn workload(seed: u64, n: usize, rate: f64) -> Vec<ServingRequest> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut t = 0.0;
    (0..n)
        .map(|k| {
            t += -(1.0 - rng.random::<f64>()).ln() / rate;
            let shared = rng.random_range(0..4u32);
            let prompt = (0..64 * rng.random_range(1..5u32))
                .map(|x| 100_000 * shared + x)
                .chain((0..rng.random_range(1..300u32)).map(|x| 10_000_000 + 1000 * k as u32 + x))
                .collect();
            ServingRequest {
                id: format!("q{k:03}"),
                arrival: t,
                prompt: Prompt::Tokens(prompt),
                output_len: rng.random_range(1..200),
                priority: 0,
            }
        })
        .collect()
}

/// The sends the semaphore gives, recomputed from the run's own finishes: requests in arrival
/// order (ties in input order), each at max(its arrival, the earliest time a client is free),
/// that client then busy to its finish.
fn semaphore_sends(n: usize, arrival: &[f64], finish: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..arrival.len()).collect();
    order.sort_by(|&a, &b| arrival[a].total_cmp(&arrival[b]));
    let mut free = vec![f64::NEG_INFINITY; n.min(arrival.len())];
    let mut sends = vec![f64::NAN; arrival.len()];
    for i in order {
        let (slot, &f) = free
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .unwrap();
        sends[i] = arrival[i].max(f);
        free[slot] = finish[i];
    }
    sends
}

/// The most requests in flight at once (a finish before a send at the same time).
fn peak(sends: &[f64], finish: &[f64]) -> usize {
    let mut ev: Vec<(f64, i32)> = sends.iter().map(|&s| (s, 1)).collect();
    ev.extend(finish.iter().map(|&f| (f, -1)));
    ev.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut now = 0;
    let mut most = 0;
    for (_, d) in ev {
        now += d;
        most = most.max(now);
    }
    most as usize
}

/// The three checks on a closed-loop run's request lines (input order): at most `n` in flight,
/// sends as the semaphore gives them, and `replay` on the sends as arrivals gives the same lines.
fn check_closed_loop(
    n: usize,
    reqs: &[ServingRequest],
    lines: &[RequestLine],
    clients: &ClientReport,
    replay: impl Fn(&[ServingRequest]) -> Vec<RequestLine>,
) {
    let arrival: Vec<f64> = reqs.iter().map(|r| r.arrival).collect();
    let sends: Vec<f64> = lines.iter().map(|l| l.arrival).collect();
    let finish: Vec<f64> = lines.iter().map(|l| l.finish.unwrap()).collect();
    for (l, r) in lines.iter().zip(reqs) {
        assert_eq!(l.scheduled_arrival, Some(r.arrival), "{}", l.id);
    }
    assert_eq!(sends, semaphore_sends(n, &arrival, &finish));
    let most = peak(&sends, &finish);
    assert!(most <= n, "{most} in flight with {n} clients");
    assert_eq!(clients.peak_in_flight, most);
    assert!(
        sends.iter().zip(&arrival).any(|(s, a)| s > a),
        "the clients held some request back (else the case tests nothing)"
    );
    let moved: Vec<ServingRequest> = reqs
        .iter()
        .zip(&sends)
        .map(|(r, &s)| ServingRequest {
            arrival: s,
            ..r.clone()
        })
        .collect();
    let open = replay(&moved);
    let strip = |ls: &[RequestLine]| -> Vec<RequestLine> {
        ls.iter()
            .map(|l| RequestLine {
                scheduled_arrival: None,
                ..l.clone()
            })
            .collect()
    };
    assert_eq!(strip(lines), strip(&open));
}

/// The request lines of `reqs` on one engine (sync or async), closed or open.
fn engine_lines(
    s: &RunSettings,
    reqs: &[ServingRequest],
) -> (Vec<RequestLine>, Option<ClientReport>) {
    let spec = ClusterSpec::colocated(1, RouterKind::RoundRobin, RouterConfig::default()).unwrap();
    let o = pagedkv::sim::cluster::run(s, SIXTEEN, &spec, reqs, false, None, |_, _| {}).unwrap();
    (o.requests, o.clients)
}

#[test]
fn one_engine_in_seconds_keeps_the_semaphores_rule_and_replays_open() {
    for (seed, async_scheduling, n) in [(1u64, false, 3usize), (2, true, 8), (3, false, 1)] {
        // Faster than the engine serves them: the clients hold requests back.
        let reqs = workload(seed, 60, 200.0);
        let s = settings(4000, async_scheduling, closed(n));
        let (lines, clients) = engine_lines(&s, &reqs);
        let clients = clients.unwrap();
        check_closed_loop(n, &reqs, &lines, &clients, |moved| {
            engine_lines(&settings(4000, async_scheduling, Clients::Open), moved).0
        });
        // The engine's own report (`sim engine`) agrees with the cluster of one.
        let o = s.run(SIXTEEN, &reqs, false, None, |_, _| {}).unwrap();
        assert_eq!(o.clients.as_ref(), Some(&clients));
        let e2e: Vec<f64> = lines
            .iter()
            .map(|l| l.finish.unwrap() - l.arrival)
            .collect();
        let mean = e2e.iter().sum::<f64>() / e2e.len() as f64;
        assert!((o.report.latency.e2e.unwrap().mean - mean).abs() < 1e-9);
    }
}

#[test]
fn a_cluster_shares_one_pool_of_clients_over_its_replicas() {
    for (seed, router, n) in [
        (4u64, RouterKind::LeastLoaded, 5usize),
        (5, RouterKind::KvAware, 12),
    ] {
        let reqs = workload(seed, 80, 400.0);
        let router_cfg = RouterConfig {
            seed,
            ..RouterConfig::default()
        };
        let spec = ClusterSpec::colocated(3, router, router_cfg).unwrap();
        let run = |s: &RunSettings, r: &[ServingRequest]| {
            pagedkv::sim::cluster::run(s, SIXTEEN, &spec, r, false, None, |_, _| {}).unwrap()
        };
        let o = run(&settings(4000, false, closed(n)), &reqs);
        check_closed_loop(n, &reqs, &o.requests, o.clients.as_ref().unwrap(), |m| {
            run(&settings(4000, false, Clients::Open), m).requests
        });
        let used = o.requests.iter().filter_map(|l| l.replica).max().unwrap();
        assert_eq!(used, 2, "every replica took requests");
    }
}

#[test]
fn prefill_and_decode_apart_under_closed_loop_clients() {
    let reqs = workload(6, 60, 300.0);
    let spec = ClusterSpec::disaggregated(
        Disagg {
            prefill_replicas: 1,
            decode_replicas: 2,
            prefill_tp: None,
            decode_tp: None,
            link_gbps: 100.0,
            transfer: KvTransfer::Layerwise,
            link_sharing: LinkSharing::Own,
            local_prefill: None,
            balancing_threshold: None,
        },
        RouterKind::LeastLoaded,
        RouterConfig::default(),
    );
    let run = |s: &RunSettings, r: &[ServingRequest]| {
        pagedkv::sim::cluster::run(s, SIXTEEN, &spec, r, false, None, |_, _| {}).unwrap()
    };
    let n = 6;
    let o = run(&settings(4000, false, closed(n)), &reqs);
    check_closed_loop(n, &reqs, &o.requests, o.clients.as_ref().unwrap(), |m| {
        run(&settings(4000, false, Clients::Open), m).requests
    });
}
