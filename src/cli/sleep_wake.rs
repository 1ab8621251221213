//! `pagedkv sleep-wake`: sleep/wake cycles on one pool (CUDA virtual memory, or the CPU twin),
//! with the time, the memory freed, offload/restore bandwidth beside the plain copy bandwidth,
//! and address and data checks; optionally the chunk-size table.

use crate::cli::{count, count_u64, CheckFailed, CmdResult};
use crate::device::cuda::Gpu;
use crate::device::{DeviceChoice, DeviceError};
use crate::host_memory;
use crate::progress::StderrProgress;
use crate::report::Table;
use crate::vmm::cuda::{self as vcuda, CudaPool};
use crate::vmm::host::CpuPool;
use crate::vmm::measure::{self, CycleReport, SweepRow};
use crate::vmm::{memstat, Backing, SleepMode, SleepPool, VmmError};
use serde::Serialize;
use std::sync::Arc;

const MIB: usize = 1 << 20;

#[derive(clap::Args)]
pub struct Args {
    /// Where the pool lives: the GPU's virtual memory, or the CPU twin (memfd + mmap).
    #[arg(long, value_enum, default_value_t = DeviceChoice::Auto)]
    device: DeviceChoice,
    /// Pool size in MiB [default: 4096 on a GPU, 1024 on the CPU].
    #[arg(long, value_parser = count(1..))]
    pool_mib: Option<usize>,
    /// Physical chunk size in MiB, rounded up to the allocation granularity [default: the whole
    /// pool, one chunk].
    #[arg(long, value_parser = count(1..))]
    chunk_mib: Option<usize>,
    #[arg(long, value_enum, default_value_t = SleepMode::Offload)]
    mode: SleepMode,
    #[arg(long, default_value_t = 10, value_parser = count(1..))]
    cycles: usize,
    /// Keep the offload buffer between cycles instead of allocating (pinning) it at each sleep.
    #[arg(long)]
    keep_host_buffer: bool,
    /// Seed of the random pool contents.
    #[arg(long, default_value_t = 1, value_parser = count_u64(0..))]
    seed: u64,
    /// Also print the chunk-size table: discard-sleep and wake time per GiB as chunks grow.
    #[arg(long)]
    chunk_sweep: bool,
    /// Pool size of the chunk-size table in MiB [default: 16384 on a GPU, 1024 on the CPU].
    #[arg(long, value_parser = count(1..))]
    sweep_pool_mib: Option<usize>,
    /// Sleep/wake pairs per chunk size in the table.
    #[arg(long, default_value_t = 3, value_parser = count(1..))]
    sweep_reps: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Output {
    device: String,
    /// What `freed_bytes` counts: device memory, or resident memfd (shared) pages.
    memory_measure: &'static str,
    granularity_bytes: usize,
    #[serde(flatten)]
    cycles: CycleReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    chunk_sweep: Option<Vec<SweepRow>>,
}

enum Target {
    Cpu,
    Cuda(Arc<Gpu>),
}

/// The device for the pools. Virtual memory needs no kernels, so a GPU without built kernels
/// is still used; `auto` takes the CPU when no GPU is usable.
fn target(choice: DeviceChoice) -> Result<Target, DeviceError> {
    match choice {
        DeviceChoice::Cpu => Ok(Target::Cpu),
        DeviceChoice::Cuda => Gpu::open(0).map(Target::Cuda),
        DeviceChoice::Auto => Ok(Gpu::open(0).map_or(Target::Cpu, Target::Cuda)),
    }
}

fn mib(n: usize, what: &str) -> Result<usize, Box<dyn std::error::Error>> {
    n.checked_mul(MIB)
        .ok_or_else(|| format!("--{what} {n} is too large").into())
}

pub fn run(args: Args) -> CmdResult {
    let target = target(args.device)?;
    let gpu = matches!(target, Target::Cuda(_));
    let size = mib(
        args.pool_mib.unwrap_or(if gpu { 4096 } else { 1024 }),
        "pool-mib",
    )?;
    let chunk = args.chunk_mib.map(|c| mib(c, "chunk-mib")).transpose()?;
    let sweep_size = mib(
        args.sweep_pool_mib
            .unwrap_or(if gpu { 16384 } else { 1024 }),
        "sweep-pool-mib",
    )?;
    let what = format!("sleep-wake --pool-mib {}", size / MIB);
    host_memory::ensure_fits(measure::host_bytes(size, args.mode, !gpu), &what)?;
    if args.chunk_sweep && !gpu {
        let what = format!("sleep-wake --sweep-pool-mib {}", sweep_size / MIB);
        host_memory::ensure_fits(sweep_size as u64, &what)?;
    }
    let measured = match &target {
        Target::Cpu => {
            let pool = CpuPool::create(size, chunk)?;
            let in_use = || memstat::resident().map(|r| r.shmem);
            let make = |c| CpuPool::create(sweep_size, Some(c));
            measure_all(
                &args,
                "cpu (memfd + mmap)".into(),
                "resident memfd pages",
                pool,
                &in_use,
                &make,
                sweep_size,
            )
        }
        Target::Cuda(ctx) => {
            let pool = CudaPool::create(ctx, size, chunk)
                .map_err(|e| format!("cannot build a {} MiB pool on the GPU: {e}", size / MIB))?;
            let in_use = || vcuda::device_memory(ctx).map(|(free, total)| (total - free) as u64);
            let make = |c| CudaPool::create(ctx, sweep_size, Some(c));
            let name = ctx.name()?;
            measure_all(
                &args,
                name,
                "device memory in use (cuMemGetInfo)",
                pool,
                &in_use,
                &make,
                sweep_size,
            )
        }
    };
    // A cycle that failed and was brought back is a failed check (exit 1), not bad input.
    let out = match measured {
        Err(e @ VmmError::CycleFailed { .. }) => {
            return Err(Box::new(CheckFailed(format!("sleep-wake: {e}"))))
        }
        other => other?,
    };
    print(&args, &out)?;
    if !out.cycles.data_intact {
        return Err(Box::new(CheckFailed(format!(
            "sleep-wake: pool contents changed across a {:?} cycle",
            out.cycles.mode
        ))));
    }
    if !out.cycles.address_stable {
        return Err(Box::new(CheckFailed(
            "sleep-wake: the pool moved across a cycle".into(),
        )));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn measure_all<B: Backing>(
    args: &Args,
    device: String,
    memory_measure: &'static str,
    mut pool: SleepPool<B>,
    in_use: &dyn Fn() -> Result<u64, VmmError>,
    make: &dyn Fn(usize) -> Result<SleepPool<B>, VmmError>,
    sweep_size: usize,
) -> Result<Output, VmmError> {
    pool.keep_host_buffer(args.keep_host_buffer);
    let granularity_bytes = pool.layout().granularity;
    let progress = StderrProgress::new();
    let cycles = measure::run_cycles(
        &mut pool,
        args.mode,
        args.cycles,
        args.seed,
        in_use,
        &progress,
    )?;
    drop(pool);
    let chunk_sweep = if args.chunk_sweep {
        // Chunks from 2 MiB (the CUDA granularity) up: the CPU's 4 KiB pages would need a
        // memfd per page.
        let smallest = granularity_bytes.max(2 * MIB);
        let chunks = measure::sweep_chunks(sweep_size, smallest);
        Some(measure::chunk_sweep(
            make,
            &chunks,
            args.sweep_reps,
            &progress,
        )?)
    } else {
        None
    };
    Ok(Output {
        device,
        memory_measure,
        granularity_bytes,
        cycles,
        chunk_sweep,
    })
}

fn print(args: &Args, out: &Output) -> CmdResult {
    if args.json {
        outln!("{}", serde_json::to_string_pretty(out)?)?;
        return Ok(());
    }
    let c = &out.cycles;
    let mib = |b: f64| format!("{:.1}", b / MIB as f64);
    outln!(
        "device: {} — pool {} MiB in {} chunk(s) of {} MiB (granularity {} KiB), {:?}, {} cycles{}",
        out.device,
        mib(c.pool_bytes as f64),
        c.chunks,
        mib(c.chunk_bytes as f64),
        out.granularity_bytes / 1024,
        c.mode,
        c.cycles,
        if c.keep_host_buffer {
            ", host buffer kept"
        } else {
            ""
        }
    )?;
    let opt = |g: Option<f64>| g.map_or("-".to_string(), |g| format!("{g:.2}"));
    let mut t = Table::new(["measure", "median", "max"]);
    t.row([
        "sleep ms".into(),
        format!("{:.2}", c.sleep_ms.median),
        format!("{:.2}", c.sleep_ms.max),
    ]);
    t.row([
        "wake ms".into(),
        format!("{:.2}", c.wake_ms.median),
        format!("{:.2}", c.wake_ms.max),
    ]);
    t.row([
        "host buffer alloc ms (in sleep)".into(),
        format!("{:.2}", c.host_alloc_ms.median),
        format!("{:.2}", c.host_alloc_ms.max),
    ]);
    out!("{t}")?;
    let mut t = Table::new(["bandwidth", "GB/s", "vs plain copy"]);
    t.row([
        "plain copy pool → host".into(),
        format!("{:.2}", c.copy_gbps),
        "1.00".into(),
    ]);
    t.row([
        "plain copy host → pool".into(),
        format!("{:.2}", c.copy_h2d_gbps),
        "1.00".into(),
    ]);
    t.row([
        "offload".into(),
        opt(c.offload_gbps),
        opt(c.offload_vs_copy),
    ]);
    t.row([
        "restore".into(),
        opt(c.restore_gbps),
        opt(c.restore_vs_copy),
    ]);
    out!("{t}")?;
    outln!(
        "freed per sleep: {} MiB of {} ({}); after all cycles: {:+} bytes vs start",
        mib(c.freed_bytes as f64),
        mib(c.pool_bytes as f64),
        out.memory_measure,
        c.leak_bytes
    )?;
    outln!(
        "address stable: {}, data intact: {}",
        c.address_stable,
        c.data_intact
    )?;
    if let Some(rows) = &out.chunk_sweep {
        let mut t = Table::new([
            "chunk MiB",
            "chunks",
            "sleep ms",
            "wake ms",
            "sleep ms/GiB",
            "wake ms/GiB",
        ]);
        for r in rows {
            t.row([
                mib(r.chunk_bytes as f64),
                r.chunks.to_string(),
                format!("{:.2}", r.sleep_ms),
                format!("{:.2}", r.wake_ms),
                format!("{:.2}", r.sleep_ms_per_gib),
                format!("{:.2}", r.wake_ms_per_gib),
            ]);
        }
        outln!("discard-sleep and wake by chunk size:")?;
        out!("{t}")?;
    }
    Ok(())
}
