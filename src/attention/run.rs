//! Runs one problem on a device: paged and contiguous, each checked against the oracle, timed,
//! and reported as bandwidth and as a fraction of the limits measured over the same bytes.

use super::problem::{describe, host_bytes};
use super::roofline::{attention_lane_fmas, in_cache_secs_per_token, ReadTimes, Roofline};
use super::{
    attention_f64, attention_f64_exact, relative_error, AttentionShape, Problem, ProblemError,
    ProblemOptions, SplitPlan,
};
use crate::device::cpu::fma::FmaLimit;
use crate::device::{cpu, Device, DeviceError, Limits};
use crate::host_memory::{self, TooLarge};
use crate::kv::{Dtype, Fp8E4m3, Fp8E5m2, KvElem};
use crate::launch::attention::{dispatched, has_instance};
use crate::launch::{Engine, Layout};
use crate::progress::{phase, Progress};
use crate::stats::median;
use crate::timing::timed;
use half::{bf16, f16};
use serde::Serialize;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RunError {
    #[error(transparent)]
    Problem(#[from] ProblemError),
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("memory-limit buffer: {0}")]
    Memory(#[from] std::io::Error),
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
    #[error(transparent)]
    InCache(#[from] super::roofline::InCacheError),
    #[error(
        "q in {0} with K and V in {1}: K/V are stored as q is, or in fp8 with q in f16 or bf16"
    )]
    Dtypes(Dtype, Dtype),
}

#[derive(Debug, Clone, Copy)]
pub struct MeasureOptions {
    pub iters: usize,
    /// Compare with the f64 oracle (slow for very large problems).
    pub check: bool,
    /// Which GPU kernels run (the CPU runs its reference implementation whatever this says).
    pub engines: EngineChoice,
}

/// Which decode-attention kernels a GPU run times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineChoice {
    /// The kernel the launchers dispatch for the shape.
    Auto,
    CudaCores,
    TensorCores,
    /// The dispatched kernel, then the other engine's when the shape has one on both.
    Both,
}

impl EngineChoice {
    /// The engines to run for a shape, the reported one first; an engine without a kernel for the
    /// shape is an error when asked for by name.
    fn engines(self, dtype: Dtype, kv: Dtype, head_dim: usize, group: usize) -> Vec<Engine> {
        let first = dispatched(dtype, kv, head_dim, group);
        let other = match first {
            Engine::CudaCores => Engine::TensorCores,
            Engine::TensorCores => Engine::CudaCores,
        };
        match self {
            EngineChoice::Auto => vec![first],
            EngineChoice::CudaCores => vec![Engine::CudaCores],
            EngineChoice::TensorCores => vec![Engine::TensorCores],
            EngineChoice::Both if has_instance(other, dtype, kv, head_dim, group) => {
                vec![first, other]
            }
            EngineChoice::Both => vec![first],
        }
    }
}

/// One more engine's kernels on the same problem (`EngineChoice::Both`), against the same limits.
#[derive(Debug, Clone, Serialize)]
pub struct EngineFigures {
    pub engine: Engine,
    pub paged_us: f64,
    pub contiguous_us: f64,
    pub paged_gbps: f64,
    pub paged_frac_of_stream: f64,
    /// Against the f64 oracle (NaN when not checked).
    pub paged_rel_error: f64,
    pub contiguous_rel_error: f64,
}

/// One problem measured, by concern; each group is flattened, so the JSON is one flat object in
/// this order.
#[derive(Debug, Clone, Serialize)]
pub struct AttentionReport {
    pub device: String,
    /// The GPU kernels' engine (None on the CPU, which runs its reference implementation).
    pub engine: Option<Engine>,
    /// The other engine on the same problem, when asked for and built for the shape.
    pub other_engines: Vec<EngineFigures>,
    /// Run on the emulated CUDA driver: the times are the CPU's, not a GPU's.
    pub emulated: bool,
    #[serde(flatten)]
    pub storage: KvStorage,
    #[serde(flatten)]
    pub shape: ProblemShape,
    #[serde(flatten)]
    pub accuracy: Accuracy,
    #[serde(flatten)]
    pub speed: Speed,
    /// The CPU's roofline: K and V at the stream limit, the FMAs at the FMA limit measured in
    /// the same run (None on a GPU).
    pub roofline: Option<Roofline>,
}

