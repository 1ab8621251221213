//! The driver as compute-sanitizer would be: misaligned accesses on their real addresses,
//! initcheck (`PAGEDKV_EMU_INITCHECK=1`), host code touching device memory, and racecheck-lite
//! over the streams' queues. Each test breaks the rule and checks the report, and that the
//! legal way passes.

mod common;

use common::*;
use cudarc::driver::sys::{CUevent, CUresult, CUstream};
use pagedkv_emu_cuda::api::*;
use pagedkv_emu_cuda::{last_failure, GRANULARITY};
use std::ffi::c_void;

fn sync(s: CUstream) -> CUresult {
    unsafe { cuStreamSynchronize(s) }
}

fn host_to_device(dst: u64, data: &[u8]) {
    ok(unsafe { cuMemcpyHtoD_v2(dst, data.as_ptr() as *const c_void, data.len()) });
}

fn failure() -> String {
    last_failure().unwrap_or_default()
}

/// `stream_read(out, src, n)`: one CTA of 256 threads; thread 0 stores a 4-byte fold to `out[0]`.
fn launch_read(
    f: cudarc::driver::sys::CUfunction,
    s: CUstream,
    out: u64,
    src: u64,
    n: i64,
) -> CUresult {
    launch_copy(f, s, out, src, n)
}

#[test]
fn misaligned_vectors_and_scalars_are_caught_on_their_real_addresses() {
    let _d = device();
    let Some(m) = stream_module() else { return };
    let copy = function(m, "stream_copy").unwrap();
    let read = function(m, "stream_read").unwrap();
    let (dst, src, out) = (alloc(4096), alloc(4096), alloc(64));
    host_to_device(src, &random_bytes(4096, 1));
    // Aligned: fine.
    ok(launch_copy(copy, std::ptr::null_mut(), dst, src, 255));
    ok(launch_read(read, std::ptr::null_mut(), out, src, 255));
    ok(unsafe { cuCtxSynchronize() });
    // 16-byte loads from src + 4: in bounds, aligned relative to the argument, not on the GPU.
    ok(launch_copy(copy, std::ptr::null_mut(), dst, src + 4, 255));
    assert_eq!(
        unsafe { cuCtxSynchronize() },
        CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
    );
    let why = failure();
    assert!(
        why.contains("stream_copy") && why.contains("'src'") && why.contains("16-byte aligned"),
        "{why}"
    );
    reset();
    let read = function(stream_module().unwrap(), "stream_read").unwrap();
    let (src, out) = (alloc(4096), alloc(64));
    host_to_device(src, &random_bytes(4096, 1));
    // A 4-byte store to out + 1.
    ok(launch_read(read, std::ptr::null_mut(), out + 1, src, 255));
    assert_eq!(
        unsafe { cuCtxSynchronize() },
        CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
    );
    let why = failure();
    assert!(
        why.contains("stream_read") && why.contains("'out'") && why.contains("4-byte aligned"),
        "{why}"
    );
}

#[test]
fn initcheck_reports_a_kernel_reading_device_memory_never_written() {
    let _d = device();
    let Some(m) = stream_module() else { return };
    let copy = function(m, "stream_copy").unwrap();
    let n = 4096;
    set_env("PAGEDKV_EMU_INITCHECK", Some("1"));
    let (src, dst) = (alloc(n), alloc(n));
    // Half of src written: the kernel reads the other half.
    host_to_device(src, &random_bytes(n / 2, 2));
    ok(launch_copy(
        copy,
        std::ptr::null_mut(),
        dst,
        src,
        (n / 16) as i64,
    ));
    let r = unsafe { cuCtxSynchronize() };
    let why = failure();
    set_env("PAGEDKV_EMU_INITCHECK", None);
    assert_eq!(r, CUresult::CUDA_ERROR_LAUNCH_FAILED, "{why}");
    assert!(
        why.contains("initcheck") && why.contains("'src'") && why.contains("never written"),
        "{why}"
    );
    assert!(why.contains(&format!("byte offset {}", n / 2)), "{why}");

    reset();
    let copy = function(stream_module().unwrap(), "stream_copy").unwrap();
    set_env("PAGEDKV_EMU_INITCHECK", Some("1"));
    let (src, dst, dst2) = (alloc(n), alloc(n), alloc(n));
    // Written by a copy, a memset, the kernel itself, and a device-to-device copy of them.
    host_to_device(src, &random_bytes(n / 2, 3));
    ok(unsafe { cuMemsetD8_v2(src + (n / 2) as u64, 1, n / 2) });
    ok(launch_copy(
        copy,
        std::ptr::null_mut(),
        dst,
        src,
        (n / 16) as i64,
    ));
    ok(unsafe { cuMemcpyDtoD_v2(dst2, dst, n) });
    ok(launch_copy(
        copy,
        std::ptr::null_mut(),
        src,
        dst2,
        (n / 16) as i64,
    ));
    ok(unsafe { cuCtxSynchronize() });
    // A copy carries what was never written along: reading its destination is still a report.
    let (never, never2) = (alloc(n), alloc(n));
    ok(unsafe { cuMemcpyDtoD_v2(never2, never, n) });
    ok(launch_copy(copy, std::ptr::null_mut(), dst, never2, 1));
    let r = unsafe { cuCtxSynchronize() };
    let why = failure();
    set_env("PAGEDKV_EMU_INITCHECK", None);
    assert_eq!(r, CUresult::CUDA_ERROR_LAUNCH_FAILED, "{why}");
    assert!(
        why.contains("'src'") && why.contains("byte offset 0"),
        "{why}"
    );
}

