//! The GPU bandwidth probe: the paged gather kernels (`device::cuda::gather`) and paged decode
//! attention (`launch_attention`) in device memory, next to the device's copy and read-only stream
//! limits (`memory_limits`), with the conventions of [`super::bandwidth`].
//!
//! - Pools: K and V of `pool_bytes / 2` each (rounded to whole blocks of the largest block size),
//!   random values, uploaded once; every block size reads the same bytes through its own shuffled
//!   table ([`shuffled_table`], the CPU probe's).
//! - Every figure comes from a checked kernel: before timing, each kernel runs once on poisoned
//!   (NaN) outputs and is compared with the CPU reference (copy-out bit for bit, the read-only sums
//!   and attention within a relative error); a mismatch is an error, never a figure.
//! - The stream limit reads raw 16-byte vectors (`kernels/stream.cu`): on a GPU the element
//!   conversion costs nothing measurable, so there is no separate raw-read limit.
//! - Contiguous attention (no block table) is measured once, on the first block size, as the
//!   baseline that shows what paging costs; it is reported in the notes.
//! - Times come from CUDA events ([`CudaDevice::time_ms`]), median of several runs after a warm-up.

use super::attention_probe::{check_finite, AttentionBatch};
use super::bandwidth::{BandwidthProbe, GatherRates, LimitSet, Limits, ProbeError, ProbeOptions};
use super::cpu_probe::{fill, shuffled_table};
use crate::attention::{relative_error, tolerance, Problem};
use crate::device::cpu::gather::{gather_copy, gather_sum};
use crate::device::cuda::gather::{GatherError, GatherPool};
use crate::device::cuda::{CudaDevice, DeviceProblem, Layout};
use crate::device::DeviceError;
use crate::kv::{Dtype, Fp8E4m3, Fp8E5m2, KvElem, KvSpec, MAX_BLOCK_SIZE};
use crate::launch::attention::check_instance;
use crate::launch::gather::GatherGeometry;
use crate::stats::median;
use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use half::{bf16, f16};
use std::any::Any;
use std::sync::Arc;

/// Element types the GPU kernels take.
pub trait GpuElem: KvElem + DeviceRepr + ValidAsZeroBits {}
impl<T: KvElem + DeviceRepr + ValidAsZeroBits> GpuElem for T {}

/// Largest relative error of the read-only sums against the CPU's (f32 sums in another order).
const SUM_TOLERANCE: f64 = 1e-3;

/// The pools on the host (for the reference) and on the device.
struct Pools<T: DeviceRepr> {
    k: Vec<T>,
    v: Vec<T>,
    dev: GatherPool<T>,
}

pub struct GpuProbe {
    dev: Arc<CudaDevice>,
    opts: ProbeOptions,
    /// `Pools<T>` of the dtype measured last.
    pools: Option<Box<dyn Any>>,
    notes: Vec<String>,
    baseline_done: bool,
}

/// A launch error inside a timed closure, which must return a [`DeviceError`].
fn as_device(e: GatherError) -> DeviceError {
    match e {
        GatherError::Device(d) => d,
        other => DeviceError::Invalid(other.to_string()),
    }
}

fn gbps(bytes: f64, ms: &[f64]) -> f64 {
    bytes / (median(ms) * 1e-3) / 1e9
}

impl GpuProbe {
    pub fn new(dev: Arc<CudaDevice>, opts: ProbeOptions) -> Self {
        GpuProbe {
            dev,
            opts,
            pools: None,
            notes: Vec::new(),
            baseline_done: false,
        }
    }

    /// Event-timed runs per figure: GPU runs are short, so more of them than on the CPU.
    fn iters(&self) -> usize {
        (self.opts.reps * 5).max(10)
    }

    /// One pool's bytes: half the probe's, as on the CPU.
    fn half_bytes(&self) -> usize {
        super::bandwidth::half_pool_bytes(self.opts.pool_bytes)
    }

