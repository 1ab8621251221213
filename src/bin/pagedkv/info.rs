//! `pagedkv info`: what this machine and this build can do.

use crate::CmdResult;
use pagedkv::device::{self, GpuInfo};
use pagedkv::kernels::{self, KernelResources};
use pagedkv::report::Table;
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Info {
    /// The device `--device auto` picks.
    device: String,
    gpus: Vec<GpuInfo>,
    kernels_built: bool,
    nvcc_version: Option<&'static str>,
    kernels: &'static [KernelResources],
    cpu_cores: usize,
    memory_bytes: u64,
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
    let gpus = device::gpus();
    let info = Info {
        device: device::Device::detect(device::DeviceChoice::Auto)?.name(),
        gpus,
        kernels_built: kernels::KERNELS_BUILT,
        nvcc_version: kernels::NVCC_VERSION,
        kernels: kernels::RESOURCES,
        cpu_cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_bytes: memory_bytes(),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&info)?);
        return Ok(());
    }
    println!("device (auto): {}", info.device);
    if info.gpus.is_empty() {
        println!("gpus: none usable");
    }
    for g in &info.gpus {
        println!(
            "gpu {}: {} — {:.1} GiB, compute capability {}, {} SMs",
            g.ordinal,
            g.name,
            g.total_memory_bytes as f64 / (1u64 << 30) as f64,
            g.compute_capability,
            g.multiprocessors
        );
    }
    println!(
        "cpu: {} cores, {:.1} GiB memory",
        info.cpu_cores,
        info.memory_bytes as f64 / (1u64 << 30) as f64
    );
    match info.nvcc_version {
        Some(v) => println!("kernels: built by nvcc ({v})"),
        None => println!(
            "kernels: not built (no nvcc at build time; see scripts/install-cuda-compiler)"
        ),
    }
    if !info.kernels.is_empty() {
        let mut t = Table::new([
            "module", "kernel", "arch", "regs", "spill st", "spill ld", "smem", "stack",
        ]);
        for r in info.kernels {
            t.row([
                r.module.to_string(),
                r.kernel.to_string(),
                r.arch.to_string(),
                r.registers.to_string(),
                r.spill_stores.to_string(),
                r.spill_loads.to_string(),
                r.shared_bytes.to_string(),
                r.stack_bytes.to_string(),
            ]);
        }
        print!("{t}");
    }
    Ok(())
}
