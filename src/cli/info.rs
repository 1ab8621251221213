//! `pagedkv info`: what this machine and this build can do.

use crate::cli::info_sass;
use crate::cli::{CheckFailed, CmdResult};
use crate::device::{self, GpuInfo};
use crate::kernels::gpu_facts::H200;
use crate::kernels::report::{self as static_report, StaticKernel};
use crate::kernels::{self, sass, KernelResources};
use crate::launch::attention::{dispatch_table, dispatched, Dispatch, Engine};
use crate::launch::{instances, split};
use crate::report::Table;
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// On a GPU: check every sm_90 kernel's CTAs per SM in the static report against the
    /// driver's occupancy query (exit 1 when they differ on an sm_90 GPU).
    #[arg(long, conflicts_with = "sass")]
    check_occupancy: bool,
    #[command(flatten)]
    foreign: info_sass::ForeignArgs,
}

#[derive(Serialize)]
struct Info {
    /// The device `--device auto` picks.
    device: String,
    gpus: Vec<GpuInfo>,
    kernels_built: bool,
    nvcc_version: Option<&'static str>,
    static_report: StaticReportInfo,
    /// Every decode-attention shape built and the paged kernel the launchers run for it.
    dispatch: Vec<Dispatch>,
    kernels: Vec<KernelEntry>,
    cpu_cores: usize,
    memory_bytes: u64,
}

/// What the static report is and whether this build has one.
#[derive(Serialize)]
struct StaticReportInfo {
    arch: &'static str,
    /// The tool that read the SASS, when the build had one.
    analysed_by: Option<&'static str>,
    /// Why there is no analysis, when there is none.
    missing: Option<&'static str>,
    method: &'static str,
}

const METHOD: &str = "per SM = bytes in flight per warp in a main loop's steady state (from the \
    SASS scoreboards) x resident warps per SM, assuming every resident warp is in that loop's steady \
    state; a kernel's figure is its weakest main loop; dynamic shared memory per launch from \
    kernels::report::DYNAMIC_SHARED_BYTES (0 when not listed); issue per token = warp instructions \
    per iteration of the main loops / tokens of one KV head they stream per iteration (conditional \
    blocks counted as run, but refills by their share and blocks of one iteration not at all); \
    budget = what an H200 issues per token at 4.8 TB/s; see KERNELS.md, Static report";

/// ptxas's report for one kernel on one architecture, and on sm_90 the static report's figures.
#[derive(Serialize)]
struct KernelEntry {
    #[serde(flatten)]
    resources: &'static KernelResources,
    threads_per_cta: Option<u32>,
    ctas_per_sm: Option<u32>,
    warps_per_sm: Option<u32>,
    bytes_in_flight_per_warp: Option<f64>,
    bytes_in_flight_per_sm: Option<f64>,
    bytes_per_token: Option<u32>,
    issue_per_token: Option<f64>,
    issue_budget_per_token: Option<f64>,
    /// For a decode-attention kernel: whether the launchers run it for its shape (the other
    /// engine's kernel of the same shape is built to compare with); absent for other kernels.
    #[serde(skip_serializing_if = "Option::is_none")]
    dispatched: Option<bool>,
    loops: Vec<static_report::LoopDetail>,
}

/// Whether a decode-attention kernel is the one its shape is dispatched to.
fn is_dispatched(kernel: &str) -> Option<bool> {
    let (_, engine, i) = instances::parse_kernel(kernel)?;
    Some(dispatched(i.dtype, i.kv_dtype, i.head_dim, i.group) == engine)
}

fn entry(resources: &'static KernelResources, report: &[StaticKernel]) -> KernelEntry {
    let figures = (resources.arch == sass::ARCH)
        .then(|| static_report::find(report, resources.kernel))
        .flatten()
        .filter(|k| k.module == resources.module);
    KernelEntry {
        resources,
        threads_per_cta: figures.and_then(|k| k.threads_per_cta),
        ctas_per_sm: figures.and_then(|k| k.ctas_per_sm),
        warps_per_sm: figures.and_then(|k| k.warps_per_sm),
        bytes_in_flight_per_warp: figures.and_then(|k| k.bytes_in_flight_per_warp),
        bytes_in_flight_per_sm: figures.and_then(|k| k.bytes_in_flight_per_sm),
        bytes_per_token: figures.and_then(|k| k.bytes_per_token),
        issue_per_token: figures.and_then(|k| k.issue_per_token),
        issue_budget_per_token: figures.and_then(|k| k.issue_budget_per_token),
        dispatched: is_dispatched(resources.kernel),
        loops: figures.map(|k| k.loops.clone()).unwrap_or_default(),
    }
}

