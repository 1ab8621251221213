//! The one emulated device: an sm_90 part with an H200's SM count and per-SM limits (those of
//! `pagedkv::kernels::occupancy::SM90`, the limits the static report uses), named so that nobody
//! mistakes its figures for a GPU's, with as much memory as `PAGEDKV_EMU_MEMORY` says.

use cudarc::driver::sys::CUdevice_attribute as A;
use pagedkv::kernels::occupancy::SM90;

/// What `cuDeviceGetName` answers; pagedkv marks every figure measured on it as emulated.
pub const DEVICE_NAME: &str = pagedkv::device::EMULATED_GPU_NAME;

/// H200 (SXM): 132 SMs.
pub const MULTIPROCESSORS: i32 = 132;

/// `cuMemCreate`/`cuMemMap`'s granularity, as on current NVIDIA GPUs.
pub const GRANULARITY: usize = 2 << 20;

/// Device memory when `PAGEDKV_EMU_MEMORY` is not set.
pub const DEFAULT_MEMORY: usize = 4 << 30;

/// Dynamic shared memory a launch may use without opting in (`cuFuncSetAttribute`).
pub const DEFAULT_DYNAMIC_SMEM: u32 = 48 * 1024;

/// The L2 cache the device reports. Much smaller than an H200's 50 MiB: a bandwidth measurement
/// streams at least four times the L2, which the emulator would take minutes to run through; the
/// figure only sizes working sets, and no emulated figure is a measurement.
pub const L2_BYTES: i32 = 1 << 20;

/// Device memory in bytes: `PAGEDKV_EMU_MEMORY` (bytes, or with a K/M/G suffix) or the default.
pub fn total_memory() -> Result<usize, String> {
    let Ok(text) = std::env::var("PAGEDKV_EMU_MEMORY") else {
        return Ok(DEFAULT_MEMORY);
    };
    let t = text.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => (&t[..i], t[i..].trim_end_matches(['i', 'B', 'b'])),
        None => (t, ""),
    };
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => {
            return Err(format!(
                "PAGEDKV_EMU_MEMORY={text:?}: expected bytes or a K/M/G size"
            ))
        }
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_shl(shift).filter(|&b| b >> shift == n))
        .filter(|&b| b > 0)
        .ok_or_else(|| format!("PAGEDKV_EMU_MEMORY={text:?}: expected a positive size"))
}

/// The value of a device attribute, or `None` for one the emulator does not answer.
pub fn attribute(raw: u32) -> Option<i32> {
    let is = |a: A| a as u32 == raw;
    let smem_per_block_optin = SM90.max_shared_bytes_per_cta as i32;
    let table: &[(A, i32)] = &[
        (A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024),
        (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024),
        (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024),
        (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64),
        (A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, i32::MAX),
        (A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65_535),
        (A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65_535),
        (
            A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
            DEFAULT_DYNAMIC_SMEM as i32,
        ),
        (
            A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            smem_per_block_optin,
        ),
        (
            A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
            SM90.shared_bytes as i32,
        ),
        (
            A::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK,
            SM90.reserved_shared_bytes_per_cta as i32,
        ),
        (A::CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65_536),
        (A::CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32),
        (
            A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK,
            SM90.registers as i32,
        ),
        (
            A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR,
            SM90.registers as i32,
        ),
        (
            A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
            (SM90.max_warps * 32) as i32,
        ),
        (
            A::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR,
            SM90.max_ctas as i32,
        ),
        (A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, MULTIPROCESSORS),
        (A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1_980_000),
        (A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 2_619_000),
        (A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 6144),
        (A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, L2_BYTES),
        (A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9),
        (A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0),
        (A::CU_DEVICE_ATTRIBUTE_INTEGRATED, 0),
        (A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1),
        (A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1),
        (A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1),
        (A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1),
        // Host memory is not reachable from kernels without registration, as on a discrete GPU
        // without HMM: pageable pointers in a launch are errors.
        (A::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0),
        (A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1),
        (
            A::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            1,
        ),
        (A::CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1),
        (A::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 2),
        (A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0),
        (A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 0),
        (A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0),
        (A::CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 0),
        (A::CU_DEVICE_ATTRIBUTE_TCC_DRIVER, 0),
        (A::CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, 0),
        (A::CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT, 0),
    ];
    table.iter().find(|(a, _)| is(*a)).map(|&(_, v)| v)
}