    /// The pools for `spec`'s dtype and token size, uploaded on first use.
    fn pools<T: GpuElem>(&mut self, spec: &KvSpec) -> Result<&Pools<T>, ProbeError> {
        let per_run = spec.elems_per_token() * MAX_BLOCK_SIZE;
        let elems = self.half_bytes() / std::mem::size_of::<T>() / per_run * per_run;
        if elems == 0 {
            return Err(ProbeError::PoolTooSmall {
                pool_bytes: self.half_bytes(),
                block_bytes: per_run * std::mem::size_of::<T>(),
            });
        }
        let fits = self
            .pools
            .as_ref()
            .and_then(|p| p.downcast_ref::<Pools<T>>())
            .is_some_and(|p| p.k.len() == elems);
        if !fits {
            self.pools = None; // free the device memory before the next upload
            let mut k = vec![T::default(); elems];
            let mut v = vec![T::default(); elems];
            fill(&mut k, self.opts.seed);
            fill(&mut v, self.opts.seed + 1);
            let dev = self.dev.upload_gather_pool(&k, &v)?;
            self.pools = Some(Box::new(Pools { k, v, dev }));
        }
        Ok(self
            .pools
            .as_ref()
            .and_then(|p| p.downcast_ref::<Pools<T>>())
            .expect("just uploaded"))
    }

    fn measure_gather<T: GpuElem>(&mut self, spec: &KvSpec) -> Result<GatherRates, ProbeError> {
        let (seq_tokens, seed, iters) = (self.opts.seq_tokens, self.opts.seed, self.iters());
        let table = shuffled_table(spec, self.half_bytes(), seq_tokens, seed)?;
        let dev = self.dev.clone();
        let pools = self.pools::<T>(spec)?;
        let mut g = dev.upload_gather(&pools.dev, spec, &table, GatherGeometry::for_spec(spec))?;
        let (n_copy, n_sum) = (g.plan.copy_elems, g.plan.sum_elems);

        dev.poison_gather(&mut g)?;
        dev.launch_gather_copy(&pools.dev, &mut g)?;
        dev.launch_gather_sum(&pools.dev, &mut g)?;
        let copied = dev.download(&g.copy_out)?;
        let sums = dev.download(&g.sums)?;
        let mut want = vec![T::default(); n_copy];
        gather_copy(spec, &pools.k, &table, &mut want);
        let bits = |x: &[T]| bytemuck::cast_slice::<T, u8>(x).to_vec();
        if bits(&copied[..n_copy]) != bits(&want) {
            return Err(ProbeError::Check(format!(
                "GPU copy-out gather differs from the CPU's at block size {}",
                spec.block_size
            )));
        }
        let mut want_sums = vec![0f32; n_sum];
        gather_sum(spec, &pools.k, &pools.v, &table, &mut want_sums);
        let reference: Vec<f64> = want_sums.iter().map(|&x| x as f64).collect();
        let err = relative_error(&sums[..n_sum], &reference);
        let within = err <= SUM_TOLERANCE; // false for NaN too
        if !within {
            return Err(ProbeError::Check(format!(
                "GPU read-only gather at block size {}: relative error {err:.2e} against the CPU's",
                spec.block_size
            )));
        }

        let copy_ms = dev.time_ms(2, iters, || {
            dev.launch_gather_copy(&pools.dev, &mut g)
                .map_err(as_device)
        })?;
        let read_ms = dev.time_ms(2, iters, || {
            dev.launch_gather_sum(&pools.dev, &mut g).map_err(as_device)
        })?;
        // Copy-out: K read + written; read-only: K and V read.
        let bytes = (n_copy * std::mem::size_of::<T>()) as f64;
        Ok(GatherRates {
            copy_gbps: gbps(2.0 * bytes, &copy_ms),
            read_gbps: gbps(2.0 * bytes, &read_ms),
        })
    }

    /// Runs `layout` once on a poisoned output and compares it with the CPU implementation.
    fn check_attention<T: GpuElem, KV: GpuElem>(
        &self,
        p: &Problem<T, KV>,
        dp: &mut DeviceProblem<T, KV>,
        layout: Layout,
        reference: &[f64],
    ) -> Result<(), ProbeError> {
        self.dev.poison_output(dp)?;
        self.dev.launch_attention(dp, layout)?;
        let out = self.dev.download(&dp.out)?;
        check_finite(&out, &format!("GPU {layout:?} attention"))?;
        let err = relative_error(&out, reference);
        // Against the CPU implementation, both rounded to the dtype.
        let bound = tolerance(T::DTYPE);
        let within = err <= bound; // false for NaN too
        if !within {
            return Err(ProbeError::Check(format!(
                "GPU {layout:?} attention at block size {}: relative error {err:.2e} > {bound:.0e}",
                p.spec.block_size
            )));
        }
        Ok(())
    }

