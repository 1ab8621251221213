//! Processes the driver's tests (`tests/`) run to see how a whole process ends:
//! - `fixture` (or `fixture leak`): leaks one device allocation of 12288 bytes and exits 0 (the
//!   leak report's fixture, run with `PAGEDKV_EMU_LEAKS=1`; with `PAGEDKV_EMU_FAULTS` set, the
//!   fault spec's);
//! - `fixture read-device` / `fixture read-mapped`: host code reads a device allocation / a
//!   mapped range it was granted access to, which must fault as on a GPU;
//! - `fixture refusals`: two calls the driver refuses, each of which must say why once.

use cudarc::driver::sys::{
    CUmemAccessDesc, CUmemAccess_flags, CUmemAllocationProp, CUmemAllocationType, CUmemLocation,
    CUmemLocationType, CUresult,
};
use pagedkv_emu_cuda::api::*;
use pagedkv_emu_cuda::GRANULARITY;
use std::process::ExitCode;

fn ok(r: CUresult) -> bool {
    r == CUresult::CUDA_SUCCESS
}

/// A granted mapping of one granule.
fn mapped() -> Option<u64> {
    let location = CUmemLocation {
        type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: 0,
    };
    // SAFETY: plain data; the fields that matter are set below.
    let mut prop: CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = location;
    let desc = CUmemAccessDesc {
        location,
        flags: CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    let (mut base, mut handle) = (0, 0);
    // SAFETY: the driver's entry points with valid pointers.
    let done = unsafe {
        ok(cuMemAddressReserve(&mut base, GRANULARITY, 0, 0, 0))
            && ok(cuMemCreate(&mut handle, GRANULARITY, &prop, 0))
            && ok(cuMemMap(base, GRANULARITY, 0, handle, 0))
            && ok(cuMemSetAccess(base, GRANULARITY, &desc, 1))
    };
    done.then_some(base)
}

fn main() -> ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "leak".into());
    let mut ctx = std::ptr::null_mut();
    // SAFETY: the driver's own entry points, called in order with valid out-pointers.
    let ready = unsafe {
        ok(cuInit(0)) && ok(cuDevicePrimaryCtxRetain(&mut ctx, 0)) && ok(cuCtxSetCurrent(ctx))
    };
    if !ready {
        return ExitCode::from(1);
    }
    let mut ptr = 0;
    let done = match mode.as_str() {
        // SAFETY: a valid out-pointer.
        "leak" => ok(unsafe { cuMemAlloc_v2(&mut ptr, 12288) }),
        "read-device" | "read-mapped" => {
            let target = if mode == "read-device" {
                // SAFETY: a valid out-pointer.
                ok(unsafe { cuMemAlloc_v2(&mut ptr, 4096) }).then_some(ptr)
            } else {
                mapped()
            };
            let Some(target) = target else {
                return ExitCode::from(1);
            };
            // SAFETY: none: this is the bug the driver must show, a host read of device memory.
            let byte = unsafe { std::ptr::read_volatile(target as *const u8) };
            println!("read {byte} from device memory");
            true
        }
        "refusals" => {
            let mut base = 0;
            // SAFETY: valid pointers; the arguments are the ones the driver must refuse.
            unsafe {
                !ok(cuMemAddressReserve(&mut base, 3 << 20, 0, 0, 0))
                    && !ok(cuMemsetD8_v2(0x1234, 0, 16))
            }
        }
        _ => false,
    };
    if done {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
