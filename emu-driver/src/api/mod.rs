//! The exported entry points, by the driver API's symbol names (the versioned ones cudarc 0.19
//! loads, e.g. `cuMemAlloc_v2`) and signatures. Enumerations arrive as plain integers and are
//! compared with cudarc's constants: a value the driver does not know must not become a Rust enum.

mod context;
mod errors;
mod launch;
mod memory;
mod module;
mod stream;
mod vmm;

pub use context::*;
pub use errors::*;
pub use launch::*;
pub use memory::*;
pub use module::*;
pub use stream::*;
pub use vmm::*;

/// A handle the driver hands out as an opaque pointer.
fn handle<T>(id: u64) -> *mut T {
    id as usize as *mut T
}

fn id<T>(ptr: *mut T) -> u64 {
    ptr as usize as u64
}
