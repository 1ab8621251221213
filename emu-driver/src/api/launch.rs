//! `cuLaunchKernel`: the launch is checked as the driver checks it (grid, block, the kernel's
//! `__launch_bounds__`, dynamic shared memory above 48 KiB only after the opt-in), its arguments
//! copied out of `kernelParams` by the kernel's parameter list, and the launch queued. When it
//! runs, every pointer must lie in a live allocation or an accessible mapping; the kernel sees
//! memory up to that allocation's or mapping's end, and the emulator checks every access.

use super::id;
use crate::device::attribute;
use crate::errors::Failure;
use crate::state::call;
use crate::streams::{ArgValue, KernelLaunch, Op};
use cudarc::driver::sys::{CUdevice_attribute as A, CUfunction, CUresult, CUstream};
use pagedkv::emu::{ParamKind, Scalar};
use std::ffi::{c_uint, c_void};

fn limit(a: A) -> u32 {
    attribute(a as u32).expect("a device limit the driver answers") as u32
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernel(
    f: CUfunction,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    smem: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    call("cuLaunchKernel", true, |st| {
        let func = st
            .functions
            .get(&id(f))
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
        let name = func.kernel.name;
        let refuse = |why: String| Failure::invalid(format!("kernel {name}: {why}"));
        if !extra.is_null() {
            return Err(Failure::new(
                CUresult::CUDA_ERROR_NOT_SUPPORTED,
                "arguments through `extra` are not emulated (kernelParams is)",
            ));
        }
        let grid = [grid_x, grid_y, grid_z];
        let block = [block_x, block_y, block_z];
        let grid_max = [
            A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
            A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
            A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z,
        ];
        let block_max = [
            A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
            A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
            A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z,
        ];
        for i in 0..3 {
            if grid[i] == 0 || grid[i] > limit(grid_max[i]) {
                return Err(refuse(format!("grid {grid:?} outside the device's limits")));
            }
            if block[i] == 0 || block[i] > limit(block_max[i]) {
                return Err(refuse(format!(
                    "block {block:?} outside the device's limits"
                )));
            }
        }
        let threads = block.iter().product::<u32>();
        if threads
            > func
                .max_threads
                .min(limit(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK))
        {
            return Err(refuse(format!(
                "{threads} threads per block, the kernel allows {}",
                func.max_threads
            )));
        }
        if smem > func.max_dynamic_smem {
            return Err(refuse(format!(
                "{smem} bytes of dynamic shared memory, {} allowed (above 48 KiB a launcher opts in \
                 with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)",
                func.max_dynamic_smem
            )));
        }
        if !func.kernel.params.is_empty() && params.is_null() {
            return Err(refuse("kernelParams is null".into()));
        }
        let args = func
            .kernel
            .params
            .iter()
            .enumerate()
            .map(|(i, p)| {
                // SAFETY: kernelParams holds one pointer per parameter, each to a value of the
                // parameter's type, as the driver API requires.
                let value = unsafe { *params.add(i) };
                if value.is_null() {
                    return Err(refuse(format!("kernelParams[{i}] ({}) is null", p.name)));
                }
                let mut bits = [0u8; 8];
                let size = match p.kind {
                    ParamKind::Buf(..) | ParamKind::Scalar(Scalar::I64 | Scalar::U64) => 8,
                    ParamKind::Scalar(_) => 4,
                };
                // SAFETY: as above, `size` bytes of the argument's value.
                unsafe {
                    std::ptr::copy_nonoverlapping(value as *const u8, bits.as_mut_ptr(), size)
                };
                Ok(match p.kind {
                    ParamKind::Buf(..) => ArgValue::Pointer(u64::from_ne_bytes(bits)),
                    ParamKind::Scalar(_) => ArgValue::Scalar(bits),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let launch = KernelLaunch {
            kernel: func.kernel,
            grid,
            block,
            smem,
            args,
        };
        st.enqueue(id(stream), Op::Kernel(launch))
    })
}
