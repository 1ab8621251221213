//! The cache operations' launches (kernels/cache_ops.cu): writing new tokens' K and V through a
//! slot mapping, and copying whole blocks (copy-on-write, swaps) in one launch per 65,535 pairs.
//! The CUDA launchers (`device::cuda::cache_ops`) and the emulated ones (`emu::cache_ops`) bind
//! their buffers to these plans.

use super::{to_i32, to_u32, LaunchError};
use crate::kv::{Dtype, KvSpec};
use std::ops::Range;
use thiserror::Error;

// ---- checks before any launch: out of range, or two writers of one slot or block -------------

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CacheOpError {
    #[error("slot {slot} of token {token} is outside the pool of {slots} slots")]
    SlotOutOfRange {
        token: usize,
        slot: i64,
        slots: usize,
    },
    #[error("block copy {index}: block {block} is outside the pool of {num_blocks} blocks")]
    BlockOutOfRange {
        index: usize,
        block: i32,
        num_blocks: usize,
    },
    #[error("tokens {first} and {second} both write slot {slot}: on a GPU the winner would vary")]
    DuplicateSlot {
        first: usize,
        second: usize,
        slot: i64,
    },
    #[error(
        "block copies {first} and {second} both write block {block}: on a GPU the winner would vary"
    )]
    DuplicateDestination {
        first: usize,
        second: usize,
        block: i32,
    },
    #[error(
        "block copy {writer} writes block {block}, which copy {reader} reads: within one pool the \
         result would depend on their order"
    )]
    DestinationIsSource {
        writer: usize,
        reader: usize,
        block: i32,
    },
    #[error("new K/V holds {got} elements, {want} expected for {tokens} tokens")]
    Shape {
        got: usize,
        want: usize,
        tokens: usize,
    },
}

/// Checks a slot mapping against a pool of `num_blocks` blocks (negative slots are skipped): every
/// slot inside the pool, and no slot written twice (on a GPU two CTAs would race for it).
pub fn check_slots(spec: &KvSpec, num_blocks: usize, slots: &[i64]) -> Result<(), CacheOpError> {
    let total = num_blocks * spec.block_size;
    if let Some((token, &slot)) = slots.iter().enumerate().find(|(_, &s)| s >= total as i64) {
        return Err(CacheOpError::SlotOutOfRange {
            token,
            slot,
            slots: total,
        });
    }
    let written = slots.iter().enumerate().filter(|(_, &s)| s >= 0);
    match first_repeat(written.map(|(token, &slot)| (slot, token))) {
        Some((slot, first, second)) => Err(CacheOpError::DuplicateSlot {
            first,
            second,
            slot,
        }),
        None => Ok(()),
    }
}

/// The first key seen twice, with the positions of its two sightings.
fn first_repeat<K: std::hash::Hash + Eq + Copy>(
    items: impl Iterator<Item = (K, usize)>,
) -> Option<(K, usize, usize)> {
    let mut seen = std::collections::HashMap::new();
    for (key, at) in items {
        if let Some(&first) = seen.get(&key) {
            return Some((key, first, at));
        }
        seen.insert(key, at);
    }
    None
}

/// Checks (src, dst) block pairs against pools of `src_blocks` and `dst_blocks` blocks.
pub fn check_pairs(
    pairs: &[[i32; 2]],
    src_blocks: usize,
    dst_blocks: usize,
) -> Result<(), CacheOpError> {
    for (index, &[src, dst]) in pairs.iter().enumerate() {
        for (block, n) in [(src, src_blocks), (dst, dst_blocks)] {
            if block < 0 || block as usize >= n {
                return Err(CacheOpError::BlockOutOfRange {
                    index,
                    block,
                    num_blocks: n,
                });
            }
        }
    }
    match first_repeat(pairs.iter().enumerate().map(|(i, &[_, dst])| (dst, i))) {
        Some((block, first, second)) => Err(CacheOpError::DuplicateDestination {
            first,
            second,
            block,
        }),
        None => Ok(()),
    }
}

/// [`check_pairs`] for copies inside one pool, where a block both written and read by the same
/// batch would make the result depend on the order the copies run in.
pub fn check_pairs_within(pairs: &[[i32; 2]], num_blocks: usize) -> Result<(), CacheOpError> {
    check_pairs(pairs, num_blocks, num_blocks)?;
    let writers: std::collections::HashMap<i32, usize> = pairs
        .iter()
        .enumerate()
        .map(|(i, &[_, d])| (d, i))
        .collect();
    for (reader, &[src, _]) in pairs.iter().enumerate() {
        if let Some(&writer) = writers.get(&src) {
            return Err(CacheOpError::DestinationIsSource {
                writer,
                reader,
                block: src,
            });
        }
    }
    Ok(())
}

// ---- the launches ---------------------------------------------------------------------------------

