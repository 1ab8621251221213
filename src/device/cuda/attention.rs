//! Launches the decode-attention kernels (kernels/paged_attention.cu, contiguous_attention.cu).
//!
//! The instance is chosen by name from (dtype, head dim, group): every block size shares one
//! instance, since block size only changes a shift and a mask in the addressing. Arguments go in
//! the order of the kernels' signatures, stated in kernels/attention.cuh.

use super::{CudaDevice, DeviceError};
use crate::attention::{split_plan, Problem, SplitPlan};
use crate::kernels::{ATTENTION_SMEM_BYTES, ATTENTION_THREADS};
use crate::kv::KvElem;
use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{
    CudaFunction, CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits,
};

/// Head dims and groups the kernels are instantiated for (kernels/attention.cuh).
pub fn instance_exists(dtype: &str, head_dim: usize, group: usize) -> bool {
    let dims: &[usize] = if dtype == "f32" {
        &[128]
    } else {
        &[64, 128, 256]
    };
    dims.contains(&head_dim) && [1, 2, 4, 8].contains(&group)
}

fn check_instance(dtype: &str, head_dim: usize, group: usize) -> Result<(), DeviceError> {
    if instance_exists(dtype, head_dim, group) {
        return Ok(());
    }
    Err(DeviceError::Invalid(format!(
        "no attention kernel for {dtype} head dim {head_dim} with {group} query heads per KV head \
         (built: f16/bf16 head dims 64, 128, 256, f32 head dim 128; groups 1, 2, 4, 8)"
    )))
}

/// A problem's buffers on the device, outputs poisoned with NaN before every launch.
pub struct DeviceProblem<T: DeviceRepr> {
    pub plan: SplitPlan,
    num_seqs: usize,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
    group: usize,
    scale: f32,
    table_stride: i32,
    log2_block_size: i32,
    max_len: i32,
    q: CudaSlice<T>,
    k: CudaSlice<T>,
    v: CudaSlice<T>,
    k_contiguous: CudaSlice<T>,
    v_contiguous: CudaSlice<T>,
    table: CudaSlice<i32>,
    lens: CudaSlice<i32>,
    pub out: CudaSlice<T>,
    part_out: CudaSlice<f32>,
    part_max: CudaSlice<f32>,
    part_sum: CudaSlice<f32>,
}

/// Which cache the kernel reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Paged,
    Contiguous,
}

