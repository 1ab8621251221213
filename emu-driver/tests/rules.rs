//! The emulated driver's own rules, called through its C entry points directly (the rlib): each
//! test breaks one rule the real driver enforces and checks the emulated one refuses it the same
//! way, and that the legal way works. Tests run one at a time on a reset context (they share the
//! one device and some of them poison its context on purpose).

mod common;

use common::*;
use cudarc::driver::sys::{CUdevice_attribute as A, CUfunction_attribute as F, CUresult};
use pagedkv_emu_cuda::api::*;
use std::ffi::c_void;

#[test]
fn the_device_says_what_it_is_and_has_h200_limits() {
    let _d = device();
    let mut name = [0i8; 128];
    ok(unsafe { cuDeviceGetName(name.as_mut_ptr(), 128, 0) });
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_str()
        .unwrap();
    assert!(
        name.contains("emulated") && name.contains("not a measurement"),
        "{name}"
    );
    let attr = |a: A| {
        let mut v = 0;
        ok(unsafe { cuDeviceGetAttribute(&mut v, a as u32, 0) });
        v
    };
    assert_eq!(attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 132);
    assert_eq!(attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), 9);
    assert_eq!(
        attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        227 * 1024
    );
    assert_eq!(
        attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
        228 * 1024
    );
    assert_eq!(
        attr(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR),
        65_536
    );
    assert_eq!(attr(A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED), 1);
    // The README states the L2 the device reports, once.
    let readme = include_str!("../README.md");
    let l2 = format!(
        "reports a {} MiB L2",
        attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE) >> 20
    );
    assert_eq!(readme.matches("MiB L2").count(), 1, "{readme}");
    assert!(readme.contains(&l2), "the README does not say it {l2}");
    let mut v = 0;
    let unknown = unsafe { cuDeviceGetAttribute(&mut v, 0x7fff_0000, 0) };
    assert_eq!(unknown, CUresult::CUDA_ERROR_INVALID_VALUE);
}

