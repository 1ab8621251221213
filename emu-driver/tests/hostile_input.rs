//! No input crashes the driver or passes for what it is not: ranges that wrap or cut mappings,
//! a pointer freed twice, and fault specs that would never fire.

mod common;

use common::*;
use cudarc::driver::sys::CUresult;
use pagedkv_emu_cuda::api::*;
use pagedkv_emu_cuda::GRANULARITY;
use std::ffi::c_void;

#[test]
fn set_access_on_part_of_a_mapping_is_refused_and_the_rest_stays_closed() {
    let _d = device();
    let g = GRANULARITY;
    // The reviewer's case: a 4 MiB mapping opened for its first 2 MiB, then written past them.
    let mut base = 0;
    ok(unsafe { cuMemAddressReserve(&mut base, 2 * g, 0, 0, 0) });
    let mut h = 0;
    ok(unsafe { cuMemCreate(&mut h, 2 * g, &prop(), 0) });
    ok(unsafe { cuMemMap(base, 2 * g, 0, h, 0) });
    let d = access();
    assert_eq!(
        unsafe { cuMemSetAccess(base, g, &d, 1) },
        CUresult::CUDA_ERROR_INVALID_VALUE,
        "half a mapping"
    );
    assert_eq!(
        unsafe { cuMemSetAccess(base + g as u64, g, &d, 1) },
        CUresult::CUDA_ERROR_INVALID_VALUE,
        "the second half"
    );
    let data = random_bytes(4096, 11);
    let copy = |p: u64| unsafe { cuMemcpyHtoD_v2(p, data.as_ptr() as *const c_void, data.len()) };
    assert_eq!(copy(base + g as u64), CUresult::CUDA_ERROR_INVALID_VALUE);
    assert_eq!(copy(base), CUresult::CUDA_ERROR_INVALID_VALUE);
    // The whole mapping is what the driver opens.
    ok(unsafe { cuMemSetAccess(base, 2 * g, &d, 1) });
    ok(copy(base + g as u64));
    let mut back = vec![0u8; data.len()];
    ok(unsafe {
        cuMemcpyDtoH_v2(
            back.as_mut_ptr() as *mut c_void,
            base + g as u64,
            back.len(),
        )
    });
    assert_eq!(back, data);
    ok(unsafe { cuMemUnmap(base, 2 * g) });
    ok(unsafe { cuMemRelease(h) });
    ok(unsafe { cuMemAddressFree(base, 2 * g) });
}

