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

/// Every symbol exported above, as `state::call` names it; what a fault spec may name (without a
/// `_vN` suffix). A test reads the sources above and checks the list against them.
pub const ENTRY_POINTS: &[&str] = &[
    "cuCtxGetCurrent",
    "cuCtxGetDevice",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuDeviceGet",
    "cuDeviceGetAttribute",
    "cuDeviceGetCount",
    "cuDeviceGetName",
    "cuDevicePrimaryCtxRelease_v2",
    "cuDevicePrimaryCtxReset_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDeviceTotalMem_v2",
    "cuDriverGetVersion",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventElapsedTime",
    "cuEventElapsedTime_v2",
    "cuEventQuery",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuFuncGetAttribute",
    "cuFuncSetAttribute",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuGraphDestroy",
    "cuGraphExecDestroy",
    "cuGraphInstantiateWithFlags",
    "cuGraphLaunch",
    "cuGraphUpload",
    "cuInit",
    "cuLaunchKernel",
    "cuMemAddressFree",
    "cuMemAddressReserve",
    "cuMemAdvise_v2",
    "cuMemAllocAsync",
    "cuMemAllocHost_v2",
    "cuMemAllocManaged",
    "cuMemAlloc_v2",
    "cuMemCreate",
    "cuMemFreeAsync",
    "cuMemFreeHost",
    "cuMemFree_v2",
    "cuMemGetAllocationGranularity",
    "cuMemGetInfo_v2",
    "cuMemHostAlloc",
    "cuMemHostGetDevicePointer_v2",
    "cuMemMap",
    "cuMemPrefetchAsync_v2",
    "cuMemRelease",
    "cuMemSetAccess",
    "cuMemUnmap",
    "cuMemcpyAsync",
    "cuMemcpyDtoDAsync_v2",
    "cuMemcpyDtoD_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyHtoD_v2",
    "cuMemsetD8Async",
    "cuMemsetD8_v2",
    "cuModuleGetFunction",
    "cuModuleLoadData",
    "cuModuleUnload",
    "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
    "cuStreamBeginCapture_v2",
    "cuStreamCreate",
    "cuStreamCreateWithPriority",
    "cuStreamDestroy_v2",
    "cuStreamEndCapture",
    "cuStreamIsCapturing",
    "cuStreamQuery",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
];

/// `CUmemLocation` as the caller's bytes: a Rust enum read from a value it lacks is undefined
/// behaviour, so the type is read as the integer it is and compared with cudarc's constants.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RawLocation {
    pub type_: u32,
    pub id: i32,
}

/// `CUmemAccessDesc` as the caller's bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RawAccessDesc {
    pub location: RawLocation,
    pub flags: u32,
}

/// The head of `CUmemAllocationProp` (what the emulator checks) as the caller's bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RawAllocationPropHead {
    pub type_: u32,
    pub requested_handle_types: u32,
    pub location: RawLocation,
}

// The raw forms have cudarc's layouts.
const _: () = {
    use cudarc::driver::sys::{CUmemAccessDesc, CUmemAllocationProp, CUmemLocation};
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<RawLocation>() == size_of::<CUmemLocation>());
    assert!(align_of::<RawLocation>() == align_of::<CUmemLocation>());
    assert!(offset_of!(RawLocation, id) == offset_of!(CUmemLocation, id));
    assert!(size_of::<RawAccessDesc>() == size_of::<CUmemAccessDesc>());
    assert!(offset_of!(RawAccessDesc, flags) == offset_of!(CUmemAccessDesc, flags));
    assert!(
        offset_of!(RawAllocationPropHead, location) == offset_of!(CUmemAllocationProp, location)
    );
    assert!(
        offset_of!(RawAllocationPropHead, requested_handle_types)
            == offset_of!(CUmemAllocationProp, requestedHandleTypes)
    );
    assert!(size_of::<RawAllocationPropHead>() <= size_of::<CUmemAllocationProp>());
};

/// A handle the driver hands out as an opaque pointer.
fn handle<T>(id: u64) -> *mut T {
    id as usize as *mut T
}

fn id<T>(ptr: *mut T) -> u64 {
    ptr as usize as u64
}

#[cfg(test)]
mod tests {
    use super::ENTRY_POINTS;
    use std::collections::BTreeSet;

    /// The names that follow `marker` in `text` (an identifier, optionally quoted).
    fn names_after<'a>(text: &'a str, marker: &str) -> Vec<&'a str> {
        text.split(marker)
            .skip(1)
            .map(|rest| {
                let rest = rest.trim_start().trim_start_matches('"');
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                &rest[..end]
            })
            .collect()
    }

    #[test]
    fn the_list_of_entry_points_is_every_exported_symbol_and_every_call_name() {
        let sources = [
            include_str!("context.rs"),
            include_str!("errors.rs"),
            include_str!("launch.rs"),
            include_str!("memory.rs"),
            include_str!("module.rs"),
            include_str!("stream.rs"),
            include_str!("vmm.rs"),
        ];
        let listed: BTreeSet<&str> = ENTRY_POINTS.iter().copied().collect();
        assert_eq!(listed.len(), ENTRY_POINTS.len(), "a name listed twice");
        let exported: BTreeSet<&str> = sources
            .iter()
            .flat_map(|s| names_after(s, "extern \"C\" fn"))
            .collect();
        let called: BTreeSet<&str> = sources
            .iter()
            .flat_map(|s| names_after(s, "call("))
            .collect();
        assert_eq!(exported, listed);
        assert_eq!(called, listed);
    }
}