/// Threads per CTA of both kernels (their `__launch_bounds__`).
pub const THREADS: u32 = 128;
/// Block pairs per copy_blocks launch: a grid's y dimension stops at 65,535.
pub const PAIRS_PER_LAUNCH: usize = 65_535;

/// `write_kv_slots_*`: one CTA per token. Buffers: (k_cache, v_cache, k_new, v_new, slots).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotWrites {
    pub kernel: String,
    pub grid: u32,
    pub threads: u32,
    /// (num_kv_heads, head_dim, log2_block_size), in signature order.
    pub scalars: [i32; 3],
}

impl SlotWrites {
    /// New K/V of `dtype` into a pool of `spec.dtype`: `write_kv_slots_{dtype}` when they are the
    /// same; into an fp8 pool `quantize_kv_slots_{dtype}_to_{fp8}`, whose buffers gain
    /// (k_scale, v_scale) `[num_kv_heads]` after the slots.
    pub fn new(spec: &KvSpec, dtype: Dtype, tokens: usize) -> Result<SlotWrites, LaunchError> {
        let kernel = if spec.dtype == dtype {
            format!("write_kv_slots_{}", dtype.name())
        } else if spec.dtype.fp8().is_some() && dtype.fp8().is_none() {
            format!(
                "quantize_kv_slots_{}_to_{}",
                dtype.name(),
                spec.dtype.name()
            )
        } else {
            return Err(LaunchError::NoInstance(format!(
                "new K/V in {dtype} cannot be written into a {} pool",
                spec.dtype
            )));
        };
        Ok(SlotWrites {
            kernel,
            grid: to_u32("tokens", tokens)?,
            threads: THREADS,
            scalars: [
                to_i32("num_kv_heads", spec.num_kv_heads)?,
                to_i32("head_dim", spec.head_dim)?,
                spec.block_size.trailing_zeros() as i32,
            ],
        })
    }
}

/// `copy_blocks`: grid (CTAs per block, pairs of this launch). Buffers: (dst, src, pairs); the one
/// scalar is `block_vecs` (i64), the block's 16-byte vectors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockCopies {
    pub threads: u32,
    pub block_vecs: i64,
    pub ctas_per_block: u32,
    /// The pairs of each launch, as a range of the pair list.
    pub launches: Vec<Range<usize>>,
}

impl BlockCopies {
    /// Copies of `pairs` blocks of `block_bytes` bytes (a multiple of 16).
    pub fn new(block_bytes: usize, pairs: usize) -> Result<BlockCopies, LaunchError> {
        if block_bytes == 0 || !block_bytes.is_multiple_of(16) {
            return Err(LaunchError::Geometry(format!(
                "blocks of {block_bytes} bytes: copy_blocks moves whole 16-byte vectors"
            )));
        }
        let block_vecs = block_bytes / 16;
        Ok(BlockCopies {
            threads: THREADS,
            block_vecs: block_vecs as i64,
            // Up to 64 CTAs share one block, so a few big blocks still fill the GPU.
            ctas_per_block: block_vecs.div_ceil(THREADS as usize).clamp(1, 64) as u32,
            launches: (0..pairs)
                .step_by(PAIRS_PER_LAUNCH)
                .map(|start| start..(start + PAIRS_PER_LAUNCH).min(pairs))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_pairs_take_several_launches_and_big_blocks_several_ctas() {
        let c = BlockCopies::new(4096, 70_000).unwrap();
        assert_eq!(c.launches, vec![0..65_535, 65_535..70_000]);
        assert_eq!((c.block_vecs, c.ctas_per_block), (256, 2));
        assert!(BlockCopies::new(16, 0).unwrap().launches.is_empty());
        assert_eq!(BlockCopies::new(1 << 20, 1).unwrap().ctas_per_block, 64);
        assert!(BlockCopies::new(24, 1).is_err());
    }

    #[test]
    fn writes_into_an_fp8_pool_quantise() {
        let spec = KvSpec::new(2, 64, 16, Dtype::Fp8E5m2).unwrap();
        let w = SlotWrites::new(&spec, Dtype::Bf16, 3).unwrap();
        assert_eq!(w.kernel, "quantize_kv_slots_bf16_to_fp8_e5m2");
        assert!(SlotWrites::new(&spec, Dtype::Fp8E4m3, 3).is_err());
        let f16_pool = KvSpec::new(2, 64, 16, Dtype::F16).unwrap();
        assert!(SlotWrites::new(&f16_pool, Dtype::F32, 3).is_err());
    }

    #[test]
    fn slot_writes_pass_the_block_size_as_a_shift() {
        let spec = KvSpec::new(4, 64, 16, Dtype::Bf16).unwrap();
        let w = SlotWrites::new(&spec, Dtype::Bf16, 7).unwrap();
        assert_eq!(
            (w.kernel.as_str(), w.grid, w.scalars),
            ("write_kv_slots_bf16", 7, [4, 64, 4])
        );
    }
}