fn memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

pub fn run(args: Args) -> CmdResult {
    if let Some(file) = &args.foreign.sass {
        return info_sass::run(file, &args.foreign, args.json);
    }
    let report = static_report::report(static_report::DYNAMIC_SHARED_BYTES);
    if args.check_occupancy {
        return check_occupancy(&report);
    }
    let gpus = device::cuda::list_gpus().unwrap_or_else(|e| {
        warn_unless_absent(&e);
        Vec::new()
    });
    let availability = static_report::availability();
    let info = Info {
        device: auto_device(),
        gpus,
        kernels_built: kernels::KERNELS_BUILT,
        nvcc_version: kernels::NVCC_VERSION,
        static_report: StaticReportInfo {
            arch: sass::ARCH,
            analysed_by: availability.ok(),
            missing: availability.err(),
            method: METHOD,
        },
        dispatch: dispatch_table(),
        kernels: kernels::RESOURCES
            .iter()
            .map(|r| entry(r, &report))
            .collect(),
        cpu_cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_bytes: memory_bytes(),
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&info)?)?;
        return Ok(());
    }
    outln!("device (auto): {}", info.device)?;
    if info.gpus.is_empty() {
        outln!("gpus: none usable")?;
    }
    for g in &info.gpus {
        outln!(
            "gpu {}: {} — {:.1} GiB, compute capability {}, {} SMs",
            g.ordinal,
            g.name,
            g.total_memory_bytes as f64 / (1u64 << 30) as f64,
            g.compute_capability,
            g.multiprocessors
        )?;
    }
    outln!(
        "cpu: {} cores, {:.1} GiB memory",
        info.cpu_cores,
        info.memory_bytes as f64 / (1u64 << 30) as f64
    )?;
    match info.nvcc_version {
        Some(v) => outln!("kernels: built by nvcc ({v})")?,
        None => {
            outln!("kernels: not built (no nvcc at build time; see scripts/install-cuda-compiler)")?
        }
    }
    if !info.kernels.is_empty() {
        // The module (kernels/*.cu file) is in --json; the kernel's name says it, and leaving it
        // out keeps the table inside 100 columns.
        let mut t = Table::new([
            "kernel", "arch", "regs", "spill st", "spill ld", "smem", "stack",
        ]);
        for r in info.kernels.iter().map(|k| k.resources) {
            t.row([
                r.kernel.to_string(),
                r.arch.to_string(),
                r.registers.to_string(),
                r.spill_stores.to_string(),
                r.spill_loads.to_string(),
                r.shared_bytes.to_string(),
                r.stack_bytes.to_string(),
            ]);
        }
        out!("{t}")?;
    }
    print_dispatch(&info.dispatch)?;
    if info.kernels_built {
        print_static_report(&info.static_report, &report)?;
        print_reference_split(&report)?;
    }
    Ok(())
}

/// A GPU that fails (not one that is absent) is said on stderr: `info` still reports the rest.
fn warn_unless_absent(e: &device::DeviceError) {
    if !matches!(e, device::DeviceError::NoGpu(_)) {
        eprintln!("pagedkv: warning: {e}");
    }
}

/// What `--device auto` picks: the GPU when it opens with kernels, else the CPU.
fn auto_device() -> String {
    match device::Device::detect(device::DeviceChoice::Cuda) {
        Ok(d) => d.name(),
        Err(e) => {
            if !matches!(e, device::DeviceError::NoKernels) {
                warn_unless_absent(&e);
            }
            device::Device::Cpu.name()
        }
    }
}

