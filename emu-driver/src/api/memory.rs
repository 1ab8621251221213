//! Allocations and copies. Device pointers are host addresses of memory the driver mapped;
//! every copy checks its device range against a live allocation or an accessible mapping.

use super::id;
use crate::memory::Kind;
use crate::queue::Op;
use crate::state::{call, put, State, NULL_STREAM, R};
use cudarc::driver::sys::{CUdeviceptr, CUmemLocation, CUresult, CUstream};
use std::ffi::{c_uint, c_void};

fn invalid(what: String) -> CUresult {
    eprintln!("pagedkv emulated driver: {what}");
    CUresult::CUDA_ERROR_INVALID_VALUE
}

fn allocate(st: &mut State, out: *mut CUdeviceptr, bytes: usize, kind: Kind) -> R {
    if bytes == 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    if kind == Kind::Device {
        st.reserve_memory(bytes)?;
    }
    let ptr = st
        .memory
        .allocate(bytes, kind)
        .ok_or(CUresult::CUDA_ERROR_OUT_OF_MEMORY)?;
    // SAFETY: out-pointer from the caller.
    unsafe { put(out, ptr) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytes: usize) -> CUresult {
    call("cuMemAlloc_v2", true, |st| {
        allocate(st, dptr, bytes, Kind::Device)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    call("cuMemAllocAsync", true, |st| {
        if id(stream) != NULL_STREAM && !st.streams.contains_key(&id(stream)) {
            return Err(CUresult::CUDA_ERROR_INVALID_HANDLE);
        }
        // Usable in stream order from here; allocating now is one legal order.
        allocate(st, dptr, bytes, Kind::Device)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    call("cuMemFree_v2", true, |st| {
        // The driver synchronises before freeing: work still using the memory completes first.
        st.flush_all()?;
        // Managed memory is freed with cuMemFree too.
        st.memory
            .free(dptr, Kind::Device)
            .or_else(|| st.memory.free(dptr, Kind::Managed))
            .map(|_| ())
            .ok_or_else(|| {
                invalid(format!(
                    "cuMemFree({dptr:#x}): not the start of a live device or managed allocation"
                ))
            })
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, stream: CUstream) -> CUresult {
    call("cuMemFreeAsync", true, |st| {
        if !matches!(st.memory.find(dptr), Some((start, a)) if start == dptr && a.kind == Kind::Device)
        {
            return Err(invalid(format!(
                "cuMemFreeAsync({dptr:#x}): not the start of a live device allocation"
            )));
        }
        st.enqueue(id(stream), Op::Free { ptr: dptr })
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    call("cuMemGetInfo_v2", true, |st| {
        let used = st.used_memory();
        // SAFETY: out-pointers from the caller.
        unsafe {
            put(free, st.total_memory.saturating_sub(used))?;
            put(total, st.total_memory)
        }
    })
}

/// A copy between any two pointers (unified addressing): each is memory the driver holds (device,
/// managed or page-locked host memory: written or read when the copy runs) or pageable host
/// memory (a source is staged now; a destination is written before the call returns, after the
/// stream's earlier work, as the driver documents for pageable memory).
fn copy(st: &mut State, stream: u64, dst: u64, src: u64, len: usize, api: &str) -> R {
    if len == 0 {
        return Ok(());
    }
    let check = |st: &State, p: u64, role: &str| {
        st.device_range(p, len)
            .map_err(|why| invalid(format!("{api}: {role} {p:#x} {why}")))
    };
    let op = match (st.is_device(dst), st.is_device(src)) {
        (true, true) => {
            check(st, src, "source")?;
            check(st, dst, "destination")?;
            Op::DeviceToDevice { dst, src, len }
        }
        (true, false) => {
            check(st, dst, "destination")?;
            // SAFETY: the caller's host source holds `len` bytes.
            let bytes = unsafe { std::slice::from_raw_parts(src as *const u8, len) }.to_vec();
            Op::HostToDevice { dst, bytes }
        }
        (false, true) => {
            check(st, src, "source")?;
            // To pageable memory the driver returns only once the copy is done (it orders after
            // the stream's earlier work); to page-locked memory (`is_device` above) it does not.
            st.enqueue(
                stream,
                Op::DeviceToHost {
                    dst: dst as usize,
                    src,
                    len,
                },
            )?;
            if stream != NULL_STREAM {
                if st.streams.get(&stream).is_some_and(|s| s.capture.is_some()) {
                    return Err(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
                }
                let upto = st.last_seq(stream).expect("queued above");
                st.flush(stream, upto)?;
            }
            return Ok(());
        }
        (false, false) => {
            return Err(invalid(format!(
                "{api}: neither {dst:#x} nor {src:#x} is device memory"
            )))
        }
    };
    st.enqueue(stream, op)
}

/// A synchronous copy: the legacy default stream's order, then the host waits for it.
fn copy_sync(st: &mut State, dst: u64, src: u64, len: usize, api: &str) -> R {
    copy(st, NULL_STREAM, dst, src, len, api)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    len: usize,
) -> CUresult {
    call("cuMemcpyHtoD_v2", true, |st| {
        copy_sync(st, dst, src as u64, len, "cuMemcpyHtoD")
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    len: usize,
) -> CUresult {
    call("cuMemcpyDtoH_v2", true, |st| {
        copy_sync(st, dst as u64, src, len, "cuMemcpyDtoH")
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoD_v2(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    len: usize,
) -> CUresult {
    call("cuMemcpyDtoD_v2", true, |st| {
        copy_sync(st, dst, src, len, "cuMemcpyDtoD")
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    len: usize,
    stream: CUstream,
) -> CUresult {
    call("cuMemcpyHtoDAsync_v2", true, |st| {
        copy(st, id(stream), dst, src as u64, len, "cuMemcpyHtoDAsync")
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    len: usize,
    stream: CUstream,
) -> CUresult {
    call("cuMemcpyDtoHAsync_v2", true, |st| {
        copy(st, id(stream), dst as u64, src, len, "cuMemcpyDtoHAsync")
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    len: usize,
    stream: CUstream,
) -> CUresult {
    call("cuMemcpyDtoDAsync_v2", true, |st| {
        copy(st, id(stream), dst, src, len, "cuMemcpyDtoDAsync")
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyAsync(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    len: usize,
    stream: CUstream,
) -> CUresult {
    call("cuMemcpyAsync", true, |st| {
        copy(st, id(stream), dst, src, len, "cuMemcpyAsync")
    })
}

fn memset(st: &mut State, stream: u64, dst: u64, value: u8, len: usize) -> R {
    if len == 0 {
        return Ok(());
    }
    st.device_range(dst, len)
        .map_err(|why| invalid(format!("cuMemsetD8: {dst:#x} {why}")))?;
    st.enqueue(stream, Op::Memset { dst, value, len })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8_v2(dst: CUdeviceptr, value: u8, len: usize) -> CUresult {
    call("cuMemsetD8_v2", true, |st| {
        memset(st, NULL_STREAM, dst, value, len)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async(
    dst: CUdeviceptr,
    value: u8,
    len: usize,
    stream: CUstream,
) -> CUresult {
    call("cuMemsetD8Async", true, |st| {
        memset(st, id(stream), dst, value, len)
    })
}

fn host_alloc(st: &mut State, out: *mut *mut c_void, bytes: usize) -> R {
    if bytes == 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let ptr = st
        .memory
        .allocate(bytes, Kind::PinnedHost)
        .ok_or(CUresult::CUDA_ERROR_OUT_OF_MEMORY)?;
    // SAFETY: out-pointer from the caller.
    unsafe { put(out, ptr as *mut c_void) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(
    pp: *mut *mut c_void,
    bytes: usize,
    _flags: c_uint,
) -> CUresult {
    call("cuMemHostAlloc", true, |st| host_alloc(st, pp, bytes))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytes: usize) -> CUresult {
    call("cuMemAllocHost_v2", true, |st| host_alloc(st, pp, bytes))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    call("cuMemFreeHost", true, |st| {
        st.flush_all()?;
        st.memory
            .free(p as u64, Kind::PinnedHost)
            .map(|_| ())
            .ok_or_else(|| {
                invalid(format!(
                    "cuMemFreeHost({p:?}): not a live page-locked allocation"
                ))
            })
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    dptr: *mut CUdeviceptr,
    p: *mut c_void,
    flags: c_uint,
) -> CUresult {
    call("cuMemHostGetDevicePointer_v2", true, |st| {
        if flags != 0
            || !matches!(st.memory.find(p as u64), Some((_, a)) if a.kind == Kind::PinnedHost)
        {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: out-pointer from the caller; unified addressing: the same address.
        unsafe { put(dptr, p as u64) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    _flags: c_uint,
) -> CUresult {
    call("cuMemAllocManaged", true, |st| {
        allocate(st, dptr, bytes, Kind::Managed)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPrefetchAsync_v2(
    ptr: CUdeviceptr,
    len: usize,
    _location: CUmemLocation,
    _flags: c_uint,
    stream: CUstream,
) -> CUresult {
    call("cuMemPrefetchAsync_v2", true, |st| {
        if !matches!(st.memory.find(ptr), Some((_, a)) if a.kind == Kind::Managed) {
            return Err(invalid(format!(
                "cuMemPrefetchAsync: {ptr:#x} is not managed memory"
            )));
        }
        st.device_range(ptr, len)
            .map_err(|why| invalid(format!("cuMemPrefetchAsync: {ptr:#x} {why}")))?;
        // Host and device share the pages here: a prefetch moves nothing, but keeps its order.
        if id(stream) != NULL_STREAM && !st.streams.contains_key(&id(stream)) {
            return Err(CUresult::CUDA_ERROR_INVALID_HANDLE);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAdvise_v2(
    ptr: CUdeviceptr,
    len: usize,
    _advice: u32,
    _location: CUmemLocation,
) -> CUresult {
    call("cuMemAdvise_v2", true, |st| {
        st.device_range(ptr, len)
            .map_err(|why| invalid(format!("cuMemAdvise: {ptr:#x} {why}")))
    })
}
