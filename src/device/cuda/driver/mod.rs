//! pagedkv's safe layer over the CUDA driver: the context of one GPU, streams, events, modules and
//! launches, device and pinned memory, each made from cudarc's thin `result`/`sys` calls (one
//! driver function per call).
//!
//! Why not cudarc's safe types: their destructors keep a failed release in the context and return
//! it from the next unrelated call (a failed `cuStreamDestroy` reported as "cuCtxSetCurrent
//! failed"), and one of their calls makes several driver calls (bind, allocate, copy), so an error
//! cannot say which one failed. Here every failure names its driver function and what it was
//! doing to which object ([`DeviceError::Driver`]), and a release that fails in a destructor, where
//! no caller can be told, goes to the [`teardown`] log that the CLI reports.

mod context;
mod event;
mod memory;
mod module;
mod pinned;
mod stream;
pub mod teardown;

pub use context::Gpu;
pub use event::Event;
pub use memory::DeviceBuffer;
pub use module::{Function, KernelArg, Launch, Module};
pub use pinned::PinnedBuffer;
pub use stream::Stream;

use crate::device::DeviceError;
use cudarc::driver::DriverError;

/// The name of a driver error's code (`CUDA_ERROR_OUT_OF_MEMORY`), without asking the driver
/// (`cuGetErrorString` is one more call that can fail while an error is being reported).
pub fn code(e: &DriverError) -> String {
    format!("{:?}", e.0)
}

/// Maps a failed call of the driver function `op` to a [`DeviceError`]; `doing` says what for,
/// and is only formatted on failure (launches sit in timed loops).
pub(crate) fn failed<D: FnOnce() -> String>(
    op: &'static str,
    doing: D,
) -> impl FnOnce(DriverError) -> DeviceError {
    move |source| DeviceError::Driver {
        op,
        doing: doing(),
        source,
    }
}

/// `n` bytes as text (`2.0 MiB`) for messages.
pub(crate) fn bytes(n: usize) -> String {
    crate::host_memory::bytes(n as u64)
}
