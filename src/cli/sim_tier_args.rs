//! The host tier's flags for `sim engine` and `sim cluster`: vLLM 0.33's own names
//! (`--kv-offloading-size`, `--kv-offloading-backend`, and the connector's extra config as
//! `--offload-*`), and the simulator's earlier ones (`--cpu-offload-*`).

use crate::cli::count;
use crate::cli::latency_unit::latency_unit;
use crate::kv::BlockSize;
use crate::sim::cache::Policy as CachePolicy;
use crate::sim::engine::host_tier::{OffloadMode, TierStats};
use crate::sim::engine::{CpuOffload, EngineReport, OffloadScope};
use crate::sim::run_spec::{Backend, TierSpec};

#[derive(clap::Args)]
pub struct TierArgs {
    /// vLLM's --kv-offloading-size: a KV tier in host memory of this many GiB in total over the
    /// tensor-parallel GPUs (chunks of the model's KV, each rounded up to a 4 KiB page, as vLLM
    /// sizes it); per replica with the local scope, the one shared pool with the global scope.
    #[arg(long, conflicts_with_all = ["cpu_offload_blocks", "cpu_offload_gib"])]
    pub kv_offloading_size: Option<f64>,
    /// vLLM's --kv-offloading-backend: native (vLLM's OffloadingConnector) is modelled, lmcache
    /// is not [default: native].
    #[arg(long, value_enum)]
    pub kv_offloading_backend: Option<Backend>,
    /// The host tier's size in blocks of --block-size.
    #[arg(long, conflicts_with = "cpu_offload_gib", value_parser = count(0..))]
    pub cpu_offload_blocks: Option<usize>,
    /// The host tier's size in GiB per GPU.
    #[arg(long)]
    pub cpu_offload_gib: Option<f64>,
    /// native: vLLM 0.33's native CPU offloading (write-through stores of prompt chunks,
    /// asynchronous loads, vLLM's LRU or ARC); store-on-evict: beyond vLLM, blocks the GPU
    /// evicts are stored and loaded back synchronously at admission.
    #[arg(long, value_enum, default_value_t = TierSpec::default().cpu_offload_mode)]
    pub cpu_offload_mode: OffloadMode,
    /// The tier's eviction policy: lru or arc (vLLM's `eviction_policy`) in native mode; any of
    /// `sim cache`'s but opt in store-on-evict mode.
    #[arg(long, value_enum, default_value_t = TierSpec::default().cpu_offload_policy)]
    pub cpu_offload_policy: CachePolicy,
    /// Native: GPU blocks per offloaded chunk (vLLM's `blocks_per_chunk` extra config) [default: 1].
    #[arg(long, conflicts_with = "offload_block_size", value_parser = count(1..))]
    pub offload_blocks_per_chunk: Option<usize>,
    /// Native: tokens per offloaded chunk, a multiple of --block-size (vLLM's `block_size` extra
    /// config).
    #[arg(long, value_parser = count(1..))]
    pub offload_block_size: Option<usize>,
    /// Native: store prompt chunks only (vLLM's `offload_prompt_only`).
    #[arg(long, default_value_t = TierSpec::default().offload_prompt_only, action = clap::ArgAction::Set)]
    pub offload_prompt_only: bool,
    /// Host link for the tier, GB/s per GPU, or a `pagedkv swap --json` file whose measured copy
    /// rate (the slower direction, at the nearest block size) is used [default: 63, PCIe 5.0 ×16,
    /// an assumption].
    #[arg(long)]
    pub offload_bandwidth: Option<String>,
    /// local (or per-replica): a tier per replica; global: one tier every replica shares
    /// (store-on-evict mode only); disaggregated, global is the KV pool across prefill nodes
    /// (Mooncake's): a tier of this size per prefill node, read by the others over the KV link.
    #[arg(long, value_enum, default_value_t = TierSpec::default().cpu_offload_scope)]
    pub cpu_offload_scope: OffloadScope,
}

