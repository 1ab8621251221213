//! What the disaggregated-serving tests share: the step-time model they run, the run loop that
//! feeds a [`PdCore`] its requests at their arrivals, and the requests they make.

use pagedkv::hw::gpu;
use pagedkv::sim::cluster::pd::PdCore;
use pagedkv::sim::engine::{prepare, EngineConfig, StepModel, System};
use pagedkv::workload::serving::{Prompt, ServingRequest};
use rand::rngs::StdRng;
use rand::Rng;

/// Llama 3.1 8B on one H200 at 0.8 of its bandwidth.
pub fn step_model() -> StepModel {
    StepModel {
        cpu_overhead_s: 5e-4,
        overlap_cpu: false,
        swap_gbps: None,
        offload_gbps: None,
        ..StepModel::roofline(
            pagedkv::kv::model::preset("llama-3.1-8b").unwrap(),
            gpu("h200").unwrap(),
            1,
            0.8,
        )
    }
}

/// Feeds `reqs` to `c` at their arrivals and advances it until every request has finished and
/// its host-tier copies have landed, calling `each` after every event.
pub fn run(
    c: &mut PdCore,
    cfg: &EngineConfig,
    reqs: &[ServingRequest],
    mut each: impl FnMut(&PdCore),
) {
    let p = prepare(cfg, reqs).unwrap();
    let mut next = 0;
    let mut events = 0u64;
    while next < reqs.len() || c.finished() < c.requests.len() || c.copies_in_flight() {
        let t = c.next_event_time();
        events += 1;
        if events > 300_000 {
            let pre: Vec<_> = c
                .prefill
                .engines
                .iter()
                .map(|e| e.next_step_time())
                .collect();
            let dec: Vec<_> = c.decode.iter().map(|e| e.next_step_time()).collect();
            panic!(
                "no progress: t {t:?}, prefill {pre:?}, decode {dec:?}, finished {}",
                c.finished()
            );
        }
        match p.arrival(next) {
            Some(a) if t.is_none_or(|t| a <= t) => {
                c.submit(p.submission(next), a).unwrap();
                next += 1;
            }
            _ => {
                assert!(t.is_some(), "nothing to run with work left");
                c.advance(&mut |_, _| Ok(())).unwrap();
            }
        }
        each(c);
    }
}

/// A request for these tokens.
pub fn tokens(id: &str, arrival: f64, prompt: Vec<u32>, output_len: u32) -> ServingRequest {
    ServingRequest {
        id: id.into(),
        arrival,
        prompt: Prompt::Tokens(prompt),
        output_len,
        priority: 0,
    }
}

/// Random requests: a few shared prefixes plus a tail, some unique.
pub fn random_requests(rng: &mut StdRng, n: usize, span: f64) -> Vec<ServingRequest> {
    let prefixes: Vec<Vec<u32>> = (0..4)
        .map(|p| {
            (0..rng.random_range(40..400))
                .map(|t| p * 1000 + t)
                .collect()
        })
        .collect();
    let mut arrivals: Vec<f64> = (0..n).map(|_| rng.random_range(0.0..span)).collect();
    arrivals.sort_by(f64::total_cmp);
    arrivals
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let prompt = if rng.random_bool(0.2) {
                Prompt::Unique(rng.random_range(1..600))
            } else {
                let mut t = prefixes[rng.random_range(0..4)].clone();
                t.extend((0..rng.random_range(0..200)).map(|_| rng.random_range(0..5u32)));
                Prompt::Tokens(t)
            };
            ServingRequest {
                id: format!("q{i}"),
                arrival: a,
                prompt,
                output_len: rng.random_range(1..60),
                priority: 0,
            }
        })
        .collect()
}
