//! Disaggregated serving: prefill instances run the unchanged engine on each prompt (the first
//! token is sampled there), then the request's KV moves over a link to a decode instance, which
//! decodes the rest. Each instance keeps its own pool, prefix cache and step-time model.
//!
//! - [`link`]: when a transfer ends (layer by layer, overlapping the prefill, or whole after it).
//! - [`core`]: the prefill instances (a [`super::ClusterCore`] behind any router) and the decode
//!   instances as one [`crate::sim::engine::System`]; Dynamo's conditional disaggregation.
//! - [`conductor`]: Mooncake's Conductor: the prefill instance with the least estimated TTFT,
//!   early rejection under SLOs.
//! - [`pool`]: the KV pool across the prefill nodes' host memory, read over the link.
//! - [`run`]: runs on a trace; [`report`]: what such a run adds to the cluster's outcome.

mod check;
mod choose;
pub mod conductor;
pub mod core;
pub mod link;
pub mod pool;
pub mod report;
pub mod run;

pub use self::core::{PdCore, PdRequest, PdStats};
pub use link::{KvTransfer, Link, LinkSharing};
pub use pool::{Pool, TierHits, DEFAULT_BALANCING_THRESHOLD};
pub use report::PdReport;

use serde::Serialize;

/// The default link: 100 GB/s per node, Mooncake's assumption (FAST'25 §4: an 800 Gbps RDMA
/// NIC per node; its transfer engine measured 87 GB/s on 4×200 Gbps and 190 GB/s on 8×400 Gbps).
pub const DEFAULT_KV_LINK_GBPS: f64 = 100.0;

/// Dynamo's conditional disaggregation defaults (`PyDisaggregatedRouter.__init__`,
/// examples/llm/components/disagg_router.py @ 02e16f75490465f69b38a5f69bcd89f5bf494f35).
pub const DYNAMO_MAX_LOCAL_PREFILL_LENGTH: u32 = 1000;
pub const DYNAMO_MAX_PREFILL_QUEUE_SIZE: usize = 2;

/// A disaggregated layout and its link.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Disagg {
    pub prefill_replicas: usize,
    pub decode_replicas: usize,
    /// Tensor-parallel size of each instance (`None`: the engine's `--tp`).
    pub prefill_tp: Option<usize>,
    pub decode_tp: Option<usize>,
    /// GB/s per node.
    pub link_gbps: f64,
    pub transfer: KvTransfer,
    /// Whether transfers share their nodes' NICs.
    #[serde(skip_serializing_if = "LinkSharing::is_own")]
    pub link_sharing: LinkSharing,
    /// Dynamo's conditional disaggregation (`None`: every prefill is remote).
    pub local_prefill: Option<LocalPrefill>,
    /// Mooncake's `kvcache_balancing_threshold` for the KV pool across prefill nodes (`None`:
    /// [`DEFAULT_BALANCING_THRESHOLD`]); the pool is on with `--cpu-offload-scope global`.
    pub balancing_threshold: Option<f64>,
}

/// When a request prefills on its decode instance instead (Dynamo's rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LocalPrefill {
    /// Prefill remotely only when the uncached prompt is longer than this (tokens) ...
    pub max_local_prefill_length: u32,
    /// ... and fewer than this many requests wait in the prefill queue.
    pub max_prefill_queue_size: usize,
}

impl LocalPrefill {
    /// Dynamo's `prefill_remote` negated: local when `uncached <= max_local_prefill_length` or
    /// `queue >= max_prefill_queue_size` (remote iff `absolute_prefill_length >
    /// max_local_prefill_length and queue_size < max_prefill_queue_size`,
    /// examples/llm/components/disagg_router.py @ 02e16f75490465f69b38a5f69bcd89f5bf494f35;
    /// the Rust `DisaggregatedRouter::prefill_remote`, lib/llm/src/disagg_router.rs @
    /// 3454aa8ba87052802ffa26fee3c01ca1e888210d, has the length test alone).
    pub fn is_local(&self, uncached: u32, queue: usize) -> bool {
        uncached <= self.max_local_prefill_length || queue >= self.max_prefill_queue_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditional_disaggregation_has_two_thresholds() {
        let c = LocalPrefill {
            max_local_prefill_length: 100,
            max_prefill_queue_size: 2,
        };
        // The length: at most 100 uncached tokens stay local, 101 go remote.
        assert!(c.is_local(100, 0));
        assert!(!c.is_local(101, 0));
        assert!(!c.is_local(101, 1));
        // The queue: 2 waiting (Dynamo's `queue_size < max`) keeps a long prompt local.
        assert!(c.is_local(101, 2));
        assert!(c.is_local(5000, 3));
    }
}
