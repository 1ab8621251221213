//! Launches the paged gather kernels (kernels/paged_gather.cu) on the GPU: the copy-out gather
//! and the read-only gather (partial sums, then the merge), with the same [`GatherPlan`] and
//! argument order as the emulated launchers in `emu::gather` (`launch::gather` states them).
//!
//! The pools are uploaded once ([`GatherPool`]); a table is uploaded per block size
//! ([`DeviceGather`]) after it is validated against the pool, so no launch reads outside it.

use super::driver::DeviceBuffer;
use super::{CudaDevice, DeviceError};
use crate::kv::{BlockTable, KvElem, KvSpec, TableError};
use crate::launch::gather::{GatherGeometry, GatherPlan, MERGE_THREADS};
use crate::launch::LaunchError;
use cudarc::driver::{DeviceRepr, LaunchConfig, ValidAsZeroBits};
use std::sync::atomic::{AtomicU64, Ordering};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum GatherError {
    #[error("gather pools: {0}")]
    Pool(String),
    #[error("gather block table: {0}")]
    Table(#[from] TableError),
    #[error("gather launch: {0}")]
    Geometry(#[from] LaunchError),
    #[error(transparent)]
    Device(#[from] DeviceError),
}

/// A launch of `grid` CTAs of `threads` threads (one-dimensional) with no dynamic shared memory.
fn launch_config(grid: (u32, u32, u32), threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: grid,
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(0);

/// K and V pools `[num_blocks, num_kv_heads, block_size, head_dim]` on the device. The same bytes
/// serve every block size: only the table's reading of them changes.
pub struct GatherPool<T> {
    id: u64,
    elems: usize,
    pub k: DeviceBuffer<T>,
    pub v: DeviceBuffer<T>,
}

impl<T> GatherPool<T> {
    pub fn elems(&self) -> usize {
        self.elems
    }
}

/// One block table on the device with its launch plan and output buffers.
pub struct DeviceGather<T> {
    pub plan: GatherPlan,
    pool_id: u64,
    table: DeviceBuffer<i32>,
    lens: DeviceBuffer<i32>,
    out_offsets: DeviceBuffer<i32>,
    /// `[num_kv_heads, total_tokens, head_dim]`
    pub copy_out: DeviceBuffer<T>,
    /// `[num_seqs, num_kv_heads, chunks]`
    partials: DeviceBuffer<f32>,
    /// `[num_seqs, num_kv_heads]`
    pub sums: DeviceBuffer<f32>,
}

impl CudaDevice {
    /// Uploads K and V pools of equal length.
    pub fn upload_gather_pool<T: KvElem + DeviceRepr>(
        &self,
        k: &[T],
        v: &[T],
    ) -> Result<GatherPool<T>, GatherError> {
        if k.len() != v.len() || k.is_empty() {
            return Err(GatherError::Pool(format!(
                "K holds {} elements and V {}: they must be equal and non-empty",
                k.len(),
                v.len()
            )));
        }
        Ok(GatherPool {
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            elems: k.len(),
            k: self.stream.upload("the gather's K pool", k)?,
            v: self.stream.upload("the gather's V pool", v)?,
        })
    }

    /// Uploads `table` for reading `pool` as `spec` describes it. Every entry a kernel will read
    /// is checked against the pool's blocks first (a typed error, never an out-of-bounds read).
    pub fn upload_gather<T: KvElem + DeviceRepr + ValidAsZeroBits>(
        &self,
        pool: &GatherPool<T>,
        spec: &KvSpec,
        table: &BlockTable,
        geometry: GatherGeometry,
    ) -> Result<DeviceGather<T>, GatherError> {
        if spec.dtype != T::DTYPE {
            return Err(GatherError::Pool(format!(
                "the spec says {}, the pool holds {}",
                spec.dtype,
                T::DTYPE
            )));
        }
        if table.block_size != spec.block_size {
            return Err(GatherError::Pool(format!(
                "the table has blocks of {} tokens, the spec {}",
                table.block_size, spec.block_size
            )));
        }
        let per_block = spec.elems_per_block();
        if !pool.elems.is_multiple_of(per_block) {
            return Err(GatherError::Pool(format!(
                "{} elements are not a whole number of {per_block}-element blocks",
                pool.elems
            )));
        }
        table.validate(pool.elems / per_block)?;
        // block_sum reduces whole warps.
        if !geometry.threads.is_multiple_of(32) {
            return Err(LaunchError::Geometry(format!(
                "{} threads per CTA: the read-only gather needs a multiple of 32",
                geometry.threads
            ))
            .into());
        }
        let plan = GatherPlan::new(spec, table, geometry)?;
        // A GPU grid's y (KV heads) and z (sequences) stop at 65535.
        if plan.grid.1 > 65_535 || plan.grid.2 > 65_535 {
            return Err(LaunchError::Geometry(format!(
                "grid {:?}: at most 65535 KV heads and 65535 sequences per launch",
                plan.grid
            ))
            .into());
        }
        let st = &self.stream;
        Ok(DeviceGather {
            pool_id: pool.id,
            table: st.upload("the gather's block table", &table.entries)?,
            lens: st.upload("the gather's sequence lengths", &table.lens)?,
            out_offsets: st.upload("the gather's output offsets", &plan.out_offsets)?,
            // At least one element each: empty device allocations are not portable.
            copy_out: st.alloc_zeros("the gathered K", plan.copy_elems.max(1))?,
            partials: st.alloc_zeros("the gather's partial sums", plan.partial_elems.max(1))?,
            sums: st.alloc_zeros("the gather's sums", plan.sum_elems.max(1))?,
            plan,
        })
    }

    /// Fills every output (copy-out, partials, sums) with NaN, so an element no kernel writes
    /// shows in the results.
    pub fn poison_gather<T>(&self, g: &mut DeviceGather<T>) -> Result<(), GatherError> {
        self.poison(&mut g.copy_out)?;
        self.poison(&mut g.partials)?;
        self.poison(&mut g.sums)?;
        Ok(())
    }

    fn poison<U>(&self, buf: &mut DeviceBuffer<U>) -> Result<(), GatherError> {
        Ok(self.stream.memset(buf, 0xFF)?)
    }

    fn check_pool<T>(pool: &GatherPool<T>, g: &DeviceGather<T>) -> Result<(), GatherError> {
        if pool.id == g.pool_id {
            Ok(())
        } else {
            Err(GatherError::Pool(
                "the table was validated against another pool".into(),
            ))
        }
    }

    /// Copy-out gather of the K pool into `g.copy_out`.
    pub fn launch_gather_copy<T: KvElem + DeviceRepr>(
        &self,
        pool: &GatherPool<T>,
        g: &mut DeviceGather<T>,
    ) -> Result<(), GatherError> {
        Self::check_pool(pool, g)?;
        let p = &g.plan;
        if p.chunks == 0 {
            return Ok(());
        }
        let name = format!("paged_gather_copy_{}", T::DTYPE.name());
        let f = self.function("paged_gather", &name)?;
        let cfg = launch_config(p.grid, p.threads);
        let scalars = p.copy_scalars();
        let mut b = f.launch(&self.stream);
        b.arg(&pool.k)
            .arg(&g.table)
            .arg(&g.lens)
            .arg(&g.out_offsets)
            .arg(&g.copy_out);
        for s in &scalars {
            b.arg(s);
        }
        // SAFETY: the arguments match paged_gather_copy's signature; the table was validated
        // against this pool at upload and copy_out holds plan.copy_elems elements.
        unsafe { b.launch(cfg)? };
        Ok(())
    }

    /// Read-only gather of K and V: per (sequence, KV head) sums into `g.sums`.
    pub fn launch_gather_sum<T: KvElem + DeviceRepr>(
        &self,
        pool: &GatherPool<T>,
        g: &mut DeviceGather<T>,
    ) -> Result<(), GatherError> {
        Self::check_pool(pool, g)?;
        let p = &g.plan;
        if p.sum_elems == 0 {
            return Ok(());
        }
        if p.chunks > 0 {
            let name = format!("paged_gather_sum_partial_{}", T::DTYPE.name());
            let f = self.function("paged_gather", &name)?;
            let cfg = launch_config(p.grid, p.threads);
            let scalars = p.sum_scalars();
            let mut b = f.launch(&self.stream);
            b.arg(&pool.k)
                .arg(&pool.v)
                .arg(&g.table)
                .arg(&g.lens)
                .arg(&g.partials);
            for s in &scalars {
                b.arg(s);
            }
            // SAFETY: as for the copy; partials holds num_seqs * num_kv_heads * chunks floats.
            unsafe { b.launch(cfg)? };
        }
        let f = self.function("paged_gather", "paged_gather_sum_merge")?;
        let cfg = launch_config((p.merge_grid, 1, 1), MERGE_THREADS);
        let scalars = p.merge_scalars();
        let mut b = f.launch(&self.stream);
        b.arg(&g.partials).arg(&g.lens).arg(&g.sums);
        for s in &scalars {
            b.arg(s);
        }
        // SAFETY: the merge reads chunks partials per (sequence, head) and writes sum_elems floats.
        unsafe { b.launch(cfg)? };
        Ok(())
    }
}