#[test]
fn no_range_crashes_the_driver_or_trips_it_up() {
    let _d = device();
    let g = GRANULARITY;
    let mut base = 0;
    ok(unsafe { cuMemAddressReserve(&mut base, 4 * g, 0, 0, 0) });
    let mut h = 0;
    ok(unsafe { cuMemCreate(&mut h, 2 * g, &prop(), 0) });
    ok(unsafe { cuMemMap(base, 2 * g, 0, h, 0) });
    let d = access();
    ok(unsafe { cuMemSetAccess(base, 2 * g, &d, 1) });
    let small = alloc(4096);
    let ptrs = [
        0,
        1,
        small,
        small + 4095,
        base,
        base + 1,
        base + g as u64,
        base + 2 * g as u64,
        base + 4 * g as u64,
        u64::MAX - 4095,
        u64::MAX,
    ];
    let sizes = [0, 1, 4096, g, 2 * g, 3 * g, usize::MAX - g + 1, usize::MAX];
    // Whether `[p, p + n)` is memory a memset may write.
    let inside = |p: u64, n: usize| {
        let within = |start: u64, len: usize| {
            p >= start
                && p.checked_add(n as u64)
                    .is_some_and(|e| e <= start + len as u64)
        };
        n == 0 || within(base, 2 * g) || within(small, 4096)
    };
    for &p in &ptrs {
        for &n in &sizes {
            // Everything here is either legal or refused with a reason; an internal error
            // (CUDA_ERROR_UNKNOWN, a caught panic) or a crash is a bug.
            let memset = unsafe { cuMemsetD8_v2(p, 0, n) };
            assert_eq!(
                memset == CUresult::CUDA_SUCCESS,
                inside(p, n),
                "cuMemsetD8({p:#x}, {n}): {memset:?}"
            );
            let results = unsafe {
                [
                    ("cuMemcpyDtoD", cuMemcpyDtoD_v2(p, base, n)),
                    ("cuMemcpyDtoD back", cuMemcpyDtoD_v2(base, p, n)),
                    ("cuMemSetAccess", cuMemSetAccess(p, n, &d, 1)),
                    ("cuMemAdvise", cuMemAdvise_v2(p, n, 0, location())),
                ]
            };
            for (call, r) in results {
                assert_ne!(r, CUresult::CUDA_ERROR_UNKNOWN, "{call}({p:#x}, {n})");
            }
            // The legacy stream's memsets and copies are asynchronous: the host waits for them
            // before it unmaps (racecheck would rightly report it otherwise).
            ok(unsafe { cuCtxSynchronize() });
            let map = unsafe { cuMemMap(p, n, 0, h, 0) };
            assert_ne!(map, CUresult::CUDA_ERROR_UNKNOWN, "cuMemMap({p:#x}, {n})");
            if map == CUresult::CUDA_SUCCESS {
                // Only into the free half of the reservation.
                assert!(
                    p == base + 2 * g as u64 && n <= 2 * g,
                    "cuMemMap({p:#x}, {n})"
                );
                ok(unsafe { cuMemUnmap(p, n) });
            }
            // Only the exact range unmaps.
            let unmap = unsafe { cuMemUnmap(p, n) };
            assert_ne!(
                unmap,
                CUresult::CUDA_ERROR_UNKNOWN,
                "cuMemUnmap({p:#x}, {n})"
            );
            if unmap == CUresult::CUDA_SUCCESS {
                assert_eq!((p, n), (base, 2 * g));
                ok(unsafe { cuMemMap(base, 2 * g, 0, h, 0) });
                ok(unsafe { cuMemSetAccess(base, 2 * g, &d, 1) });
            }
            let free = unsafe { cuMemAddressFree(p, n) };
            assert_ne!(
                free,
                CUresult::CUDA_SUCCESS,
                "cuMemAddressFree({p:#x}, {n})"
            );
        }
    }
    // Still sane: the mapping works and everything can be given back.
    ok(unsafe { cuMemsetD8_v2(base, 7, 2 * g) });
    ok(unsafe { cuCtxSynchronize() });
    ok(unsafe { cuMemUnmap(base, 2 * g) });
    ok(unsafe { cuMemRelease(h) });
    ok(unsafe { cuMemAddressFree(base, 4 * g) });
    ok(unsafe { cuMemFree_v2(small) });
}

#[test]
fn a_pointer_freed_twice_on_a_stream_is_refused_before_the_stream_runs() {
    let _d = device();
    let x = alloc(4096);
    let s = non_blocking_stream();
    ok(unsafe { cuMemFreeAsync(x, s) });
    assert_eq!(
        unsafe { cuMemFreeAsync(x, s) },
        CUresult::CUDA_ERROR_INVALID_VALUE,
        "the same pointer again, same stream"
    );
    let t = non_blocking_stream();
    assert_eq!(
        unsafe { cuMemFreeAsync(x, t) },
        CUresult::CUDA_ERROR_INVALID_VALUE,
        "the same pointer again, another stream"
    );
    ok(unsafe { cuStreamSynchronize(s) });
    assert_eq!(
        unsafe { cuMemFreeAsync(x, s) },
        CUresult::CUDA_ERROR_INVALID_VALUE,
        "once it ran"
    );
    assert_eq!(
        unsafe { cuMemFree_v2(x) },
        CUresult::CUDA_ERROR_INVALID_VALUE
    );
    ok(unsafe { cuStreamDestroy_v2(s) });
    ok(unsafe { cuStreamDestroy_v2(t) });
    let live = pagedkv_emu_cuda::live_objects();
    assert!(live.is_empty(), "{live:?}");
}

#[test]
fn a_fault_spec_that_would_never_fire_stops_the_process_naming_it() {
    for spec in [
        "cuMemAloc@1=CUDA_ERROR_OUT_OF_MEMORY",
        "cumemalloc@1=CUDA_ERROR_OUT_OF_MEMORY",
        "cuMemAlloc@1=CUDA_SUCCESS",
    ] {
        let out = fixture("leak")
            .env("PAGEDKV_EMU_FAULTS", spec)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{spec}: {err}");
        assert!(err.contains(spec), "{spec}: {err}");
        assert_eq!(err.lines().count(), 1, "{spec}: {err}");
    }
    // initcheck takes 1 or 0, nothing it would have to guess at.
    let out = fixture("leak")
        .env("PAGEDKV_EMU_INITCHECK", "yes")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("PAGEDKV_EMU_INITCHECK=\"yes\""), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // The spelling the README documents fires.
    let out = fixture("leak")
        .env(
            "PAGEDKV_EMU_FAULTS",
            "cuMemAlloc@1=CUDA_ERROR_OUT_OF_MEMORY",
        )
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "the allocation should have failed"
    );
}
