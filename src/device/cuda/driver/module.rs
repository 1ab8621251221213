//! Kernel modules, their functions, and launches.

use super::{failed, teardown, DeviceBuffer, Gpu, Stream};
use crate::device::DeviceError;
use cudarc::driver::{result, sys, LaunchConfig};
use std::ffi::{c_void, CString};
use std::marker::PhantomData;
use std::sync::Arc;

/// A loaded `kernels/NAME.cu` module, unloaded when the last of its functions is dropped.
#[derive(Debug)]
pub struct Module {
    gpu: Arc<Gpu>,
    raw: sys::CUmodule,
    name: &'static str,
}

// SAFETY: module handles may be used from any thread with the context current.
unsafe impl Send for Module {}
// SAFETY: as above; the struct itself is never mutated.
unsafe impl Sync for Module {}

impl Module {
    /// Loads the fatbin `image` of module `name`.
    pub fn load(
        gpu: &Arc<Gpu>,
        name: &'static str,
        image: &[u8],
    ) -> Result<Arc<Module>, DeviceError> {
        // The driver reads the fatbin's header in place: give it an 8-byte aligned copy.
        let mut aligned = vec![0u64; image.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut aligned)[..image.len()].copy_from_slice(image);
        let doing = || format!("loading module {name}");
        gpu.bind(doing)?;
        // SAFETY: a fatbin image, alive for the call (the driver copies what it keeps).
        let raw = unsafe { result::module::load_data(aligned.as_ptr().cast()) }
            .map_err(failed("cuModuleLoadData", doing))?;
        Ok(Arc::new(Module {
            gpu: gpu.clone(),
            raw,
            name,
        }))
    }

    /// Kernel `name` of this module.
    pub fn function(self: &Arc<Self>, name: &str) -> Result<Function, DeviceError> {
        let doing = || format!("finding kernel {name} in module {}", self.name);
        let c_name = CString::new(name).map_err(|_| DeviceError::Invalid(doing()))?;
        self.gpu.bind(doing)?;
        // SAFETY: a live module of the current context.
        let raw = unsafe { result::module::get_function(self.raw, c_name) }
            .map_err(failed("cuModuleGetFunction", doing))?;
        Ok(Function {
            module: self.clone(),
            raw,
            name: name.to_string(),
        })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        let doing = || format!("unloading module {}", self.name);
        teardown::record_err(self.gpu.bind(doing));
        // SAFETY: loaded in `load`, unloaded once, after every function of it was dropped.
        teardown::record_err(
            unsafe { result::module::unload(self.raw) }.map_err(failed("cuModuleUnload", doing)),
        );
    }
}

/// One kernel; keeps its module loaded.
#[derive(Debug, Clone)]
pub struct Function {
    module: Arc<Module>,
    raw: sys::CUfunction,
    name: String,
}

// SAFETY: function handles may be used from any thread with the context current.
unsafe impl Send for Function {}
// SAFETY: as above.
unsafe impl Sync for Function {}

impl Function {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The raw handle, for launching on a stream this layer does not own (tests/vmm_cuda.rs
    /// captures one into a graph with cudarc's).
    pub fn cu_function(&self) -> sys::CUfunction {
        self.raw
    }

    /// Lets launches ask for up to `bytes` of dynamic shared memory (above 48 KiB needs it).
    pub fn set_max_dynamic_shared(&self, bytes: u32) -> Result<(), DeviceError> {
        let doing = || {
            format!(
                "allowing {} {bytes} bytes of dynamic shared memory",
                self.name
            )
        };
        self.module.gpu.bind(doing)?;
        let attr = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        // SAFETY: a live function of the current context.
        unsafe { result::function::set_function_attribute(self.raw, attr, bytes as i32) }
            .map_err(failed("cuFuncSetAttribute", doing))
    }

    /// CTAs of this kernel one SM holds at `threads` threads and `dynamic_smem` bytes each.
    pub fn occupancy(&self, threads: u32, dynamic_smem: u32) -> Result<u32, DeviceError> {
        let doing = || format!("asking the occupancy of {} at {threads} threads", self.name);
        self.module.gpu.bind(doing)?;
        // SAFETY: a live function of the current context.
        let n = unsafe {
            result::occupancy::max_active_block_per_multiprocessor(
                self.raw,
                threads as i32,
                dynamic_smem as usize,
            )
        }
        .map_err(failed("cuOccupancyMaxActiveBlocksPerMultiprocessor", doing))?;
        Ok(n.max(0) as u32)
    }

    /// A launch of this kernel on `stream`, its arguments pushed in the kernel's order.
    pub fn launch<'a>(&'a self, stream: &'a Stream) -> Launch<'a> {
        Launch {
            function: self,
            stream,
            params: Vec::new(),
            _args: PhantomData,
        }
    }
}

/// A value a kernel takes as an argument: its parameter is a pointer to the value's bytes.
///
/// # Safety
/// `param` points at `Self`'s kernel-side representation, valid while `self` is borrowed.
pub unsafe trait KernelArg {
    fn param(&self) -> *mut c_void;
}

/// A buffer is passed as its device address.
// SAFETY: points at the buffer's address field, which lives as long as the buffer.
unsafe impl<T> KernelArg for DeviceBuffer<T> {
    fn param(&self) -> *mut c_void {
        (self.ptr_field() as *const sys::CUdeviceptr)
            .cast_mut()
            .cast()
    }
}

macro_rules! scalar_arg {
    ($($t:ty),*) => {$(
        // SAFETY: a plain value, passed by its own bytes.
        unsafe impl KernelArg for $t {
            fn param(&self) -> *mut c_void {
                (self as *const $t).cast_mut().cast()
            }
        }
    )*};
}
scalar_arg!(i32, u32, i64, u64, f32);

/// The arguments of one launch, borrowed until it is made.
pub struct Launch<'a> {
    function: &'a Function,
    stream: &'a Stream,
    params: Vec<*mut c_void>,
    _args: PhantomData<&'a ()>,
}

impl<'a> Launch<'a> {
    pub fn arg<A: KernelArg>(&mut self, a: &'a A) -> &mut Self {
        self.params.push(a.param());
        self
    }

    /// Queues the kernel on the stream.
    ///
    /// # Safety
    /// The arguments match the kernel's parameters in number, order and type, and every buffer
    /// holds what the kernel reads and writes at `cfg`.
    pub unsafe fn launch(&mut self, cfg: LaunchConfig) -> Result<(), DeviceError> {
        let doing = || format!("launching {}", self.function.name);
        self.function.module.gpu.bind(doing)?;
        // SAFETY: per the caller; `params` point at values borrowed for 'a.
        unsafe {
            result::launch_kernel(
                self.function.raw,
                cfg.grid_dim,
                cfg.block_dim,
                cfg.shared_mem_bytes,
                self.stream.raw(),
                &mut self.params,
            )
        }
        .map_err(failed("cuLaunchKernel", doing))
    }
}
