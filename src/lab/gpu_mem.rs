//! Device memory from `cuMemAlloc` or `cuMemAllocManaged`, freed with `cuMemFree` on drop (error
//! paths; a failure goes to the teardown log) or by [`DeviceMemory::free`] (timed paths). Only
//! made through a [`Gpu`], so the driver is known to be loaded.

use crate::device::cuda::driver::{bytes, failed, teardown};
use crate::device::cuda::Gpu;
use crate::device::DeviceError;
use cudarc::driver::{result, sys};
use std::sync::Arc;

pub(crate) struct DeviceMemory {
    gpu: Arc<Gpu>,
    pub ptr: sys::CUdeviceptr,
    pub bytes: usize,
    what: &'static str,
}

impl DeviceMemory {
    /// `cuMemAlloc`: device memory, committed at once.
    pub fn alloc(gpu: &Arc<Gpu>, n: usize) -> Result<DeviceMemory, DeviceError> {
        let doing = || format!("allocating {} of device memory", bytes(n));
        gpu.bind(doing)?;
        // SAFETY: a plain allocation, owned by the value returned.
        let ptr = unsafe { result::malloc_sync(n) }.map_err(failed("cuMemAlloc", doing))?;
        Ok(DeviceMemory {
            gpu: gpu.clone(),
            ptr,
            bytes: n,
            what: "device memory",
        })
    }

    /// `cuMemAllocManaged(CU_MEM_ATTACH_GLOBAL)`: one address valid on the host and the GPU; pages
    /// live where they were last touched and migrate on a fault.
    pub fn managed(gpu: &Arc<Gpu>, n: usize) -> Result<DeviceMemory, DeviceError> {
        let doing = || format!("allocating {} of managed memory", bytes(n));
        gpu.bind(doing)?;
        let global = sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL;
        // SAFETY: as above.
        let ptr = unsafe { result::malloc_managed(n, global) }
            .map_err(failed("cuMemAllocManaged", doing))?;
        Ok(DeviceMemory {
            gpu: gpu.clone(),
            ptr,
            bytes: n,
            what: "managed memory",
        })
    }

    /// The host's view of managed memory.
    ///
    /// # Safety
    /// The memory must be managed and no GPU work may use it while the slice lives (the context
    /// is synchronised here first).
    pub unsafe fn host_mut(&mut self) -> Result<&mut [u8], DeviceError> {
        self.gpu
            .synchronize(|| "before the host writes managed memory".into())?;
        // SAFETY: managed memory is addressable on the host at the same address; see above.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.bytes) })
    }

    /// Frees now, reporting the driver's answer.
    pub fn free(self) -> Result<(), DeviceError> {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; the Arc is moved out once.
        let gpu = unsafe { std::ptr::read(&this.gpu) };
        release(&gpu, this.ptr, this.bytes, this.what)
    }
}

/// `cuMemFree`, which waits for the work still using the memory (the driver synchronises first).
fn release(gpu: &Gpu, ptr: u64, n: usize, what: &str) -> Result<(), DeviceError> {
    let doing = || format!("freeing {} of {what}", bytes(n));
    // Freed even when the context could not be made current: it most likely still is.
    let bound = gpu.bind(doing);
    // SAFETY: `ptr` came from cuMemAlloc(Managed) and is freed once.
    let freed = unsafe { result::free_sync(ptr) }.map_err(failed("cuMemFree", doing));
    bound.and(freed)
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // Reached only when `free` was not called.
        teardown::record_err(release(&self.gpu, self.ptr, self.bytes, self.what));
    }
}