#[test]
fn memory_info_counts_allocations_and_handles_and_refuses_what_does_not_fit() {
    let _d = device();
    let before = free_bytes();
    let p = alloc(64 * MIB);
    assert_eq!(before - free_bytes(), 64 * MIB);
    let mut h = 0;
    ok(unsafe { cuMemCreate(&mut h, 4 * MIB, &prop(), 0) });
    assert_eq!(before - free_bytes(), 68 * MIB);
    let mut q = 0;
    let too_big = unsafe { cuMemAlloc_v2(&mut q, free_bytes() + 1) };
    assert_eq!(too_big, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    ok(unsafe { cuMemRelease(h) });
    ok(unsafe { cuMemFree_v2(p) });
    assert_eq!(free_bytes(), before);
    assert!(
        pagedkv_emu_cuda::live_objects().is_empty(),
        "{:?}",
        pagedkv_emu_cuda::live_objects()
    );
}

#[test]
fn a_call_without_a_current_context_fails() {
    let _d = device();
    let other = std::thread::spawn(|| {
        let mut p = 0;
        unsafe { cuMemAlloc_v2(&mut p, 4096) }
    })
    .join()
    .unwrap();
    assert_eq!(other, CUresult::CUDA_ERROR_INVALID_CONTEXT);
}

#[test]
fn a_freed_pointer_in_a_launch_is_an_illegal_address_naming_kernel_and_argument() {
    let _d = device();
    let Some(m) = stream_module() else { return };
    let f = function(m, "stream_copy").unwrap();
    let (dst, src) = (alloc(4096), alloc(4096));
    ok(launch_copy(f, std::ptr::null_mut(), dst, src, 256));
    ok(unsafe { cuCtxSynchronize() });
    ok(unsafe { cuMemFree_v2(src) });
    let s = non_blocking_stream();
    ok(launch_copy(f, s, dst, src, 256)); // queued: the GPU finds out when it runs
    assert_eq!(
        unsafe { cuStreamSynchronize(s) },
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
    );
    let why = pagedkv_emu_cuda::last_failure().unwrap();
    assert!(
        why.contains("stream_copy") && why.contains("(src)") && why.contains("freed"),
        "{why}"
    );
    // Sticky, as on a GPU: the context is unusable until reset.
    let mut p = 0;
    assert_eq!(
        unsafe { cuMemAlloc_v2(&mut p, 4096) },
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
    );
}

#[test]
fn a_launch_past_the_end_of_an_allocation_is_caught() {
    let _d = device();
    let Some(m) = stream_module() else { return };
    let f = function(m, "stream_copy").unwrap();
    let (dst, src) = (alloc(4096), alloc(4096));
    ok(launch_copy(f, std::ptr::null_mut(), dst, src + 16, 256)); // one vector too many
    assert_eq!(
        unsafe { cuCtxSynchronize() },
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
    );
    let why = pagedkv_emu_cuda::last_failure().unwrap();
    assert!(why.contains("stream_copy"), "{why}");
}

#[test]
fn a_name_the_module_does_not_hold_is_not_found() {
    let _d = device();
    let Some(m) = stream_module() else { return };
    assert!(function(m, "stream_read").is_ok());
    assert_eq!(
        function(m, "no_such_kernel").unwrap_err(),
        CUresult::CUDA_ERROR_NOT_FOUND
    );
    // A kernel of another module is not in this one.
    assert_eq!(
        function(m, "copy_blocks").unwrap_err(),
        CUresult::CUDA_ERROR_NOT_FOUND
    );
    let garbage = [0u8; 64];
    let mut other = std::ptr::null_mut();
    let r = unsafe { cuModuleLoadData(&mut other, garbage.as_ptr() as *const c_void) };
    assert_eq!(r, CUresult::CUDA_ERROR_INVALID_IMAGE);
    ok(unsafe { cuModuleUnload(m) });
}

#[test]
fn dynamic_shared_memory_above_48_kib_needs_the_opt_in() {
    let _d = device();
    let Some(m) = pagedkv::kernels::module("paged_attention") else {
        eprintln!("skipping: kernels were not built (no nvcc at build time)");
        return;
    };
    let mut module = std::ptr::null_mut();
    ok(unsafe { cuModuleLoadData(&mut module, m.fatbin.as_ptr() as *const c_void) });
    let name = "paged_attention_f16_d128_g4";
    let f = function(module, name).unwrap();
    let smem = pagedkv::kernels::ATTENTION_SMEM_BYTES;
    assert!(smem > 48 * 1024);
    // The launch is checked before its arguments are read: a stream that captures keeps it
    // from ever running.
    let s = non_blocking_stream();
    let launch = || {
        let mut params = [std::ptr::null_mut::<c_void>(); 32];
        let mut zero = [0u64; 32];
        for (p, z) in params.iter_mut().zip(zero.iter_mut()) {
            *p = z as *mut u64 as *mut c_void;
        }
        unsafe {
            cuLaunchKernel(
                f,
                1,
                1,
                1,
                128,
                1,
                1,
                smem,
                s,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
    };
    ok(unsafe { cuStreamBeginCapture_v2(s, 0) });
    assert_eq!(launch(), CUresult::CUDA_ERROR_INVALID_VALUE);
    let attr = F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as u32;
    ok(unsafe { cuFuncSetAttribute(f, attr, smem as i32) });
    ok(launch());
    let too_much = unsafe { cuFuncSetAttribute(f, attr, 228 * 1024) };
    assert_eq!(too_much, CUresult::CUDA_ERROR_INVALID_VALUE);
    let mut graph = std::ptr::null_mut();
    ok(unsafe { cuStreamEndCapture(s, &mut graph) });
    ok(unsafe { cuGraphDestroy(graph) });
    // Occupancy answers from the static report's registers and shared memory.
    let mut blocks = 0;
    ok(unsafe { cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut blocks, f, 128, smem as usize) });
    let report = pagedkv::kernels::report::report(pagedkv::kernels::report::DYNAMIC_SHARED_BYTES);
    if let Some(k) = pagedkv::kernels::report::find(&report, name) {
        assert_eq!(Some(blocks as u32), k.ctas_per_sm, "{k:?}");
    }
    assert!(blocks >= 1);
}

#[test]
fn maps_must_be_aligned_inside_a_reservation_and_not_overlap() {
    let _d = device();
    let g = pagedkv_emu_cuda::GRANULARITY;
    let mut base = 0;
    ok(unsafe { cuMemAddressReserve(&mut base, 4 * g, 0, 0, 0) });
    assert_eq!(base as usize % g, 0);
    let mut h = 0;
    ok(unsafe { cuMemCreate(&mut h, 2 * g, &prop(), 0) });
    let invalid = CUresult::CUDA_ERROR_INVALID_VALUE;
    assert_eq!(
        unsafe { cuMemMap(base + 4096, g, 0, h, 0) },
        invalid,
        "misaligned address"
    );
    assert_eq!(
        unsafe { cuMemMap(base, g + 4096, 0, h, 0) },
        invalid,
        "misaligned size"
    );
    assert_eq!(
        unsafe { cuMemMap(base, g, 4096, h, 0) },
        invalid,
        "misaligned offset"
    );
    assert_eq!(
        unsafe { cuMemMap(base, 4 * g, 0, h, 0) },
        invalid,
        "past the handle"
    );
    assert_eq!(
        unsafe { cuMemMap(base + 3 * g as u64, 2 * g, 0, h, 0) },
        invalid,
        "past the reservation"
    );
    ok(unsafe { cuMemMap(base, 2 * g, 0, h, 0) });
    assert_eq!(
        unsafe { cuMemMap(base + g as u64, g, 0, h, 0) },
        CUresult::CUDA_ERROR_ALREADY_MAPPED
    );
    assert_eq!(unsafe { cuMemUnmap(base, g) }, invalid, "half a mapping");
    assert_eq!(
        unsafe { cuMemAddressFree(base, 4 * g) },
        invalid,
        "still mapped"
    );
    ok(unsafe { cuMemUnmap(base, 2 * g) });
    ok(unsafe { cuMemRelease(h) });
    ok(unsafe { cuMemAddressFree(base, 4 * g) });
    assert!(
        pagedkv_emu_cuda::live_objects().is_empty(),
        "{:?}",
        pagedkv_emu_cuda::live_objects()
    );
}

#[test]
fn mapped_memory_is_unreachable_until_set_access_and_a_released_handle_goes_with_its_map() {
    let _d = device();
    let g = pagedkv_emu_cuda::GRANULARITY;
    let before = free_bytes();
    let mut base = 0;
    ok(unsafe { cuMemAddressReserve(&mut base, 2 * g, 0, 0, 0) });
    let mut h = 0;
    ok(unsafe { cuMemCreate(&mut h, g, &prop(), 0) });
    ok(unsafe { cuMemMap(base, g, 0, h, 0) });
    let data = random_bytes(4096, 3);
    let copy = |p: u64| unsafe { cuMemcpyHtoD_v2(p, data.as_ptr() as *const c_void, data.len()) };
    assert_eq!(
        copy(base),
        CUresult::CUDA_ERROR_INVALID_VALUE,
        "before cuMemSetAccess"
    );
    let d = access();
    assert_eq!(
        unsafe { cuMemSetAccess(base, 2 * g, &d, 1) },
        CUresult::CUDA_ERROR_INVALID_VALUE,
        "a hole"
    );
    ok(unsafe { cuMemSetAccess(base, g, &d, 1) });
    ok(copy(base));
    let mut back = vec![0u8; data.len()];
    ok(unsafe { cuMemcpyDtoH_v2(back.as_mut_ptr() as *mut c_void, base, back.len()) });
    assert_eq!(back, data);
    // Released while mapped: the memory stays until the unmap, then it is gone. (A copy from
    // pageable memory may still be under way when it returns: the host waits before unmapping.)
    ok(unsafe { cuCtxSynchronize() });
    ok(unsafe { cuMemRelease(h) });
    assert_eq!(before - free_bytes(), g);
    ok(unsafe { cuMemUnmap(base, g) });
    assert_eq!(free_bytes(), before);
    assert_eq!(
        copy(base),
        CUresult::CUDA_ERROR_INVALID_VALUE,
        "after the unmap"
    );
    // The address is still ours: a new handle maps at the same place.
    ok(unsafe { cuMemCreate(&mut h, g, &prop(), 0) });
    ok(unsafe { cuMemMap(base, g, 0, h, 0) });
    ok(unsafe { cuMemSetAccess(base, g, &d, 1) });
    ok(copy(base));
    ok(unsafe { cuCtxSynchronize() });
    ok(unsafe { cuMemUnmap(base, g) });
    ok(unsafe { cuMemRelease(h) });
    ok(unsafe { cuMemAddressFree(base, 2 * g) });
}

#[test]
fn a_read_before_synchronising_does_not_see_the_result() {
    let _d = device();
    let Some(m) = stream_module() else { return };
    let f = function(m, "stream_copy").unwrap();
    let n = 64 * 1024;
    let data = random_bytes(n, 7);
    let (src, dst) = (alloc(n), alloc(n));
    let s = non_blocking_stream();
    ok(unsafe { cuMemcpyHtoDAsync_v2(src, data.as_ptr() as *const c_void, n, s) });
    ok(launch_copy(f, s, dst, src, (n / 16) as i64));
    // Page-locked memory: the copy is asynchronous (to pageable memory the driver returns only
    // once it is done).
    let mut pinned = std::ptr::null_mut();
    ok(unsafe { cuMemHostAlloc(&mut pinned, n, 0) });
    let out = unsafe { std::slice::from_raw_parts_mut(pinned as *mut u8, n) };
    out.fill(0xAA);
    ok(unsafe { cuMemcpyDtoHAsync_v2(pinned, dst, n, s) });
    assert!(
        out.iter().all(|&b| b == 0xAA),
        "the copy landed before any synchronisation"
    );
    // A synchronous copy orders after the legacy stream, not after a non-blocking one.
    let mut early = vec![0xAAu8; n];
    ok(unsafe { cuMemcpyDtoH_v2(early.as_mut_ptr() as *mut c_void, dst, n) });
    assert_ne!(
        early, data,
        "a synchronous read waited for a non-blocking stream"
    );
    ok(unsafe { cuStreamSynchronize(s) });
    assert_eq!(out, &data[..]);
    // To pageable memory the copy is done when the call returns.
    let mut pageable = vec![0xAAu8; n];
    ok(unsafe { cuMemsetD8Async(dst, 5, n, s) });
    ok(unsafe { cuMemcpyDtoHAsync_v2(pageable.as_mut_ptr() as *mut c_void, dst, n, s) });
    assert!(pageable.iter().all(|&b| b == 5));
    ok(unsafe { cuMemFreeHost(pinned) });
}

#[test]
fn a_stream_waits_for_the_event_it_is_told_to() {
    let _d = device();
    let n = 4096;
    let (a_buf, b_buf) = (alloc(n), alloc(n));
    ok(unsafe { cuMemsetD8_v2(a_buf, 0, n) });
    let (a, b) = (non_blocking_stream(), non_blocking_stream());
    let mut e = std::ptr::null_mut();
    ok(unsafe { cuEventCreate(&mut e, 0) });
    let run = |wait: bool| {
        ok(unsafe { cuMemsetD8Async(a_buf, 7, n, a) });
        ok(unsafe { cuEventRecord(e, a) });
        if wait {
            ok(unsafe { cuStreamWaitEvent(b, e, 0) });
        }
        ok(unsafe { cuMemcpyDtoDAsync_v2(b_buf, a_buf, n, b) });
        let mut out = vec![1u8; n];
        ok(unsafe { cuMemcpyDtoHAsync_v2(out.as_mut_ptr() as *mut c_void, b_buf, n, b) });
        ok(unsafe { cuStreamSynchronize(b) });
        ok(unsafe { cuCtxSynchronize() });
        ok(unsafe { cuMemsetD8_v2(a_buf, 0, n) });
        out
    };
    // Without the wait, b runs ahead of a's memset (one of the orders a GPU allows).
    assert!(run(false).iter().all(|&x| x == 0));
    assert!(run(true).iter().all(|&x| x == 7));
    let mut ms = 0.0f32;
    let mut e2 = std::ptr::null_mut();
    ok(unsafe { cuEventCreate(&mut e2, 0) });
    ok(unsafe { cuEventRecord(e2, a) });
    assert_eq!(
        unsafe { cuEventElapsedTime(&mut ms, e, e2) },
        CUresult::CUDA_ERROR_NOT_READY
    );
    ok(unsafe { cuEventSynchronize(e2) });
    ok(unsafe { cuEventElapsedTime(&mut ms, e, e2) });
    assert!(ms >= 0.0);
}

#[test]
fn a_captured_graph_replays_its_work() {
    let _d = device();
    let n = 4096;
    let (x, y) = (alloc(n), alloc(n));
    let s = non_blocking_stream();
    ok(unsafe { cuStreamBeginCapture_v2(s, 0) });
    ok(unsafe { cuMemsetD8Async(x, 9, n, s) });
    ok(unsafe { cuMemcpyDtoDAsync_v2(y, x, n, s) });
    assert_eq!(
        unsafe { cuStreamSynchronize(s) },
        CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    );
    let mut graph = std::ptr::null_mut();
    ok(unsafe { cuStreamEndCapture(s, &mut graph) });
    let mut out = vec![0u8; n];
    ok(unsafe { cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut c_void, y, n) });
    assert!(out.iter().all(|&b| b == 0), "captured work ran");
    let mut exec = std::ptr::null_mut();
    ok(unsafe { cuGraphInstantiateWithFlags(&mut exec, graph, 0) });
    ok(unsafe { cuGraphLaunch(exec, s) });
    ok(unsafe { cuStreamSynchronize(s) });
    ok(unsafe { cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut c_void, y, n) });
    assert!(out.iter().all(|&b| b == 9));
    ok(unsafe { cuGraphExecDestroy(exec) });
    ok(unsafe { cuGraphDestroy(graph) });
}

