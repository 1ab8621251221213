//! The paged gather probes' launches (kernels/paged_gather.cu): [`GatherPlan`] is the one
//! description of a launch (grid, scalar arguments in signature order, buffer sizes); the emulated
//! launchers (`emu::gather`) and the CUDA launcher (`device::cuda::gather`) both bind their buffers
//! to it. The CPU reference is `device::cpu::gather`.

use super::{to_i32, to_u32, LaunchError};
use crate::kv::{BlockTable, KvSpec};

/// How the per-token gather kernels are launched: grid (ceil(max_len / tokens_per_cta),
/// num_kv_heads, num_seqs), `threads` per CTA (at most 256; a multiple of 32 for the sum).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatherGeometry {
    pub threads: u32,
    pub tokens_per_cta: usize,
}

/// Threads per CTA of the merge kernel.
pub const MERGE_THREADS: u32 = 128;

impl GatherGeometry {
    /// 256 threads and about 32 KiB of one pool per CTA: enough bytes in flight per CTA, and enough
    /// CTAs for a GPU's SMs once a batch holds a few thousand tokens.
    pub fn for_spec(spec: &KvSpec) -> Self {
        let row_bytes = spec.head_dim * spec.dtype.bytes();
        GatherGeometry {
            threads: 256,
            tokens_per_cta: (32 * 1024 / row_bytes).max(1),
        }
    }

    /// Chunks of the longest sequence: the grid's x dimension (0 when no sequence has tokens).
    pub fn chunks(&self, table: &BlockTable) -> usize {
        let max_len = table.lens.iter().copied().max().unwrap_or(0).max(0) as usize;
        max_len.div_ceil(self.tokens_per_cta.max(1))
    }
}

/// Everything the gather kernels take besides the buffers; the `*_scalars` methods give the `int`
/// arguments in each kernel's signature order (kernels/paged_gather.cu).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatherPlan {
    /// Grid of `paged_gather_copy_*` and `paged_gather_sum_partial_*`: (chunks, heads, seqs).
    pub grid: (u32, u32, u32),
    pub threads: u32,
    /// Grid (1-D) of `paged_gather_sum_merge`, [`MERGE_THREADS`] threads each.
    pub merge_grid: u32,
    pub num_seqs: i32,
    pub num_kv_heads: i32,
    pub log2_block_size: i32,
    pub head_dim: i32,
    pub table_stride: i32,
    pub total_tokens: i32,
    pub tokens_per_cta: i32,
    /// Chunks of the longest sequence (the grid's x; the partials' last dimension).
    pub chunks: i32,
    /// `[num_seqs]`: first token of each sequence in the copy-out buffer.
    pub out_offsets: Vec<i32>,
    /// Elements of the copy-out buffer `[num_kv_heads, total_tokens, head_dim]`.
    pub copy_elems: usize,
    /// Elements of the partial sums `[num_seqs, num_kv_heads, chunks]`.
    pub partial_elems: usize,
    /// Elements of the read-only gather's output `[num_seqs, num_kv_heads]`.
    pub sum_elems: usize,
}

impl GatherPlan {
    pub fn new(
        spec: &KvSpec,
        table: &BlockTable,
        geometry: GatherGeometry,
    ) -> Result<GatherPlan, LaunchError> {
        if geometry.tokens_per_cta == 0 || geometry.threads == 0 || geometry.threads > 256 {
            return Err(LaunchError::Geometry(format!(
                "gather geometry {geometry:?}: tokens_per_cta must be at least 1 and threads 1 to 256"
            )));
        }
        let (offsets, total) = table.token_offsets();
        let heads = spec.num_kv_heads;
        let seqs = table.num_seqs();
        let chunks = geometry.chunks(table);
        let pairs = seqs * heads;
        Ok(GatherPlan {
            grid: (
                to_u32("chunks", chunks)?,
                to_u32("num_kv_heads", heads)?,
                to_u32("num_seqs", seqs)?,
            ),
            threads: geometry.threads,
            merge_grid: to_u32("merge CTAs", pairs.div_ceil(MERGE_THREADS as usize))?,
            num_seqs: to_i32("num_seqs", seqs)?,
            num_kv_heads: to_i32("num_kv_heads", heads)?,
            log2_block_size: spec.block_size.trailing_zeros() as i32,
            head_dim: to_i32("head_dim", spec.head_dim)?,
            table_stride: to_i32("table stride", table.stride)?,
            total_tokens: to_i32("total tokens", total)?,
            tokens_per_cta: to_i32("tokens per CTA", geometry.tokens_per_cta)?,
            chunks: to_i32("chunks", chunks)?,
            out_offsets: offsets
                .iter()
                .map(|&o| to_i32("a token offset", o))
                .collect::<Result<_, _>>()?,
            copy_elems: heads * total * spec.head_dim,
            partial_elems: pairs * chunks,
            sum_elems: pairs,
        })
    }

    /// `paged_gather_copy_*`'s scalars: (num_kv_heads, log2_block_size, head_dim, table_stride,
    /// total_tokens, tokens_per_cta), after (pool, block_tables, seq_lens, out_offsets, out).
    pub fn copy_scalars(&self) -> [i32; 6] {
        [
            self.num_kv_heads,
            self.log2_block_size,
            self.head_dim,
            self.table_stride,
            self.total_tokens,
            self.tokens_per_cta,
        ]
    }

    /// `paged_gather_sum_partial_*`'s scalars: (num_kv_heads, log2_block_size, head_dim,
    /// table_stride, tokens_per_cta), after (k_pool, v_pool, block_tables, seq_lens, partials).
    pub fn sum_scalars(&self) -> [i32; 5] {
        [
            self.num_kv_heads,
            self.log2_block_size,
            self.head_dim,
            self.table_stride,
            self.tokens_per_cta,
        ]
    }

    /// `paged_gather_sum_merge`'s scalars: (num_seqs, num_kv_heads, num_chunks, tokens_per_cta),
    /// after (partials, seq_lens, out).
    pub fn merge_scalars(&self) -> [i32; 4] {
        [
            self.num_seqs,
            self.num_kv_heads,
            self.chunks,
            self.tokens_per_cta,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::Dtype;

    #[test]
    fn the_plan_matches_the_table_counted_by_hand() {
        let spec = KvSpec::new(3, 32, 4, Dtype::F16).unwrap();
        // Lengths 5, 0, 11 over blocks of 4 tokens.
        let rows = vec![vec![0, 1], vec![], vec![2, 3, 4]];
        let table = BlockTable::from_rows(&rows, &[5, 0, 11], 4).unwrap();
        let g = GatherGeometry {
            threads: 64,
            tokens_per_cta: 3,
        };
        let p = GatherPlan::new(&spec, &table, g).unwrap();
        // ceil(11 / 3) = 4 chunks; 3 heads; 3 sequences.
        assert_eq!(p.grid, (4, 3, 3));
        assert_eq!(p.out_offsets, vec![0, 5, 5]);
        assert_eq!(p.total_tokens, 16);
        assert_eq!(p.copy_elems, 3 * 16 * 32);
        assert_eq!(p.partial_elems, 3 * 3 * 4);
        assert_eq!(p.sum_elems, 9);
        assert_eq!(p.merge_grid, 1);
        assert_eq!(p.table_stride, 3);
        let bad = GatherGeometry {
            threads: 512,
            tokens_per_cta: 3,
        };
        assert!(GatherPlan::new(&spec, &table, bad).is_err());
    }
}
