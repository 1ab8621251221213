//! Allocations and copies. Device pointers are host addresses of memory the driver mapped;
//! every copy checks its device range against a live allocation or an accessible mapping.

use super::{id, RawLocation};
use crate::access::initcheck_requested;
use crate::errors::{Failure, R};
use crate::memory::Kind;
use crate::state::{call, put, State, NULL_STREAM};
use crate::streams::Op;
use cudarc::driver::sys::{CUdeviceptr, CUresult, CUstream};
use std::ffi::{c_uint, c_void};

fn allocate(st: &mut State, out: *mut CUdeviceptr, bytes: usize, kind: Kind) -> R {
    if bytes == 0 {
        return Err(Failure::invalid("0 bytes"));
    }
    if kind == Kind::Device {
        st.reserve_memory(bytes)?;
    }
    let ptr = st
        .memory
        .allocate(bytes, kind, initcheck_requested())
        .ok_or_else(|| {
            Failure::new(
                CUresult::CUDA_ERROR_OUT_OF_MEMORY,
                format!("the host refused a mapping of {bytes} bytes"),
            )
        })?;
    // SAFETY: out-pointer from the caller.
    unsafe { put(out, ptr) }
}

fn stream_exists(st: &State, stream: u64) -> R {
    if stream == NULL_STREAM || st.streams.contains_key(&stream) {
        Ok(())
    } else {
        Err(CUresult::CUDA_ERROR_INVALID_HANDLE.into())
    }
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
        stream_exists(st, id(stream))?;
        // Usable in stream order from here; allocating now is one legal order.
        allocate(st, dptr, bytes, Kind::Device)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    call("cuMemFree_v2", true, |st| {
        // The driver synchronises before freeing: work still using the memory completes first.
        st.synchronize_all()?;
        // Managed memory is freed with cuMemFree too.
        st.memory
            .free(dptr, Kind::Device)
            .or_else(|| st.memory.free(dptr, Kind::Managed))
            .map(|_| ())
            .ok_or_else(|| {
                Failure::invalid(format!(
                    "{dptr:#x} is not the start of a live device or managed allocation{}",
                    freed_already(st, dptr)
                ))
            })
    })
}