/// Which engine runs which decode-attention shapes, in a few lines (`--json`: every shape).
fn print_dispatch(table: &[Dispatch]) -> Result<(), crate::cli::stdout::StdoutFailed> {
    let on = |e: Engine| table.iter().filter(move |d| d.engine == e);
    let list = |v: Vec<String>| {
        let mut v = v;
        v.sort();
        v.dedup();
        v.join(", ")
    };
    let tc: Vec<&Dispatch> = on(Engine::TensorCores).collect();
    if tc.is_empty() {
        outln!("attention dispatch: CUDA cores for every shape (no tensor-core kernel built)")?;
        return Ok(());
    }
    let pairs = list(
        tc.iter()
            .map(|d| {
                if d.dtype == d.kv_dtype {
                    d.dtype.to_string()
                } else {
                    format!("{} over {}", d.dtype, d.kv_dtype)
                }
            })
            .collect(),
    );
    let dims = list(tc.iter().map(|d| d.head_dim.to_string()).collect());
    let groups = list(tc.iter().map(|d| d.group.to_string()).collect());
    info_sass::print_wrapped(&format!(
        "attention dispatch: tensor cores (paged_attention_tc_*) for head dim {dims}, groups \
         {groups}, q/KV {pairs}; CUDA cores for the other {} shapes built (--json: dispatch)",
        on(Engine::CudaCores).count()
    ))?;
    Ok(())
}

/// How the reference shape is split on an H200 with the static report's occupancy: issue 14 asks
/// that it runs without a merge.
fn print_reference_split(report: &[StaticKernel]) -> Result<(), crate::cli::stdout::StdoutFailed> {
    let sms = H200.sms as usize;
    let kernel = "paged_attention_f16_d128_g4";
    if let Some(per_sm) = split::static_ctas_per_sm(report, kernel) {
        let plan = split::split_plan(64, 8, 4096, sms, per_sm);
        info_sass::print_wrapped(&format!(
            "split-K at batch 64 x 8 KV heads x 4096 tokens ({kernel}) on {sms} SMs: {per_sm} \
             CTAs per SM (static report) -> {} partition(s) of {} tokens",
            plan.num_partitions, plan.partition_size
        ))?;
    }
    Ok(())
}

/// One kernel's CTAs per SM: the static report's and the driver's.
#[derive(Serialize)]
struct Occupancy {
    kernel: String,
    threads_per_cta: u32,
    dynamic_shared_bytes: u32,
    static_ctas_per_sm: u32,
    driver_ctas_per_sm: u32,
}

fn check_occupancy(report: &[StaticKernel]) -> CmdResult {
    let device::Device::Cuda(dev) = device::Device::detect(device::DeviceChoice::Cuda)? else {
        unreachable!("a CUDA choice gives a CUDA device or an error")
    };
    let mut rows = Vec::new();
    for k in report {
        let (Some(threads), Some(ctas), Some(module)) = (
            k.threads_per_cta,
            k.ctas_per_sm,
            kernels::module(&k.module).map(|m| m.name),
        ) else {
            continue;
        };
        rows.push(Occupancy {
            kernel: k.kernel.clone(),
            threads_per_cta: threads,
            dynamic_shared_bytes: k.dynamic_shared_bytes,
            static_ctas_per_sm: ctas,
            driver_ctas_per_sm: dev.occupancy(
                module,
                &k.kernel,
                threads,
                k.dynamic_shared_bytes,
            )?,
        });
    }
    let differ: Vec<&Occupancy> = rows
        .iter()
        .filter(|r| r.static_ctas_per_sm != r.driver_ctas_per_sm)
        .collect();
    outln!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({
            "gpu": dev.info.name,
            "compute_capability": dev.info.compute_capability,
            "kernels": rows,
            "differ": differ.len(),
        }))?
    )?;
    if rows.is_empty() {
        return Err("no static report in this build: nothing to check".into());
    }
    // The static model is sm_90's: on another GPU a difference is expected, not a failure.
    if dev.info.compute_capability == "9.0" && !differ.is_empty() {
        let names: Vec<&str> = differ.iter().map(|r| r.kernel.as_str()).collect();
        return Err(Box::new(CheckFailed(format!(
            "the static report's CTAs per SM differ from the driver's for {} kernels: {names:?}",
            names.len()
        ))));
    }
    Ok(())
}

fn print_static_report(
    about: &StaticReportInfo,
    report: &[StaticKernel],
) -> Result<(), crate::cli::stdout::StdoutFailed> {
    let Some(tool) = about.analysed_by else {
        outln!("static report: {}", about.missing.unwrap_or("unavailable"))?;
        return Ok(());
    };
    outln!("static report ({}, read by {tool}):", about.arch)?;
    out!(
        "{}",
        info_sass::static_tables(report, |_, k| k.kernel.clone())
    )?;
    info_sass::print_wrapped(about.method)?;
    info_sass::print_aims()?;
    Ok(())
}
