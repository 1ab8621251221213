//! `sim cluster`'s disaggregated layout: prefill and decode instances, the KV link between them
//! and Dynamo's conditional disaggregation.

use crate::cli::count;
use crate::sim::cluster::pd::{
    Disagg, KvTransfer, LinkSharing, LocalPrefill, DEFAULT_BALANCING_THRESHOLD,
    DEFAULT_KV_LINK_GBPS, DYNAMO_MAX_LOCAL_PREFILL_LENGTH, DYNAMO_MAX_PREFILL_QUEUE_SIZE,
};
use crate::sim::cluster::RouterKind;

#[derive(clap::Args, Clone)]
pub struct PdArgs {
    /// Disaggregated serving: prefill instances (with --decode-replicas; instead of
    /// --replicas). Each runs the engine on prompts only and samples the first token; the KV
    /// then moves to a decode instance.
    #[arg(long, value_parser = count(1..=1024), requires = "decode_replicas", conflicts_with = "replicas")]
    prefill_replicas: Option<usize>,
    /// Disaggregated serving: decode instances (with --prefill-replicas). Each takes a request
    /// when its KV has arrived, the one with the fewest requests whose pool has room.
    #[arg(long, value_parser = count(1..=1024), requires = "prefill_replicas", conflicts_with = "replicas")]
    decode_replicas: Option<usize>,
    /// Tensor-parallel size of a prefill instance (default --tp).
    #[arg(long, value_parser = count(1..=64))]
    prefill_tp: Option<usize>,
    /// Tensor-parallel size of a decode instance (default --tp).
    #[arg(long, value_parser = count(1..=64))]
    decode_tp: Option<usize>,
    /// The KV link, GB/s per node. The default, 100, is Mooncake's assumption (FAST'25: an 800
    /// Gbps RDMA NIC per node; its transfer engine measured 87 GB/s on 4×200 Gbps and 190 GB/s
    /// on 8×400 Gbps). DistServe (OSDI'24) found the transfer under 0.1% of latency for a 175B
    /// model even on 25 Gbps.
    #[arg(long, default_value_t = DEFAULT_KV_LINK_GBPS)]
    kv_link_bandwidth: f64,
    /// How the KV moves: layer by layer while the prefill runs (Mooncake; vLLM's NIXL
    /// connector), ending at max(prefill end + one layer's share, reservation + bytes /
    /// bandwidth); or whole after the prefill.
    #[arg(long, value_enum, default_value_t = KvTransfer::Layerwise)]
    kv_transfer: KvTransfer,
    /// Whether transfers share their nodes' links: `own` (each has the whole bandwidth, however
    /// many run at once) or `fifo` (a node's NIC sends or receives one transfer at a time, at
    /// the full bandwidth, in the order they are ready).
    #[arg(long, value_enum, default_value_t = LinkSharing::Own)]
    kv_link_sharing: LinkSharing,
    /// The prefill instances' router (default: --router's list); `conductor` is Mooncake's
    /// (FAST'25, Algorithm 1): the instance with the least estimated TTFT (its queued prefills,
    /// then the request's uncached tokens, through the step-time model, plus the KV's tail to
    /// decode), rejecting a request early when the estimate misses the TTFT SLO or the decode
    /// step with it would miss the TBT (or TPOT) SLO.
    #[arg(long, value_enum, value_delimiter = ',')]
    prefill_router: Vec<RouterKind>,
    /// Dynamo's conditional disaggregation: a request prefills on its decode instance when its
    /// prompt past that instance's cached prefix is at most this many tokens ... [Dynamo's
    /// default with either flag: 1000]
    #[arg(long, value_parser = count(0..))]
    max_local_prefill_length: Option<usize>,
    /// ... or when this many requests or more wait for a prefill instance to begin them
    /// [Dynamo's default with either flag: 2].
    #[arg(long, value_parser = count(0..))]
    max_prefill_queue_size: Option<usize>,
    /// The KV pool across prefill nodes (a host tier with --cpu-offload-scope global: a tier
    /// per prefill node, which the others read over the KV link), read by the Conductor: an
    /// instance fetches the longer prefix the pool holds when best / local match >= this ratio
    /// (Mooncake's kvcache_balancing_threshold, FAST'25 Algorithm 1), else prefills from its
    /// own. [default: 1, fetch any longer prefix: Mooncake publishes no value; see
    /// docs/cluster.md]
    #[arg(long)]
    kvcache_balancing_threshold: Option<f64>,
}

