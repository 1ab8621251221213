//! Device memory from `cuMemAlloc` or `cuMemAllocManaged`, freed with `cuMemFree` on drop (error
//! paths) or by [`DeviceMemory::free`] (timed paths). Only made through a context that
//! [`crate::vmm::cuda::open_context`] or [`crate::device::cuda::CudaDevice::open`] handed out,
//! so the driver is known to be loaded.

use cudarc::driver::{result, sys, CudaContext, DriverError};
use std::sync::Arc;

pub(crate) struct DeviceMemory {
    ctx: Arc<CudaContext>,
    pub ptr: sys::CUdeviceptr,
    pub bytes: usize,
}

impl DeviceMemory {
    /// `cuMemAlloc`: device memory, committed at once.
    pub fn alloc(ctx: &Arc<CudaContext>, bytes: usize) -> Result<DeviceMemory, DriverError> {
        ctx.bind_to_thread()?;
        // SAFETY: a plain allocation, owned by the value returned.
        let ptr = unsafe { result::malloc_sync(bytes) }?;
        Ok(DeviceMemory {
            ctx: ctx.clone(),
            ptr,
            bytes,
        })
    }

    /// `cuMemAllocManaged(CU_MEM_ATTACH_GLOBAL)`: one address valid on the host and the GPU; pages
    /// live where they were last touched and migrate on a fault.
    pub fn managed(ctx: &Arc<CudaContext>, bytes: usize) -> Result<DeviceMemory, DriverError> {
        ctx.bind_to_thread()?;
        // SAFETY: as above.
        let ptr =
            unsafe { result::malloc_managed(bytes, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL) }?;
        Ok(DeviceMemory {
            ctx: ctx.clone(),
            ptr,
            bytes,
        })
    }

    /// The host's view of managed memory.
    ///
    /// # Safety
    /// The memory must be managed and no GPU work may use it while the slice lives (the context
    /// is synchronised here first).
    pub unsafe fn host_mut(&mut self) -> Result<&mut [u8], DriverError> {
        self.ctx.synchronize()?;
        // SAFETY: managed memory is addressable on the host at the same address; see above.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.bytes) })
    }

    /// Frees now, reporting the driver's answer.
    pub fn free(self) -> Result<(), DriverError> {
        let (ptr, ctx) = (self.ptr, self.ctx.clone());
        std::mem::forget(self);
        ctx.bind_to_thread()?;
        ctx.synchronize()?;
        // SAFETY: `ptr` came from cuMemAlloc(Managed) and is freed once, after the GPU is idle.
        unsafe { result::free_sync(ptr) }
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() && self.ctx.synchronize().is_ok() {
            // SAFETY: as in `free`; reached only when `free` was not called.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}