/// How q and the KV cache are stored.
#[derive(Debug, Clone, Serialize)]
pub struct KvStorage {
    /// q and the output.
    pub dtype: Dtype,
    /// How K and V are stored: `dtype`, or fp8 with the scales below.
    pub kv_dtype: Dtype,
    /// `[num_kv_heads]`: K = stored * k_scale (1 unless fp8).
    pub k_scale: Vec<f32>,
    pub v_scale: Vec<f32>,
    /// For an fp8 cache: the paged output's relative error against the oracle over K and V
    /// before quantisation (the accuracy fp8 costs); NaN otherwise or when not checked.
    pub quantised_rel_error: f64,
}

/// The problem and how the kernels split it.
#[derive(Debug, Clone, Serialize)]
pub struct ProblemShape {
    pub batch: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
    pub max_context: usize,
    pub total_tokens: usize,
    pub partitions: usize,
    pub partition_size: usize,
    /// Copies of the problem the timed runs took turns over, so that small problems are read from
    /// memory, not from the L2 cache (GPU; 1 on the CPU).
    pub copies_rotated: usize,
}

/// The outputs against the f64 oracle.
#[derive(Debug, Clone, Serialize)]
pub struct Accuracy {
    /// Whether the outputs were compared with the f64 oracle (`--no-check` skips it).
    pub checked: bool,
    /// Worst of the paged and contiguous errors against the f64 oracle (NaN when not checked).
    pub max_rel_error: f64,
    pub paged_rel_error: f64,
    pub contiguous_rel_error: f64,
}

/// Times, and the rates they give against the limits measured in the same run.
#[derive(Debug, Clone, Serialize)]
pub struct Speed {
    pub paged_us: f64,
    pub contiguous_us: f64,
    pub kv_bytes: usize,
    pub paged_gbps: f64,
    pub contiguous_gbps: f64,
    pub copy_gbps: f64,
    pub stream_gbps: f64,
    pub paged_frac_of_stream: f64,
    pub paged_frac_of_copy: f64,
    pub contiguous_frac_of_stream: f64,
    /// Paged time over contiguous time: what paging costs.
    pub paged_over_contiguous: f64,
}

/// A problem whose element types are chosen at run time: q of `q_dtype`, K/V stored as
/// `kv_dtype` (the same, or fp8 with q in f16 or bf16), one sequence per entry of `lens`.
#[derive(Debug, Clone, Copy)]
pub struct DtypeProblem<'a> {
    pub q_dtype: Dtype,
    pub kv_dtype: Dtype,
    pub shape: AttentionShape,
    pub block_size: usize,
    pub lens: &'a [usize],
    pub seed: u64,
    pub options: ProblemOptions,
}

/// Draws and measures `problem`.
pub fn measure_dtype(
    device: &Device,
    problem: &DtypeProblem<'_>,
    opts: MeasureOptions,
    progress: &dyn Progress,
) -> Result<AttentionReport, RunError> {
    let DtypeProblem {
        q_dtype,
        kv_dtype,
        shape,
        block_size,
        lens,
        seed,
        options,
    } = *problem;
    ensure_fits(device, problem)?;
    macro_rules! run {
        ($t:ty, $kv:ty) => {{
            let p = phase(progress, "attention: drawing K and V", 0, || {
                Problem::<$t, $kv>::with_options(shape, block_size, lens, seed, options)
            })?;
            measure(device, &p, opts, progress)
        }};
    }
    match (q_dtype, kv_dtype) {
        (Dtype::F16, Dtype::F16) => run!(f16, f16),
        (Dtype::Bf16, Dtype::Bf16) => run!(bf16, bf16),
        (Dtype::F32, Dtype::F32) => run!(f32, f32),
        (Dtype::F16, Dtype::Fp8E4m3) => run!(f16, Fp8E4m3),
        (Dtype::F16, Dtype::Fp8E5m2) => run!(f16, Fp8E5m2),
        (Dtype::Bf16, Dtype::Fp8E4m3) => run!(bf16, Fp8E4m3),
        (Dtype::Bf16, Dtype::Fp8E5m2) => run!(bf16, Fp8E5m2),
        (q, kv) => Err(RunError::Dtypes(q, kv)),
    }
}

