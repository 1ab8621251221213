//! The host tier's flags for `sim engine` and `sim cluster`: vLLM 0.33's own names
//! (`--kv-offloading-size`, `--kv-offloading-backend`, and the connector's extra config as
//! `--offload-*`), and the simulator's earlier ones (`--cpu-offload-*`).

use crate::count;
use pagedkv::kv::model::ModelShape;
use pagedkv::sim::cache::Policy as CachePolicy;
use pagedkv::sim::engine::host_tier::{OffloadMode, TierStats};
use pagedkv::sim::engine::step_time::kv_bytes_per_token_per_gpu;
use pagedkv::sim::engine::{CpuOffload, EngineReport, OffloadScope};
use std::path::Path;

/// PCIe 5.0 ×16, one direction: 32 GT/s × 16 lanes × 128/130 / 8 bits.
pub const PCIE5_X16_GBPS: f64 = 63.0;

/// vLLM's CPU page size, to which it rounds a chunk's bytes (`SharedOffloadRegion`).
const PAGE_BYTES: u64 = 4096;

/// vLLM's `--kv-offloading-backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// vLLM's OffloadingConnector (the simulator's default tier).
    Native,
    /// An external LMCache server: not modelled.
    Lmcache,
}

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
    #[arg(long, value_enum, default_value_t = OffloadMode::Native)]
    pub cpu_offload_mode: OffloadMode,
    /// The tier's eviction policy: lru or arc (vLLM's `eviction_policy`) in native mode; any of
    /// `sim cache`'s but opt in store-on-evict mode.
    #[arg(long, value_enum, default_value_t = CachePolicy::Lru)]
    pub cpu_offload_policy: CachePolicy,
    /// Native: GPU blocks per offloaded chunk (vLLM's `blocks_per_chunk` extra config) [default: 1].
    #[arg(long, conflicts_with = "offload_block_size", value_parser = count(1..))]
    pub offload_blocks_per_chunk: Option<usize>,
    /// Native: tokens per offloaded chunk, a multiple of --block-size (vLLM's `block_size` extra
    /// config).
    #[arg(long, value_parser = count(1..))]
    pub offload_block_size: Option<usize>,
    /// Native: store prompt chunks only (vLLM's `offload_prompt_only`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub offload_prompt_only: bool,
    /// Host link for the tier, GB/s per GPU, or a `pagedkv swap --json` file whose measured copy
    /// rate (the slower direction, at the nearest block size) is used [default: 63, PCIe 5.0 ×16,
    /// an assumption].
    #[arg(long)]
    pub offload_bandwidth: Option<String>,
    /// local (or per-replica): a tier per replica; global: one tier every replica shares
    /// (store-on-evict mode only); disaggregated, global is the KV pool across prefill nodes
    /// (Mooncake's): a tier of this size per prefill node, read by the others over the KV link.
    #[arg(long, value_enum, default_value_t = OffloadScope::Local)]
    pub cpu_offload_scope: OffloadScope,
}

/// The host link from `pagedkv swap --json` output at the row nearest `block_size`: the slower
/// direction's batched copy rate.
fn swap_file_gbps(path: &Path, block_size: usize) -> Result<(f64, String), String> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: {e}"))?;
    let v = pagedkv::workload::strict_json::from_str(&text).map_err(|e| format!("{name}: {e}"))?;
    let rate = |r: &serde_json::Value, dir: &str| r.get(dir)?.get("batched_gbps")?.as_f64();
    let row = v
        .get("rows")
        .and_then(|r| r.as_array())
        .and_then(|rows| {
            rows.iter()
                .filter_map(|r| Some((r.get("block_size")?.as_u64()? as usize, r)))
                .min_by_key(|(b, _)| b.abs_diff(block_size))
        })
        .ok_or_else(|| format!("{name}: not `pagedkv swap --json` output (no rows)"))?;
    let gbps = rate(row.1, "swap_in")
        .zip(rate(row.1, "swap_out"))
        .map(|(i, o)| i.min(o))
        .ok_or_else(|| format!("{name}: row for block size {} lacks batched_gbps", row.0))?;
    let device = v.get("device").and_then(|d| d.as_str()).unwrap_or("?");
    Ok((
        gbps,
        format!(
            "measured by pagedkv swap on {device} at block size {}",
            row.0
        ),
    ))
}

fn positive_gib(flag: &str, gib: f64) -> Result<f64, String> {
    if gib.is_finite() && gib > 0.0 {
        Ok(gib)
    } else {
        Err(format!("--{flag} must be > 0, got {gib}"))
    }
}

