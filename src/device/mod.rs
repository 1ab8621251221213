//! Where memory lives and kernels run: the CPU (always) or a CUDA GPU (when one is usable).
//!
//! Detection never lets cudarc panic: it panics when libcuda is missing, so nothing touches the
//! driver before `cudarc::driver::sys::is_culib_present()` says the library is there.

pub mod cpu;
pub mod cuda;

use serde::Serialize;
use thiserror::Error;

/// What the user asked for with `--device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum DeviceChoice {
    /// The GPU when one is usable, else the CPU.
    #[default]
    Auto,
    Cpu,
    Cuda,
}

#[derive(Debug, Error)]
pub enum DeviceError {
    #[error("no usable CUDA GPU: {0}")]
    NoGpu(String),
    #[error("GPU kernels were not built into this binary (run scripts/install-cuda-compiler, then rebuild)")]
    NoKernels,
    /// A driver call failed: which function, and what it was doing to which object. The code is
    /// printed by name (formatting cudarc's error would call the driver again).
    #[error("{doing}: CUDA {op} failed: {}", cuda::driver::code(source))]
    Driver {
        op: &'static str,
        doing: String,
        #[source]
        source: cudarc::driver::DriverError,
    },
    #[error("{0}")]
    Invalid(String),
}

/// The memory limits a bandwidth figure is reported against, measured over the same bytes in the
/// same run: a copy (bytes read plus bytes written per second) and a read-only stream.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Limits {
    pub copy_gbps: f64,
    pub stream_gbps: f64,
}

/// The name of the device the emulated CUDA driver (`emu-driver/`) reports: the CPU running the
/// kernels behind the CUDA driver API. Its timings are the CPU's, never measurements of a GPU.
pub const EMULATED_GPU_NAME: &str = "pagedkv emulated GPU (CPU; not a measurement)";

/// A GPU as `pagedkv info` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct GpuInfo {
    pub ordinal: usize,
    pub name: String,
    pub total_memory_bytes: usize,
    pub compute_capability: String,
    pub multiprocessors: i32,
    pub l2_cache_bytes: usize,
    /// The emulated driver's device ([`EMULATED_GPU_NAME`]): figures measured on it are not a
    /// GPU's.
    pub emulated: bool,
}

/// The device a command runs on.
#[derive(Clone)]
pub enum Device {
    Cpu,
    Cuda(std::sync::Arc<cuda::CudaDevice>),
}

impl Device {
    /// The device for `choice`: `auto` falls back to the CPU, `cuda` fails when no GPU is usable.
    pub fn detect(choice: DeviceChoice) -> Result<Device, DeviceError> {
        match choice {
            DeviceChoice::Cpu => Ok(Device::Cpu),
            DeviceChoice::Cuda => cuda::CudaDevice::open(0).map(|d| Device::Cuda(d.into())),
            DeviceChoice::Auto => Ok(cuda::CudaDevice::open(0)
                .map(|d| Device::Cuda(d.into()))
                .unwrap_or(Device::Cpu)),
        }
    }

    pub fn name(&self) -> String {
        match self {
            Device::Cpu => format!("cpu ({} threads)", rayon::current_num_threads()),
            Device::Cuda(d) => d.info.name.clone(),
        }
    }

    pub fn is_cuda(&self) -> bool {
        matches!(self, Device::Cuda(_))
    }

    /// True on the emulated driver's device: timings are the CPU's, not measurements.
    pub fn is_emulated(&self) -> bool {
        matches!(self, Device::Cuda(d) if d.info.emulated)
    }
}

/// Every GPU the driver reports; empty when libcuda is missing or reports none.
pub fn gpus() -> Vec<GpuInfo> {
    cuda::list_gpus().unwrap_or_default()
}