impl PdArgs {
    /// The disaggregated layout, `None` when colocated; an error for a flag that needs it
    /// without it.
    pub fn disagg(&self) -> Result<Option<Disagg>, String> {
        let (Some(p), Some(d)) = (self.prefill_replicas, self.decode_replicas) else {
            let stray = [
                (self.prefill_tp.is_some(), "--prefill-tp"),
                (self.decode_tp.is_some(), "--decode-tp"),
                (
                    self.kv_link_bandwidth != DEFAULT_KV_LINK_GBPS,
                    "--kv-link-bandwidth",
                ),
                (self.kv_transfer != KvTransfer::Layerwise, "--kv-transfer"),
                (!self.kv_link_sharing.is_own(), "--kv-link-sharing"),
                (!self.prefill_router.is_empty(), "--prefill-router"),
                (
                    self.max_local_prefill_length.is_some(),
                    "--max-local-prefill-length",
                ),
                (
                    self.max_prefill_queue_size.is_some(),
                    "--max-prefill-queue-size",
                ),
                (
                    self.kvcache_balancing_threshold.is_some(),
                    "--kvcache-balancing-threshold",
                ),
            ];
            if let Some((_, name)) = stray.iter().find(|(set, _)| *set) {
                return Err(format!(
                    "{name} needs disaggregated serving (--prefill-replicas and --decode-replicas)"
                ));
            }
            return Ok(None);
        };
        if !(self.kv_link_bandwidth.is_finite() && self.kv_link_bandwidth > 0.0) {
            return Err(format!(
                "--kv-link-bandwidth must be a number of GB/s > 0, got {}",
                self.kv_link_bandwidth
            ));
        }
        if let Some(t) = self.kvcache_balancing_threshold {
            if !(t.is_finite() && t >= 1.0) {
                return Err(format!(
                    "--kvcache-balancing-threshold is a ratio of prefix lengths, >= 1 (default {DEFAULT_BALANCING_THRESHOLD}), got {t}"
                ));
            }
        }
        let local_prefill = (self.max_local_prefill_length.is_some()
            || self.max_prefill_queue_size.is_some())
        .then(|| LocalPrefill {
            max_local_prefill_length: self
                .max_local_prefill_length
                .map_or(DYNAMO_MAX_LOCAL_PREFILL_LENGTH, |n| {
                    n.min(u32::MAX as usize) as u32
                }),
            max_prefill_queue_size: self
                .max_prefill_queue_size
                .unwrap_or(DYNAMO_MAX_PREFILL_QUEUE_SIZE),
        });
        Ok(Some(Disagg {
            prefill_replicas: p,
            decode_replicas: d,
            prefill_tp: self.prefill_tp,
            decode_tp: self.decode_tp,
            link_gbps: self.kv_link_bandwidth,
            transfer: self.kv_transfer,
            link_sharing: self.kv_link_sharing,
            local_prefill,
            balancing_threshold: self.kvcache_balancing_threshold,
        }))
    }

    /// The split `p:d` of `--layouts`, with these flags' link and thresholds.
    pub fn split(&self, p: usize, d: usize) -> Result<Disagg, String> {
        let args = PdArgs {
            prefill_replicas: Some(p),
            decode_replicas: Some(d),
            ..self.clone()
        };
        Ok(args.disagg()?.expect("both sides given"))
    }

    /// The prefill routers, when given.
    pub fn prefill_routers(&self) -> &[RouterKind] {
        &self.prefill_router
    }
}
