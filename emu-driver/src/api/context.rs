//! Initialisation, the device and its primary context.

use super::{handle, id};
use crate::device::{self, DEVICE_NAME};
use crate::errors::{Failure, R};
use crate::state::{call, put, CURRENT, PRIMARY_CONTEXT};
use crate::{host_access, leaks};
use cudarc::driver::sys::{CUcontext, CUdevice, CUresult};
use std::ffi::{c_char, c_int, c_uint};

fn check_device(dev: CUdevice) -> R {
    if dev == 0 {
        Ok(())
    } else {
        Err(CUresult::CUDA_ERROR_INVALID_DEVICE.into())
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    call("cuInit", false, |st| {
        if flags != 0 {
            return Err(Failure::invalid(format!("flags {flags} (must be 0)")));
        }
        if !st.initialized {
            st.total_memory = device::total_memory().map_err(Failure::invalid)?;
            st.initialized = true;
            leaks::arm();
            host_access::install();
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    // SAFETY: out-pointer from the caller.
    call("cuDriverGetVersion", false, |_| unsafe {
        put(version, 13000)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    // SAFETY: out-pointer from the caller.
    call("cuDeviceGetCount", false, |_| unsafe { put(count, 1) })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    call("cuDeviceGet", false, |_| {
        check_device(ordinal)?;
        // SAFETY: out-pointer from the caller.
        unsafe { put(device, 0) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    call("cuDeviceGetName", false, |_| {
        check_device(dev)?;
        if name.is_null() || len <= 0 {
            return Err(Failure::invalid("a null name buffer or a length below 1"));
        }
        let bytes = DEVICE_NAME.as_bytes();
        let n = bytes.len().min(len as usize - 1);
        // SAFETY: the caller's buffer holds `len` bytes; n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), name as *mut u8, n);
            *name.add(n) = 0;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    call("cuDeviceTotalMem_v2", false, |st| {
        check_device(dev)?;
        // SAFETY: out-pointer from the caller.
        unsafe { put(bytes, st.total_memory) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    attrib: u32,
    dev: CUdevice,
) -> CUresult {
    call("cuDeviceGetAttribute", false, |_| {
        check_device(dev)?;
        let v = device::attribute(attrib)
            .ok_or_else(|| Failure::invalid(format!("attribute {attrib} is not one it answers")))?;
        // SAFETY: out-pointer from the caller.
        unsafe { put(value, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    call("cuDevicePrimaryCtxRetain", false, |st| {
        check_device(dev)?;
        // SAFETY: out-pointer from the caller.
        unsafe { put(ctx, handle(PRIMARY_CONTEXT))? };
        st.context_refs += 1;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    call("cuDevicePrimaryCtxRelease_v2", false, |st| {
        check_device(dev)?;
        if st.context_refs == 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT.into());
        }
        st.context_refs -= 1;
        if st.context_refs == 0 {
            leaks::destroy_context(st, "the primary context's last release");
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset_v2(dev: CUdevice) -> CUresult {
    call("cuDevicePrimaryCtxReset_v2", false, |st| {
        check_device(dev)?;
        leaks::destroy_context(st, "cuDevicePrimaryCtxReset");
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    call("cuCtxSetCurrent", false, |st| {
        let ctx = id(ctx);
        if ctx != 0 && (ctx != PRIMARY_CONTEXT || st.context_refs == 0) {
            return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT.into());
        }
        CURRENT.set(ctx);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut CUcontext) -> CUresult {
    // SAFETY: out-pointer from the caller.
    call("cuCtxGetCurrent", false, |_| unsafe {
        put(ctx, handle(CURRENT.get()))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut CUdevice) -> CUresult {
    // SAFETY: out-pointer from the caller.
    call("cuCtxGetDevice", true, |_| unsafe { put(device, 0) })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    call("cuCtxSynchronize", true, |st| st.synchronize_all())
}
