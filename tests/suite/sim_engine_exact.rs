//! The engine simulator on scenarios small enough to work out by hand (the reasoning is in the
//! comments): exact TTFT and end-to-end times in steps, exact preemption victims and order, exact
//! prefix-cache reuse, chunked prefill across steps; and Little's law on a long stationary run.

use pagedkv::hw::gpu;
use pagedkv::sim::engine::{step_records, Clock, Engine, EngineConfig, Recording, Slo, StepModel};
use pagedkv::workload::serving::{Prompt, ServingRequest};

fn req(id: &str, arrival: f64, prompt: Prompt, out: u32) -> ServingRequest {
    ServingRequest {
        id: id.into(),
        arrival,
        prompt,
        output_len: out,
        priority: 0,
    }
}

fn cfg(block_size: usize, num_gpu_blocks: usize, budget: usize, caching: bool) -> EngineConfig {
    EngineConfig {
        block_size: pagedkv::kv::BlockSize::new(block_size as u64).unwrap(),
        num_gpu_blocks,
        max_num_seqs: 8,
        max_num_batched_tokens: budget,
        enable_prefix_caching: caching,
        ..EngineConfig::default()
    }
}

/// Runs under a step clock, checking every invariant after every step; returns each request's
/// (TTFT, end to end) in steps, in input order, and the step log as lines without spaces.
fn run(c: EngineConfig, reqs: &[ServingRequest]) -> (Vec<(f64, f64)>, Vec<String>) {
    let rec = Recording {
        steps: true,
        timeline: false,
    };
    let mut e = Engine::new(c, reqs, Clock::Steps, rec, Slo::default()).unwrap();
    let mut log = Vec::new();
    while e.step().unwrap() {
        e.check().unwrap();
        log.push(e.last_record().unwrap().to_line());
    }
    let times = e
        .scheduler()
        .reqs
        .iter()
        .map(|r| (r.first_token_time - r.arrival, r.finish_time - r.arrival))
        .collect();
    (times, log)
}

/// `{"step":k,"time":k,...}` for a step clock.
fn line(step: u64, sched: &str, pre: &str, fin: &str, free: usize, hits: &str) -> String {
    format!(
        r#"{{"step":{step},"time":{step},"scheduled":{{{sched}}},"preempted":[{pre}],"finished":[{fin}],"free_blocks":{free},"prefix_hit_tokens":{{{hits}}}}}"#
    )
}

