//! Device memory owned by a stream: allocated, copied, set and freed in the stream's order
//! (`cuMemAllocAsync`/`cuMemFreeAsync` where the GPU has memory pools, as cudarc does).

use super::{bytes, failed, teardown, Stream};
use crate::device::DeviceError;
use cudarc::driver::{result, sys, DeviceRepr, ValidAsZeroBits};
use std::marker::PhantomData;
use std::sync::Arc;

/// `len` elements of `T` in device memory, called `name` in messages, freed on its stream when
/// dropped.
#[derive(Debug)]
pub struct DeviceBuffer<T> {
    stream: Arc<Stream>,
    /// Kernel arguments point at this field (`KernelArg`).
    ptr: sys::CUdeviceptr,
    len: usize,
    name: String,
    _elems: PhantomData<T>,
}

// SAFETY: the buffer owns its allocation; the address is plain data.
unsafe impl<T: Send> Send for DeviceBuffer<T> {}
// SAFETY: shared references only read the address.
unsafe impl<T: Sync> Sync for DeviceBuffer<T> {}

impl<T> DeviceBuffer<T> {
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn num_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The address kernel arguments take (see `KernelArg`).
    pub(crate) fn ptr_field(&self) -> &sys::CUdeviceptr {
        &self.ptr
    }

    /// `name (2.0 KiB)`, for messages.
    fn what(&self) -> String {
        format!("{} ({})", self.name, bytes(self.num_bytes()))
    }
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        let gpu = self.stream.gpu();
        let doing = || format!("freeing {}", self.what());
        teardown::record_err(gpu.bind(doing));
        // SAFETY: allocated in `Stream::alloc`, freed once, after the work queued on its stream.
        let freed = if gpu.async_alloc {
            unsafe { result::free_async(self.ptr, self.stream.raw()) }
                .map_err(failed("cuMemFreeAsync", doing))
        } else {
            unsafe { result::free_sync(self.ptr) }.map_err(failed("cuMemFree", doing))
        };
        teardown::record_err(freed);
    }
}

impl Stream {
    /// `len` uninitialised elements.
    ///
    /// # Safety
    /// Nothing may read the memory before it is written.
    pub unsafe fn alloc<T: DeviceRepr>(
        self: &Arc<Self>,
        name: &str,
        len: usize,
    ) -> Result<DeviceBuffer<T>, DeviceError> {
        let n = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            DeviceError::Invalid(format!("{name}: {len} elements overflow the address space"))
        })?;
        let doing = || format!("allocating {name} ({})", bytes(n));
        self.gpu().bind(doing)?;
        // SAFETY: a plain allocation, owned by the buffer returned.
        let ptr = if self.gpu().async_alloc {
            unsafe { result::malloc_async(self.raw(), n) }
                .map_err(failed("cuMemAllocAsync", doing))?
        } else {
            unsafe { result::malloc_sync(n) }.map_err(failed("cuMemAlloc", doing))?
        };
        Ok(DeviceBuffer {
            stream: self.clone(),
            ptr,
            len,
            name: name.to_string(),
            _elems: PhantomData,
        })
    }

    /// `len` zeroed elements.
    pub fn alloc_zeros<T: DeviceRepr + ValidAsZeroBits>(
        self: &Arc<Self>,
        name: &str,
        len: usize,
    ) -> Result<DeviceBuffer<T>, DeviceError> {
        // SAFETY: zeroed below before anything can read it.
        let mut buf = unsafe { self.alloc(name, len) }?;
        self.memset(&mut buf, 0)?;
        Ok(buf)
    }

    /// A new buffer holding a copy of `src`.
    pub fn upload<T: DeviceRepr>(
        self: &Arc<Self>,
        name: &str,
        src: &[T],
    ) -> Result<DeviceBuffer<T>, DeviceError> {
        // SAFETY: written whole below before anything can read it.
        let mut buf = unsafe { self.alloc(name, src.len()) }?;
        self.write(&mut buf, src)?;
        Ok(buf)
    }

    /// Copies `src` to the start of `dst` (which holds at least as many elements).
    pub fn write<T: DeviceRepr>(
        &self,
        dst: &mut DeviceBuffer<T>,
        src: &[T],
    ) -> Result<(), DeviceError> {
        check_len(src.len(), dst)?;
        let doing = || {
            format!(
                "copying {} to {} on the GPU",
                bytes(size_of_val(src)),
                dst.what()
            )
        };
        self.gpu().bind(doing)?;
        // SAFETY: `dst` holds at least `src.len()` elements; the driver stages pageable memory
        // before returning, so `src` may go once the call has.
        unsafe { result::memcpy_htod_async(dst.ptr, src, self.raw()) }
            .map_err(failed("cuMemcpyHtoDAsync", doing))
    }

    /// Sets every byte of `dst` to `value`.
    pub fn memset<T>(&self, dst: &mut DeviceBuffer<T>, value: u8) -> Result<(), DeviceError> {
        let doing = || format!("setting the bytes of {} to {value:#04x}", dst.what());
        self.gpu().bind(doing)?;
        // SAFETY: the range is the buffer's own.
        unsafe { result::memset_d8_async(dst.ptr, value, dst.num_bytes(), self.raw()) }
            .map_err(failed("cuMemsetD8Async", doing))
    }

    /// Copies all of `src` into the start of `dst` on the device.
    pub fn copy<T>(
        &self,
        src: &DeviceBuffer<T>,
        dst: &mut DeviceBuffer<T>,
    ) -> Result<(), DeviceError> {
        check_len(src.len, dst)?;
        let doing = || format!("copying {} to {}", src.what(), dst.what());
        self.gpu().bind(doing)?;
        // SAFETY: both ranges lie in their buffers.
        unsafe { result::memcpy_dtod_async(dst.ptr, src.ptr, src.num_bytes(), self.raw()) }
            .map_err(failed("cuMemcpyDtoDAsync", doing))
    }

    /// The buffer's contents, once the work queued before has run.
    pub fn download<T: DeviceRepr + Default + Clone>(
        &self,
        src: &DeviceBuffer<T>,
    ) -> Result<Vec<T>, DeviceError> {
        let mut out = vec![T::default(); src.len];
        let doing = || format!("copying {} from the GPU", src.what());
        self.gpu().bind(doing)?;
        // SAFETY: `out` holds the buffer's length and is not read before the stream is
        // synchronised below.
        unsafe { result::memcpy_dtoh_async(&mut out, src.ptr, self.raw()) }
            .map_err(failed("cuMemcpyDtoHAsync", doing))?;
        if let Err(e) = self.synchronize(doing) {
            // The copy may still land later: `out` must outlive it, so it is leaked, not freed.
            std::mem::forget(out);
            return Err(e);
        }
        Ok(out)
    }
}

fn check_len<T>(n: usize, dst: &DeviceBuffer<T>) -> Result<(), DeviceError> {
    if n > dst.len {
        return Err(DeviceError::Invalid(format!(
            "{n} elements copied into {}, which holds {}",
            dst.name, dst.len
        )));
    }
    Ok(())
}