impl TierArgs {
    /// The tier the flags ask for, as plain values.
    pub fn spec(&self) -> TierSpec {
        TierSpec {
            kv_offloading_size: self.kv_offloading_size,
            kv_offloading_backend: self.kv_offloading_backend,
            cpu_offload_blocks: self.cpu_offload_blocks,
            cpu_offload_gib: self.cpu_offload_gib,
            cpu_offload_mode: self.cpu_offload_mode,
            cpu_offload_policy: self.cpu_offload_policy,
            offload_blocks_per_chunk: self.offload_blocks_per_chunk,
            offload_block_size: self.offload_block_size,
            offload_prompt_only: self.offload_prompt_only,
            offload_bandwidth: self.offload_bandwidth.clone(),
            cpu_offload_scope: self.cpu_offload_scope,
        }
    }
}

/// The line that says what the tier is.
pub fn describe(o: &CpuOffload, source: &str, block_size: BlockSize) -> String {
    match o.mode {
        OffloadMode::Native => format!(
            "host tier: native (vLLM 0.33's OffloadingConnector): {} chunks of {} blocks ({} tokens), {} eviction, {}, {} scope, {} GB/s per GPU ({source}); stores as chunks are computed, loads asynchronously",
            o.chunks,
            o.blocks_per_chunk,
            o.blocks_per_chunk * block_size.get(),
            o.policy,
            if o.prompt_only { "prompt chunks only" } else { "prompt and output chunks" },
            o.scope,
            o.gbps
        ),
        OffloadMode::StoreOnEvict => format!(
            "host tier: store-on-evict (beyond vLLM): {} blocks, {} eviction, {} scope, {} GB/s per GPU ({source}); stores blocks the GPU evicts, loads at admission",
            o.chunks, o.policy, o.scope, o.gbps
        ),
    }
}

/// One line on the host tier's effect: hits per tier, what moved, TTFT with and without it.
/// `block_bytes`: one block's KV over every GPU.
pub fn tier_line(
    with: &EngineReport,
    stats: TierStats,
    block_bytes: u64,
    without: &EngineReport,
) -> String {
    let (scale, unit) = latency_unit(with.time_unit);
    let ttft = |r: &EngineReport| {
        r.latency.ttft.map_or("-".into(), |d| {
            format!("{:.1}/{:.1}", d.p50 * scale, d.p99 * scale)
        })
    };
    let gib = |blocks: u64| (blocks * block_bytes) as f64 / (1u64 << 30) as f64;
    let external = match stats.mode {
        OffloadMode::Native => format!(
            "; vLLM's external prefix cache: {} hit of {} queried tokens{}; {} stores refused (tier full of pinned or pending chunks)",
            with.offload.external_prefix_cache_hits,
            with.offload.external_prefix_cache_queries,
            if with.offload.preempted_external_prefix_cache_queries > 0 {
                format!(
                    " (after preemptions {} of {})",
                    with.offload.preempted_external_prefix_cache_hits,
                    with.offload.preempted_external_prefix_cache_queries
                )
            } else {
                String::new()
            },
            stats.store_failures
        ),
        OffloadMode::StoreOnEvict => String::new(),
    };
    format!(
        "host tier ({}): prompt tokens hit in the GPU cache {}, loaded from the host {}, computed {}; stored {} chunks ({:.1} GiB), loaded {} chunks ({:.1} GiB), evicted {}{external}; TTFT p50/p99 {} {unit} with the tier, {} without",
        stats.mode,
        with.prefix_cache.prefix_cache_hit_tokens,
        with.offload.offload_hit_tokens,
        with.offload.prompt_computed_tokens,
        stats.stored_chunks,
        gib(stats.stored_blocks),
        stats.loaded_chunks,
        gib(stats.loaded_blocks),
        stats.evicted_chunks,
        ttft(with),
        ttft(without),
    )
}
