//! Modules, functions, their attributes and the occupancy calculator.

use super::{handle, id};
use crate::errors::{Failure, R};
use crate::modules::{self, Module};
use crate::state::{call, put};
use cudarc::driver::sys::{CUfunction, CUmodule, CUresult};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) -> CUresult {
    call("cuModuleLoadData", true, |st| {
        // SAFETY: the caller passes an image; identify reads its header first.
        let embedded = unsafe { modules::identify(image as *const u8) }?;
        let h = st.new_handle();
        st.modules.insert(
            h,
            Module {
                name: embedded.name,
            },
        );
        // SAFETY: out-pointer from the caller.
        unsafe { put(module, handle(h)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleUnload(module: CUmodule) -> CUresult {
    call("cuModuleUnload", true, |st| {
        st.synchronize_all()?;
        st.modules
            .remove(&id(module))
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
        st.functions.retain(|_, f| f.module_handle != id(module));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    function: *mut CUfunction,
    module: CUmodule,
    name: *const c_char,
) -> CUresult {
    call("cuModuleGetFunction", true, |st| {
        let m = st
            .modules
            .get(&id(module))
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
        if name.is_null() {
            return Err(Failure::invalid("the kernel name is null"));
        }
        // SAFETY: a NUL-terminated name from the caller.
        let name = unsafe { CStr::from_ptr(name) }
            .to_str()
            .map_err(|_| CUresult::CUDA_ERROR_NOT_FOUND)?;
        let mut f = modules::function(m.name, name)?;
        f.module_handle = id(module);
        let h = st.new_handle();
        st.functions.insert(h, f);
        // SAFETY: out-pointer from the caller.
        unsafe { put(function, handle(h)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetAttribute(
    value: *mut c_int,
    attrib: u32,
    function: CUfunction,
) -> CUresult {
    call("cuFuncGetAttribute", true, |st| {
        let f = st
            .functions
            .get(&id(function))
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
        let v = f
            .attribute(attrib)
            .ok_or_else(|| Failure::invalid(format!("attribute {attrib} is not one it answers")))?;
        // SAFETY: out-pointer from the caller.
        unsafe { put(value, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncSetAttribute(
    function: CUfunction,
    attrib: u32,
    value: c_int,
) -> CUresult {
    call("cuFuncSetAttribute", true, |st| {
        let f = st
            .functions
            .get_mut(&id(function))
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
        f.set_attribute(attrib, value)
    })
}

fn occupancy(
    st: &crate::state::State,
    out: *mut c_int,
    function: CUfunction,
    threads: c_int,
    smem: usize,
) -> R {
    let f = st
        .functions
        .get(&id(function))
        .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
    let block = u32::try_from(threads)
        .ok()
        .filter(|&t| t > 0 && t <= f.max_threads);
    let (Some(block), Ok(smem)) = (block, u32::try_from(smem)) else {
        return Err(Failure::invalid(format!(
            "{threads} threads and {smem} bytes of shared memory per block (the kernel takes 1 \
             to {} threads)",
            f.max_threads
        )));
    };
    // SAFETY: out-pointer from the caller.
    unsafe { put(out, f.occupancy(block, smem) as c_int) }
}

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessor(
    blocks: *mut c_int,
    function: CUfunction,
    threads: c_int,
    smem: usize,
) -> CUresult {
    call("cuOccupancyMaxActiveBlocksPerMultiprocessor", true, |st| {
        occupancy(st, blocks, function, threads, smem)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    blocks: *mut c_int,
    function: CUfunction,
    threads: c_int,
    smem: usize,
    _flags: c_uint,
) -> CUresult {
    call(
        "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
        true,
        |st| occupancy(st, blocks, function, threads, smem),
    )
}
