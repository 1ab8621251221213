//! How many partitions of the context each (sequence, KV head) is split into (split-K).
//!
//! One CTA per (sequence, KV head) reads its KV once. When the batch alone leaves part of the GPU
//! idle, the context is cut into partitions, one CTA each, and a merge kernel combines them; the
//! merge costs a second launch and a pass over the partial outputs, so it must buy something.
//! The rule, from the occupancy of the kernel (CTAs per SM: the driver's occupancy query on a GPU,
//! the static report's registers and shared memory against the SM's limits without one):
//! - a wave is `ctas_per_sm * sms` CTAs; a grid that fills at least [`FULL_WAVE`] of one wave is
//!   not split;
//! - otherwise split into as many partitions as fit in one wave (never past it: a second wave of
//!   partitions would leave SMs idle at its tail), at most one per [`CHUNK`] tokens, partitions
//!   whole multiples of [`CHUNK`] so no CTA is left with a sliver.

use crate::kernels::report::{self, StaticKernel};
use serde::Serialize;

/// Tokens per partition quantum (`attn::kPartitionQuantum` in kernels/attention.cuh).
pub const CHUNK: usize = 128;
/// The share of one wave at or above which a grid is left unsplit.
pub const FULL_WAVE: f64 = 0.8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SplitPlan {
    pub num_partitions: usize,
    /// Tokens per partition (a multiple of [`CHUNK`] when split).
    pub partition_size: usize,
}

/// The split for `num_seqs x num_kv_heads` CTAs over contexts up to `max_len` tokens on `sms`
/// multiprocessors that each hold `ctas_per_sm` CTAs of the kernel.
pub fn split_plan(
    num_seqs: usize,
    num_kv_heads: usize,
    max_len: usize,
    sms: usize,
    ctas_per_sm: usize,
) -> SplitPlan {
    let ctas = num_seqs * num_kv_heads;
    let wave = ctas_per_sm.max(1) * sms.max(1);
    let single = SplitPlan {
        num_partitions: 1,
        partition_size: max_len.max(1),
    };
    if ctas == 0 || max_len <= CHUNK || ctas as f64 >= FULL_WAVE * wave as f64 {
        return single;
    }
    let parts = (wave / ctas).min(max_len.div_ceil(CHUNK));
    let size = max_len.div_ceil(parts.max(1)).div_ceil(CHUNK) * CHUNK;
    let parts = max_len.div_ceil(size);
    if parts <= 1 {
        return single;
    }
    SplitPlan {
        num_partitions: parts,
        partition_size: size,
    }
}

/// CTAs per SM of a kernel on sm_90 (H100, H200) from the static `report` (ptxas's registers and
/// shared memory against the SM's limits): the occupancy a GPU's driver reports, without one; None
/// when the kernel is not in it (no nvcc or no cuobjdump at build time).
pub fn static_ctas_per_sm(report: &[StaticKernel], kernel: &str) -> Option<usize> {
    report::find(report, kernel)
        .and_then(|k| k.ctas_per_sm)
        .map(|c| c as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_shape_runs_without_a_merge() {
        // Batch 64 x 8 KV heads = 512 CTAs on an H200 (132 SMs): at 4 CTAs per SM that is 0.97 of
        // a wave; at 5, 0.78 of one, and a second partition per CTA would need 1,024 > 660 slots.
        for ctas_per_sm in [2, 3, 4, 5] {
            assert_eq!(split_plan(64, 8, 4096, 132, ctas_per_sm).num_partitions, 1);
        }
    }

    #[test]
    fn a_small_batch_fills_one_wave_at_most() {
        // 1 x 8 CTAs, 528 slots: 66 partitions wanted, 32 chunks of 128 tokens available.
        assert_eq!(
            split_plan(1, 8, 4096, 132, 4),
            SplitPlan {
                num_partitions: 32,
                partition_size: 128
            }
        );
        // 16 x 8 = 128 CTAs, 528 slots: 4 partitions of 1,024 tokens = 512 CTAs <= 528.
        assert_eq!(
            split_plan(16, 8, 4096, 132, 4),
            SplitPlan {
                num_partitions: 4,
                partition_size: 1024
            }
        );
        for (seqs, heads, len, sms, per_sm) in [(1, 4, 1000, 132, 4), (3, 4, 5000, 132, 2)] {
            let p = split_plan(seqs, heads, len, sms, per_sm);
            assert!(p.num_partitions * p.partition_size >= len);
            assert!((p.num_partitions - 1) * p.partition_size < len);
            assert_eq!(p.partition_size % CHUNK, 0);
            assert!(p.num_partitions * seqs * heads <= sms * per_sm, "{p:?}");
        }
    }

    #[test]
    fn short_contexts_and_full_grids_are_not_split() {
        assert_eq!(split_plan(1, 1, 100, 132, 4).num_partitions, 1);
        // 432 of 528 slots (0.82 of a wave).
        assert_eq!(split_plan(54, 8, 4096, 132, 4).num_partitions, 1);
        // 416 of 528 (0.79): one partition per CTA is all one wave holds (2 x 416 > 528).
        assert_eq!(split_plan(52, 8, 4096, 132, 4).num_partitions, 1);
    }
}
