//! The C structs of `kernels/emu/abi.h`; keep both in step.

use std::ffi::c_void;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EmuLaunch {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub dynamic_smem_bytes: u64,
    pub schedule: u32,
    pub workers: u32,
    pub seed: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EmuArg {
    pub ptr: *mut c_void,
    pub bytes: u64,
    /// initcheck's shadow of a buffer (`bytes` bytes, non-zero where written), or null.
    pub shadow: *mut c_void,
}

pub const EMU_OK: i32 = 0;
pub const EMU_INVALID_LAUNCH: i32 = 1;
pub const EMU_OUT_OF_BOUNDS: i32 = 2;
pub const EMU_DIVERGENT_BARRIER: i32 = 3;
pub const EMU_WARP_SYNC: i32 = 4;
pub const EMU_MISALIGNED: i32 = 5;
pub const EMU_TRAP: i32 = 6;
pub const EMU_ASYNC_COPY_RACE: i32 = 7;
pub const EMU_UNINITIALIZED: i32 = 8;

pub const SCHEDULE_FORWARD: u32 = 0;
pub const SCHEDULE_REVERSE: u32 = 1;
pub const SCHEDULE_SHUFFLED: u32 = 2;
