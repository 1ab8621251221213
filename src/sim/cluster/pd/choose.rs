//! Mooncake's Conductor over the instances' state ([`super::conductor`] has the estimate): for
//! a request, each prefill instance's prefix match (its GPU, its host tier and, with the pool,
//! the other nodes' host tiers), the estimate there, and the choice or the early rejection.

use super::conductor::{self, Estimate, Rejection};
use super::core::{needs_seconds, PdCore};
use super::pool::{Fetch, Holders, Match};
use crate::sim::cluster::router::{Choice, Reason};
use crate::sim::engine::hash::BlockHash;
use crate::sim::engine::request::Req;
use crate::sim::engine::EngineError;
use crate::workload::serving::ServingRequest;

/// The Conductor's choice, the prompt tokens cached there (by its estimate), and its fetch from
/// the pool.
pub(super) type Conducted = (Choice, u32, Option<Fetch>);

impl PdCore {
    /// The chained hashes of `r`'s full blocks, as the engines hash them.
    pub(super) fn hashes(&self, r: &ServingRequest, uid: u64) -> Vec<BlockHash> {
        let bs = self.block_size.tokens();
        let mut probe = Req::new(r, 0.0, 0, uid);
        (0..r.prompt.len() as u32 / bs)
            .map(|j| probe.block_hash(j, bs))
            .collect()
    }

    /// The Conductor's estimate on every prefill instance for request `r` (numbered `uid`)
    /// arriving at `now`, its KV bound for the least loaded decode instance.
    pub fn conductor_estimates(
        &self,
        r: &ServingRequest,
        uid: u64,
        now: f64,
    ) -> Result<Vec<Estimate>, EngineError> {
        let hashes = self.hashes(r, uid);
        let est = self.estimates(r, &hashes, now, self.decode_order()[0])?;
        Ok(est.into_iter().map(|(e, _, _)| e).collect())
    }

    /// Per prefill instance: the estimate, the prefix match, and whether it fetches from the
    /// pool.
    fn estimates(
        &self,
        r: &ServingRequest,
        hashes: &[BlockHash],
        now: f64,
        d: usize,
    ) -> Result<Vec<(Estimate, Match, bool)>, EngineError> {
        let bs = self.block_size.tokens();
        let prompt = r.prompt.len() as u32;
        // The last prompt token is always computed (vLLM's max_cache_hit_length).
        let usable = &hashes[..(prompt.saturating_sub(1) / bs) as usize];
        let kv_bytes = if r.output_len > 1 {
            let held = self.decode[d].cached_prefix_blocks(hashes) as u32 * bs;
            self.link.bytes(prompt - held.min(prompt))
        } else {
            0
        };
        let holders = self.pool.map(|_| Holders::of(&self.prefill, usable));
        self.prefill
            .engines
            .iter()
            .enumerate()
            .map(|(p, e)| {
                let model = e.step_model().ok_or_else(needs_seconds)?;
                let gpu = e.cached_prefix_blocks(usable);
                // The instance's cache is its GPU's and its host tier's (Mooncake's prefix_len).
                let m = match &holders {
                    Some(h) => h.matched(p, gpu),
                    None => Match {
                        gpu: gpu as u32,
                        host: self.prefill.host_blocks(p, usable, gpu) as u32,
                        remote: 0,
                    },
                };
                let fetches = self.pool.is_some_and(|pl| pl.fetches(&m));
                let (hit, fetch) = if fetches {
                    let bytes = self.link.bytes(m.remote * bs);
                    (m.best() * bs, self.link.seconds(bytes))
                } else {
                    (m.local() * bs, 0.0)
                };
                let fetching: Vec<(u32, u32)> = self.fetching[p]
                    .iter()
                    .map(|&k| {
                        let q = &self.requests[k as usize];
                        let hit = q.chosen.map_or(0, |(_, h)| h);
                        (q.request.prompt.len() as u32 - hit, hit)
                    })
                    .collect();
                let ask = conductor::Ask {
                    prompt_len: prompt,
                    hit,
                    fetch,
                    kv_bytes,
                };
                let est =
                    conductor::estimate(e, model, &self.open[p], &fetching, now, ask, &self.link);
                Ok((est, m, fetches))
            })
            .collect()
    }

    /// The Conductor's choice for `r` at `now`, its KV bound for decode instance `d`: the
    /// prefill instance with the least estimate and the prefix hit there, or a rejection.
    pub(super) fn conduct(
        &self,
        r: &ServingRequest,
        uid: u64,
        now: f64,
        d: usize,
    ) -> Result<Result<Conducted, Rejection>, EngineError> {
        let hashes = self.hashes(r, uid);
        let all = self.estimates(r, &hashes, now, d)?;
        let est: Vec<Estimate> = all.iter().map(|(e, _, _)| *e).collect();
        let p = conductor::least(&est).expect("a cluster has prefill instances");
        let best = est[p];
        let (_, m, fetches) = all[p];
        if let Some(slo) = self.slo.ttft.filter(|&s| best.ttft() > s) {
            return Ok(Err(Rejection::Ttft {
                estimate: best.ttft(),
                slo,
            }));
        }
        let tbt = match (self.slo.tbt, self.slo.tpot) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let (Some(slo), true) = (tbt, r.output_len > 1) {
            let e = &self.decode[d];
            let model = e.step_model().ok_or_else(needs_seconds)?;
            let step = conductor::decode_step_seconds(e, model, r.prompt.len() as u32);
            if step > slo {
                return Ok(Err(Rejection::Tbt {
                    estimate: step,
                    slo,
                }));
            }
        }
        let choice = Choice {
            replica: p,
            reason: Reason::Estimate {
                ttft: best.ttft(),
                fetch: best.fetch,
                queue: best.queue,
                prefill: best.prefill,
                transfer: best.transfer,
            },
        };
        let fetch =
            fetches.then(|| Fetch::new(m.local(), m.best(), self.block_size, &self.link, now));
        Ok(Ok((choice, best.hit_tokens, fetch)))
    }
}
