use crate::errors;
use crate::state::{call, put};
use cudarc::driver::sys::CUresult;
use std::ffi::c_char;

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: u32, out: *mut *const c_char) -> CUresult {
    call("cuGetErrorName", false, |_| {
        let code = errors::by_number(error).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: out-pointer from the caller.
        unsafe { put(out, errors::name(code).as_ptr()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: u32, out: *mut *const c_char) -> CUresult {
    call("cuGetErrorString", false, |_| {
        let code = errors::by_number(error).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: out-pointer from the caller.
        unsafe { put(out, errors::description(code).as_ptr()) }
    })
}
