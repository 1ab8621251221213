//! Page-locked host memory (`cuMemHostAlloc`): the offload buffer of a sleeping pool, the host
//! side of swaps (mapped into the device's address space), the source of fast copies.

use super::{bytes, failed, teardown, Gpu};
use crate::device::DeviceError;
use cudarc::driver::{result, sys};
use std::sync::Arc;

pub struct PinnedBuffer {
    gpu: Arc<Gpu>,
    ptr: *mut u8,
    len: usize,
    name: String,
}

// SAFETY: the buffer owns its allocation exclusively; the driver frees it from any thread once
// the context is current, which `drop` makes it.
unsafe impl Send for PinnedBuffer {}

impl PinnedBuffer {
    /// `len` bytes (at least one: the driver refuses zero), called `name` in messages.
    pub fn new(gpu: &Arc<Gpu>, name: &str, len: usize) -> Result<Self, DeviceError> {
        PinnedBuffer::with_flags(gpu, name, len, 0)
    }

    /// The same, mapped into the device's address space ([`Self::device_ptr`]) and usable from
    /// any context.
    pub fn mapped(gpu: &Arc<Gpu>, name: &str, len: usize) -> Result<Self, DeviceError> {
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        PinnedBuffer::with_flags(gpu, name, len, flags)
    }

    fn with_flags(gpu: &Arc<Gpu>, name: &str, len: usize, flags: u32) -> Result<Self, DeviceError> {
        let doing = || format!("allocating {name} ({} of pinned host memory)", bytes(len));
        gpu.bind(doing)?;
        // SAFETY: a plain allocation, owned by the value returned.
        let ptr = unsafe { result::malloc_host(len.max(1), flags) }
            .map_err(failed("cuMemHostAlloc", doing))?;
        Ok(PinnedBuffer {
            gpu: gpu.clone(),
            ptr: ptr.cast(),
            len,
            name: name.to_string(),
        })
    }

    /// The address kernels and copies use for this memory (made with [`Self::mapped`]).
    pub fn device_ptr(&self) -> Result<u64, DeviceError> {
        let doing = || format!("mapping {} into the device's address space", self.name);
        self.gpu.bind(doing)?;
        let mut dev: sys::CUdeviceptr = 0;
        // SAFETY: `ptr` is the start of a live allocation of this context.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, self.ptr.cast(), 0) }
            .result()
            .map_err(failed("cuMemHostGetDevicePointer", doing))?;
        Ok(dev)
    }

    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }
}

impl AsRef<[u8]> for PinnedBuffer {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `len` bytes were allocated at `ptr` and live as long as `self`. Pinned memory
        // is not zeroed, but every byte is plain data.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl AsMut<[u8]> for PinnedBuffer {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        let doing = || {
            format!(
                "freeing {} ({} of pinned host memory)",
                self.name,
                bytes(self.len)
            )
        };
        teardown::record_err(self.gpu.bind(doing));
        // SAFETY: `ptr` came from cuMemHostAlloc and is freed once.
        teardown::record_err(
            unsafe { result::free_host(self.ptr.cast()) }.map_err(failed("cuMemFreeHost", doing)),
        );
    }
}