#[test]
fn initcheck_tracks_mapped_memory_through_its_handle() {
    let _d = device();
    let Some(m) = stream_module() else { return };
    let copy = function(m, "stream_copy").unwrap();
    let g = GRANULARITY;
    set_env("PAGEDKV_EMU_INITCHECK", Some("1"));
    let mut base = 0;
    ok(unsafe { cuMemAddressReserve(&mut base, 2 * g, 0, 0, 0) });
    let mut h = 0;
    ok(unsafe { cuMemCreate(&mut h, g, &prop(), 0) });
    ok(unsafe { cuMemMap(base, g, 0, h, 0) });
    ok(unsafe { cuMemSetAccess(base, g, &access(), 1) });
    let out = alloc(4096);
    host_to_device(base, &random_bytes(4096, 4));
    ok(launch_copy(copy, std::ptr::null_mut(), out, base, 256));
    ok(unsafe { cuCtxSynchronize() });
    // The same handle mapped again elsewhere shares what was written; the rest was not.
    ok(unsafe { cuMemMap(base + g as u64, g, 0, h, 0) });
    ok(unsafe { cuMemSetAccess(base + g as u64, g, &access(), 1) });
    ok(launch_copy(
        copy,
        std::ptr::null_mut(),
        out,
        base + g as u64,
        256,
    ));
    ok(unsafe { cuCtxSynchronize() });
    ok(launch_copy(
        copy,
        std::ptr::null_mut(),
        out,
        base + g as u64 + 4096,
        1,
    ));
    let r = unsafe { cuCtxSynchronize() };
    let why = failure();
    set_env("PAGEDKV_EMU_INITCHECK", None);
    assert_eq!(r, CUresult::CUDA_ERROR_LAUNCH_FAILED, "{why}");
    assert!(why.contains("never written"), "{why}");
}

#[test]
fn without_initcheck_nothing_is_tracked() {
    let _d = device();
    let Some(m) = stream_module() else { return };
    let copy = function(m, "stream_copy").unwrap();
    let (src, dst) = (alloc(4096), alloc(4096));
    ok(launch_copy(copy, std::ptr::null_mut(), dst, src, 256));
    ok(unsafe { cuCtxSynchronize() });
}

#[test]
fn host_code_reading_device_memory_faults_naming_it() {
    for (mode, names) in [
        ("read-device", "a live device allocation of 4096 bytes"),
        ("read-mapped", "a cuMemMap mapping of 2097152 bytes"),
    ] {
        let out = fixture(mode).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{mode}: {err}");
        assert!(
            err.contains("host code accessed device memory") && err.contains(names),
            "{mode}: {err}"
        );
    }
}

fn event() -> CUevent {
    let mut e = std::ptr::null_mut();
    ok(unsafe { cuEventCreate(&mut e, 0) });
    e
}

/// A read of `x` on stream `a` and a `cuMemFreeAsync(x)` on `b`, ordered by an event when
/// `ordered`; then the streams synchronised in the order given. The first error, if any.
fn read_then_free(ordered: bool, a_first: bool) -> CUresult {
    let n = 4096;
    let (x, y) = (alloc(n), alloc(n));
    ok(unsafe { cuMemsetD8_v2(x, 1, n) });
    // The legacy stream's memset is asynchronous too: wait for it, so that only the two below
    // can race.
    ok(unsafe { cuCtxSynchronize() });
    let (a, b) = (non_blocking_stream(), non_blocking_stream());
    ok(unsafe { cuMemcpyDtoDAsync_v2(y, x, n, a) });
    if ordered {
        let e = event();
        ok(unsafe { cuEventRecord(e, a) });
        ok(unsafe { cuStreamWaitEvent(b, e, 0) });
    }
    let free = unsafe { cuMemFreeAsync(x, b) };
    if free != CUresult::CUDA_SUCCESS {
        return free;
    }
    let (first, second) = if a_first { (a, b) } else { (b, a) };
    let r = sync(first);
    if r != CUresult::CUDA_SUCCESS {
        return r;
    }
    sync(second)
}

#[test]
fn a_free_racing_a_read_on_another_stream_is_reported_whatever_runs_first() {
    let _d = device();
    for a_first in [true, false] {
        reset();
        assert_eq!(
            read_then_free(false, a_first),
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            "a_first: {a_first}"
        );
        let why = failure();
        assert!(
            why.starts_with("race: cuMemFreeAsync on stream")
                && why.contains("a copy from it on stream")
                && why.contains("device allocation of 4096 bytes"),
            "{why}"
        );
        // An event between them orders them: no report, whatever the order.
        reset();
        assert_eq!(
            read_then_free(true, a_first),
            CUresult::CUDA_SUCCESS,
            "{}",
            failure()
        );
    }
}

