//! Ending requests from outside the step loop, as `pagedkv serve` does: an abort (its client
//! went away) frees the request's blocks before the next step and drops output already in
//! flight for it; forgetting finished requests reuses their records' slots and changes nothing
//! the engine does, while its records stay as many as the requests it holds at once.

use pagedkv::sim::engine::request::Status;
use pagedkv::sim::engine::{
    drive, prepare, Abort, Clock, Engine, EngineConfig, EngineError, Recording, Slo, StepRecord,
    Submission, System,
};
use pagedkv::workload::serving::{Prompt, ServingRequest};
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;

fn config(blocks: usize, async_scheduling: bool) -> EngineConfig {
    EngineConfig {
        block_size: pagedkv::kv::BlockSize::of(16),
        num_gpu_blocks: blocks,
        max_num_seqs: 8,
        max_num_batched_tokens: 256,
        async_scheduling,
        ..EngineConfig::default()
    }
}

fn request(id: &str, arrival: f64, prompt: Vec<u32>, output_len: u32) -> ServingRequest {
    ServingRequest {
        id: id.into(),
        arrival,
        prompt: Prompt::Tokens(prompt),
        output_len,
        priority: 0,
    }
}

fn submit(e: &mut Engine, r: &ServingRequest, uid: u64) -> u32 {
    let s = Submission {
        request: r,
        uid,
        predicted: 0.0,
        id_rank: uid as u32,
    };
    e.submit(s, Vec::new()).unwrap()
}

fn engine(cfg: EngineConfig) -> Engine {
    Engine::open(cfg, Clock::Steps, Recording::default(), Slo::default()).unwrap()
}

#[test]
fn an_abort_frees_the_blocks_at_once_and_drops_output_in_flight() {
    for async_scheduling in [false, true] {
        let mut e = engine(config(64, async_scheduling));
        // A: 100 prompt tokens (7 blocks of 16), B: 40 (3 blocks); both arrive at step 0.
        let a = submit(&mut e, &request("a", 0.0, (0..100).collect(), 50), 0);
        let b = submit(&mut e, &request("b", 0.0, (1000..1040).collect(), 20), 1);
        // Until A has its first token (one step; two under async scheduling, whose first
        // output is processed a step later).
        while e.request(a).num_output == 0 {
            assert!(e.step().unwrap());
            e.check().unwrap();
        }
        assert_eq!(e.request(a).status, Status::Running);
        let (used, produced) = (e.scheduler().kv.used_blocks(), e.request(a).num_output);
        assert_eq!(used, 7 + 3, "async {async_scheduling}");
        let when = e.now();
        assert_eq!(e.abort(a), Abort::Aborted);
        e.check().unwrap();
        // Freed before the next step: B's blocks alone are in use.
        assert_eq!(e.scheduler().kv.used_blocks(), 3);
        assert!(e.scheduler().running.iter().all(|&i| i != a));
        assert_eq!(e.abort(a), Abort::Finished);
        while e.step().unwrap() {
            e.check().unwrap();
        }
        let qa = e.request(a);
        // The step in flight under async scheduling sampled for A: its token is dropped.
        assert_eq!(
            (qa.num_output, qa.aborted, qa.finish_time),
            (produced, true, when)
        );
        let qb = e.request(b);
        assert_eq!(
            (qb.num_output, qb.aborted, qb.is_finished()),
            (20, false, true)
        );
        assert_eq!(e.finished_requests(), 2);
        assert_eq!(e.scheduler().kv.used_blocks(), 0);
    }
}

#[test]
fn an_aborted_waiting_request_never_runs_and_one_not_arrived_never_waits() {
    // Room for one request's 6 blocks at a time (8 blocks, the null block aside): B waits.
    let mut e = engine(config(8, false));
    let a = submit(&mut e, &request("a", 0.0, (0..80).collect(), 30), 0);
    let b = submit(&mut e, &request("b", 0.0, (500..580).collect(), 30), 1);
    let c = submit(&mut e, &request("c", 40.0, (900..910).collect(), 5), 2);
    assert!(e.step().unwrap());
    assert_eq!(e.request(b).status, Status::Waiting);
    assert_eq!(e.scheduler().num_waiting(), 1);
    assert_eq!(e.abort(b), Abort::Aborted);
    assert_eq!(e.abort(c), Abort::Aborted);
    assert_eq!(e.scheduler().num_waiting(), 0);
    e.check().unwrap();
    while e.step().unwrap() {
        e.check().unwrap();
    }
    for i in [b, c] {
        let q = e.request(i);
        assert_eq!(
            (q.scheduled_tokens, q.first_hit, q.aborted),
            (0, None, true)
        );
    }
    // C was aborted at step 1, before its arrival: it ends when it would have come.
    assert_eq!(e.request(c).finish_time, 40.0);
    assert_eq!(e.request(a).num_output, 30);
    assert_eq!(e.finished_requests(), 3);
}

