//! The kernel images that build.rs compiled from `kernels/*.cu`, ptxas's resource report, and the
//! static report read from the compiled sm_90 code (KERNELS.md, "Static report").

pub mod fatbin;
pub mod foreign;
pub mod gpu_facts;
pub mod names;
pub mod occupancy;
pub mod report;
pub mod sass;
pub mod token_bytes;

/// Threads per CTA of the decode-attention kernels (`attn::kThreads` in kernels/attention.cuh).
pub const ATTENTION_THREADS: u32 = 128;
/// Dynamic shared memory every decode-attention launch passes: `attn::kSmemBytes` in
/// kernels/attention.cuh (the cp.async ring, the staged block-table words and the tiles' row ids).
/// A launch with less traps, so a mismatch fails every emulated attention test.
pub const ATTENTION_SMEM_BYTES: u32 = 52_224;
/// The same for the tensor-core kernels: `attn::tc::kSmemBytes` in kernels/attention_tc.cuh (a
/// 64 KiB ring of 4 KiB tiles, two slots per warp, the table words and the row ids).
pub const ATTENTION_TC_SMEM_BYTES: u32 = 67_584;

/// One `kernels/NAME.cu`, compiled into a fatbin.
#[derive(Debug, Clone, Copy)]
pub struct EmbeddedModule {
    pub name: &'static str,
    pub fatbin: &'static [u8],
}

/// What ptxas reported for one kernel on one architecture.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct KernelResources {
    pub module: &'static str,
    pub kernel: &'static str,
    pub arch: &'static str,
    pub registers: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
    pub shared_bytes: u32,
    pub stack_bytes: u32,
}

include!(concat!(env!("OUT_DIR"), "/kernels.rs"));

/// One `extern "C" __global__` kernel of `kernels/NAME.cu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompiledKernel {
    pub module: &'static str,
    pub name: &'static str,
}

// COMPILED_KERNELS: every kernel of kernels/*.cu, found in the sources by build.rs whether or not
// nvcc is present (the emulator compiles the same files).
include!(concat!(env!("OUT_DIR"), "/compiled_kernels.rs"));

/// The embedded module called `name`, when kernels were built.
pub fn module(name: &str) -> Option<&'static EmbeddedModule> {
    MODULES.iter().find(|m| m.name == name)
}

/// Kernels whose registers spilled to local memory on any architecture.
pub fn spilling_kernels() -> Vec<&'static KernelResources> {
    RESOURCES
        .iter()
        .filter(|r| r.spill_stores > 0 || r.spill_loads > 0)
        .collect()
}
