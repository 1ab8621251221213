//! The paged gather kernels of `kernels/paged_gather.cu` run on the emulator, and the launch
//! geometry they take. [`GatherPlan`] is the one description of a launch (grid, scalar arguments,
//! buffer sizes): the emulated launchers here and the CUDA launcher
//! (`device::cuda::gather`) both bind their buffers to it, so the two cannot drift apart. The CPU
//! reference is [`crate::device::cpu::gather`].

use super::{EmuElem, EmuError, Launch, Schedule};
use crate::device::cpu::gather::token_offsets;
use crate::kv::{BlockTable, KvElem, KvSpec};
use thiserror::Error;

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

/// A launch the kernels cannot take: a size that does not fit their `int` arguments or a grid
/// dimension, or a geometry outside what they are written for.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{0}")]
pub struct GeometryError(pub String);

fn to_i32(what: &str, x: usize) -> Result<i32, GeometryError> {
    i32::try_from(x).map_err(|_| GeometryError(format!("{what} = {x} does not fit a kernel's i32")))
}

fn to_u32(what: &str, x: usize) -> Result<u32, GeometryError> {
    u32::try_from(x)
        .map_err(|_| GeometryError(format!("{what} = {x} does not fit a grid dimension")))
}

/// Everything the gather kernels take besides the buffers, in their argument order.
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
    ) -> Result<GatherPlan, GeometryError> {
        if geometry.tokens_per_cta == 0 || geometry.threads == 0 || geometry.threads > 256 {
            return Err(GeometryError(format!(
                "gather geometry {geometry:?}: tokens_per_cta must be at least 1 and threads 1 to 256"
            )));
        }
        let (offsets, total) = token_offsets(table);
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
}

fn invalid(e: GeometryError) -> EmuError {
    EmuError::InvalidLaunch(e.0)
}

fn check_len(what: &str, got: usize, want: usize) -> Result<(), EmuError> {
    if got == want {
        Ok(())
    } else {
        Err(EmuError::InvalidLaunch(format!(
            "{what} holds {got} elements, the launch needs {want}"
        )))
    }
}

/// Copy-out gather of `pool` into `out` (`[num_kv_heads, total_tokens, head_dim]`), emulated.
pub fn gather_copy<T: KvElem + EmuElem>(
    spec: &KvSpec,
    pool: &[T],
    table: &BlockTable,
    out: &mut [T],
    geometry: GatherGeometry,
    schedule: Schedule,
) -> Result<(), EmuError> {
    let plan = GatherPlan::new(spec, table, geometry).map_err(invalid)?;
    check_len("the output", out.len(), plan.copy_elems)?;
    if plan.chunks == 0 {
        return Ok(());
    }
    Launch::new(&format!("paged_gather_copy_{}", T::DTYPE.name()))
        .grid(plan.grid)
        .block(plan.threads)
        .schedule(schedule)
        .buf(pool)
        .buf(&table.entries)
        .buf(&table.lens)
        .buf(&plan.out_offsets)
        .buf_mut(out)
        .i32(plan.num_kv_heads)
        .i32(plan.log2_block_size)
        .i32(plan.head_dim)
        .i32(plan.table_stride)
        .i32(plan.total_tokens)
        .i32(plan.tokens_per_cta)
        .run()
}

/// Read-only gather: per (sequence, KV head) the f32 sum of its K and V elements into `out`
/// (`[num_seqs, num_kv_heads]`), emulated: the partial-sum kernel, then the merge.
pub fn gather_sum<T: KvElem + EmuElem>(
    spec: &KvSpec,
    k: &[T],
    v: &[T],
    table: &BlockTable,
    out: &mut [f32],
    geometry: GatherGeometry,
    schedule: Schedule,
) -> Result<(), EmuError> {
    let plan = GatherPlan::new(spec, table, geometry).map_err(invalid)?;
    check_len("the output", out.len(), plan.sum_elems)?;
    if out.is_empty() {
        return Ok(());
    }
    // Poisoned: a partial the merge reads but no CTA wrote turns the sum into NaN.
    let mut partials = vec![f32::NAN; plan.partial_elems];
    if plan.chunks > 0 {
        Launch::new(&format!("paged_gather_sum_partial_{}", T::DTYPE.name()))
            .grid(plan.grid)
            .block(plan.threads)
            .schedule(schedule)
            .buf(k)
            .buf(v)
            .buf(&table.entries)
            .buf(&table.lens)
            .buf_mut(&mut partials)
            .i32(plan.num_kv_heads)
            .i32(plan.log2_block_size)
            .i32(plan.head_dim)
            .i32(plan.table_stride)
            .i32(plan.tokens_per_cta)
            .run()?;
    }
    Launch::new("paged_gather_sum_merge")
        .grid(plan.merge_grid)
        .block(MERGE_THREADS)
        .schedule(schedule)
        .buf(&partials)
        .buf(&table.lens)
        .buf_mut(out)
        .i32(plan.num_seqs)
        .i32(plan.num_kv_heads)
        .i32(plan.chunks)
        .i32(plan.tokens_per_cta)
        .run()
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