#[test]
fn an_armed_fault_fails_exactly_the_call_it_names() {
    let _d = device();
    // SAFETY (edition 2021 API): tests in this file run one at a time under ONE_AT_A_TIME.
    std::env::set_var(
        "PAGEDKV_EMU_FAULTS",
        "cuMemAlloc@2=CUDA_ERROR_OUT_OF_MEMORY",
    );
    let mut p = [0u64; 3];
    let r: Vec<CUresult> = p
        .iter_mut()
        .map(|p| unsafe { cuMemAlloc_v2(p, 4096) })
        .collect();
    std::env::remove_var("PAGEDKV_EMU_FAULTS");
    assert_eq!(
        r,
        [
            CUresult::CUDA_SUCCESS,
            CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            CUresult::CUDA_SUCCESS
        ]
    );
    ok(unsafe { cuMemFree_v2(p[0]) });
    ok(unsafe { cuMemFree_v2(p[2]) });
}

#[test]
fn what_is_never_freed_is_listed() {
    let _d = device();
    let p = alloc(8192);
    let mut s = std::ptr::null_mut();
    ok(unsafe { cuStreamCreate(&mut s, 0) });
    let live = pagedkv_emu_cuda::live_objects();
    assert!(
        live.iter()
            .any(|l| l.contains("device allocation of 8192 bytes")),
        "{live:?}"
    );
    assert!(live.iter().any(|l| l.starts_with("stream")), "{live:?}");
    ok(unsafe { cuMemFree_v2(p) });
    ok(unsafe { cuStreamDestroy_v2(s) });
    assert!(
        pagedkv_emu_cuda::live_objects().is_empty(),
        "{:?}",
        pagedkv_emu_cuda::live_objects()
    );
}

