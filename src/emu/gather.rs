//! The paged gather kernels of `kernels/paged_gather.cu` run on the emulator, and the launch
//! geometry they take (the same on a GPU). The CPU reference is [`crate::device::cpu::gather`].

use super::{EmuElem, EmuError, Launch, Schedule};
use crate::device::cpu::gather::token_offsets;
use crate::kv::{BlockTable, KvElem, KvSpec};

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

fn to_i32(what: &str, x: usize) -> Result<i32, EmuError> {
    i32::try_from(x)
        .map_err(|_| EmuError::InvalidLaunch(format!("{what} = {x} does not fit a kernel's i32")))
}

fn to_u32(what: &str, x: usize) -> Result<u32, EmuError> {
    u32::try_from(x)
        .map_err(|_| EmuError::InvalidLaunch(format!("{what} = {x} does not fit a grid dimension")))
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
    let (offsets, total) = token_offsets(table);
    check_len(
        "the output",
        out.len(),
        spec.num_kv_heads * total * spec.head_dim,
    )?;
    let chunks = geometry.chunks(table);
    if chunks == 0 {
        return Ok(());
    }
    let offsets = offsets
        .iter()
        .map(|&o| to_i32("a token offset", o))
        .collect::<Result<Vec<i32>, _>>()?;
    Launch::new(&format!("paged_gather_copy_{}", T::DTYPE.name()))
        .grid((
            to_u32("chunks", chunks)?,
            to_u32("num_kv_heads", spec.num_kv_heads)?,
            to_u32("num_seqs", table.num_seqs())?,
        ))
        .block(geometry.threads)
        .schedule(schedule)
        .buf(pool)
        .buf(&table.entries)
        .buf(&table.lens)
        .buf(&offsets)
        .buf_mut(out)
        .i32(to_i32("num_kv_heads", spec.num_kv_heads)?)
        .i32(to_i32("block_size", spec.block_size)?)
        .i32(to_i32("head_dim", spec.head_dim)?)
        .i32(to_i32("table stride", table.stride)?)
        .i32(to_i32("total tokens", total)?)
        .i32(to_i32("tokens per CTA", geometry.tokens_per_cta)?)
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
    let heads = spec.num_kv_heads;
    check_len("the output", out.len(), table.num_seqs() * heads)?;
    if out.is_empty() {
        return Ok(());
    }
    let chunks = geometry.chunks(table);
    // Poisoned: a partial the merge reads but no CTA wrote turns the sum into NaN.
    let mut partials = vec![f32::NAN; table.num_seqs() * heads * chunks];
    if chunks > 0 {
        Launch::new(&format!("paged_gather_sum_partial_{}", T::DTYPE.name()))
            .grid((
                to_u32("chunks", chunks)?,
                to_u32("num_kv_heads", heads)?,
                to_u32("num_seqs", table.num_seqs())?,
            ))
            .block(geometry.threads)
            .schedule(schedule)
            .buf(k)
            .buf(v)
            .buf(&table.entries)
            .buf(&table.lens)
            .buf_mut(&mut partials)
            .i32(to_i32("num_kv_heads", heads)?)
            .i32(to_i32("block_size", spec.block_size)?)
            .i32(to_i32("head_dim", spec.head_dim)?)
            .i32(to_i32("table stride", table.stride)?)
            .i32(to_i32("tokens per CTA", geometry.tokens_per_cta)?)
            .run()?;
    }
    let pairs = table.num_seqs() * heads;
    Launch::new("paged_gather_sum_merge")
        .grid(to_u32(
            "merge CTAs",
            pairs.div_ceil(MERGE_THREADS as usize),
        )?)
        .block(MERGE_THREADS)
        .schedule(schedule)
        .buf(&partials)
        .buf(&table.lens)
        .buf_mut(out)
        .i32(to_i32("num_seqs", table.num_seqs())?)
        .i32(to_i32("num_kv_heads", heads)?)
        .i32(to_i32("chunks", chunks)?)
        .i32(to_i32("tokens per CTA", geometry.tokens_per_cta)?)
        .run()
}
