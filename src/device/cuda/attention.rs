//! Launches the decode-attention kernels (kernels/paged_attention.cu, contiguous_attention.cu) as
//! `launch::attention` plans them: this file uploads the buffers and binds them, in the order of
//! the kernels' signatures (kernels/attention.cuh), to the plan's kernel, grid and scalars.

use super::driver::{DeviceBuffer, Function, Launch};
use super::{CudaDevice, DeviceError};
use crate::kv::KvElem;
use crate::launch::attention::{check_engine, dispatched, kernel_name, module, Engine};
use crate::launch::{split_plan, AttentionData, AttentionLaunch, KernelLaunch, Layout, Scalar};
use crate::launch::{LaunchError, SplitPlan};
use cudarc::driver::{DeviceRepr, LaunchConfig, ValidAsZeroBits};

impl From<LaunchError> for DeviceError {
    fn from(e: LaunchError) -> Self {
        DeviceError::Invalid(e.to_string())
    }
}

/// A problem's buffers on the device, and its two launches; the output is poisoned with NaN before
/// every checked launch.
pub struct DeviceProblem<T, KV = T> {
    pub plan: SplitPlan,
    /// What computes the products (both layouts run on the same engine).
    pub engine: Engine,
    paged: AttentionLaunch,
    contiguous: AttentionLaunch,
    q: DeviceBuffer<T>,
    k: DeviceBuffer<KV>,
    v: DeviceBuffer<KV>,
    k_contiguous: DeviceBuffer<KV>,
    v_contiguous: DeviceBuffer<KV>,
    k_scale: DeviceBuffer<f32>,
    v_scale: DeviceBuffer<f32>,
    table: DeviceBuffer<i32>,
    lens: DeviceBuffer<i32>,
    pub out: DeviceBuffer<T>,
    part_out: DeviceBuffer<f32>,
    part_max: DeviceBuffer<f32>,
    part_sum: DeviceBuffer<f32>,
}

impl CudaDevice {
    /// An attention kernel, opted in to the dynamic shared memory it needs (more than the 48 KiB a
    /// launch gets without asking). Done at upload, not per launch: a launch should cost nothing
    /// but the launch.
    pub fn attention_function(&self, launch: &KernelLaunch) -> Result<Function, DeviceError> {
        let f = self.function(launch.module, &launch.kernel)?;
        f.set_max_dynamic_shared(launch.smem_bytes)?;
        Ok(f)
    }

    /// The split-K plan for `data` on this GPU, from the driver's occupancy query for the kernel
    /// instance it runs (`launch::split` has the rule), on the engine dispatched for the shape.
    pub fn attention_plan<T: KvElem, KV: KvElem>(
        &self,
        data: &AttentionData<'_, T, KV>,
    ) -> Result<SplitPlan, DeviceError> {
        let s = &data.shape;
        let engine = dispatched(T::DTYPE, KV::DTYPE, s.head_dim, s.group());
        self.attention_plan_on(engine, data)
    }

    /// [`CudaDevice::attention_plan`] for the kernel of a chosen engine.
    pub fn attention_plan_on<T: KvElem, KV: KvElem>(
        &self,
        engine: Engine,
        data: &AttentionData<'_, T, KV>,
    ) -> Result<SplitPlan, DeviceError> {
        let s = &data.shape;
        check_engine(engine, T::DTYPE, KV::DTYPE, s.head_dim, s.group())?;
        let name = kernel_name(
            Layout::Paged,
            engine,
            T::DTYPE,
            KV::DTYPE,
            s.head_dim,
            s.group(),
        );
        let per_sm = self.occupancy(
            module(Layout::Paged, engine, KV::DTYPE),
            &name,
            crate::kernels::ATTENTION_THREADS,
            engine.smem_bytes(),
        )?;
        Ok(split_plan(
            data.lens.len(),
            s.num_kv_heads,
            data.max_len,
            self.info.multiprocessors.max(1) as usize,
            per_sm as usize,
        ))
    }

    /// Uploads a problem, its buffers checked against what the kernels read first (a GPU reads past
    /// a short buffer silently).
    pub fn upload_attention<T, KV>(
        &self,
        data: &AttentionData<'_, T, KV>,
        plan: SplitPlan,
    ) -> Result<DeviceProblem<T, KV>, DeviceError>
    where
        T: KvElem + DeviceRepr + ValidAsZeroBits,
        KV: KvElem + DeviceRepr,
    {
        let s = &data.shape;
        let engine = dispatched(T::DTYPE, KV::DTYPE, s.head_dim, s.group());
        self.upload_attention_on(engine, data, plan)
    }

