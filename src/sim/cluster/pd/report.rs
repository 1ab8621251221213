//! What a disaggregated run adds to its [`crate::sim::cluster::ClusterOutcome`]: the layout, the
//! link and what moved over it, and the prompt tokens by the tier that held them; and each
//! request's whole path (prefill side and decode side as one [`Req`]).

use super::core::{PdCore, PdRequest, PdStats};
use super::link::KvTransfer;
use super::pool::{Pool, TierHits};
use super::Disagg;
use crate::sim::engine::metrics::Distribution;
use crate::sim::engine::request::Req;
use serde::Serialize;

/// What a disaggregated run adds to its [`crate::sim::cluster::ClusterOutcome`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PdReport {
    pub prefill_replicas: usize,
    pub decode_replicas: usize,
    pub prefill_tp: usize,
    pub decode_tp: usize,
    pub prefill_gpu_blocks: usize,
    pub decode_gpu_blocks: usize,
    pub link_gbps: f64,
    pub transfer: KvTransfer,
    pub kv_bytes_per_token: u64,
    #[serde(flatten)]
    pub stats: PdStats,
    /// Reservation to arrival, over the requests that moved (seconds).
    pub transfer_seconds: Option<Distribution>,
    /// Prefill end to arrival: what the move added to the request's path (seconds).
    pub transfer_delay_seconds: Option<Distribution>,
    /// The KV pool across prefill nodes, when on; each node's tier holds `pool_node_chunks`.
    pub pool: Option<Pool>,
    pub pool_node_chunks: Option<usize>,
    /// Prompt tokens by where they were found, and the pool's fetches.
    pub tier_hits: TierHits,
}

/// Each side's engines as the run resolved them.
#[derive(Debug, Clone, Copy)]
pub struct Sides {
    pub prefill_tp: usize,
    pub decode_tp: usize,
    pub prefill_gpu_blocks: usize,
    pub decode_gpu_blocks: usize,
    /// Chunks in each prefill node's tier, with the pool on.
    pub pool_node_chunks: Option<usize>,
}

impl PdReport {
    /// The report of `c`, run on the layout `d` with `sides`.
    pub fn of(c: &PdCore, d: &Disagg, sides: Sides) -> PdReport {
        let moved: Vec<&PdRequest> = c
            .requests
            .iter()
            .filter(|q| q.prefill.is_some() && q.decode.is_some())
            .collect();
        let seconds =
            |f: fn(&PdRequest) -> f64| Distribution::of(moved.iter().map(|q| f(q)).collect());
        PdReport {
            prefill_replicas: d.prefill_replicas,
            decode_replicas: d.decode_replicas,
            prefill_tp: sides.prefill_tp,
            decode_tp: sides.decode_tp,
            prefill_gpu_blocks: sides.prefill_gpu_blocks,
            decode_gpu_blocks: sides.decode_gpu_blocks,
            link_gbps: d.link_gbps,
            transfer: d.transfer,
            kv_bytes_per_token: c.link().bytes_per_token,
            stats: c.stats,
            transfer_seconds: seconds(|q| q.transfer_end - q.transfer_start),
            transfer_delay_seconds: seconds(|q| q.transfer_end - q.prefill_end),
            pool: c.pool(),
            pool_node_chunks: sides.pool_node_chunks,
            tier_hits: tier_hits(c),
        }
    }
}

/// Request `k`'s whole path as one [`Req`]: its decode side (when it moved or prefilled
/// there) with its prefill side's hits, scheduled tokens and preemptions; `None`: rejected
/// early, it never ran.
pub fn whole_path(c: &PdCore, k: usize) -> Option<Req> {
    if c.requests[k].rejected.is_some() {
        return None;
    }
    let mut r = match (c.prefill_req(k), c.decode_req(k)) {
        (Some(p), Some(d)) => {
            let mut r = d.clone();
            r.first_hit = p.first_hit;
            r.first_offload_hit = p.first_offload_hit;
            r.scheduled_tokens += p.scheduled_tokens;
            r.preemptions += p.preemptions;
            r
        }
        (Some(p), None) => p.clone(),
        (None, Some(d)) => d.clone(),
        (None, None) => unreachable!("every request not rejected is placed"),
    };
    // A request that fetched from the pool reached its prefill engine later: its TTFT counts
    // from its arrival.
    r.arrival = c.requests[k].request.arrival;
    Some(r)
}

/// Prompt tokens by tier over the requests that ran (their whole paths), and the pool's
/// fetches.
pub fn tier_hits(c: &PdCore) -> TierHits {
    let bs = c.block_size().tokens();
    let mut t = TierHits::default();
    for (k, q) in c.requests.iter().enumerate() {
        let r = whole_path(c, k);
        if let Some(f) = &q.fetch {
            t.fetches += 1;
            t.fetched_tokens += u64::from((f.to - f.from) * bs);
            t.pool_bytes_moved += f.bytes;
            t.store_failures += usize::from(!f.stored);
        }
        let Some(r) = r else { continue };
        let host = r.first_offload_hit.unwrap_or(0);
        let remote = q.fetch.map_or(0, |f| f.used_tokens(&r, c.block_size()));
        t.prompt_tokens += u64::from(r.prompt_len);
        t.gpu_hit_tokens += u64::from(r.first_hit.unwrap_or(0));
        t.local_host_hit_tokens += u64::from(host - remote);
        t.remote_hit_tokens += u64::from(remote);
    }
    t
}
