//! The CUDA pool: a small safe wrapper over the driver's virtual-memory API.
//!
//! `cuMemAddressReserve` takes the address range once; each chunk is a `cuMemCreate` handle
//! mapped at its place with `cuMemMap` and opened with `cuMemSetAccess`. Releasing a chunk is
//! `cuMemUnmap` + `cuMemRelease`; the reservation is freed (`cuMemAddressFree`) only when the
//! backing is dropped, so the pool's device pointer never changes. Offloaded contents go to
//! pinned host memory (`cuMemHostAlloc`).
//!
//! Every driver failure names its function and the chunk; a release that fails is never lost
//! track of: a chunk whose unmap failed stays mapped (a wake keeps it), a handle whose release
//! failed is kept and tried again at drop, and what drop cannot release goes to the teardown log.

use super::{Backing, ChunkLayout, VmmError};
use crate::device::cuda::driver::{bytes, failed, teardown};
use crate::device::cuda::Gpu;
use cudarc::driver::{result, sys};
use std::sync::Arc;

pub use crate::device::cuda::driver::PinnedBuffer;

/// GPU `ordinal`'s context, or a typed error when libcuda or the device is missing.
pub fn open_context(ordinal: usize) -> Result<Arc<Gpu>, VmmError> {
    Ok(Gpu::open(ordinal)?)
}