#[test]
fn with_leaks_asked_for_a_process_that_leaks_fails_at_exit_naming_what() {
    let out = fixture("leak")
        .env("PAGEDKV_EMU_LEAKS", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("leaked at exit") && err.contains("device allocation of 12288 bytes"),
        "{err}"
    );
    // Without the setting the same process ends as it would on a GPU.
    let quiet = fixture("leak").output().unwrap();
    assert_eq!(quiet.status.code(), Some(0));
}

#[test]
fn a_copy_to_pageable_memory_refused_while_capturing_leaves_nothing_in_the_graph() {
    let _d = device();
    let n = 4096;
    let x = alloc(n);
    ok(unsafe { cuMemsetD8_v2(x, 3, n) });
    let s = non_blocking_stream();
    ok(unsafe { cuStreamBeginCapture_v2(s, 0) });
    let mut pageable = vec![0u8; n];
    let refused = unsafe { cuMemcpyDtoHAsync_v2(pageable.as_mut_ptr() as *mut c_void, x, n, s) };
    assert_eq!(refused, CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    let mut graph = std::ptr::null_mut();
    ok(unsafe { cuStreamEndCapture(s, &mut graph) });
    let mut exec = std::ptr::null_mut();
    ok(unsafe { cuGraphInstantiateWithFlags(&mut exec, graph, 0) });
    ok(unsafe { cuGraphLaunch(exec, s) });
    ok(unsafe { cuStreamSynchronize(s) });
    assert!(
        pageable.iter().all(|&b| b == 0),
        "the refused copy was replayed by the graph"
    );
    ok(unsafe { cuGraphExecDestroy(exec) });
    ok(unsafe { cuGraphDestroy(graph) });
    ok(unsafe { cuMemFree_v2(x) });
}

#[test]
fn a_refused_call_says_why_in_one_line_naming_itself() {
    let out = fixture("refusals").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].starts_with("pagedkv emulated driver: cuMemAddressReserve: size 3145728")
            && lines[0].contains("granularity"),
        "{err}"
    );
    assert!(
        lines[1].starts_with("pagedkv emulated driver: cuMemsetD8: 0x1234")
            && lines[1].contains("not in any allocation or mapping"),
        "{err}"
    );
}

