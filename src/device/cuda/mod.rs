//! The CUDA side: a context and stream on one GPU, and the embedded kernel modules loaded into it.

mod attention;
pub mod cache_ops;
pub mod gather;
mod stream;
mod timing;

pub use crate::launch::Layout;
pub use attention::DeviceProblem;

use super::{DeviceError, GpuInfo};
use crate::kernels;
use cudarc::driver::{
    sys, CudaContext, CudaFunction, CudaModule, CudaStream, LaunchArgs, LaunchConfig,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A launch that names its kernel when the driver refuses it (cudarc's error carries only the
/// code, and a failed launch must say which kernel failed).
pub trait LaunchNamed {
    /// # Safety
    /// As [`cudarc::driver::LaunchArgs::launch`]: the arguments match `kernel`'s signature.
    unsafe fn launch_named(&mut self, kernel: &str, cfg: LaunchConfig) -> Result<(), DeviceError>;
}

impl LaunchNamed for LaunchArgs<'_> {
    unsafe fn launch_named(&mut self, kernel: &str, cfg: LaunchConfig) -> Result<(), DeviceError> {
        // SAFETY: per the caller.
        unsafe { self.launch(cfg) }
            .map(|_| ())
            .map_err(|source| DeviceError::Launch {
                kernel: kernel.to_string(),
                source,
            })
    }
}

/// True when libcuda can be loaded; the only safe first question to ask cudarc.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda; no driver call is made.
    unsafe { sys::is_culib_present() }
}

pub fn list_gpus() -> Result<Vec<GpuInfo>, DeviceError> {
    if !driver_present() {
        return Err(DeviceError::NoGpu("libcuda not found".into()));
    }
    let count = CudaContext::device_count()?;
    (0..count as usize)
        .map(|i| {
            let ctx = CudaContext::new(i)?;
            gpu_info(&ctx)
        })
        .collect()
}

fn gpu_info(ctx: &Arc<CudaContext>) -> Result<GpuInfo, DeviceError> {
    let (major, minor) = ctx.compute_capability()?;
    let name = ctx.name()?;
    Ok(GpuInfo {
        ordinal: ctx.ordinal(),
        emulated: name == super::EMULATED_GPU_NAME,
        name,
        total_memory_bytes: ctx.total_mem()?,
        compute_capability: format!("{major}.{minor}"),
        multiprocessors: ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        l2_cache_bytes: ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?
            .max(0) as usize,
    })
}

/// One GPU with its context, a stream, and the kernel modules loaded so far. Every buffer it
/// allocates is used on `stream` only (cudarc's cross-stream event tracking is off); raw addresses
/// may be used on other streams, as tests/vmm_cuda.rs does, with explicit synchronisation.
pub struct CudaDevice {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub info: GpuInfo,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    functions: Mutex<HashMap<String, CudaFunction>>,
}

impl CudaDevice {
    /// Opens GPU `ordinal`; a typed error (never a panic) when there is none or no kernels.
    pub fn open(ordinal: usize) -> Result<CudaDevice, DeviceError> {
        if !driver_present() {
            return Err(DeviceError::NoGpu("libcuda not found".into()));
        }
        let count = CudaContext::device_count()
            .map_err(|e| DeviceError::NoGpu(format!("the driver reports no device ({e})")))?;
        if ordinal >= count.max(0) as usize {
            return Err(DeviceError::NoGpu(format!(
                "{count} devices, asked for #{ordinal}"
            )));
        }
        if !kernels::KERNELS_BUILT {
            return Err(DeviceError::NoKernels);
        }
        let ctx = CudaContext::new(ordinal)?;
        // Everything a CudaDevice allocates and launches goes through its one stream, in order,
        // so cudarc's cross-stream events (about twenty driver calls around every launch) buy
        // nothing and would make the host, not the GPU, the limit of microsecond kernels.
        // SAFETY: no slice of this context is used on another stream (see the struct's doc).
        unsafe { ctx.disable_event_tracking() };
        let info = gpu_info(&ctx)?;
        let stream = ctx.new_stream()?;
        Ok(CudaDevice {
            ctx,
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
        self.ctx.bind_to_thread()?;
        if dynamic_smem > 48 * 1024 {
            f.set_attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                dynamic_smem as i32,
            )?;
        }
        Ok(f.occupancy_max_active_blocks_per_multiprocessor(threads, dynamic_smem as usize, None)?)
    }

    /// The kernel `name` from the embedded `kernels/{module}.cu`, loading the module on first use.
    pub fn function(&self, module: &'static str, name: &str) -> Result<CudaFunction, DeviceError> {
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
                let m = self
                    .ctx
                    .load_module(cudarc::nvrtc::Ptx::from_binary(image.fatbin.to_vec()))?;
                loaded.insert(module, m.clone());
                m
            }
        };
        let f = m.load_function(name)?;
        self.functions
            .lock()
            .expect("function cache poisoned")
            .insert(name.to_string(), f.clone());
        Ok(f)
    }
}
