//! Helpers of the driver's tests, which call its C entry points directly (the rlib). Tests run
//! one at a time on a reset context (they share the one device and some of them poison its
//! context on purpose).
#![allow(dead_code)]

use cudarc::driver::sys::{
    CUfunction, CUmemAccessDesc, CUmemAccess_flags, CUmemAllocationProp, CUmemAllocationType,
    CUmemLocation, CUmemLocationType, CUmodule, CUresult, CUstream, CUstream_flags,
};
use pagedkv_emu_cuda::api::*;
use std::ffi::{c_void, CString};
use std::sync::{Mutex, MutexGuard};

pub const MIB: usize = 1 << 20;
pub static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

pub fn ok(r: CUresult) {
    assert_eq!(r, CUresult::CUDA_SUCCESS);
}

/// The device with a fresh primary context current on this thread.
pub fn device() -> MutexGuard<'static, ()> {
    let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    reset();
    guard
}

/// A fresh primary context (the sticky error gone), for a test that poisons it more than once.
pub fn reset() {
    unsafe {
        ok(cuInit(0));
        ok(cuDevicePrimaryCtxReset_v2(0));
        let mut ctx = std::ptr::null_mut();
        ok(cuDevicePrimaryCtxRetain(&mut ctx, 0));
        ok(cuCtxSetCurrent(ctx));
    }
}

/// Sets (or with `None` removes) an environment variable the driver reads.
pub fn set_env(name: &str, value: Option<&str>) {
    // Edition 2021: safe to call; tests in a file run one at a time under ONE_AT_A_TIME.
    match value {
        Some(v) => std::env::set_var(name, v),
        None => std::env::remove_var(name),
    }
}

pub fn alloc(bytes: usize) -> u64 {
    let mut p = 0;
    ok(unsafe { cuMemAlloc_v2(&mut p, bytes) });
    p
}

pub fn free_bytes() -> usize {
    let (mut free, mut total) = (0, 0);
    ok(unsafe { cuMemGetInfo_v2(&mut free, &mut total) });
    free
}

/// `kernels/stream.cu`'s module, or `None` (the test then says it skips) without nvcc.
pub fn stream_module() -> Option<CUmodule> {
    let Some(m) = pagedkv::kernels::module("stream") else {
        eprintln!("skipping: kernels were not built (no nvcc at build time)");
        return None;
    };
    let mut module = std::ptr::null_mut();
    ok(unsafe { cuModuleLoadData(&mut module, m.fatbin.as_ptr() as *const c_void) });
    Some(module)
}

pub fn function(module: CUmodule, name: &str) -> Result<CUfunction, CUresult> {
    let name = CString::new(name).unwrap();
    let mut f = std::ptr::null_mut();
    match unsafe { cuModuleGetFunction(&mut f, module, name.as_ptr()) } {
        CUresult::CUDA_SUCCESS => Ok(f),
        e => Err(e),
    }
}

/// `stream_copy(dst, src, n)`: n 16-byte vectors, one CTA of 256 threads.
pub fn launch_copy(f: CUfunction, stream: CUstream, dst: u64, src: u64, n: i64) -> CUresult {
    let (mut dst, mut src, mut n) = (dst, src, n);
    let mut params = [
        &mut dst as *mut u64 as *mut c_void,
        &mut src as *mut u64 as *mut c_void,
        &mut n as *mut i64 as *mut c_void,
    ];
    unsafe {
        cuLaunchKernel(
            f,
            1,
            1,
            1,
            256,
            1,
            1,
            0,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
}

pub fn non_blocking_stream() -> CUstream {
    let mut s = std::ptr::null_mut();
    ok(unsafe { cuStreamCreate(&mut s, CUstream_flags::CU_STREAM_NON_BLOCKING as u32) });
    s
}

pub fn prop() -> CUmemAllocationProp {
    let mut p: CUmemAllocationProp = unsafe { std::mem::zeroed() };
    p.type_ = CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location = CUmemLocation {
        type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: 0,
    };
    p
}

/// Device 0, as the calls that take a location by value read it.
pub fn location() -> RawLocation {
    RawLocation {
        type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE as u32,
        id: 0,
    }
}

pub fn access() -> CUmemAccessDesc {
    CUmemAccessDesc {
        location: prop().location,
        flags: CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    }
}

pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The driver's fixture process (`src/bin/fixture.rs`), run in `mode`.
pub fn fixture(mode: &str) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_fixture"));
    c.arg(mode)
        .env_remove("PAGEDKV_EMU_FAULTS")
        .env_remove("PAGEDKV_EMU_LEAKS")
        .env_remove("PAGEDKV_EMU_INITCHECK");
    c
}
