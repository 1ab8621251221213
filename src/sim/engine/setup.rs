//! What every run needs before its first step, built once for `sim engine` and `sim cluster`
//! alike: each request checked against the engine (a request that can never run is refused
//! before step 0, not when it arrives), ids unique, the arrival order, vLLM's id tie-break ranks,
//! and the output lengths the ranking policies believe. A [`Submission`] is one request with
//! those facts, as [`super::driver::drive`] hands it to an engine or a cluster at its arrival.

use super::config::{EngineConfig, Policy, Prediction};
use super::error::EngineError;
use crate::workload::serving::ServingRequest;
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};

/// One request as an engine takes it.
#[derive(Debug, Clone, Copy)]
pub struct Submission<'a> {
    pub request: &'a ServingRequest,
    /// Numbers the request among every request its blocks may meet (unique prompts hash by it);
    /// its index in the caller's input.
    pub uid: u64,
    /// The output length SJF and SRPT rank by.
    pub predicted: f64,
    /// The id's place among all ids in string order (vLLM's last tie-break).
    pub id_rank: u32,
}

/// A workload ready to run: `order` lists request indices by arrival (ties in input order).
#[derive(Debug, Clone)]
pub struct Prepared<'a> {
    pub requests: &'a [ServingRequest],
    pub order: Vec<u32>,
    predicted: Vec<f64>,
    id_ranks: Vec<u32>,
}

impl<'a> Prepared<'a> {
    /// The `k`-th request to arrive.
    pub fn submission(&self, k: usize) -> Submission<'a> {
        let i = self.order[k] as usize;
        Submission {
            request: &self.requests[i],
            uid: i as u64,
            predicted: self.predicted[i],
            id_rank: self.id_ranks[i],
        }
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// When the `k`-th request arrives.
    pub fn arrival(&self, k: usize) -> Option<f64> {
        self.order
            .get(k)
            .map(|&i| self.requests[i as usize].arrival)
    }
}

/// Checks every request against `cfg` and their ids, and orders them by arrival.
pub fn prepare<'a>(
    cfg: &EngineConfig,
    requests: &'a [ServingRequest],
) -> Result<Prepared<'a>, EngineError> {
    if requests.is_empty() {
        return Err(EngineError::NoRequests);
    }
    for r in requests {
        check_request(cfg, r)?;
    }
    check_unique_ids(requests)?;
    let mut order: Vec<u32> = (0..requests.len() as u32).collect();
    order.sort_by(|&a, &b| {
        requests[a as usize]
            .arrival
            .total_cmp(&requests[b as usize].arrival)
    });
    Ok(Prepared {
        requests,
        order,
        predicted: requests
            .iter()
            .enumerate()
            .map(|(i, r)| predicted_output(cfg, r, i as u64))
            .collect(),
        id_ranks: id_ranks(requests),
    })
}

/// The output length the ranking policies believe for request `uid`: predicted under SJF and
/// SRPT (true × e^N(0, sigma²), drawn from the request's own seed, so a request's prediction does
/// not depend on which others run with it), else true.
pub fn predicted_output(cfg: &EngineConfig, r: &ServingRequest, uid: u64) -> f64 {
    let truth = f64::from(r.output_len);
    if !matches!(cfg.scheduling_policy, Policy::Sjf | Policy::Srpt) {
        return truth;
    }
    let Prediction { sigma, seed } = cfg.prediction;
    match Normal::new(0.0, sigma) {
        Ok(noise) if sigma > 0.0 => {
            let mut rng = StdRng::seed_from_u64(
                (seed ^ 0x5eed_0e17).wrapping_add(uid.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            );
            truth * noise.sample(&mut rng).exp()
        }
        _ => truth,
    }
}

/// An error naming the first id used twice.
pub fn check_unique_ids(requests: &[ServingRequest]) -> Result<(), EngineError> {
    let mut seen = std::collections::HashSet::new();
    match requests.iter().find(|r| !seen.insert(r.id.as_str())) {
        Some(r) => Err(EngineError::Request {
            id: r.id.clone(),
            detail: "duplicate id".into(),
        }),
        None => Ok(()),
    }
}

/// Each request's id's position among all ids in string order (vLLM's last tie-break).
pub fn id_ranks(requests: &[ServingRequest]) -> Vec<u32> {
    let mut by_id: Vec<u32> = (0..requests.len() as u32).collect();
    by_id.sort_by(|&a, &b| requests[a as usize].id.cmp(&requests[b as usize].id));
    let mut rank = vec![0u32; requests.len()];
    for (r, &i) in by_id.iter().enumerate() {
        rank[i as usize] = r as u32;
    }
    rank
}

/// Checks that a request can run to completion in an engine of `cfg`.
pub fn check_request(cfg: &EngineConfig, r: &ServingRequest) -> Result<(), EngineError> {
    let bad = |detail: String| {
        Err(EngineError::Request {
            id: r.id.clone(),
            detail,
        })
    };
    let prompt = r.prompt.len() as u64;
    if prompt == 0 || r.output_len == 0 {
        return bad("prompt and output need at least one token each".into());
    }
    if !(r.arrival.is_finite() && r.arrival >= 0.0) {
        return bad(format!(
            "arrival must be finite and >= 0, got {}",
            r.arrival
        ));
    }
    // vLLM's engine refuses it too (`InputProcessor._validate_prompt_len`, input_processor.py).
    if prompt >= cfg.max_model_len as u64 {
        return bad(format!(
            "a prompt of {prompt} tokens reaches max_model_len {}",
            cfg.max_model_len
        ));
    }
    // The KV it ever holds at once: prompt and every sampled token but the last, and never more
    // than max_model_len − 1 tokens (`Scheduler.schedule` caps a step at max_model_len −
    // num_computed_tokens − 1; `check_stop` ends the request at max_model_len tokens).
    let peak = (prompt + u64::from(r.output_len) - 1).min(cfg.max_model_len as u64 - 1);
    let blocks = peak.div_ceil(u64::from(cfg.block_size));
    if blocks > cfg.usable_blocks() as u64 {
        return bad(format!(
            "{peak} tokens need {blocks} blocks of {}, the pool holds {} (num_gpu_blocks {} less the null block)",
            cfg.block_size,
            cfg.usable_blocks(),
            cfg.num_gpu_blocks
        ));
    }
    if !cfg.enable_chunked_prefill && peak > cfg.max_num_batched_tokens as u64 {
        return bad(format!(
            "without chunked prefill, {peak} tokens exceed max_num_batched_tokens {}",
            cfg.max_num_batched_tokens
        ));
    }
    Ok(())
}