/// ": it was freed already" when `ptr` starts a freed allocation, for a refusal.
fn freed_already(st: &State, ptr: u64) -> &'static str {
    match st.memory.find_freed(ptr) {
        Some((start, _)) if start == ptr => ": it was freed already",
        _ => "",
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, stream: CUstream) -> CUresult {
    call("cuMemFreeAsync", true, |st| {
        stream_exists(st, id(stream))?;
        let allocation = st
            .memory
            .find(dptr)
            .filter(|&(start, a)| start == dptr && a.kind == Kind::Device);
        let Some((_, a)) = allocation else {
            return Err(Failure::invalid(format!(
                "{dptr:#x} is not the start of a live device allocation{}",
                freed_already(st, dptr)
            )));
        };
        if let Some(queued) = a.free_queued {
            return Err(Failure::invalid(format!(
                "{dptr:#x} is freed twice: a cuMemFreeAsync of it is already queued on {}",
                crate::racecheck::stream_name(queued)
            )));
        }
        st.enqueue(id(stream), Op::Free { ptr: dptr })?;
        if id(stream) != NULL_STREAM {
            st.memory.queue_free(dptr, id(stream));
        }
        Ok(())
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

/// Which sides of a copy its API says are device memory.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sides {
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
    /// `cuMemcpyAsync`: either, told apart by unified addressing.
    Unified,
}

fn page_locked(st: &State, ptr: u64) -> bool {
    matches!(st.memory.find(ptr), Some((_, a)) if a.kind == Kind::PinnedHost)
}

/// A copy between any two pointers (unified addressing): each is memory the driver holds (device,
/// managed or page-locked host memory: written or read when the copy runs) or pageable host
/// memory (a source is staged now; a destination is written before the call returns, after the
/// stream's earlier work, as the driver documents for pageable memory). A side the API names as
/// device memory must be the driver's. `stream` is `None` for the synchronous calls, which run on
/// the legacy stream and, when they copy to host memory or from page-locked memory, return only
/// once the copy is done ("API synchronization behavior" in the driver API reference: not from
/// pageable memory, which is staged, nor between two device buffers).
fn copy(st: &mut State, stream: Option<u64>, dst: u64, src: u64, len: usize, sides: Sides) -> R {
    let synchronous = stream.is_none();
    let stream = stream.unwrap_or(NULL_STREAM);
    if len == 0 {
        return Ok(());
    }
    stream_exists(st, stream)?;
    let device_dst = matches!(sides, Sides::HostToDevice | Sides::DeviceToDevice);
    let device_src = matches!(sides, Sides::DeviceToHost | Sides::DeviceToDevice);
    for (needed, p, role) in [
        (device_dst, dst, "destination"),
        (device_src, src, "source"),
    ] {
        if needed && !st.is_device(p) {
            return Err(Failure::invalid(format!(
                "the {role} {p:#x} is not device memory"
            )));
        }
    }
    let check = |st: &State, p: u64, role: &str| {
        st.device_range(p, len)
            .map_err(|why| Failure::invalid(format!("{role} {p:#x} {why}")))
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
            // To host memory the driver returns only once the copy is done (it orders after the
            // stream's earlier work), which a capturing stream cannot do: refused before
            // anything is queued or captured.
            if st.streams.get(&stream).is_some_and(|s| s.capture.is_some()) {
                return Err(Failure::new(
                    CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                    "a copy to pageable host memory on a capturing stream",
                ));
            }
            st.enqueue(
                stream,
                Op::DeviceToHost {
                    dst: dst as usize,
                    src,
                    len,
                },
            )?;
            if stream != NULL_STREAM {
                let upto = st.last_seq(stream).expect("queued above");
                st.flush(stream, upto)?;
            }
            st.order.host_waits_stream(stream);
            return Ok(());
        }
        (false, false) => {
            return Err(Failure::invalid(format!(
                "neither {dst:#x} nor {src:#x} is device memory"
            )))
        }
    };
    // Pageable destinations returned above.
    let host_waits = synchronous && (page_locked(st, dst) || page_locked(st, src));
    st.enqueue(stream, op)?;
    if host_waits {
        st.order.host_waits_stream(stream);
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    len: usize,
) -> CUresult {
    call("cuMemcpyHtoD_v2", true, |st| {
        copy(st, None, dst, src as u64, len, Sides::HostToDevice)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    len: usize,
) -> CUresult {
    call("cuMemcpyDtoH_v2", true, |st| {
        copy(st, None, dst as u64, src, len, Sides::DeviceToHost)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoD_v2(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    len: usize,
) -> CUresult {
    call("cuMemcpyDtoD_v2", true, |st| {
        copy(st, None, dst, src, len, Sides::DeviceToDevice)
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
        copy(
            st,
            Some(id(stream)),
            dst,
            src as u64,
            len,
            Sides::HostToDevice,
        )
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
        copy(
            st,
            Some(id(stream)),
            dst as u64,
            src,
            len,
            Sides::DeviceToHost,
        )
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
        copy(st, Some(id(stream)), dst, src, len, Sides::DeviceToDevice)
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
        copy(st, Some(id(stream)), dst, src, len, Sides::Unified)
    })
}

fn memset(st: &mut State, stream: u64, dst: u64, value: u8, len: usize) -> R {
    if len == 0 {
        return Ok(());
    }
    stream_exists(st, stream)?;
    st.device_range(dst, len)
        .map_err(|why| Failure::invalid(format!("{dst:#x} {why}")))?;
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
        return Err(Failure::invalid("0 bytes"));
    }
    let ptr = st
        .memory
        .allocate(bytes, Kind::PinnedHost, false)
        .ok_or_else(|| {
            Failure::new(
                CUresult::CUDA_ERROR_OUT_OF_MEMORY,
                format!("the host refused a mapping of {bytes} bytes"),
            )
        })?;
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
        st.synchronize_all()?;
        st.memory
            .free(p as u64, Kind::PinnedHost)
            .map(|_| ())
            .ok_or_else(|| {
                Failure::invalid(format!(
                    "{p:?} is not the start of a live page-locked allocation{}",
                    freed_already(st, p as u64)
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
        if flags != 0 {
            return Err(Failure::invalid(format!("flags {flags} (must be 0)")));
        }
        if !matches!(st.memory.find(p as u64), Some((_, a)) if a.kind == Kind::PinnedHost) {
            return Err(Failure::invalid(format!(
                "{p:?} is not in a live page-locked allocation"
            )));
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
    _location: RawLocation,
    _flags: c_uint,
    stream: CUstream,
) -> CUresult {
    call("cuMemPrefetchAsync_v2", true, |st| {
        if !matches!(st.memory.find(ptr), Some((_, a)) if a.kind == Kind::Managed) {
            return Err(Failure::invalid(format!("{ptr:#x} is not managed memory")));
        }
        st.device_range(ptr, len)
            .map_err(|why| Failure::invalid(format!("{ptr:#x} {why}")))?;
        // Host and device share the pages here: a prefetch moves nothing, but keeps its order.
        stream_exists(st, id(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAdvise_v2(
    ptr: CUdeviceptr,
    len: usize,
    _advice: u32,
    _location: RawLocation,
) -> CUresult {
    call("cuMemAdvise_v2", true, |st| {
        st.device_range(ptr, len)
            .map_err(|why| Failure::invalid(format!("{ptr:#x} {why}")))
    })
}