/// One engine that forgets each request once finished, keeping what it needs to compare.
struct Forgetful {
    e: Engine,
    outcomes: BTreeMap<String, (f64, f64, u32, u32, Option<u32>)>,
    unforgotten: Vec<u32>,
    most_held: usize,
}

fn outcome(q: &pagedkv::sim::engine::request::Req) -> (f64, f64, u32, u32, Option<u32>) {
    (
        q.first_token_time,
        q.finish_time,
        q.num_output,
        q.preemptions,
        q.first_hit,
    )
}

impl System for Forgetful {
    fn submit(&mut self, s: Submission<'_>, now: f64) -> Result<(), EngineError> {
        System::submit(&mut self.e, s, now)?;
        let held = self.e.submitted() - self.e.finished_requests() + self.unforgotten.len();
        self.most_held = self.most_held.max(held);
        Ok(())
    }
    fn next_event_time(&self) -> Option<f64> {
        self.e.next_event_time()
    }
    fn advance(
        &mut self,
        steps: &mut pagedkv::sim::engine::driver::StepSink<'_>,
    ) -> Result<(), EngineError> {
        System::advance(&mut self.e, steps)?;
        for &i in self.e.just_finished() {
            let q = self.e.request(i);
            self.outcomes.insert(q.id.clone(), outcome(q));
        }
        let mut now_finished: Vec<u32> = self.e.just_finished().to_vec();
        now_finished.append(&mut self.unforgotten);
        self.unforgotten = now_finished
            .into_iter()
            .filter(|&i| !self.e.forget(i))
            .collect();
        Ok(())
    }
    fn finished(&self) -> usize {
        self.e.finished_requests()
    }
}

#[test]
fn forgetting_finished_requests_changes_nothing_and_bounds_the_records() {
    for (seed, async_scheduling) in [(1u64, false), (2, true), (3, false), (4, true)] {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut t = 0.0;
        let requests: Vec<ServingRequest> = (0..400)
            .map(|k| {
                t += f64::from(rng.random_range(0..12u32));
                // Four shared prefixes (the prefix cache hits) and a private tail.
                let shared = rng.random_range(0..4u32);
                let prompt = (0..16 * rng.random_range(1..4u32))
                    .map(|x| 10_000 * shared + x)
                    .chain((0..rng.random_range(1..40u32)).map(|x| 1_000_000 + 100 * k + x))
                    .collect();
                request(&format!("r{k:03}"), t, prompt, rng.random_range(1..60))
            })
            .collect();
        // A pool small enough to preempt.
        let cfg = config(40, async_scheduling);
        let prepared = prepare(&cfg, &requests).unwrap();
        let recording = Recording {
            steps: true,
            timeline: false,
        };
        let run = |sys: &mut dyn System| {
            let mut steps: Vec<StepRecord> = Vec::new();
            drive(
                sys,
                &prepared,
                &mut |_, r| {
                    steps.push(r.clone());
                    Ok(())
                },
                |_, _| {},
            )
            .unwrap();
            steps
        };
        let mut plain = Engine::open(cfg.clone(), Clock::Steps, recording, Slo::default()).unwrap();
        let plain_steps = run(&mut plain);
        let mut f = Forgetful {
            e: Engine::open(cfg, Clock::Steps, recording, Slo::default()).unwrap(),
            outcomes: BTreeMap::new(),
            unforgotten: Vec::new(),
            most_held: 0,
        };
        let forgetful_steps = run(&mut f);
        assert_eq!(plain_steps, forgetful_steps, "seed {seed}");
        let expected: BTreeMap<_, _> = (0..requests.len() as u32)
            .map(|i| (plain.request(i).id.clone(), outcome(plain.request(i))))
            .collect();
        assert_eq!(f.outcomes, expected, "seed {seed}");
        assert!(plain.scheduler().stats.preemptions > 0 && plain.scheduler().stats.prefix_hits > 0);
        // Records: as many as were ever held at once, far fewer than were served.
        let records = f.e.scheduler().reqs.len();
        assert!(
            records <= f.most_held && records < requests.len() / 4,
            "seed {seed}: {records} records, at most {} held",
            f.most_held
        );
        assert_eq!(f.e.submitted(), requests.len());
    }
}