/// Free and total device memory, as `cuMemGetInfo` reports them.
pub fn device_memory(gpu: &Gpu) -> Result<(usize, usize), VmmError> {
    Ok(gpu.memory_info()?)
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
pub fn granularity(gpu: &Gpu) -> Result<usize, VmmError> {
    let doing = || "asking the virtual-memory granularity".to_string();
    gpu.bind(doing)?;
    let prop = allocation_prop(gpu.cu_device());
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
    .map_err(failed("cuMemGetAllocationGranularity", doing))?;
    Ok(g)
}

/// A reserved device address range with chunks mapped on demand.
pub struct CudaBacking {
    gpu: Arc<Gpu>,
    layout: ChunkLayout,
    base: sys::CUdeviceptr,
    /// The physical allocation behind each mapped chunk; `None` while the chunk is released.
    handles: Vec<Option<sys::CUmemGenericAllocationHandle>>,
    /// Chunks mapped whose `cuMemSetAccess` failed and whose unmap then failed too: mapped but
    /// closed to the device, so no copy may touch them; a later `map_chunk` opens them.
    closed: Vec<bool>,
    /// Handles unmapped whose `cuMemRelease` failed: released again at drop.
    unreleased: Vec<sys::CUmemGenericAllocationHandle>,
}

/// One driver call on a chunk: `Err` names the function and the chunk.
fn chunk_call(
    result: sys::CUresult,
    op: &'static str,
    doing: impl FnOnce() -> String,
) -> Result<(), VmmError> {
    result
        .result()
        .map_err(failed(op, doing))
        .map_err(VmmError::from)
}

impl CudaBacking {
    /// Reserves `size` bytes in chunks of `chunk` bytes (both rounded up to the granularity; one
    /// chunk when `None`). No chunk is mapped yet (see [`super::SleepPool::new`]).
    pub fn reserve(gpu: &Arc<Gpu>, size: usize, chunk: Option<usize>) -> Result<Self, VmmError> {
        let layout = ChunkLayout::new(size, chunk, granularity(gpu)?)?;
        let doing = || format!("reserving {} of device addresses", bytes(layout.size));
        gpu.bind(doing)?;
        let mut base: sys::CUdeviceptr = 0;
        // Aligned to the granularity so every chunk offset is a legal mapping address.
        // SAFETY: reserves address space only; `base` receives the start.
        let reserved =
            unsafe { sys::cuMemAddressReserve(&mut base, layout.size, layout.granularity, 0, 0) };
        chunk_call(reserved, "cuMemAddressReserve", doing)?;
        Ok(CudaBacking {
            gpu: gpu.clone(),
            layout,
            base,
            handles: vec![None; layout.count()],
            closed: vec![false; layout.count()],
            unreleased: Vec::new(),
        })
    }

    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// `chunk 2 of 4 (2.0 MiB)`, for messages.
    fn chunk(&self, i: usize) -> String {
        let (_, len) = self.layout.range(i);
        format!("chunk {i} of {} ({})", self.layout.count(), bytes(len))
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<(), VmmError> {
        let chunks = self.layout.chunks_of(offset, len)?;
        let open = |i: usize| self.handles[i].is_some() && !self.closed[i];
        if chunks.into_iter().all(open) {
            Ok(())
        } else {
            Err(VmmError::Asleep(super::PoolState::AsleepDiscarded))
        }
    }

    /// Waits for the whole context: kernels on any stream may be reading or writing the pool.
    fn wait(&self, before: &'static str) -> Result<(), VmmError> {
        Ok(self
            .gpu
            .synchronize(|| format!("before {before} the pool"))?)
    }

    /// What drop could not release, each failure to the teardown log.
    fn release_all(&mut self) {
        teardown::record_err(self.gpu.synchronize(|| "before freeing a pool".into()));
        let mut stuck = Vec::new();
        for i in 0..self.handles.len() {
            if let Err(e) = self.unmap_chunk(i) {
                teardown::record(e);
                if self.handles[i].is_some() {
                    stuck.push(i);
                }
            }
        }
        // A failed unmap would cost the whole reservation: it gets one more try.
        for i in stuck {
            teardown::record_err(self.unmap_chunk(i));
        }
        for handle in std::mem::take(&mut self.unreleased) {
            let doing = || "releasing a pool chunk's memory once more".to_string();
            teardown::record_err(self.gpu.bind(doing));
            // SAFETY: an unmapped handle of ours whose release failed before.
            let released = unsafe { sys::cuMemRelease(handle) };
            teardown::record_err(released.result().map_err(failed("cuMemRelease", doing)));
        }
        let doing = || {
            format!(
                "freeing a pool's {} of device addresses",
                bytes(self.layout.size)
            )
        };
        if let Some(i) = self.handles.iter().position(Option::is_some) {
            teardown::record(format!(
                "{}: kept, because chunk {i} is still mapped in it (cuMemUnmap failed)",
                doing()
            ));
            return;
        }
        teardown::record_err(self.gpu.bind(doing));
        // SAFETY: nothing is mapped in the reservation; it is freed once.
        let freed = unsafe { sys::cuMemAddressFree(self.base, self.layout.size) };
        teardown::record_err(freed.result().map_err(failed("cuMemAddressFree", doing)));
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
        if self.handles[i].is_some() && !self.closed[i] {
            return Ok(());
        }
        let (offset, len) = self.layout.range(i);
        let addr = self.base + offset as u64;
        self.gpu.bind(|| format!("mapping {}", self.chunk(i)))?;
        let prop = allocation_prop(self.gpu.cu_device());
        if self.closed[i] {
            // Mapped by an earlier call that could neither open nor unmap it: open it now.
            self.open_chunk(i, &prop)?;
            self.closed[i] = false;
            return Ok(());
        }
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: `prop` describes pinned device memory on this context's device; `len` is a
        // multiple of its granularity.
        let created = unsafe { sys::cuMemCreate(&mut handle, len, &prop, 0) };
        chunk_call(created, "cuMemCreate", || {
            format!("creating {}", self.chunk(i))
        })?;
        // SAFETY: [addr, addr+len) lies in our reservation and is not mapped (handles[i] is None).
        let mapped = unsafe { sys::cuMemMap(addr, len, 0, handle, 0) };
        if let Err(e) = chunk_call(mapped, "cuMemMap", || format!("mapping {}", self.chunk(i))) {
            self.release_unmapped(handle, i);
            return Err(e);
        }
        if let Err(e) = self.open_chunk(i, &prop) {
            // SAFETY: undo the mapping and the allocation made above.
            let unmapped = unsafe { sys::cuMemUnmap(addr, len) };
            if unmapped != sys::CUresult::CUDA_SUCCESS {
                // Still mapped: kept as a closed chunk, which drop (or a sleep) unmaps and a
                // later map opens.
                self.handles[i] = Some(handle);
                self.closed[i] = true;
                self.undo(unmapped, "cuMemUnmap", i);
                return Err(e);
            }
            self.release_unmapped(handle, i);
            return Err(e);
        }
        self.handles[i] = Some(handle);
        Ok(())
    }

    fn unmap_chunk(&mut self, i: usize) -> Result<(), VmmError> {
        let Some(handle) = self.handles[i] else {
            return Ok(());
        };
        let (offset, len) = self.layout.range(i);
        self.gpu.bind(|| format!("unmapping {}", self.chunk(i)))?;
        // SAFETY: chunk i is mapped with `handle`; callers synchronised outstanding work.
        let unmapped = unsafe { sys::cuMemUnmap(self.base + offset as u64, len) };
        chunk_call(unmapped, "cuMemUnmap", || {
            format!("unmapping {}", self.chunk(i))
        })?;
        self.handles[i] = None;
        self.closed[i] = false;
        // SAFETY: `handle` is no longer mapped anywhere.
        let released = unsafe { sys::cuMemRelease(handle) };
        let doing = || format!("releasing {}'s memory", self.chunk(i));
        chunk_call(released, "cuMemRelease", doing).inspect_err(|_| self.unreleased.push(handle))
    }

    fn synchronize(&self) -> Result<(), VmmError> {
        self.wait("sleeping")
    }

    fn alloc_host(&self, len: usize) -> Result<PinnedBuffer, VmmError> {
        Ok(PinnedBuffer::new(
            &self.gpu,
            "a pool's offload buffer",
            len,
        )?)
    }

    fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<(), VmmError> {
        self.check_range(offset, dst.len())?;
        // Work on other streams (non-blocking ones do not wait for this copy) finishes first.
        self.wait("reading")?;
        let n = dst.len();
        let doing = || format!("copying {} from the pool at offset {offset}", bytes(n));
        self.gpu.bind(doing)?;
        // SAFETY: the device range is mapped (checked above) and `dst` is a valid host slice.
        unsafe { result::memcpy_dtoh_sync(dst, self.base + offset as u64) }
            .map_err(failed("cuMemcpyDtoH", doing))?;
        Ok(())
    }

    fn copy_from_host(&mut self, offset: usize, src: &[u8]) -> Result<(), VmmError> {
        self.check_range(offset, src.len())?;
        self.wait("writing")?;
        let doing = || {
            format!(
                "copying {} into the pool at offset {offset}",
                bytes(src.len())
            )
        };
        self.gpu.bind(doing)?;
        // SAFETY: as above.
        unsafe { result::memcpy_htod_sync(self.base + offset as u64, src) }
            .map_err(failed("cuMemcpyHtoD", doing))?;
        // From pageable memory the call may return before the data reaches the device; wait, so
        // kernels on non-blocking streams launched next see it.
        self.wait("using what was written to")
    }
}

impl CudaBacking {
    /// Grants the device read and write access to mapped chunk `i` (`cuMemSetAccess`).
    fn open_chunk(&self, i: usize, prop: &sys::CUmemAllocationProp) -> Result<(), VmmError> {
        let (offset, len) = self.layout.range(i);
        let access = sys::CUmemAccessDesc {
            location: prop.location,
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: the range is mapped (by the caller); one descriptor is passed.
        let opened = unsafe { sys::cuMemSetAccess(self.base + offset as u64, len, &access, 1) };
        chunk_call(opened, "cuMemSetAccess", || {
            format!("opening {} to the device", self.chunk(i))
        })
    }

    /// The cleanup of a failed map: its own failure goes to the teardown log (the map's error
    /// is the one returned).
    fn undo(&self, code: sys::CUresult, op: &'static str, i: usize) {
        let doing = || format!("undoing the mapping of {}", self.chunk(i));
        teardown::record_err(code.result().map_err(failed(op, doing)));
    }

    /// Releases `handle` (mapped nowhere) made for chunk `i`; a failure is recorded and the
    /// handle kept for drop to try again.
    fn release_unmapped(&mut self, handle: sys::CUmemGenericAllocationHandle, i: usize) {
        // SAFETY: the handle is ours and mapped nowhere.
        let code = unsafe { sys::cuMemRelease(handle) };
        if code != sys::CUresult::CUDA_SUCCESS {
            self.unreleased.push(handle);
        }
        self.undo(code, "cuMemRelease", i);
    }
}

impl Drop for CudaBacking {
    fn drop(&mut self) {
        self.release_all();
    }
}

/// A GPU pool: the state machine over the CUDA backing.
pub type CudaPool = super::SleepPool<CudaBacking>;

impl CudaPool {
    /// Reserves and maps a pool of `size` bytes on `gpu` in chunks of `chunk` bytes.
    pub fn create(gpu: &Arc<Gpu>, size: usize, chunk: Option<usize>) -> Result<Self, VmmError> {
        super::SleepPool::new(CudaBacking::reserve(gpu, size, chunk)?)
    }
}