/// Refuses, before anything is allocated, a problem whose host memory exceeds what is available:
/// the problem itself and, on the CPU, the memory limits' buffer over as many bytes as it reads.
fn ensure_fits(device: &Device, problem: &DtypeProblem<'_>) -> Result<(), TooLarge> {
    let DtypeProblem {
        kv_dtype,
        shape,
        block_size,
        lens,
        options,
        ..
    } = *problem;
    let tokens = lens.iter().fold(0usize, |n, &l| n.saturating_add(l));
    let read = host_memory::elems_bytes(tokens, shape.num_kv_heads * shape.head_dim)
        .saturating_mul(2 * kv_dtype.bytes() as u64);
    let limits = match device {
        Device::Cpu => cpu::stream::limit_bytes(usize::try_from(read).unwrap_or(usize::MAX)) as u64,
        Device::Cuda(_) => 0,
    };
    let need = host_bytes(shape, block_size, lens, kv_dtype, options).saturating_add(limits);
    host_memory::ensure_fits(need, &describe(lens, "attention"))
}

struct Timed<T> {
    engine: Option<Engine>,
    paged_s: f64,
    contiguous_s: f64,
    paged_out: Vec<T>,
    contiguous_out: Vec<T>,
    limits: Limits,
    /// The CPU's FMA limit, the paged kernel's seconds per token with K and V in cache and the
    /// two layouts' read times, measured beside `limits` (None on a GPU).
    compute: Option<(FmaLimit, f64, ReadTimes)>,
    plan: SplitPlan,
    copies: usize,
    /// Further engines on the same problem.
    others: Vec<EngineRun<T>>,
}

/// One engine's kernels timed on the GPU: (median seconds, output) of each layout.
struct EngineRun<T> {
    engine: Engine,
    paged: (f64, Vec<T>),
    contiguous: (f64, Vec<T>),
}

pub fn measure<T, KV>(
    device: &Device,
    p: &Problem<T, KV>,
    opts: MeasureOptions,
    progress: &dyn Progress,
) -> Result<AttentionReport, RunError>
where
    T: KvElem + cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits,
    KV: KvElem + cudarc::driver::DeviceRepr,
{
    let timed = match device {
        Device::Cpu => run_cpu(p, opts, progress)?,
        Device::Cuda(dev) => phase(progress, "attention: timing on the GPU", 0, || {
            run_cuda(dev, p, opts)
        })?,
    };
    let reference = opts.check.then(|| {
        phase(
            progress,
            "attention: checking against the f64 oracle",
            0,
            || attention_f64(p),
        )
    });
    let error = |out: &[T]| {
        reference
            .as_ref()
            .map_or(f64::NAN, |r| relative_error(out, r))
    };
    let (paged_err, contiguous_err) = (error(&timed.paged_out), error(&timed.contiguous_out));
    let quantised_err = if opts.check {
        attention_f64_exact(p).map_or(f64::NAN, |exact| relative_error(&timed.paged_out, &exact))
    } else {
        f64::NAN
    };
    let kv = p.kv_bytes() as f64;
    let other_engines = timed
        .others
        .iter()
        .map(|r| EngineFigures {
            engine: r.engine,
            paged_us: r.paged.0 * 1e6,
            contiguous_us: r.contiguous.0 * 1e6,
            paged_gbps: kv / r.paged.0 / 1e9,
            paged_frac_of_stream: kv / r.paged.0 / 1e9 / timed.limits.stream_gbps,
            paged_rel_error: error(&r.paged.1),
            contiguous_rel_error: error(&r.contiguous.1),
        })
        .collect();
    let paged_gbps = kv / timed.paged_s / 1e9;
    let contiguous_gbps = kv / timed.contiguous_s / 1e9;
    let total_tokens = p.lens.iter().map(|&l| l as usize).sum();
    let roofline = timed.compute.map(|(fma, token_s, reads)| {
        let fmas = attention_lane_fmas(total_tokens, p.shape.num_heads, p.shape.head_dim);
        let in_cache_us = token_s * total_tokens as f64 * 1e6;
        let stream = timed.limits.stream_gbps;
        Roofline::new(
            kv,
            stream,
            fmas,
            fma,
            in_cache_us,
            reads,
            timed.paged_s * 1e6,
        )
    });
    let limits = timed.limits;
    Ok(AttentionReport {
        device: device.name(),
        engine: timed.engine,
        other_engines,
        emulated: device.is_emulated(),
        storage: KvStorage {
            dtype: T::DTYPE,
            kv_dtype: KV::DTYPE,
            k_scale: p.k_scale.clone(),
            v_scale: p.v_scale.clone(),
            quantised_rel_error: quantised_err,
        },
        shape: ProblemShape {
            batch: p.lens.len(),
            num_heads: p.shape.num_heads,
            num_kv_heads: p.shape.num_kv_heads,
            head_dim: p.shape.head_dim,
            block_size: p.spec.block_size,
            max_context: p.max_len,
            total_tokens,
            partitions: timed.plan.num_partitions,
            partition_size: timed.plan.partition_size,
            copies_rotated: timed.copies,
        },
        accuracy: Accuracy {
            checked: opts.check,
            max_rel_error: paged_err.max(contiguous_err),
            paged_rel_error: paged_err,
            contiguous_rel_error: contiguous_err,
        },
        speed: Speed {
            paged_us: timed.paged_s * 1e6,
            contiguous_us: timed.contiguous_s * 1e6,
            kv_bytes: p.kv_bytes(),
            paged_gbps,
            contiguous_gbps,
            copy_gbps: limits.copy_gbps,
            stream_gbps: limits.stream_gbps,
            paged_frac_of_stream: paged_gbps / limits.stream_gbps,
            paged_frac_of_copy: paged_gbps / limits.copy_gbps,
            contiguous_frac_of_stream: contiguous_gbps / limits.stream_gbps,
            paged_over_contiguous: timed.paged_s / timed.contiguous_s,
        },
        roofline,
    })
}

