//! The CUDA side: a context and stream on one GPU, and the embedded kernel modules loaded into it.

mod attention;
pub mod cache_ops;
pub mod driver;
pub mod gather;
mod stream;
mod timing;

pub use crate::launch::Layout;
pub use attention::DeviceProblem;
pub use driver::{DeviceBuffer, Gpu, Stream};

use super::{DeviceError, GpuInfo};
use crate::kernels;
use cudarc::driver::sys;
use driver::{Function, Module};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// True when libcuda can be loaded; the only safe first question to ask cudarc.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda; no driver call is made.
    unsafe { sys::is_culib_present() }
}

/// Every GPU the driver reports; [`DeviceError::NoGpu`] without a driver or a device.
pub fn list_gpus() -> Result<Vec<GpuInfo>, DeviceError> {
    (0..Gpu::count()?)
        .map(|i| gpu_info(&*Gpu::open(i)?))
        .collect()
}

fn gpu_info(gpu: &Gpu) -> Result<GpuInfo, DeviceError> {
    use sys::CUdevice_attribute as A;
    let name = gpu.name()?;
    let major = gpu.attribute(
        A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        "COMPUTE_CAPABILITY_MAJOR",
    )?;
    let minor = gpu.attribute(
        A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        "COMPUTE_CAPABILITY_MINOR",
    )?;
    Ok(GpuInfo {
        ordinal: gpu.ordinal(),
        emulated: name == super::EMULATED_GPU_NAME,
        name,
        total_memory_bytes: gpu.total_memory()?,
        compute_capability: format!("{major}.{minor}"),
        multiprocessors: gpu.attribute(
            A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            "MULTIPROCESSOR_COUNT",
        )?,
        l2_cache_bytes: gpu
            .attribute(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2_CACHE_SIZE")?
            .max(0) as usize,
    })
}

/// One GPU with its context, a stream, and the kernel modules loaded so far. Everything it
/// allocates and launches goes through `stream`, in order; raw addresses may be used on other
/// streams, as tests/vmm_cuda.rs does, with explicit synchronisation. Dropped, it unloads its
/// modules and destroys its stream; the context goes with the last object made on it.
pub struct CudaDevice {
    pub gpu: Arc<Gpu>,
    pub stream: Arc<Stream>,
    pub info: GpuInfo,
    modules: Mutex<HashMap<&'static str, Arc<Module>>>,
    functions: Mutex<HashMap<String, Function>>,
}

impl CudaDevice {
    /// Opens GPU `ordinal`; a typed error (never a panic) when there is none or no kernels.
    pub fn open(ordinal: usize) -> Result<CudaDevice, DeviceError> {
        let gpu = Gpu::open(ordinal)?;
        if !kernels::KERNELS_BUILT {
            return Err(DeviceError::NoKernels);
        }
        let info = gpu_info(&gpu)?;
        let stream = Stream::new(&gpu)?;
        Ok(CudaDevice {
            gpu,
            stream,
            info,
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
        })
    }

    /// CTAs of `name` one SM holds at `threads` threads and `dynamic_smem` bytes per CTA, as the
    /// driver's occupancy calculator says (the kernel is opted in to more than 48 KiB first).
    pub fn occupancy(
        &self,
        module: &'static str,
        name: &str,
        threads: u32,
        dynamic_smem: u32,
    ) -> Result<u32, DeviceError> {
        let f = self.function(module, name)?;
        if dynamic_smem > 48 * 1024 {
            f.set_max_dynamic_shared(dynamic_smem)?;
        }
        f.occupancy(threads, dynamic_smem)
    }

    /// The kernel `name` from the embedded `kernels/{module}.cu`, loading the module on first use.
    pub fn function(&self, module: &'static str, name: &str) -> Result<Function, DeviceError> {
        if let Some(f) = self
            .functions
            .lock()
            .expect("function cache poisoned")
            .get(name)
        {
            return Ok(f.clone());
        }
        let mut loaded = self.modules.lock().expect("module cache poisoned");
        let m = match loaded.get(module) {
            Some(m) => m.clone(),
            None => {
                let image = kernels::module(module).ok_or(DeviceError::NoKernels)?;
                let m = Module::load(&self.gpu, module, image.fatbin)?;
                loaded.insert(module, m.clone());
                m
            }
        };
        let f = m.function(name)?;
        self.functions
            .lock()
            .expect("function cache poisoned")
            .insert(name.to_string(), f.clone());
        Ok(f)
    }
}
