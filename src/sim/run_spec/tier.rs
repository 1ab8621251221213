//! The host tier a spec asks for ([`TierSpec`]): its size in whole chunks as vLLM sizes it, and
//! the host link's bandwidth (given, measured by `pagedkv swap`, or PCIe 5.0 ×16 assumed).

use super::choices::Backend;
use super::spec::TierSpec;
use crate::kv::model::ModelShape;
use crate::kv::BlockSize;
use crate::sim::engine::host_tier::OffloadMode;
use crate::sim::engine::step_time::kv_bytes_per_token_per_gpu;
use crate::sim::engine::CpuOffload;
use std::path::Path;

/// PCIe 5.0 ×16, one direction: 32 GT/s × 16 lanes × 128/130 / 8 bits.
pub const PCIE5_X16_GBPS: f64 = 63.0;

/// vLLM's CPU page size, to which it rounds a chunk's bytes (`SharedOffloadRegion`).
const PAGE_BYTES: u64 = 4096;

/// Why the tier flags are no host tier; each names its flag.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HostTierError {
    #[error("{0} needs a tier (--kv-offloading-size, --cpu-offload-blocks or --cpu-offload-gib)")]
    NoTier(&'static str),
    #[error(
        "--kv-offloading-backend lmcache (an external LMCache server) is not modelled; use native"
    )]
    Lmcache,
    #[error("--offload-block-size {tokens} is not a multiple of the block size {block_size}")]
    OffloadBlockSize {
        tokens: usize,
        block_size: BlockSize,
    },
    #[error(
        "--cpu-offload-mode store-on-evict holds single blocks (no --offload-blocks-per-chunk or \
         --offload-block-size)"
    )]
    StoreOnEvictChunks,
    #[error("--{flag} must be > 0, got {gib}")]
    NotPositive { flag: &'static str, gib: f64 },
    #[error(
        "{flag}: the host tier holds no whole chunk of {blocks_per_chunk} blocks of {block_size} \
         tokens"
    )]
    NoWholeChunk {
        flag: &'static str,
        blocks_per_chunk: usize,
        block_size: BlockSize,
    },
    #[error("--offload-bandwidth must be > 0 GB/s, got {0}")]
    Bandwidth(f64),
    /// `--offload-bandwidth FILE`: unread, or not `pagedkv swap --json` output.
    #[error("{file}: {reason}")]
    SwapFile { file: String, reason: String },
}

/// The host link from `pagedkv swap --json` output at the row nearest `block_size`: the slower
/// direction's batched copy rate.
fn swap_file_gbps(path: &Path, block_size: usize) -> Result<(f64, String), HostTierError> {
    let file = |reason: String| HostTierError::SwapFile {
        file: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| file(e.to_string()))?;
    let v = crate::workload::strict_json::from_str(&text).map_err(|e| file(e.to_string()))?;
    let rate = |r: &serde_json::Value, dir: &str| r.get(dir)?.get("batched_gbps")?.as_f64();
    let row = v
        .get("rows")
        .and_then(|r| r.as_array())
        .and_then(|rows| {
            rows.iter()
                .filter_map(|r| Some((r.get("block_size")?.as_u64()? as usize, r)))
                .min_by_key(|(b, _)| b.abs_diff(block_size))
        })
        .ok_or_else(|| file("not `pagedkv swap --json` output (no rows)".into()))?;
    let gbps = rate(row.1, "swap_in")
        .zip(rate(row.1, "swap_out"))
        .map(|(i, o)| i.min(o))
        .ok_or_else(|| file(format!("row for block size {} lacks batched_gbps", row.0)))?;
    let device = v.get("device").and_then(|d| d.as_str()).unwrap_or("?");
    Ok((
        gbps,
        format!(
            "measured by pagedkv swap on {device} at block size {}",
            row.0
        ),
    ))
}

fn positive_gib(flag: &'static str, gib: f64) -> Result<f64, HostTierError> {
    if gib.is_finite() && gib > 0.0 {
        Ok(gib)
    } else {
        Err(HostTierError::NotPositive { flag, gib })
    }
}

/// The tier `a` asks for at `block_size`, and where its bandwidth comes from; `None`
/// without a size.
pub fn resolve(
    a: &TierSpec,
    model: &ModelShape,
    tp: usize,
    block_size: BlockSize,
) -> Result<Option<(CpuOffload, String)>, HostTierError> {
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
                return Err(HostTierError::NoTier(flag));
            }
        }
        return Ok(None);
    }
    if a.kv_offloading_backend == Some(Backend::Lmcache) {
        return Err(HostTierError::Lmcache);
    }
    let native = a.cpu_offload_mode == OffloadMode::Native;
    let blocks_per_chunk = match (a.offload_blocks_per_chunk, a.offload_block_size) {
        (Some(n), _) => n,
        (None, Some(t)) if t % block_size.get() == 0 => t / block_size.get(),
        (None, Some(tokens)) => return Err(HostTierError::OffloadBlockSize { tokens, block_size }),
        (None, None) => 1,
    };
    if !native && blocks_per_chunk != 1 {
        return Err(HostTierError::StoreOnEvictChunks);
    }
    // One GPU's share of a block, and every GPU's.
    let gpu_block = kv_bytes_per_token_per_gpu(model, tp) * u64::from(block_size);
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
        return Err(HostTierError::NoWholeChunk {
            flag,
            blocks_per_chunk,
            block_size,
        });
    }
    let (gbps, source) = match &a.offload_bandwidth {
        None => (
            PCIE5_X16_GBPS,
            "PCIe 5.0 ×16 per direction, an assumption (measure with pagedkv swap)".into(),
        ),
        Some(s) => match s.parse::<f64>() {
            Ok(g) if g.is_finite() && g > 0.0 => (g, "--offload-bandwidth".to_string()),
            Ok(g) => return Err(HostTierError::Bandwidth(g)),
            Err(_) => swap_file_gbps(Path::new(s), block_size.get())?,
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