fn run_cpu<T: KvElem, KV: KvElem>(
    p: &Problem<T, KV>,
    opts: MeasureOptions,
    progress: &dyn Progress,
) -> Result<Timed<T>, RunError> {
    let nan = T::from_f32(f32::NAN);
    let mut paged_out = vec![nan; p.q.len()];
    let mut contiguous_out = vec![nan; p.q.len()];
    let iters = opts.iters.max(1);
    let [paged_s, contiguous_s] = phase(
        progress,
        "attention: paged and contiguous runs, in turns",
        2 * (1 + iters) as u64,
        || {
            medians_in_turns(
                iters,
                [
                    &mut || p.attend_cpu(Layout::Paged, &mut paged_out),
                    &mut || p.attend_cpu(Layout::Contiguous, &mut contiguous_out),
                ],
                &|| progress.advance(1),
            )
        },
    );
    let limits = phase(
        progress,
        "attention: measuring the memory limits",
        0,
        || cpu::stream::memory_limits(p.kv_bytes(), opts.iters),
    )?;
    let fma = phase(progress, "attention: measuring the FMA limit", 0, || {
        cpu::fma::fma_limit(cpu::stream::MIN_PASSES)
    });
    let in_cache = phase(
        progress,
        "attention: the kernel with K and V in cache",
        0,
        || in_cache_secs_per_token(p, cpu::stream::MIN_PASSES),
    )?;
    let reads = phase(
        progress,
        "attention: K and V read in the kernel's order, paged and contiguous in turns",
        0,
        || read_times(p, iters),
    );
    Ok(Timed {
        engine: None,
        paged_s,
        contiguous_s,
        paged_out,
        contiguous_out,
        limits,
        compute: Some((fma, in_cache, reads)),
        // The CPU splits every sequence into partitions of a fixed size (one rayon task each).
        plan: SplitPlan {
            num_partitions: p.max_len.div_ceil(cpu::attention::PARTITION),
            partition_size: cpu::attention::PARTITION,
        },
        copies: 1,
        others: Vec::new(),
    })
}

/// Median times of `iters` reads of the problem's paged and of its contiguous K and V in the
/// kernel's order ([`cpu::attention::read_rows`]), in turns.
fn read_times<T: KvElem, KV: KvElem>(p: &Problem<T, KV>, iters: usize) -> ReadTimes {
    let paged = cpu::attention::PagedRows {
        spec: &p.spec,
        table: &p.table,
    };
    let contiguous = cpu::attention::ContiguousRows {
        num_kv_heads: p.shape.num_kv_heads,
        max_len: p.max_len,
        head_dim: p.shape.head_dim,
    };
    let (kc, vc) = (&p.k_contiguous, &p.v_contiguous);
    let [paged_s, contiguous_s] = medians_in_turns(
        iters,
        [
            &mut || {
                std::hint::black_box(cpu::attention::read_rows(
                    &p.shape, &p.k, &p.v, &p.lens, &paged,
                ));
            },
            &mut || {
                std::hint::black_box(cpu::attention::read_rows(
                    &p.shape,
                    kc,
                    vc,
                    &p.lens,
                    &contiguous,
                ));
            },
        ],
        &|| {},
    );
    ReadTimes {
        paged_us: paged_s * 1e6,
        contiguous_us: contiguous_s * 1e6,
    }
}