#[test]
fn ample_memory_gives_exact_ttft_and_end_to_end_in_steps() {
    // a (10 prompt, 5 out) at 0: its prompt in step 0 samples token 1, stamped at the step's end
    // (1); steps 1-4 sample tokens 2-5; done at 5. b (6, 3) arrives at 2: admitted beside a's
    // decode in step 2 (token at 3), decodes in steps 3 and 4, done at 5.
    let reqs = [
        req("a", 0.0, Prompt::Unique(10), 5),
        req("b", 2.0, Prompt::Unique(6), 3),
    ];
    let (t, log) = run(cfg(4, 101, 32, false), &reqs);
    assert_eq!(t, vec![(1.0, 5.0), (1.0, 3.0)]);
    assert_eq!(log.len(), 5);
    assert_eq!(
        log[2],
        line(2, r#""a":1,"b":6"#, "", "", 100 - 3 - 2, r#""b":0"#)
    );
    assert_eq!(log[4], line(4, r#""a":1,"b":1"#, "", r#""a","b""#, 100, ""));

    // Async scheduling: step s schedules batch s and processes batch s-1, so every output lands
    // one step later. a: first token processed in step 1 (at 2); its 5th output is in flight after
    // step 4, so step 5 skips it and processes it: done at 6. b: admitted in step 2, first token
    // processed in step 3 (at 4), last in step 5 (at 6).
    let mut c = cfg(4, 101, 32, false);
    c.async_scheduling = true;
    let (t, log) = run(c, &reqs);
    assert_eq!(t, vec![(2.0, 6.0), (2.0, 4.0)]);
    assert_eq!(log[0], line(0, r#""a":10"#, "", "", 97, r#""a":0"#));
    assert_eq!(log[5], line(5, "", "", r#""a","b""#, 100, ""));
}

#[test]
fn memory_pressure_preempts_exactly_the_last_admitted() {
    // Blocks of 2 tokens, 4 usable. a, b, c: 2 prompt tokens, 4 outputs each.
    let reqs = [
        req("a", 0.0, Prompt::Unique(2), 4),
        req("b", 0.0, Prompt::Unique(2), 4),
        req("c", 0.0, Prompt::Unique(2), 4),
    ];
    let (t, log) = run(cfg(2, 5, 100, false), &reqs);
    let want = [
        // One block each; 1 left.
        line(0, r#""a":2,"b":2,"c":2"#, "", "", 1, r#""a":0,"b":0,"c":0"#),
        // a takes the last block for its 3rd token; b needs one too: c (last admitted) goes.
        line(1, r#""a":1,"b":1"#, r#""c""#, "", 0, ""),
        // c (2 prompt + 1 output) needs 2 blocks to re-enter: none free.
        line(2, r#""a":1,"b":1"#, "", "", 0, ""),
        // a needs a 3rd block: b goes; a samples its 4th token and finishes, freeing 3.
        line(3, r#""a":1"#, r#""b""#, r#""a""#, 4, ""),
        // b was preempted last, so it is first: 2 + 3 tokens recomputed in 3 blocks; c needs 2
        // of the 1 left and waits. b samples its last token and finishes.
        line(4, r#""b":5"#, "", r#""b""#, 4, r#""b":0"#),
        line(5, r#""c":3"#, "", "", 2, r#""c":0"#),
        line(6, r#""c":1"#, "", "", 2, ""),
        line(7, r#""c":1"#, "", r#""c""#, 4, ""),
    ];
    assert_eq!(log, want);
    assert_eq!(t, vec![(1.0, 4.0), (1.0, 5.0), (1.0, 8.0)]);
}

#[test]
fn prefix_caching_reuses_exactly_the_cached_full_blocks() {
    let toks = |v: &[u32]| Prompt::Tokens(v.to_vec());
    let ten: Vec<u32> = (1..=10).collect();
    let twelve: Vec<u32> = (1..=12).collect();
    let mut d = ten.clone();
    d.extend([0, 0, 7]);
    let reqs = [
        // Blocks [1-4] and [5-8] cached in step 0; [9, 10, 0, 0] once a's 2nd output is
        // computed (step 2).
        req("a", 0.0, toks(&ten), 3),
        // Step 1: [1-4], [5-8] hit; [9-12] is not a's block: 8 tokens.
        req("b", 1.0, toks(&twelve), 1),
        // Exactly 2 blocks: the last token is never a hit, so only [1-4]: 4 tokens.
        req("c", 1.0, toks(&(1..=8).collect::<Vec<_>>()), 1),
        // a's prompt and two outputs (token 0) and one more: 3 blocks, 12 tokens, although a has
        // finished (its blocks are free but still cached).
        req("d", 3.0, toks(&d), 1),
        req("e", 3.0, toks(&[9; 5]), 1),
    ];
    let (_, log) = run(cfg(4, 64, 64, true), &reqs);
    let hits: Vec<String> = log
        .iter()
        .map(|l| {
            l.split("\"prefix_hit_tokens\":")
                .nth(1)
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        hits,
        [
            r#"{"a":0}}"#,
            r#"{"b":8,"c":4}}"#,
            "{}}",
            r#"{"d":12,"e":0}}"#
        ]
    );
    // Without prefix caching nothing is reused.
    let (_, log) = run(cfg(4, 64, 64, false), &reqs);
    assert!(log[3].ends_with(r#"{"d":0,"e":0}}"#), "{}", log[3]);
}

#[test]
fn chunked_prefill_spreads_a_long_prompt_over_steps() {
    // Budget 8: r's 20-token prompt takes 8, 8 and 4 tokens (its first output at the end of
    // step 2); s arrives at 1 but finds no budget left until step 2, beside r's last chunk.
    let reqs = [
        req("r", 0.0, Prompt::Unique(20), 2),
        req("s", 1.0, Prompt::Unique(3), 1),
    ];
    let (t, log) = run(cfg(4, 64, 8, false), &reqs);
    assert_eq!(
        log,
        [
            line(0, r#""r":8"#, "", "", 63 - 2, r#""r":0"#),
            line(1, r#""r":8"#, "", "", 63 - 4, ""),
            line(2, r#""r":4,"s":3"#, "", r#""s""#, 63 - 5, r#""s":0"#),
            line(3, r#""r":1"#, "", r#""r""#, 63, ""),
        ]
    );
    assert_eq!(t, vec![(3.0, 4.0), (2.0, 2.0)]);
    // The step-log helper agrees with the engine run step by step.
    let records = step_records(cfg(4, 64, 8, false), &reqs).unwrap();
    assert_eq!(records.iter().map(|r| r.to_line()).collect::<Vec<_>>(), log);
}

#[test]
fn littles_law_holds_on_a_stationary_run() {
    // Poisson arrivals at 20/s for long enough to forget the start; in the engine, on average:
    // L (time average of waiting + running, sampled per step) = lambda W (arrival rate times mean
    // time in the engine).
    let w = pagedkv::workload::synthetic::SyntheticRequests {
        requests: 4000,
        rate_per_s: 20.0,
        prompt_mean: 500.0,
        prompt_sigma: 0.8,
        output_mean: 100.0,
        seed: 5,
    };
    let (reqs, _) = pagedkv::workload::serving::from_trace(&w.generate().unwrap());
    let m = pagedkv::kv::model::preset("llama-3-8b").unwrap();
    let clock = Clock::Seconds(Box::new(StepModel {
        cpu_overhead_s: 5e-4,
        overlap_cpu: false,
        swap_gbps: None,
        offload_gbps: None,
        ..StepModel::roofline(m, gpu("h200").unwrap(), 1, 0.8)
    }));
    let c = EngineConfig {
        num_gpu_blocks: 20_000,
        ..EngineConfig::default()
    };
    let mut e = Engine::new(c, &reqs, clock, Recording::default(), Slo::default()).unwrap();
    let r = e.run(|_, _| {}).unwrap();
    assert_eq!(r.completed, 4000);
    let lambda = r.completed as f64 / r.makespan;
    let w_mean = r.latency.e2e.unwrap().mean;
    let l = r.occupancy.mean_in_system;
    assert!(l > 5.0, "a trivial load: L = {l}");
    assert!(
        (l / (lambda * w_mean) - 1.0).abs() < 0.03,
        "L {l} vs lambda W {} (lambda {lambda}, W {w_mean})",
        lambda * w_mean
    );
}

#[test]
fn swap_preemption_recomputes_nothing() {
    // The memory-pressure scenario above, with preempted KV copied to the host and back: the same
    // victims, but nothing is computed twice.
    let reqs = [
        req("a", 0.0, Prompt::Unique(2), 4),
        req("b", 0.0, Prompt::Unique(2), 4),
        req("c", 0.0, Prompt::Unique(2), 4),
    ];
    let mut c = cfg(2, 5, 100, false);
    c.preemption = pagedkv::sim::engine::Preemption::Swap {
        gbps: 10.0,
        host_bytes: 1 << 30,
    };
    let rec = Recording::default();
    let mut e = Engine::new(c, &reqs, Clock::Steps, rec, Slo::default()).unwrap();
    while e.step().unwrap() {
        e.check().unwrap();
    }
    let r = e.report();
    assert_eq!(r.completed, 3);
    assert_eq!(r.preemption.preemptions, 2);
    assert_eq!(r.preemption.recomputed_tokens, 0);
    // c is preempted with 2 tokens computed, b with 4; both come back whole.
    assert_eq!(
        (
            r.preemption.swapped_out_tokens,
            r.preemption.swapped_in_tokens
        ),
        (6, 6)
    );
    let (_, log) = run(cfg(2, 5, 100, false), &reqs);
    assert!(
        log[4].contains(r#""b":5"#),
        "recompute: b computes 5 tokens again"
    );
}

#[test]
fn beyond_vllm_admission_orders_rank_the_waiting_queue() {
    // One seat: requests run one at a time, in the policy's order.
    let mk = |outs: [u32; 3], prios: [i64; 3], arrivals: [f64; 3]| -> Vec<ServingRequest> {
        ["x", "y", "z"]
            .iter()
            .zip(outs.iter().zip(prios.iter().zip(arrivals)))
            .map(|(id, (&o, (&p, a)))| ServingRequest {
                priority: p,
                ..req(id, a, Prompt::Unique(4), o)
            })
            .collect()
    };
    let order = |policy: pagedkv::sim::engine::Policy, reqs: &[ServingRequest]| {
        let mut c = cfg(4, 64, 64, false);
        c.max_num_seqs = 1;
        c.scheduling_policy = policy;
        c.aging_delay = 3.0;
        let log = step_records(c, reqs).unwrap();
        log.iter()
            .flat_map(|r| r.finished.clone())
            .collect::<Vec<_>>()
    };
    use pagedkv::sim::engine::Policy;
    let reqs = mk([9, 1, 5], [0, 0, 0], [0.0, 0.0, 0.0]);
    assert_eq!(order(Policy::Fcfs, &reqs), ["x", "y", "z"]);
    assert_eq!(order(Policy::Sjf, &reqs), ["y", "z", "x"]);
    assert_eq!(order(Policy::Srpt, &reqs), ["y", "z", "x"]);
    // Aging: priority 1 ranks like priority 0 arriving 3 steps later. x (prio 1, at 0) ranks
    // 3, y (prio 0, at 1) ranks 1, z (prio 2, at 0) ranks 6; x holds the seat from step 0.
    let reqs = mk([4, 4, 4], [1, 0, 2], [0.0, 1.0, 0.0]);
    assert_eq!(order(Policy::Aging, &reqs), ["x", "y", "z"]);
    // Strict priority: z would wait for everything of lower value.
    assert_eq!(order(Policy::Priority, &reqs), ["x", "y", "z"]);
    let reqs = mk([4, 4, 4], [2, 0, 1], [0.0, 1.0, 1.0]);
    assert_eq!(order(Policy::Priority, &reqs), ["x", "y", "z"]);
    let reqs = mk([4, 4, 4], [0, 5, 1], [0.0, 0.0, 4.0]);
    // Aging: y (prio 5 at 0) ranks 15, z (prio 1 at 4) ranks 7: z passes y.
    assert_eq!(order(Policy::Aging, &reqs), ["x", "z", "y"]);
    assert_eq!(order(Policy::Fcfs, &reqs), ["x", "y", "z"]);
}

/// A distant arrival under a step clock: the idle spell before it is logged as its first and last
/// step, and everything else is the run with a short gap, shifted by the gap's difference.
#[test]
fn an_idle_spell_is_skipped_to_its_last_step() {
    let c = || cfg(4, 20, 32, true);
    let reqs = |gap: f64| {
        vec![
            req("a", 0.0, Prompt::Tokens(vec![1, 2, 3, 4, 5]), 3),
            req("b", gap, Prompt::Tokens(vec![1, 2, 3, 4, 5, 6]), 2),
        ]
    };
    let steps = |log: &[pagedkv::sim::engine::StepRecord]| -> Vec<u64> {
        log.iter().map(|r| r.step).collect()
    };
    // "a" runs in steps 0..=2; step 3 reports its finish (vLLM's has_requests() is still true);
    // an arrival at 6 leaves two idle steps, 4 and 5, both logged; "b" finishes in step 7.
    let short = step_records(c(), &reqs(6.0)).unwrap();
    assert_eq!(steps(&short), (0..=7).collect::<Vec<u64>>());
    // At 8, the spell is steps 4 to 7: its first and last are logged, 5 and 6 skipped.
    let near = step_records(c(), &reqs(8.0)).unwrap();
    assert_eq!(steps(&near), [0, 1, 2, 3, 4, 7, 8, 9]);
    // Far: the same first idle step, then the step before the arrival; none between.
    let far = step_records(c(), &reqs(1e15)).unwrap();
    let shift = 1e15 as u64 - 8;
    assert_eq!(
        steps(&far),
        [0, 1, 2, 3, 4, 7 + shift, 8 + shift, 9 + shift]
    );
    for (n, f) in near.iter().zip(&far) {
        let mut moved = n.clone();
        if n.step >= 7 {
            moved.step += shift;
            moved.time += shift as f64;
        }
        assert_eq!(&moved, f);
    }
    // The requests' times are the near run's: TTFT and end to end count from each arrival.
    let (times, _) = run(c(), &reqs(1e15));
    let (near_times, _) = run(c(), &reqs(8.0));
    assert_eq!(times, near_times);
    // Past the clock's last countable step: refused, not wrapped round.
    let e = step_records(c(), &reqs(1e300)).unwrap_err().to_string();
    assert!(e.contains("request b") && e.contains("2^52"), "{e}");
}
