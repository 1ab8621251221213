//! The paged gather kernels of `kernels/paged_gather.cu` run on the emulator, bound to the same
//! [`GatherPlan`] the CUDA launcher uses (`launch::gather`). The CPU reference is
//! [`crate::device::cpu::gather`].

use super::{EmuElem, EmuError, Launch, Schedule};
use crate::kv::{BlockTable, KvElem, KvSpec};
use crate::launch::gather::{GatherGeometry, GatherPlan, MERGE_THREADS};
use crate::launch::LaunchError;

fn invalid(e: LaunchError) -> EmuError {
    EmuError::InvalidLaunch(e.to_string())
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
        .i32s(&plan.copy_scalars())
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
            .i32s(&plan.sum_scalars())
            .run()?;
    }
    Launch::new("paged_gather_sum_merge")
        .grid(plan.merge_grid)
        .block(MERGE_THREADS)
        .schedule(schedule)
        .buf(&partials)
        .buf(&table.lens)
        .buf_mut(out)
        .i32s(&plan.merge_scalars())
        .run()
}