/// One untimed run of each of `runs`, then `iters` timed rounds taking them in turns: a spell of
/// other work on a shared machine slows each alike, so their ratio holds where their times do
/// not. The median seconds of each; `done` is told after every run.
fn medians_in_turns<const N: usize>(
    iters: usize,
    mut runs: [&mut dyn FnMut(); N],
    done: &dyn Fn(),
) -> [f64; N] {
    let mut times = [(); N].map(|_| Vec::with_capacity(iters));
    for i in 0..=iters {
        for (run, t) in runs.iter_mut().zip(&mut times) {
            let ((), d) = timed(run);
            if i > 0 {
                t.push(d.as_secs_f64());
            }
            done();
        }
    }
    times.map(|t| median(&t))
}

fn run_cuda<T, KV>(
    dev: &crate::device::cuda::CudaDevice,
    p: &Problem<T, KV>,
    opts: MeasureOptions,
) -> Result<Timed<T>, RunError>
where
    T: KvElem + cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits,
    KV: KvElem + cudarc::driver::DeviceRepr,
{
    let s = &p.shape;
    let engines = opts
        .engines
        .engines(T::DTYPE, KV::DTYPE, s.head_dim, s.group());
    let mut runs = Vec::new();
    let mut first = None;
    for engine in engines {
        let (plan, copies, run) = run_cuda_engine(dev, p, opts, engine)?;
        first.get_or_insert((plan, copies));
        runs.push(run);
    }
    let (plan, copies) = first.expect("at least one engine");
    let mut runs = runs.into_iter();
    let main = runs.next().expect("at least one engine");
    Ok(Timed {
        engine: Some(main.engine),
        paged_s: main.paged.0,
        contiguous_s: main.contiguous.0,
        paged_out: main.paged.1,
        contiguous_out: main.contiguous.1,
        limits: dev.memory_limits(p.kv_bytes(), opts.iters.max(3))?,
        compute: None,
        plan,
        copies,
        others: runs.collect(),
    })
}

/// One engine's kernels on the GPU, with its split plan and the copies rotated.
fn run_cuda_engine<T, KV>(
    dev: &crate::device::cuda::CudaDevice,
    p: &Problem<T, KV>,
    opts: MeasureOptions,
    engine: Engine,
) -> Result<(SplitPlan, usize, EngineRun<T>), RunError>
where
    T: KvElem + cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits,
    KV: KvElem + cudarc::driver::DeviceRepr,
{
    let plan = dev.attention_plan_on(engine, &p.data())?;
    // A small problem fits the L2 cache and would be timed from it: the timed runs take turns over
    // enough copies that the bytes between two reads of one copy exceed the cache several times.
    let copies = dev.min_working_set().div_ceil(p.kv_bytes().max(1)).max(1);
    let mut dps = (0..copies)
        .map(|_| dev.upload_attention_on(engine, &p.data(), plan))
        .collect::<Result<Vec<_>, _>>()?;
    let mut results = Vec::new();
    for layout in [Layout::Paged, Layout::Contiguous] {
        // Correctness run on a poisoned output, then the timed runs.
        dev.poison_output(&mut dps[0])?;
        dev.launch_attention(&mut dps[0], layout)?;
        let out = dev.download(&dps[0].out)?;
        let mut turn = 0;
        let ms = dev.time_ms(3, opts.iters.max(1), || {
            turn = (turn + 1) % copies;
            dev.launch_attention(&mut dps[turn], layout)
        })?;
        results.push((median(&ms) * 1e-3, out));
    }
    let contiguous = results.pop().expect("two layouts");
    let paged = results.pop().expect("two layouts");
    Ok((
        plan,
        copies,
        EngineRun {
            engine,
            paged,
            contiguous,
        },
    ))
}
