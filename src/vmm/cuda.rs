//! The CUDA pool: a small safe wrapper over the driver's virtual-memory API.
//!
//! `cuMemAddressReserve` takes the address range once; each chunk is a `cuMemCreate` handle
//! mapped at its place with `cuMemMap` and opened with `cuMemSetAccess`. Releasing a chunk is
//! `cuMemUnmap` + `cuMemRelease`; the reservation is freed (`cuMemAddressFree`) only when the
//! backing is dropped, so the pool's device pointer never changes. Offloaded contents go to
//! pinned host memory (`cuMemHostAlloc`).
//!
//! Nothing here calls the driver unless [`crate::device::cuda::driver_present`] said yes (cudarc
//! panics when libcuda is missing): every entry point needs an `Arc<CudaContext>`, which only
//! [`open_context`] (or the device layer) hands out after that check.

use super::{Backing, ChunkLayout, VmmError};
use crate::device::cuda::driver_present;
use cudarc::driver::{result, sys, CudaContext, DriverError};
use std::sync::Arc;

/// Sets `ctx` current on this thread without touching cudarc's stored error state.
fn make_current(ctx: &CudaContext) -> Result<(), VmmError> {
    // SAFETY: `cu_ctx` is the live context `ctx` owns.
    unsafe { result::ctx::set_current(ctx.cu_ctx()) }.map_err(driver("cuCtxSetCurrent"))
}

fn driver(op: &'static str) -> impl FnOnce(DriverError) -> VmmError {
    move |source| VmmError::Driver { op, source }
}

/// A context on GPU `ordinal`, or a typed error when libcuda or the device is missing.
pub fn open_context(ordinal: usize) -> Result<Arc<CudaContext>, VmmError> {
    if !driver_present() {
        return Err(VmmError::NoGpu("libcuda not found".into()));
    }
    let count = CudaContext::device_count()
        .map_err(|e| VmmError::NoGpu(format!("the driver reports no device ({e})")))?;
    if ordinal >= count.max(0) as usize {
        return Err(VmmError::NoGpu(format!(
            "{count} devices, asked for #{ordinal}"
        )));
    }
    CudaContext::new(ordinal).map_err(driver("cuCtxCreate"))
}

/// Free and total device memory, as `cuMemGetInfo` reports them.
pub fn device_memory(ctx: &CudaContext) -> Result<(usize, usize), VmmError> {
    ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
    result::mem_get_info().map_err(driver("cuMemGetInfo"))
}

fn allocation_prop(device: sys::CUdevice) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
        location: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: device,
        },
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// The smallest unit `cuMemCreate` and `cuMemMap` accept on this device (2 MiB on current GPUs).
pub fn granularity(ctx: &CudaContext) -> Result<usize, VmmError> {
    ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
    let prop = allocation_prop(ctx.cu_device());
    let mut g = 0usize;
    // SAFETY: `prop` and `g` are valid for the call.
    unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut g,
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    }
    .result()
    .map_err(driver("cuMemGetAllocationGranularity"))?;
    Ok(g)
}

/// Page-locked host memory from `cuMemHostAlloc`: the offload buffer.
pub struct PinnedBuffer {
    ctx: Arc<CudaContext>,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer owns its allocation exclusively; the driver allows freeing from any thread
// once the context is bound, which `drop` does.
unsafe impl Send for PinnedBuffer {}

impl PinnedBuffer {
    pub fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<Self, VmmError> {
        ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        // SAFETY: a plain allocation; cuMemHostAlloc rejects a zero size with an error.
        let ptr =
            unsafe { result::malloc_host(len.max(1), 0) }.map_err(driver("cuMemHostAlloc"))?;
        Ok(PinnedBuffer {
            ctx: ctx.clone(),
            ptr: ptr.cast(),
            len,
        })
    }
}

impl AsRef<[u8]> for PinnedBuffer {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `len` bytes were allocated at `ptr` and live as long as `self`. Pinned memory
        // from cuMemHostAlloc is not zeroed, but every byte is plain data.
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
        if make_current(&self.ctx).is_ok() {
            // SAFETY: `ptr` came from cuMemHostAlloc and is freed once.
            let _ = unsafe { result::free_host(self.ptr.cast()) };
        }
    }
}

/// A reserved device address range with chunks mapped on demand.
pub struct CudaBacking {
    ctx: Arc<CudaContext>,
    layout: ChunkLayout,
    base: sys::CUdeviceptr,
    /// The physical allocation behind each mapped chunk; `None` while the chunk is released.
    handles: Vec<Option<sys::CUmemGenericAllocationHandle>>,
}