impl CudaDevice {
    /// An attention kernel, opted in to the dynamic shared memory it needs (more than the 48 KiB a
    /// launch gets without asking). Done at upload, not per launch: a launch should cost nothing
    /// but the launch.
    pub fn attention_function(
        &self,
        module: &'static str,
        name: &str,
    ) -> Result<CudaFunction, DeviceError> {
        let f = self.function(module, name)?;
        self.ctx.bind_to_thread()?;
        f.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            ATTENTION_SMEM_BYTES as i32,
        )?;
        Ok(f)
    }

    /// The split-K plan for a problem on this GPU, from the driver's occupancy query for the
    /// kernel instance the problem runs (src/attention/split.rs has the rule).
    pub fn attention_plan<T: KvElem>(&self, p: &Problem<T>) -> Result<SplitPlan, DeviceError> {
        let s = &p.shape;
        let group = s.num_heads / s.num_kv_heads;
        check_instance(T::DTYPE.name(), s.head_dim, group)?;
        let name = format!(
            "paged_attention_{}_d{}_g{group}",
            T::DTYPE.name(),
            s.head_dim
        );
        let f = self.attention_function("paged_attention", &name)?;
        // The driver call works on the current context: attention_function made it current.
        let per_sm = f.occupancy_max_active_blocks_per_multiprocessor(
            ATTENTION_THREADS,
            ATTENTION_SMEM_BYTES as usize,
            None,
        )?;
        Ok(split_plan(
            p.lens.len(),
            s.num_kv_heads,
            p.max_len,
            self.info.multiprocessors.max(1) as usize,
            per_sm as usize,
        ))
    }

    /// Uploads a problem; the block table is validated against the pool first.
    pub fn upload_attention<T: KvElem + DeviceRepr + ValidAsZeroBits>(
        &self,
        p: &Problem<T>,
        plan: SplitPlan,
    ) -> Result<DeviceProblem<T>, DeviceError> {
        p.table
            .validate(p.num_blocks)
            .map_err(|e| DeviceError::Invalid(e.to_string()))?;
        let s = &p.shape;
        let group = s.num_heads / s.num_kv_heads;
        let dtype = T::DTYPE.name();
        check_instance(dtype, s.head_dim, group)?;
        for layout in ["paged", "contiguous"] {
            let name = format!("{layout}_attention_{dtype}_d{}_g{group}", s.head_dim);
            let module = if layout == "paged" {
                "paged_attention"
            } else {
                "contiguous_attention"
            };
            self.attention_function(module, &name)?;
        }
        // Sequences and partitions are grid rows (y) and layers (z): at most 65,535 each.
        if p.lens.len() > 65_535 || plan.num_partitions > 65_535 {
            return Err(DeviceError::Invalid(format!(
                "{} sequences in {} partitions: the GPU launch takes at most 65535 of each",
                p.lens.len(),
                plan.num_partitions
            )));
        }
        let st = &self.stream;
        let parts = plan.num_partitions;
        let part_elems = if parts > 1 {
            p.lens.len() * s.num_heads * parts
        } else {
            1
        };
        Ok(DeviceProblem {
            plan,
            num_seqs: p.lens.len(),
            num_heads: s.num_heads,
            num_kv_heads: s.num_kv_heads,
            head_dim: s.head_dim,
            group,
            scale: s.scale,
            table_stride: p.table.stride as i32,
            log2_block_size: p.spec.block_size.trailing_zeros() as i32,
            max_len: p.max_len as i32,
            q: st.clone_htod(&p.q)?,
            k: st.clone_htod(&p.k)?,
            v: st.clone_htod(&p.v)?,
            k_contiguous: st.clone_htod(&p.k_contiguous)?,
            v_contiguous: st.clone_htod(&p.v_contiguous)?,
            table: st.clone_htod(&p.table.entries)?,
            lens: st.clone_htod(&p.lens)?,
            out: st.alloc_zeros(p.q.len())?,
            part_out: st.alloc_zeros(part_elems * s.head_dim)?,
            part_max: st.alloc_zeros(part_elems)?,
            part_sum: st.alloc_zeros(part_elems)?,
        })
    }

    /// Fills the output with NaN (all bits set), so an element the kernel misses shows.
    pub fn poison_output<T: DeviceRepr>(
        &self,
        dp: &mut DeviceProblem<T>,
    ) -> Result<(), DeviceError> {
        use cudarc::driver::DevicePtrMut;
        let bytes = dp.out.num_bytes();
        self.ctx.bind_to_thread()?;
        let (ptr, _sync) = dp.out.device_ptr_mut(&self.stream);
        // SAFETY: ptr covers `bytes` bytes of a live allocation, written on this stream.
        unsafe {
            cudarc::driver::result::memset_d8_async(ptr, 0xFF, bytes, self.stream.cu_stream())?
        };
        Ok(())
    }

    /// Launches decode attention (and the merge when split) on the device stream.
    pub fn launch_attention<T: KvElem + DeviceRepr>(
        &self,
        dp: &mut DeviceProblem<T>,
        layout: Layout,
    ) -> Result<(), DeviceError> {
        let dtype = T::DTYPE.name();
        let parts = dp.plan.num_partitions as i32;
        let psize = dp.plan.partition_size as i32;
        let cfg = LaunchConfig {
            grid_dim: (dp.num_kv_heads as u32, dp.num_seqs as u32, parts as u32),
            block_dim: (ATTENTION_THREADS, 1, 1),
            shared_mem_bytes: ATTENTION_SMEM_BYTES,
        };
        let (hd, g) = (dp.head_dim, dp.group);
        match layout {
            Layout::Paged => {
                let f = self.function(
                    "paged_attention",
                    &format!("paged_attention_{dtype}_d{hd}_g{g}"),
                )?;
                let mut b = self.stream.launch_builder(&f);
                b.arg(&mut dp.out)
                    .arg(&mut dp.part_out)
                    .arg(&mut dp.part_max)
                    .arg(&mut dp.part_sum)
                    .arg(&dp.q)
                    .arg(&dp.k)
                    .arg(&dp.v)
                    .arg(&dp.table)
                    .arg(&dp.lens)
                    .arg(&dp.table_stride)
                    .arg(&dp.log2_block_size)
                    .arg(&parts)
                    .arg(&psize)
                    .arg(&dp.scale);
                // SAFETY: the argument list matches paged_attention_*'s signature
                // (kernels/attention.cuh); the table was validated against the pool at upload.
                unsafe { b.launch(cfg)? };
            }
            Layout::Contiguous => {
                let name = format!("contiguous_attention_{dtype}_d{hd}_g{g}");
                let f = self.function("contiguous_attention", &name)?;
                let mut b = self.stream.launch_builder(&f);
                b.arg(&mut dp.out)
                    .arg(&mut dp.part_out)
                    .arg(&mut dp.part_max)
                    .arg(&mut dp.part_sum)
                    .arg(&dp.q)
                    .arg(&dp.k_contiguous)
                    .arg(&dp.v_contiguous)
                    .arg(&dp.lens)
                    .arg(&dp.max_len)
                    .arg(&parts)
                    .arg(&psize)
                    .arg(&dp.scale);
                // SAFETY: the argument list matches contiguous_attention_*'s signature
                // (kernels/contiguous_attention.cu).
                unsafe { b.launch(cfg)? };
            }
        }
        if parts > 1 {
            let f = self.function(
                "paged_attention",
                &format!("merge_partitions_{dtype}_d{hd}"),
            )?;
            let cfg = LaunchConfig {
                grid_dim: (dp.num_heads as u32, dp.num_seqs as u32, 1),
                block_dim: (128, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = self.stream.launch_builder(&f);
            b.arg(&mut dp.out)
                .arg(&dp.part_out)
                .arg(&dp.part_max)
                .arg(&dp.part_sum)
                .arg(&parts);
            // SAFETY: the argument list matches merge_partitions_*'s signature
            // (kernels/attention.cuh); the partial buffers hold num_seqs * num_heads * parts
            // entries.
            unsafe { b.launch(cfg)? };
        }
        Ok(())
    }

    pub fn download<T: DeviceRepr + Default + Clone>(
        &self,
        buf: &CudaSlice<T>,
    ) -> Result<Vec<T>, DeviceError> {
        Ok(self.stream.clone_dtoh(buf)?)
    }
}
