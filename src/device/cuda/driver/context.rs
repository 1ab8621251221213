//! One GPU and its primary context, retained while a [`Gpu`] lives and released when it drops.

use super::{failed, teardown};
use crate::device::DeviceError;
use cudarc::driver::{result, sys, DriverError};
use std::sync::Arc;

/// A GPU's primary context. Everything made on the GPU holds an `Arc` of it, so the context is
/// released only after the last of them.
#[derive(Debug)]
pub struct Gpu {
    ordinal: usize,
    device: sys::CUdevice,
    ctx: sys::CUcontext,
    /// Memory pools (`cuMemAllocAsync`) are supported; otherwise buffers use `cuMemAlloc`.
    pub(crate) async_alloc: bool,
}

// SAFETY: a CUDA context may be used from any thread once made current there (`bind`).
unsafe impl Send for Gpu {}
// SAFETY: as above; the struct itself is never mutated.
unsafe impl Sync for Gpu {}

/// `cuInit`; a driver that finds no device is [`DeviceError::NoGpu`].
fn init() -> Result<(), DeviceError> {
    if !super::super::driver_present() {
        return Err(DeviceError::NoGpu("libcuda not found".into()));
    }
    match result::init() {
        Err(DriverError(sys::CUresult::CUDA_ERROR_NO_DEVICE)) => {
            Err(DeviceError::NoGpu("the driver finds no device".into()))
        }
        r => r.map_err(failed("cuInit", || "initialising the CUDA driver".into())),
    }
}

impl Gpu {
    /// How many GPUs the driver reports.
    pub fn count() -> Result<usize, DeviceError> {
        init()?;
        let n = result::device::get_count()
            .map_err(failed("cuDeviceGetCount", || "counting the GPUs".into()))?;
        Ok(n.max(0) as usize)
    }

    /// GPU `ordinal` with its primary context retained and current on this thread.
    pub fn open(ordinal: usize) -> Result<Arc<Gpu>, DeviceError> {
        let count = Gpu::count()?;
        if ordinal >= count {
            return Err(DeviceError::NoGpu(format!(
                "{count} devices, asked for #{ordinal}"
            )));
        }
        let device = result::device::get(ordinal as i32)
            .map_err(failed("cuDeviceGet", || format!("opening GPU {ordinal}")))?;
        // SAFETY: `device` came from cuDeviceGet; the retain is released in `drop`.
        let ctx = unsafe { result::primary_ctx::retain(device) }
            .map_err(failed("cuDevicePrimaryCtxRetain", || {
                format!("retaining GPU {ordinal}'s primary context")
            }))?;
        // From here on, dropping `gpu` releases the context.
        let mut gpu = Gpu {
            ordinal,
            device,
            ctx,
            async_alloc: false,
        };
        gpu.bind(|| format!("opening GPU {ordinal}"))?;
        let pools = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED;
        gpu.async_alloc = gpu.attribute(pools, "MEMORY_POOLS_SUPPORTED")? > 0;
        Ok(Arc::new(gpu))
    }

    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    pub fn cu_device(&self) -> sys::CUdevice {
        self.device
    }

    pub fn cu_ctx(&self) -> sys::CUcontext {
        self.ctx
    }

    /// Makes the context current on this thread (driver calls act on the current context).
    pub fn bind(&self, doing: impl FnOnce() -> String) -> Result<(), DeviceError> {
        // SAFETY: `ctx` is retained for as long as `self` lives.
        unsafe { result::ctx::set_current(self.ctx) }.map_err(failed("cuCtxSetCurrent", || {
            format!(
                "making GPU {}'s context current ({})",
                self.ordinal,
                doing()
            )
        }))
    }

    /// Device attribute `attr`, called `name` in messages.
    pub fn attribute(&self, attr: sys::CUdevice_attribute, name: &str) -> Result<i32, DeviceError> {
        // SAFETY: a query of a valid device.
        unsafe { result::device::get_attribute(self.device, attr) }
            .map_err(failed("cuDeviceGetAttribute", || {
                format!("reading GPU {}'s attribute {name}", self.ordinal)
            }))
    }

    pub fn name(&self) -> Result<String, DeviceError> {
        result::device::get_name(self.device).map_err(failed("cuDeviceGetName", || {
            format!("reading GPU {}'s name", self.ordinal)
        }))
    }

    pub fn total_memory(&self) -> Result<usize, DeviceError> {
        // SAFETY: a query of a valid device.
        unsafe { result::device::total_mem(self.device) }
            .map_err(failed("cuDeviceTotalMem", || {
                format!("reading GPU {}'s memory size", self.ordinal)
            }))
    }

    /// Free and total device memory (`cuMemGetInfo`).
    pub fn memory_info(&self) -> Result<(usize, usize), DeviceError> {
        let doing = || format!("reading GPU {}'s free memory", self.ordinal);
        self.bind(doing)?;
        result::mem_get_info().map_err(failed("cuMemGetInfo", doing))
    }

    /// Waits for all work on every stream of the context; `doing` says what waits.
    pub fn synchronize(&self, doing: impl Fn() -> String) -> Result<(), DeviceError> {
        self.bind(&doing)?;
        result::ctx::synchronize().map_err(failed("cuCtxSynchronize", || {
            format!("waiting for GPU {} ({})", self.ordinal, doing())
        }))
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: retained once in `open`, released once here.
        teardown::record_err(
            unsafe { result::primary_ctx::release(self.device) }
                .map_err(failed("cuDevicePrimaryCtxRelease", || {
                    format!("releasing GPU {}'s primary context", self.ordinal)
                })),
        );
    }
}
