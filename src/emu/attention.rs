//! The decode-attention kernels (kernels/paged_attention.cu, contiguous_attention.cu) run on the
//! emulator, bound to the same plan the GPU launcher uses (`launch::attention`): the same kernel
//! names, grid, dynamic shared memory, scalars and split-K merge. Buffers go in the order of the
//! kernels' signatures (kernels/attention.cuh); the emulator checks each launch against them.

use super::{EmuElem, EmuError, Launch, Schedule};
use crate::kv::KvElem;
use crate::launch::{AttentionData, AttentionLaunch, Engine, KernelLaunch, SplitPlan};

pub use crate::launch::Layout;

/// Runs decode attention on the emulator, on the engine the launchers dispatch for the shape, and
/// returns the output, `[num_seqs, num_heads, head_dim]`, which starts as NaN so an element the
/// kernel misses shows.
pub fn decode_attention<T: KvElem + EmuElem, KV: KvElem + EmuElem>(
    data: &AttentionData<'_, T, KV>,
    layout: Layout,
    plan: SplitPlan,
    schedule: Schedule,
) -> Result<Vec<T>, EmuError> {
    let l = AttentionLaunch::new(T::DTYPE, KV::DTYPE, data, layout, plan)
        .map_err(|e| EmuError::InvalidLaunch(e.to_string()))?;
    run(data, layout, &l, &l.attention.kernel, schedule)
}

/// [`decode_attention`] on a chosen engine.
pub fn decode_attention_on<T: KvElem + EmuElem, KV: KvElem + EmuElem>(
    engine: Engine,
    data: &AttentionData<'_, T, KV>,
    layout: Layout,
    plan: SplitPlan,
    schedule: Schedule,
) -> Result<Vec<T>, EmuError> {
    let l = AttentionLaunch::on(engine, T::DTYPE, KV::DTYPE, data, layout, plan)
        .map_err(|e| EmuError::InvalidLaunch(e.to_string()))?;
    run(data, layout, &l, &l.attention.kernel, schedule)
}

/// [`decode_attention_on`] through a kernel of the same signature under another name: the mutants
/// of kernels/emu/selftest/attention*_mutant_*.cu, which the tests show the emulator catches.
pub fn decode_attention_with<T: KvElem + EmuElem, KV: KvElem + EmuElem>(
    engine: Engine,
    data: &AttentionData<'_, T, KV>,
    layout: Layout,
    kernel: &str,
    plan: SplitPlan,
    schedule: Schedule,
) -> Result<Vec<T>, EmuError> {
    let l = AttentionLaunch::on(engine, T::DTYPE, KV::DTYPE, data, layout, plan)
        .map_err(|e| EmuError::InvalidLaunch(e.to_string()))?;
    run(data, layout, &l, kernel, schedule)
}

fn launch<'a>(k: &KernelLaunch, name: &str, schedule: Schedule) -> Launch<'a> {
    Launch::new(name)
        .grid(k.grid)
        .block(k.threads)
        .smem(k.smem_bytes as usize)
        .schedule(schedule)
}

fn run<T: KvElem + EmuElem, KV: KvElem + EmuElem>(
    data: &AttentionData<'_, T, KV>,
    layout: Layout,
    l: &AttentionLaunch,
    kernel: &str,
    schedule: Schedule,
) -> Result<Vec<T>, EmuError> {
    let hd = data.shape.head_dim;
    let mut out = vec![T::from_f32(f32::NAN); l.out_elems];
    let mut part_out = vec![f32::NAN; l.partial_elems * hd];
    let mut part_max = vec![f32::NAN; l.partial_elems];
    let mut part_sum = vec![f32::NAN; l.partial_elems];
    let common = launch(&l.attention, kernel, schedule)
        .buf_mut(&mut out)
        .buf_mut(&mut part_out)
        .buf_mut(&mut part_max)
        .buf_mut(&mut part_sum)
        .buf(data.q);
    let bound = match layout {
        Layout::Paged => common
            .buf(data.k)
            .buf(data.v)
            .buf(data.k_scale)
            .buf(data.v_scale)
            .buf(&data.table.entries)
            .buf(data.lens),
        Layout::Contiguous => common
            .buf(data.k_contiguous)
            .buf(data.v_contiguous)
            .buf(data.k_scale)
            .buf(data.v_scale)
            .buf(data.lens),
    };
    bound.scalars(&l.attention.scalars).run()?;
    if let Some(m) = &l.merge {
        launch(m, &m.kernel, schedule)
            .buf_mut(&mut out)
            .buf(&part_out)
            .buf(&part_max)
            .buf(&part_sum)
            .scalars(&m.scalars)
            .run()?;
    }
    Ok(out)
}
