//! A process that leaks one device allocation of 12288 bytes and exits: the fixture of the
//! driver's leak-report test (`tests/rules.rs`), which runs it with `PAGEDKV_EMU_LEAKS=1`.

use pagedkv_emu_cuda::api::{cuCtxSetCurrent, cuDevicePrimaryCtxRetain, cuInit, cuMemAlloc_v2};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut ctx = std::ptr::null_mut();
    let mut ptr = 0;
    // SAFETY: the driver's own entry points, called in order with valid out-pointers.
    let ok = unsafe {
        cuInit(0) as u32 == 0
            && cuDevicePrimaryCtxRetain(&mut ctx, 0) as u32 == 0
            && cuCtxSetCurrent(ctx) as u32 == 0
            && cuMemAlloc_v2(&mut ptr, 12288) as u32 == 0
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
