//! The cache operations (kernels/cache_ops.cu) on the emulator, bound to the same plans the CUDA
//! launchers use (`launch::cache_ops`), with the same checks before anything runs.

use super::{EmuElem, EmuError, Launch};
use crate::kv::{KvElem, KvSpec};
use crate::launch::cache_ops::{check_pairs, check_slots, BlockCopies, SlotWrites};

fn invalid(e: impl std::fmt::Display) -> EmuError {
    EmuError::InvalidLaunch(e.to_string())
}

/// Writes token `i`'s K and V (`[num_tokens, num_kv_heads, head_dim]`) into slot `slots[i]` of the
/// pools (negative slots skipped), as `write_kv_slots_*` does on a GPU.
pub fn write_kv_slots<T: KvElem + EmuElem>(
    spec: &KvSpec,
    k_cache: &mut [T],
    v_cache: &mut [T],
    k_new: &[T],
    v_new: &[T],
    slots: &[i64],
) -> Result<(), EmuError> {
    slot_writes(spec, (k_cache, v_cache), (k_new, v_new), slots, None)
}

/// [`write_kv_slots`] into fp8 pools (`KV`) from new K/V of `T`, quantised with per-KV-head scales
/// (`quantize_kv_slots_*`).
#[allow(clippy::too_many_arguments)]
pub fn quantize_kv_slots<T: KvElem + EmuElem, KV: KvElem + EmuElem>(
    spec: &KvSpec,
    k_cache: &mut [KV],
    v_cache: &mut [KV],
    k_new: &[T],
    v_new: &[T],
    slots: &[i64],
    k_scale: &[f32],
    v_scale: &[f32],
) -> Result<(), EmuError> {
    let scales = Some((k_scale, v_scale));
    slot_writes(spec, (k_cache, v_cache), (k_new, v_new), slots, scales)
}

/// Both slot writes: the plan names the kernel from the pool's dtype and `T`; the scales follow
/// the slots when quantising.
fn slot_writes<T: KvElem + EmuElem, KV: KvElem + EmuElem>(
    spec: &KvSpec,
    (k_cache, v_cache): (&mut [KV], &mut [KV]),
    (k_new, v_new): (&[T], &[T]),
    slots: &[i64],
    scales: Option<(&[f32], &[f32])>,
) -> Result<(), EmuError> {
    check_slots(spec, k_cache.len() / spec.elems_per_block(), slots).map_err(invalid)?;
    if slots.is_empty() {
        return Ok(());
    }
    let plan = SlotWrites::new(spec, T::DTYPE, slots.len()).map_err(invalid)?;
    let mut launch = Launch::new(&plan.kernel)
        .grid(plan.grid)
        .block(plan.threads)
        .buf_mut(k_cache)
        .buf_mut(v_cache)
        .buf(k_new)
        .buf(v_new)
        .buf(slots);
    if let Some((k_scale, v_scale)) = scales {
        launch = launch.buf(k_scale).buf(v_scale);
    }
    launch.i32s(&plan.scalars).run()
}

/// Copies block `pairs[i][0]` of `src` to block `pairs[i][1]` of `dst` (blocks of `block_bytes`),
/// as `copy_blocks` does on a GPU, one launch per 65,535 pairs.
pub fn copy_blocks(
    block_bytes: usize,
    src: &[u8],
    dst: &mut [u8],
    pairs: &[[i32; 2]],
) -> Result<(), EmuError> {
    let plan = BlockCopies::new(block_bytes, pairs.len()).map_err(invalid)?;
    check_pairs(pairs, src.len() / block_bytes, dst.len() / block_bytes).map_err(invalid)?;
    for range in &plan.launches {
        let flat: Vec<i32> = pairs[range.clone()].iter().flatten().copied().collect();
        Launch::new("copy_blocks")
            .grid((plan.ctas_per_block, range.len() as u32))
            .block(plan.threads)
            .buf_mut(dst)
            .buf(src)
            .buf(&flat)
            .i64(plan.block_vecs)
            .run()?;
    }
    Ok(())
}