#[test]
fn values_no_enum_holds_are_refused_not_read_as_enums() {
    let _d = device();
    // The caller's bytes: a type no CUmemAllocationType has, and a location no CUmemLocationType.
    let mut prop = prop();
    let raw = &mut prop as *mut _ as *mut u32;
    let mut h = 0;
    unsafe { raw.write(0x7fff_0001) };
    assert_eq!(
        unsafe { cuMemCreate(&mut h, pagedkv_emu_cuda::GRANULARITY, &prop, 0) },
        CUresult::CUDA_ERROR_INVALID_VALUE
    );
    let mut prop = self::prop();
    unsafe { (&mut prop as *mut _ as *mut u32).add(2).write(0x7fff_0002) };
    assert_eq!(
        unsafe { cuMemCreate(&mut h, pagedkv_emu_cuda::GRANULARITY, &prop, 0) },
        CUresult::CUDA_ERROR_INVALID_VALUE
    );
    let mut desc = access();
    unsafe { (&mut desc as *mut _ as *mut u32).add(2).write(0x7fff_0003) };
    let g = pagedkv_emu_cuda::GRANULARITY;
    let mut base = 0;
    ok(unsafe { cuMemAddressReserve(&mut base, g, 0, 0, 0) });
    ok(unsafe { cuMemCreate(&mut h, g, &self::prop(), 0) });
    ok(unsafe { cuMemMap(base, g, 0, h, 0) });
    assert_eq!(
        unsafe { cuMemSetAccess(base, g, &desc, 1) },
        CUresult::CUDA_ERROR_NOT_SUPPORTED
    );
    ok(unsafe { cuMemUnmap(base, g) });
    ok(unsafe { cuMemRelease(h) });
    ok(unsafe { cuMemAddressFree(base, g) });
}
