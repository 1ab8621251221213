//! An emulated CUDA driver: the part of the driver API that cudarc 0.19 and pagedkv call, on host
//! memory, running pagedkv's kernels in its CPU emulator (`kernels/emu/`). Built as
//! `libpagedkv_emu_cuda.so` (never `libcuda.so` in cargo's target folder, which a plain `cargo test`
//! would load); `scripts/emulated-gpu` links `libcuda.so.1` to it and puts its folder first on
//! `LD_LIBRARY_PATH`, so cudarc's dynamic loading finds it instead of NVIDIA's driver and the
//! project takes exactly the path it takes on a GPU. How it works, what it checks and what it
//! cannot: `emu-driver/README.md`.
//!
//! Every entry point is an `extern "C"` function of the driver's name and signature (`api/`);
//! they share one state behind one lock (`state.rs`): the address space (`memory.rs`), the
//! virtual-memory objects (`vmm.rs`), modules and functions (`modules.rs`), streams, events and
//! graphs with their queued work (`queue.rs`), the happens-before order of that work and the
//! races it finds (`order.rs`, `racecheck.rs`), how the driver opens device memory for its own
//! accesses and initcheck's shadow (`access.rs`), host code that touches device memory
//! (`host_access.rs`), fault injection (`faults.rs`) and the leak report (`leaks.rs`).

#![allow(non_snake_case)]
#![allow(clippy::missing_safety_doc)]

mod access;
pub mod api;
mod device;
mod errors;
mod faults;
mod host_access;
mod leaks;
mod memory;
mod modules;
mod order;
mod queue;
mod racecheck;
mod state;
mod streams;
mod vmm;

pub use device::{DEVICE_NAME, GRANULARITY};

/// The message of the last failure inside queued work (a kernel or copy), for tests: the C API
/// can only return its code; the message went to stderr.
pub fn last_failure() -> Option<String> {
    state::lock()
        .as_ref()
        .and_then(|st| st.last_failure.clone())
}

/// One line per object still alive (what `PAGEDKV_EMU_LEAKS=1` reports at exit), for tests.
pub fn live_objects() -> Vec<String> {
    state::lock().as_ref().map(leaks::alive).unwrap_or_default()
}
