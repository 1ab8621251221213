//! The GPUs pagedkv knows, their datasheet figures stated once: the step-time models (memory,
//! FLOPs, NVLink), the KV pool a GPU leaves (its memory), the static kernel report (SMs, issue
//! rate, memory latency) all read them here.
//!
//! Sources: NVIDIA's datasheets (H200 SXM, H100 SXM, A100 SXM 80 GB: HBM bandwidth, dense BF16
//! and FP8 tensor throughput, NVLink 900/900/600 GB/s in total, half per direction); memory as
//! `nvidia-smi` reports it (MiB); SM counts as `multiProcessorCount` reports them; 4 warp
//! schedulers per SM (one per sub-partition: the Hopper and Ampere whitepapers); the maximum
//! graphics clock `nvidia-smi -q -d CLOCK` reports. DRAM latency under load is an estimate
//! (KERNELS.md, "Why bytes in flight"), not a measurement.

use serde::Serialize;

/// One GPU's figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Gpu {
    /// pagedkv's name for it (`--gpu`), lower case.
    pub name: &'static str,
    /// As NVIDIA names it.
    pub product: &'static str,
    /// Memory as nvidia-smi reports it, MiB.
    pub memory_mib: u64,
    /// HBM bandwidth, GB/s.
    pub hbm_gbps: f64,
    /// Dense BF16 tensor throughput, TFLOP/s.
    pub peak_tflops: f64,
    /// Dense FP8 tensor throughput, TFLOP/s (none before Hopper).
    pub fp8_tflops: Option<f64>,
    /// NVLink bandwidth per direction, GB/s.
    pub nvlink_gbps: f64,
    pub sms: u32,
    /// Warp schedulers per SM, each issuing at most one warp instruction per clock.
    pub schedulers_per_sm: u32,
    /// Boost clock, Hz.
    pub clock_hz: f64,
    /// DRAM latency under load, seconds (an estimate, for Little's law).
    pub dram_latency_s: f64,
}

pub const H200: Gpu = Gpu {
    name: "h200",
    product: "H200",
    memory_mib: 143_771,
    hbm_gbps: 4800.0,
    peak_tflops: 989.0,
    fp8_tflops: Some(1979.0),
    nvlink_gbps: 450.0,
    sms: 132,
    schedulers_per_sm: 4,
    clock_hz: 1.98e9,
    dram_latency_s: 700e-9,
};

pub const H100: Gpu = Gpu {
    name: "h100",
    product: "H100",
    memory_mib: 81_559,
    hbm_gbps: 3350.0,
    peak_tflops: 989.0,
    fp8_tflops: Some(1979.0),
    nvlink_gbps: 450.0,
    sms: 132,
    schedulers_per_sm: 4,
    clock_hz: 1.98e9,
    dram_latency_s: 700e-9,
};

pub const A100: Gpu = Gpu {
    name: "a100",
    product: "A100",
    memory_mib: 81_920,
    hbm_gbps: 2039.0,
    peak_tflops: 312.0,
    fp8_tflops: None,
    nvlink_gbps: 300.0,
    sms: 108,
    schedulers_per_sm: 4,
    clock_hz: 1.41e9,
    dram_latency_s: 700e-9,
};

pub const GPUS: &[Gpu] = &[H200, H100, A100];

/// The GPU called `name` (case-insensitive; AIConfigurator's system names such as `h200_sxm`
/// too).
pub fn gpu(name: &str) -> Option<Gpu> {
    let name = name.to_ascii_lowercase();
    let name = name.strip_suffix("_sxm").unwrap_or(&name);
    GPUS.iter().find(|g| g.name == name).copied()
}

/// The names `--gpu` takes, for help texts and errors.
pub fn gpu_names() -> Vec<&'static str> {
    GPUS.iter().map(|g| g.name).collect()
}

/// The GPU whose memory is `memory_mib` (each known GPU's differs).
pub fn by_memory(memory_mib: u64) -> Option<Gpu> {
    GPUS.iter().find(|g| g.memory_mib == memory_mib).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_memory_pick_one_gpu_each() {
        assert_eq!(gpu("H200").unwrap().hbm_gbps, 4800.0);
        assert_eq!(gpu("h100_sxm").unwrap().memory_mib, 81_559);
        assert!(gpu("v100").is_none());
        for g in GPUS {
            assert_eq!(by_memory(g.memory_mib).unwrap().name, g.name);
        }
        assert!(by_memory(1).is_none());
    }
}