impl CudaBacking {
    /// Reserves `size` bytes in chunks of `chunk` bytes (both rounded up to the granularity; one
    /// chunk when `None`). No chunk is mapped yet (see [`super::SleepPool::new`]).
    pub fn reserve(
        ctx: &Arc<CudaContext>,
        size: usize,
        chunk: Option<usize>,
    ) -> Result<Self, VmmError> {
        let layout = ChunkLayout::new(size, chunk, granularity(ctx)?)?;
        let mut base: sys::CUdeviceptr = 0;
        // Aligned to the granularity so every chunk offset is a legal mapping address.
        // SAFETY: reserves address space only; `base` receives the start.
        unsafe { sys::cuMemAddressReserve(&mut base, layout.size, layout.granularity, 0, 0) }
            .result()
            .map_err(driver("cuMemAddressReserve"))?;
        Ok(CudaBacking {
            ctx: ctx.clone(),
            layout,
            base,
            handles: vec![None; layout.count()],
        })
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Makes the context current. Not `bind_to_thread`: that first returns (and clears) any
    /// error cudarc stored from an unrelated drop, which would fail or leak this pool's work.
    fn bind(&self) -> Result<(), VmmError> {
        make_current(&self.ctx)
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<(), VmmError> {
        let chunks = self.layout.chunks_of(offset, len)?;
        if self.handles[chunks].iter().all(Option::is_some) {
            Ok(())
        } else {
            Err(VmmError::Asleep(super::PoolState::AsleepDiscarded))
        }
    }
}

impl Backing for CudaBacking {
    type HostBuffer = PinnedBuffer;

    fn layout(&self) -> &ChunkLayout {
        &self.layout
    }

    fn base_address(&self) -> u64 {
        self.base
    }

    fn map_chunk(&mut self, i: usize) -> Result<(), VmmError> {
        if self.handles[i].is_some() {
            return Ok(());
        }
        self.bind()?;
        let (offset, len) = self.layout.range(i);
        let addr = self.base + offset as u64;
        let prop = allocation_prop(self.ctx.cu_device());
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: `prop` describes pinned device memory on this context's device; `len` is a
        // multiple of its granularity.
        unsafe { sys::cuMemCreate(&mut handle, len, &prop, 0) }
            .result()
            .map_err(driver("cuMemCreate"))?;
        // SAFETY: [addr, addr+len) lies in our reservation and is not mapped (handles[i] is None).
        if let Err(e) = unsafe { sys::cuMemMap(addr, len, 0, handle, 0) }.result() {
            // SAFETY: the handle is ours and mapped nowhere.
            let _ = unsafe { sys::cuMemRelease(handle) };
            return Err(VmmError::Driver {
                op: "cuMemMap",
                source: e,
            });
        }
        let access = sys::CUmemAccessDesc {
            location: prop.location,
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: the range was just mapped; one descriptor is passed.
        if let Err(e) = unsafe { sys::cuMemSetAccess(addr, len, &access, 1) }.result() {
            // SAFETY: undo the mapping and the allocation made above.
            unsafe {
                let _ = sys::cuMemUnmap(addr, len);
                let _ = sys::cuMemRelease(handle);
            }
            return Err(VmmError::Driver {
                op: "cuMemSetAccess",
                source: e,
            });
        }
        self.handles[i] = Some(handle);
        Ok(())
    }

    fn unmap_chunk(&mut self, i: usize) -> Result<(), VmmError> {
        let Some(handle) = self.handles[i] else {
            return Ok(());
        };
        self.bind()?;
        let (offset, len) = self.layout.range(i);
        // SAFETY: chunk i is mapped with `handle`; callers synchronised outstanding work.
        unsafe { sys::cuMemUnmap(self.base + offset as u64, len) }
            .result()
            .map_err(driver("cuMemUnmap"))?;
        self.handles[i] = None;
        // The mapping is gone; the handle is ours to release even if this reports an error.
        // SAFETY: `handle` is no longer mapped anywhere.
        unsafe { sys::cuMemRelease(handle) }
            .result()
            .map_err(driver("cuMemRelease"))
    }

    fn synchronize(&self) -> Result<(), VmmError> {
        // The whole context: kernels on any stream may be reading or writing the pool.
        self.ctx.synchronize().map_err(driver("cuCtxSynchronize"))
    }

    fn alloc_host(&self, len: usize) -> Result<PinnedBuffer, VmmError> {
        PinnedBuffer::new(&self.ctx, len)
    }

    fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<(), VmmError> {
        self.check_range(offset, dst.len())?;
        self.bind()?;
        // Work on other streams (non-blocking ones do not wait for this copy) finishes first.
        self.ctx.synchronize().map_err(driver("cuCtxSynchronize"))?;
        // SAFETY: the device range is mapped (checked above) and `dst` is a valid host slice.
        unsafe { result::memcpy_dtoh_sync(dst, self.base + offset as u64) }
            .map_err(driver("cuMemcpyDtoH"))
    }

    fn copy_from_host(&mut self, offset: usize, src: &[u8]) -> Result<(), VmmError> {
        self.check_range(offset, src.len())?;
        self.bind()?;
        self.ctx.synchronize().map_err(driver("cuCtxSynchronize"))?;
        // SAFETY: as above.
        unsafe { result::memcpy_htod_sync(self.base + offset as u64, src) }
            .map_err(driver("cuMemcpyHtoD"))?;
        // From pageable memory the call may return before the data reaches the device; wait, so
        // kernels on non-blocking streams launched next see it.
        self.ctx.synchronize().map_err(driver("cuCtxSynchronize"))
    }
}

impl Drop for CudaBacking {
    fn drop(&mut self) {
        if self.bind().is_err() {
            return;
        }
        let _ = self.ctx.synchronize();
        for i in 0..self.handles.len() {
            let _ = self.unmap_chunk(i);
        }
        // SAFETY: every chunk is unmapped; the reservation is freed once.
        let _ = unsafe { sys::cuMemAddressFree(self.base, self.layout.size) };
    }
}

/// A GPU pool: the state machine over the CUDA backing.
pub type CudaPool = super::SleepPool<CudaBacking>;

impl CudaPool {
    /// Reserves and maps a pool of `size` bytes on `ctx`'s device in chunks of `chunk` bytes.
    pub fn create(
        ctx: &Arc<CudaContext>,
        size: usize,
        chunk: Option<usize>,
    ) -> Result<Self, VmmError> {
        super::SleepPool::new(CudaBacking::reserve(ctx, size, chunk)?)
    }
}