    /// [`CudaDevice::upload_attention`] for the kernels of a chosen engine.
    pub fn upload_attention_on<T, KV>(
        &self,
        engine: Engine,
        data: &AttentionData<'_, T, KV>,
        plan: SplitPlan,
    ) -> Result<DeviceProblem<T, KV>, DeviceError>
    where
        T: KvElem + DeviceRepr + ValidAsZeroBits,
        KV: KvElem + DeviceRepr,
    {
        data.check_buffers()
            .map_err(|e| DeviceError::Invalid(e.to_string()))?;
        let on = |layout| AttentionLaunch::on(engine, T::DTYPE, KV::DTYPE, data, layout, plan);
        let (paged, contiguous) = (on(Layout::Paged)?, on(Layout::Contiguous)?);
        for l in [&paged, &contiguous] {
            self.attention_function(&l.attention)?;
        }
        let st = &self.stream;
        let partial = paged.partial_elems;
        Ok(DeviceProblem {
            plan,
            engine,
            q: st.upload("q", data.q)?,
            k: st.upload("the paged K pool", data.k)?,
            v: st.upload("the paged V pool", data.v)?,
            k_contiguous: st.upload("the contiguous K", data.k_contiguous)?,
            v_contiguous: st.upload("the contiguous V", data.v_contiguous)?,
            k_scale: st.upload("the K scales", data.k_scale)?,
            v_scale: st.upload("the V scales", data.v_scale)?,
            table: st.upload("the block table", &data.table.entries)?,
            lens: st.upload("the sequence lengths", data.lens)?,
            out: st.alloc_zeros("the attention output", paged.out_elems.max(1))?,
            part_out: st.alloc_zeros("the partial outputs", partial * data.shape.head_dim)?,
            part_max: st.alloc_zeros("the partial maxima", partial)?,
            part_sum: st.alloc_zeros("the partial sums", partial)?,
            paged,
            contiguous,
        })
    }

    /// Fills the output with NaN (all bits set), so an element the kernel misses shows.
    pub fn poison_output<T, KV>(&self, dp: &mut DeviceProblem<T, KV>) -> Result<(), DeviceError> {
        self.stream.memset(&mut dp.out, 0xFF)
    }

    /// Launches decode attention (and the merge when split) on the device stream.
    pub fn launch_attention<T: KvElem + DeviceRepr, KV: DeviceRepr>(
        &self,
        dp: &mut DeviceProblem<T, KV>,
        layout: Layout,
    ) -> Result<(), DeviceError> {
        let l = match layout {
            Layout::Paged => &dp.paged,
            Layout::Contiguous => &dp.contiguous,
        };
        let f = self.function(l.attention.module, &l.attention.kernel)?;
        let mut b = f.launch(&self.stream);
        b.arg(&dp.out)
            .arg(&dp.part_out)
            .arg(&dp.part_max)
            .arg(&dp.part_sum)
            .arg(&dp.q);
        match layout {
            Layout::Paged => b.arg(&dp.k).arg(&dp.v),
            Layout::Contiguous => b.arg(&dp.k_contiguous).arg(&dp.v_contiguous),
        };
        b.arg(&dp.k_scale).arg(&dp.v_scale);
        if layout == Layout::Paged {
            b.arg(&dp.table);
        }
        b.arg(&dp.lens);
        push_scalars(&mut b, &l.attention.scalars);
        // SAFETY: the buffers follow the kernel's signature (kernels/attention.cuh) and the plan
        // gives its scalars; the table was validated against the pool at upload and the outputs
        // hold the plan's sizes.
        unsafe { b.launch(config(&l.attention))? };
        if let Some(m) = &l.merge {
            let f = self.function(m.module, &m.kernel)?;
            let mut b = f.launch(&self.stream);
            b.arg(&dp.out)
                .arg(&dp.part_out)
                .arg(&dp.part_max)
                .arg(&dp.part_sum);
            push_scalars(&mut b, &m.scalars);
            // SAFETY: merge_partitions_*'s signature (kernels/attention.cuh); the partial buffers
            // hold the plan's num_seqs * num_heads * num_partitions entries.
            unsafe { b.launch(config(m))? };
        }
        Ok(())
    }

    pub fn download<T: DeviceRepr + Default + Clone>(
        &self,
        buf: &DeviceBuffer<T>,
    ) -> Result<Vec<T>, DeviceError> {
        self.stream.download(buf)
    }
}

fn config(k: &KernelLaunch) -> LaunchConfig {
    LaunchConfig {
        grid_dim: k.grid,
        block_dim: (k.threads, 1, 1),
        shared_mem_bytes: k.smem_bytes,
    }
}

fn push_scalars<'a>(b: &mut Launch<'a>, scalars: &'a [Scalar]) {
    for s in scalars {
        match s {
            Scalar::I32(v) => b.arg(v),
            Scalar::F32(v) => b.arg(v),
        };
    }
}