    /// Attention with q of `T`, K and V stored as `KV` (`spec.dtype`).
    fn measure_attention<T: GpuElem, KV: GpuElem>(
        &mut self,
        spec: &KvSpec,
        batch: &AttentionBatch,
    ) -> Result<Option<f64>, ProbeError> {
        let group = batch.num_heads / spec.num_kv_heads.max(1);
        if check_instance(T::DTYPE, KV::DTYPE, spec.head_dim, group).is_err() {
            let note = format!(
                "no GPU attention kernel for q {}, K/V {} head dim {} with {group} query heads per KV head: attention not measured",
                T::DTYPE,
                KV::DTYPE,
                spec.head_dim
            );
            if !self.notes.contains(&note) {
                self.notes.push(note);
            }
            return Ok(None);
        }
        let iters = self.iters();
        let dev = self.dev.clone();
        let p = batch.problem::<T, KV>(spec, self.opts.seed)?;
        let plan = dev.attention_plan(&p.data())?;
        let mut dp = dev.upload_attention(&p.data(), plan)?;
        let mut cpu_out = vec![T::from_f32(f32::NAN); p.q.len()];
        p.attend_cpu(Layout::Paged, &mut cpu_out);
        let reference: Vec<f64> = cpu_out.iter().map(|x| x.to_f32() as f64).collect();
        self.check_attention(&p, &mut dp, Layout::Paged, &reference)?;
        let paged_ms = dev.time_ms(3, iters, || dev.launch_attention(&mut dp, Layout::Paged))?;
        let kv = p.kv_bytes() as f64;
        let paged = gbps(kv, &paged_ms);
        if !self.baseline_done {
            self.check_attention(&p, &mut dp, Layout::Contiguous, &reference)?;
            let ms = dev.time_ms(3, iters, || {
                dev.launch_attention(&mut dp, Layout::Contiguous)
            })?;
            let contiguous = gbps(kv, &ms);
            let limits = dev.memory_limits(p.kv_bytes(), iters)?;
            self.notes.push(format!(
                "contiguous attention (the baseline, no block table; {}, {} split(s)): {contiguous:.0} GB/s = {:.3} of a read-only stream of {:.0} GB/s over the same bytes; paged at block size {}: {paged:.0} GB/s, paged / contiguous time {:.3}",
                batch.source,
                plan.num_partitions,
                contiguous / limits.stream_gbps,
                limits.stream_gbps,
                spec.block_size,
                contiguous / paged
            ));
            self.baseline_done = true;
        }
        Ok(Some(paged))
    }
}

impl BandwidthProbe for GpuProbe {
    fn device(&self) -> String {
        self.dev.info.name.clone()
    }

    fn memory(&self) -> String {
        "hbm".into()
    }

    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }

    fn limits(&mut self, _spec: &KvSpec, set: LimitSet) -> Result<Limits, ProbeError> {
        // One launch pair measures both (milliseconds on a GPU): the copy is dropped when not
        // asked for, so that no copy limit stands without a copy-out gather beside it.
        let l = self.dev.memory_limits(self.half_bytes(), self.iters())?;
        Ok(Limits {
            copy_gbps: (set == LimitSet::CopyAndStream).then_some(l.copy_gbps),
            stream_gbps: l.stream_gbps,
        })
    }

    fn gather(&mut self, spec: &KvSpec) -> Result<GatherRates, ProbeError> {
        match spec.dtype {
            Dtype::F16 => self.measure_gather::<f16>(spec),
            Dtype::Bf16 => self.measure_gather::<bf16>(spec),
            Dtype::F32 => self.measure_gather::<f32>(spec),
            Dtype::Fp8E4m3 => self.measure_gather::<Fp8E4m3>(spec),
            Dtype::Fp8E5m2 => self.measure_gather::<Fp8E5m2>(spec),
        }
    }

    fn attention_gbps(&mut self, spec: &KvSpec) -> Result<Option<f64>, ProbeError> {
        let Some(batch) = self.opts.attention.clone() else {
            return Ok(None);
        };
        match spec.dtype {
            Dtype::F16 => self.measure_attention::<f16, f16>(spec, &batch),
            Dtype::Bf16 => self.measure_attention::<bf16, bf16>(spec, &batch),
            Dtype::F32 => self.measure_attention::<f32, f32>(spec, &batch),
            // An fp8 cache is read with q in f16 (q is never quantised).
            Dtype::Fp8E4m3 => self.measure_attention::<f16, Fp8E4m3>(spec, &batch),
            Dtype::Fp8E5m2 => self.measure_attention::<f16, Fp8E5m2>(spec, &batch),
        }
    }
}
