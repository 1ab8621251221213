//! The decode-attention kernels (kernels/paged_attention.cu, contiguous_attention.cu) run on the
//! emulator, launched exactly as src/device/cuda/attention.rs launches them on a GPU: the same
//! kernel names, grid and split-K merge. Arguments go in the order of the kernels' signatures,
//! stated in kernels/attention.cuh (the emulator checks each launch against them).

use super::{EmuElem, EmuError, Launch, Schedule};
use crate::attention::{Problem, SplitPlan};
use crate::kernels::{ATTENTION_SMEM_BYTES, ATTENTION_THREADS};
use crate::kv::KvElem;

/// Which cache the kernel reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Paged,
    Contiguous,
}

/// Runs decode attention on the emulator and returns the output, `[num_seqs, num_heads,
/// head_dim]`, which starts as NaN so an element the kernel misses shows.
pub fn decode_attention<T: KvElem + EmuElem>(
    p: &Problem<T>,
    layout: Layout,
    plan: SplitPlan,
    schedule: Schedule,
) -> Result<Vec<T>, EmuError> {
    let s = &p.shape;
    let group = s.num_heads / s.num_kv_heads;
    let (dtype, hd) = (T::DTYPE.name(), s.head_dim);
    let kernel = match layout {
        Layout::Paged => format!("paged_attention_{dtype}_d{hd}_g{group}"),
        Layout::Contiguous => format!("contiguous_attention_{dtype}_d{hd}_g{group}"),
    };
    run(p, layout, &kernel, plan, schedule)
}

/// [`decode_attention`] through a kernel of the same signature under another name: the mutants of
/// kernels/emu/selftest/attention_mutant_*.cu, which the tests show the emulator catches.
pub fn decode_attention_with<T: KvElem + EmuElem>(
    p: &Problem<T>,
    layout: Layout,
    kernel: &str,
    plan: SplitPlan,
    schedule: Schedule,
) -> Result<Vec<T>, EmuError> {
    run(p, layout, kernel, plan, schedule)
}

fn run<T: KvElem + EmuElem>(
    p: &Problem<T>,
    layout: Layout,
    kernel: &str,
    plan: SplitPlan,
    schedule: Schedule,
) -> Result<Vec<T>, EmuError> {
    let s = &p.shape;
    let dtype = T::DTYPE.name();
    let (hd, seqs) = (s.head_dim, p.lens.len());
    let parts = plan.num_partitions;
    let part_elems = if parts > 1 {
        seqs * s.num_heads * parts
    } else {
        1
    };
    let mut out = vec![T::from_f32(f32::NAN); p.q.len()];
    let mut part_out = vec![f32::NAN; part_elems * hd];
    let mut part_max = vec![f32::NAN; part_elems];
    let mut part_sum = vec![f32::NAN; part_elems];
    let grid = (s.num_kv_heads as u32, seqs as u32, parts as u32);
    let launch = match layout {
        Layout::Paged => Launch::new(kernel)
            .grid(grid)
            .block(ATTENTION_THREADS)
            .smem(ATTENTION_SMEM_BYTES as usize)
            .schedule(schedule)
            .buf_mut(&mut out)
            .buf_mut(&mut part_out)
            .buf_mut(&mut part_max)
            .buf_mut(&mut part_sum)
            .buf(&p.q)
            .buf(&p.k)
            .buf(&p.v)
            .buf(&p.table.entries)
            .buf(&p.lens)
            .i32(p.table.stride as i32)
            .i32(p.spec.block_size.trailing_zeros() as i32),
        Layout::Contiguous => Launch::new(kernel)
            .grid(grid)
            .block(ATTENTION_THREADS)
            .smem(ATTENTION_SMEM_BYTES as usize)
            .schedule(schedule)
            .buf_mut(&mut out)
            .buf_mut(&mut part_out)
            .buf_mut(&mut part_max)
            .buf_mut(&mut part_sum)
            .buf(&p.q)
            .buf(&p.k_contiguous)
            .buf(&p.v_contiguous)
            .buf(&p.lens)
            .i32(p.max_len as i32),
    };
    launch
        .i32(parts as i32)
        .i32(plan.partition_size as i32)
        .f32(s.scale)
        .run()?;
    if parts > 1 {
        Launch::new(&format!("merge_partitions_{dtype}_d{hd}"))
            .grid((s.num_heads as u32, seqs as u32, 1))
            .block(128)
            .schedule(schedule)
            .buf_mut(&mut out)
            .buf(&part_out)
            .buf(&part_max)
            .buf(&part_sum)
            .i32(parts as i32)
            .run()?;
    }
    Ok(out)
}