/// The tier the flags ask for at `block_size`, and where its bandwidth comes from; `None`
/// without a size.
pub fn resolve(
    a: &TierArgs,
    model: &ModelShape,
    tp: usize,
    block_size: usize,
) -> Result<Option<(CpuOffload, String)>, String> {
    let sized = a.kv_offloading_size.is_some()
        || a.cpu_offload_blocks.is_some()
        || a.cpu_offload_gib.is_some();
    if !sized {
        for (set, flag) in [
            (a.offload_bandwidth.is_some(), "--offload-bandwidth"),
            (a.kv_offloading_backend.is_some(), "--kv-offloading-backend"),
            (
                a.offload_blocks_per_chunk.is_some(),
                "--offload-blocks-per-chunk",
            ),
            (a.offload_block_size.is_some(), "--offload-block-size"),
        ] {
            if set {
                return Err(format!(
                    "{flag} needs a tier (--kv-offloading-size, --cpu-offload-blocks or --cpu-offload-gib)"
                ));
            }
        }
        return Ok(None);
    }
    if a.kv_offloading_backend == Some(Backend::Lmcache) {
        return Err("--kv-offloading-backend lmcache (an external LMCache server) is not modelled; use native".into());
    }
    let native = a.cpu_offload_mode == OffloadMode::Native;
    let blocks_per_chunk = match (a.offload_blocks_per_chunk, a.offload_block_size) {
        (Some(n), _) => n,
        (None, Some(t)) if t % block_size == 0 => t / block_size,
        (None, Some(t)) => {
            return Err(format!(
                "--offload-block-size {t} is not a multiple of the block size {block_size}"
            ))
        }
        (None, None) => 1,
    };
    if !native && blocks_per_chunk != 1 {
        return Err("--cpu-offload-mode store-on-evict holds single blocks (no --offload-blocks-per-chunk or --offload-block-size)".into());
    }
    // One GPU's share of a block, and every GPU's.
    let gpu_block = kv_bytes_per_token_per_gpu(model, tp) * block_size as u64;
    let total_block = gpu_block * tp as u64;
    // vLLM sizes the tier from its total bytes: whole page-aligned chunks.
    let chunks_of_total = |bytes: f64| {
        let chunk = (total_block * blocks_per_chunk as u64).div_ceil(PAGE_BYTES) * PAGE_BYTES;
        (bytes / chunk as f64) as usize
    };
    let gib = (1u64 << 30) as f64;
    let (chunks, flag) = match (
        a.kv_offloading_size,
        a.cpu_offload_blocks,
        a.cpu_offload_gib,
    ) {
        (_, Some(b), _) => (b / blocks_per_chunk, "--cpu-offload-blocks"),
        (Some(s), ..) => {
            let bytes = positive_gib("kv-offloading-size", s)? * gib;
            let chunks = if native {
                chunks_of_total(bytes)
            } else {
                (bytes / tp as f64 / gpu_block as f64) as usize
            };
            (chunks, "--kv-offloading-size")
        }
        (None, None, Some(g)) => {
            let per_gpu = positive_gib("cpu-offload-gib", g)? * gib;
            let chunks = if native {
                chunks_of_total(per_gpu * tp as f64)
            } else {
                (per_gpu / gpu_block as f64) as usize
            };
            (chunks, "--cpu-offload-gib")
        }
        (None, None, None) => unreachable!("sized above"),
    };
    if chunks == 0 {
        return Err(format!(
            "{flag}: the host tier holds no whole chunk of {blocks_per_chunk} blocks of {block_size} tokens"
        ));
    }
    let (gbps, source) = match &a.offload_bandwidth {
        None => (
            PCIE5_X16_GBPS,
            "PCIe 5.0 ×16 per direction, an assumption (measure with pagedkv swap)".into(),
        ),
        Some(s) => match s.parse::<f64>() {
            Ok(g) if g.is_finite() && g > 0.0 => (g, "--offload-bandwidth".to_string()),
            Ok(g) => return Err(format!("--offload-bandwidth must be > 0 GB/s, got {g}")),
            Err(_) => swap_file_gbps(Path::new(s), block_size)?,
        },
    };
    Ok(Some((
        CpuOffload {
            mode: a.cpu_offload_mode,
            chunks,
            blocks_per_chunk,
            policy: a.cpu_offload_policy,
            prompt_only: a.offload_prompt_only,
            gbps,
            scope: a.cpu_offload_scope,
        },
        source,
    )))
}

/// The line that says what the tier is.
pub fn describe(o: &CpuOffload, source: &str, block_size: usize) -> String {
    match o.mode {
        OffloadMode::Native => format!(
            "host tier: native (vLLM 0.33's OffloadingConnector): {} chunks of {} blocks ({} tokens), {} eviction, {}, {} scope, {} GB/s per GPU ({source}); stores as chunks are computed, loads asynchronously",
            o.chunks,
            o.blocks_per_chunk,
            o.blocks_per_chunk * block_size,
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
    let (scale, unit) = crate::latency_unit::latency_unit(with.time_unit);
    let ttft = |r: &EngineReport| {
        r.ttft.map_or("-".into(), |d| {
            format!("{:.1}/{:.1}", d.p50 * scale, d.p99 * scale)
        })
    };
    let gib = |blocks: u64| (blocks * block_bytes) as f64 / (1u64 << 30) as f64;
    let external = match stats.mode {
        OffloadMode::Native => format!(
            "; vLLM's external prefix cache: {} hit of {} queried tokens{}; {} stores refused (tier full of pinned or pending chunks)",
            with.external_prefix_cache_hits,
            with.external_prefix_cache_queries,
            if with.preempted_external_prefix_cache_queries > 0 {
                format!(
                    " (after preemptions {} of {})",
                    with.preempted_external_prefix_cache_hits,
                    with.preempted_external_prefix_cache_queries
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
        with.prefix_cache_hit_tokens,
        with.offload_hit_tokens,
        with.prompt_computed_tokens,
        stats.stored_chunks,
        gib(stats.stored_blocks),
        stats.loaded_chunks,
        gib(stats.loaded_blocks),
        stats.evicted_chunks,
        ttft(with),
        ttft(without),
    )
}