#[test]
fn a_read_queued_after_an_unordered_free_is_a_race_too() {
    let _d = device();
    let n = 4096;
    let (x, y) = (alloc(n), alloc(n));
    ok(unsafe { cuMemsetD8_v2(x, 1, n) });
    ok(unsafe { cuCtxSynchronize() });
    let (a, b) = (non_blocking_stream(), non_blocking_stream());
    ok(unsafe { cuMemFreeAsync(x, b) });
    // Not yet run, so the copy's own checks pass; nothing orders it with the free.
    ok(unsafe { cuMemcpyDtoDAsync_v2(y, x, n, a) });
    assert_eq!(sync(a), CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    assert!(failure().starts_with("race:"), "{}", failure());
    // Once the host has waited for the free, a later use is no race (it is a use after free,
    // which the copy's own check refuses).
    reset();
    let (x, y) = (alloc(n), alloc(n));
    let (a, b) = (non_blocking_stream(), non_blocking_stream());
    ok(unsafe { cuMemFreeAsync(x, b) });
    ok(sync(b));
    assert_eq!(
        unsafe { cuMemcpyDtoDAsync_v2(y, x, n, a) },
        CUresult::CUDA_ERROR_INVALID_VALUE
    );
    ok(sync(a));
}

#[test]
fn an_unmap_by_the_host_racing_a_read_it_never_waited_for_is_reported() {
    let _d = device();
    let g = GRANULARITY;
    for wait in [false, true] {
        reset();
        let mut base = 0;
        ok(unsafe { cuMemAddressReserve(&mut base, g, 0, 0, 0) });
        let mut h = 0;
        ok(unsafe { cuMemCreate(&mut h, g, &prop(), 0) });
        ok(unsafe { cuMemMap(base, g, 0, h, 0) });
        ok(unsafe { cuMemSetAccess(base, g, &access(), 1) });
        ok(unsafe { cuMemsetD8_v2(base, 1, g) });
        ok(unsafe { cuCtxSynchronize() });
        let y = alloc(4096);
        let a = non_blocking_stream();
        ok(unsafe { cuMemcpyDtoDAsync_v2(y, base, 4096, a) });
        if wait {
            ok(sync(a));
        }
        // Destroying a stream does not wait for its work (the emulator runs it now, so the read
        // has run before the unmap here; on a GPU it may not have).
        ok(unsafe { cuStreamDestroy_v2(a) });
        ok(unsafe { cuMemUnmap(base, g) });
        let next = unsafe { cuCtxSynchronize() };
        if wait {
            ok(next);
        } else {
            assert_eq!(next, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
            let why = failure();
            assert!(
                why.starts_with("race: cuMemUnmap (by the host)")
                    && why.contains("a copy from it on stream"),
                "{why}"
            );
        }
    }
}

#[test]
fn a_synchronous_copy_to_or_from_page_locked_memory_orders_the_host_after_it() {
    let _d = device();
    let g = GRANULARITY;
    let n = 4096;
    // (copy, whether the host has waited for it when the call returns)
    let cases: [(&str, bool); 4] = [
        ("cuMemcpyDtoH", true),
        ("cuMemcpyHtoD", true),
        ("cuMemcpyDtoHAsync", false),
        ("cuMemcpyDtoD", false),
    ];
    for (call, waited) in cases {
        reset();
        let mut base = 0;
        ok(unsafe { cuMemAddressReserve(&mut base, g, 0, 0, 0) });
        let mut h = 0;
        ok(unsafe { cuMemCreate(&mut h, g, &prop(), 0) });
        ok(unsafe { cuMemMap(base, g, 0, h, 0) });
        ok(unsafe { cuMemSetAccess(base, g, &access(), 1) });
        ok(unsafe { cuMemsetD8_v2(base, 1, g) });
        ok(unsafe { cuCtxSynchronize() });
        let mut pinned = std::ptr::null_mut();
        ok(unsafe { cuMemAllocHost_v2(&mut pinned, n) });
        let device = alloc(n);
        ok(unsafe {
            match call {
                "cuMemcpyDtoH" => cuMemcpyDtoH_v2(pinned, base, n),
                "cuMemcpyHtoD" => cuMemcpyHtoD_v2(base, pinned as *const c_void, n),
                "cuMemcpyDtoHAsync" => cuMemcpyDtoHAsync_v2(pinned, base, n, std::ptr::null_mut()),
                _ => cuMemcpyDtoD_v2(device, base, n),
            }
        });
        ok(unsafe { cuMemUnmap(base, g) });
        let next = unsafe { cuCtxSynchronize() };
        if waited {
            assert_eq!(next, CUresult::CUDA_SUCCESS, "{call}: {}", failure());
        } else {
            assert_eq!(next, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS, "{call}");
            assert!(
                failure().starts_with("race: cuMemUnmap"),
                "{call}: {}",
                failure()
            );
        }
    }
}
