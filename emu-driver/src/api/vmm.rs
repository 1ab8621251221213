//! The virtual-memory API (`crate::vmm` holds its rules).

use crate::device::GRANULARITY;
use crate::state::{call, put};
use cudarc::driver::sys::{
    CUdeviceptr, CUmemAccessDesc, CUmemAccess_flags, CUmemAllocationProp, CUmemAllocationType,
    CUmemGenericAllocationHandle, CUmemLocationType, CUresult,
};
use std::ffi::c_ulonglong;

/// The one kind of allocation the emulator makes: pinned device memory on device 0.
///
/// # Safety
/// `prop` is null or points at a property struct.
unsafe fn check_prop(prop: *const CUmemAllocationProp) -> Result<(), CUresult> {
    // SAFETY: per the caller.
    let prop = unsafe { prop.as_ref() }.ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let ok = prop.type_ as u32 == CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED as u32
        && prop.location.type_ as u32 == CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE as u32
        && prop.location.id == 0;
    if ok {
        Ok(())
    } else {
        Err(CUresult::CUDA_ERROR_INVALID_VALUE)
    }
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
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let base = st.vmm.reserve(size, alignment)?;
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
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        st.reserve_memory(size)?;
        let h = st.vmm.create(size)?;
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
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        st.vmm.map(ptr, size, offset, handle)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    call("cuMemUnmap", true, |st| st.vmm.unmap(ptr, size).map(|_| ()))
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
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: the caller passes `count` descriptors.
        let descs = unsafe { std::slice::from_raw_parts(desc, count) };
        let read_write = CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE as u32;
        let ours = |d: &CUmemAccessDesc| {
            d.location.type_ as u32 == CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE as u32
                && d.location.id == 0
        };
        // Only what the project asks for: read-write access for device 0.
        if !descs
            .iter()
            .any(|d| ours(d) && d.flags as u32 == read_write)
        {
            return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
        }
        st.vmm.set_access(ptr, size)
    })
}
