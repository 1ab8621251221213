//! The virtual-memory API (`crate::vmm` holds its rules).

use super::{RawAccessDesc, RawAllocationPropHead, RawLocation};
use crate::access::initcheck_requested;
use crate::device::GRANULARITY;
use crate::errors::{Failure, R};
use crate::state::{call, put};
use cudarc::driver::sys::{
    CUdeviceptr, CUmemAccessDesc, CUmemAccess_flags, CUmemAllocationProp, CUmemAllocationType,
    CUmemGenericAllocationHandle, CUmemLocationType, CUresult,
};
use std::ffi::c_ulonglong;

/// Device 0's memory, the only location the emulator has.
fn device_zero(location: RawLocation) -> bool {
    location.type_ == CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE as u32 && location.id == 0
}

/// The one kind of allocation the emulator makes: pinned device memory on device 0.
///
/// # Safety
/// `prop` is null or points at a property struct.
unsafe fn check_prop(prop: *const CUmemAllocationProp) -> R {
    if prop.is_null() {
        return Err(Failure::invalid("the allocation properties are null"));
    }
    // SAFETY: per the caller, a whole property struct, whose head has this layout (checked in
    // api/mod.rs); read as integers, never as cudarc's enums.
    let head = unsafe { (prop as *const RawAllocationPropHead).read_unaligned() };
    if head.type_ != CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED as u32 {
        return Err(Failure::invalid(format!(
            "allocation type {} (only CU_MEM_ALLOCATION_TYPE_PINNED is emulated)",
            head.type_
        )));
    }
    if !device_zero(head.location) {
        return Err(Failure::invalid(format!(
            "location type {} id {} (only device 0)",
            head.location.type_, head.location.id
        )));
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const CUmemAllocationProp,
    _option: u32,
) -> CUresult {
    call("cuMemGetAllocationGranularity", true, |_| {
        // SAFETY: pointers from the caller.
        unsafe {
            check_prop(prop)?;
            put(granularity, GRANULARITY)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut CUdeviceptr,
    size: usize,
    alignment: usize,
    _addr: CUdeviceptr,
    flags: c_ulonglong,
) -> CUresult {
    call("cuMemAddressReserve", true, |st| {
        if flags != 0 {
            return Err(Failure::invalid(format!("flags {flags} (must be 0)")));
        }
        let base = st.vmm.reserve(size, alignment, initcheck_requested())?;
        // SAFETY: out-pointer from the caller.
        unsafe { put(ptr, base) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> CUresult {
    call("cuMemAddressFree", true, |st| {
        st.vmm.address_free(ptr, size)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: c_ulonglong,
) -> CUresult {
    call("cuMemCreate", true, |st| {
        // SAFETY: pointer from the caller.
        unsafe { check_prop(prop)? };
        if flags != 0 {
            return Err(Failure::invalid(format!("flags {flags} (must be 0)")));
        }
        st.reserve_memory(size)?;
        let h = st.vmm.create(size, initcheck_requested())?;
        // SAFETY: out-pointer from the caller.
        unsafe { put(handle, h) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> CUresult {
    call("cuMemRelease", true, |st| {
        st.vmm.release(handle).map(|_| ())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemMap(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: c_ulonglong,
) -> CUresult {
    call("cuMemMap", true, |st| {
        if flags != 0 {
            return Err(Failure::invalid(format!("flags {flags} (must be 0)")));
        }
        st.vmm.map(ptr, size, offset, handle)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    call("cuMemUnmap", true, |st| {
        let regions = st.vmm.unmappable(ptr, size)?;
        st.track_unmap(&regions);
        st.vmm.unmap(ptr, size).map(|_| ())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemSetAccess(
    ptr: CUdeviceptr,
    size: usize,
    desc: *const CUmemAccessDesc,
    count: usize,
) -> CUresult {
    call("cuMemSetAccess", true, |st| {
        if desc.is_null() || count == 0 {
            return Err(Failure::invalid("no access descriptors"));
        }
        // SAFETY: the caller passes `count` descriptors, of this layout (checked in api/mod.rs);
        // read as integers, never as cudarc's enums.
        let descs = unsafe { std::slice::from_raw_parts(desc as *const RawAccessDesc, count) };
        let read_write = CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE as u32;
        // Only what the project asks for: read-write access for device 0.
        if !descs
            .iter()
            .any(|d| device_zero(d.location) && d.flags == read_write)
        {
            return Err(Failure::new(
                CUresult::CUDA_ERROR_NOT_SUPPORTED,
                "only read-write access for device 0 is emulated",
            ));
        }
        st.vmm.set_access(ptr, size)
    })
}
