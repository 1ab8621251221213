//! Modules and functions. `cuModuleLoadData` takes one of the fatbins this build of pagedkv
//! embeds (`pagedkv::kernels::MODULES`, compared byte for byte); its functions are the kernels
//! build.rs found in that module's source, each run by the emulator's copy of the same code.
//! Attributes and occupancy answer from ptxas's sm_90 report and the occupancy calculator of the
//! static report, so a launcher's split plan is the one an H200 would give it.

use crate::device::DEFAULT_DYNAMIC_SMEM;
use crate::errors::{Failure, R};
use cudarc::driver::sys::{CUfunction_attribute as F, CUresult};
use pagedkv::emu::{kernels, KernelInfo};
use pagedkv::kernels::occupancy::{occupancy, CtaShape, SM90};
use pagedkv::kernels::{report, EmbeddedModule, COMPILED_KERNELS, MODULES, RESOURCES};
use std::sync::OnceLock;

const FATBIN_MAGIC: u32 = 0xBA55_ED50;

pub struct Module {
    pub name: &'static str,
}

pub struct Function {
    /// The `CUmodule` it came from: unloading that module invalidates it.
    pub module_handle: u64,
    pub kernel: &'static KernelInfo,
    pub registers: u32,
    pub static_smem: u32,
    pub local_bytes: u32,
    pub max_threads: u32,
    /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`: 48 KiB until a launcher opts in.
    pub max_dynamic_smem: u32,
}

/// The embedded module whose fatbin starts at `image`.
///
/// # Safety
/// `image` points at a readable fatbin header and, if its magic matches, the whole fatbin.
pub unsafe fn identify(image: *const u8) -> R<&'static EmbeddedModule> {
    if image.is_null() {
        return Err(Failure::invalid("the image is null"));
    }
    // SAFETY: the caller passes a fatbin; its 16-byte header says how long it is.
    let header = unsafe { std::slice::from_raw_parts(image, 16) };
    let magic = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
    if magic != FATBIN_MAGIC {
        return Err(Failure::new(
            CUresult::CUDA_ERROR_INVALID_IMAGE,
            format!("not a fatbin (it starts with {magic:#010x})"),
        ));
    }
    let len = u16::from_le_bytes([header[6], header[7]]) as usize
        + u64::from_le_bytes(header[8..16].try_into().expect("8 bytes")) as usize;
    // SAFETY: as above: the header's own length.
    let bytes = unsafe { std::slice::from_raw_parts(image, len) };
    MODULES
        .iter()
        .find(|m| m.fatbin.len() >= len && &m.fatbin[..len] == bytes)
        .ok_or_else(|| {
            Failure::new(
                CUresult::CUDA_ERROR_INVALID_IMAGE,
                "a fatbin this build of pagedkv did not embed (rebuild the driver from the same \
                 tree: scripts/emulated-gpu does)",
            )
        })
}

/// The kernel `name` of `module`, or `CUDA_ERROR_NOT_FOUND` as the driver answers for a name the
/// module does not hold.
pub fn function(module: &'static str, name: &str) -> R<Function> {
    if !COMPILED_KERNELS
        .iter()
        .any(|k| k.module == module && k.name == name)
    {
        return Err(CUresult::CUDA_ERROR_NOT_FOUND.into());
    }
    let kernel = kernels()
        .iter()
        .find(|k| k.name == name)
        .ok_or(CUresult::CUDA_ERROR_NOT_FOUND)?;
    let resources = RESOURCES
        .iter()
        .find(|r| r.arch == "sm_90" && r.module == module && r.kernel == name);
    let max_threads = static_report()
        .iter()
        .find(|k| k.kernel == name)
        .and_then(|k| k.threads_per_cta)
        .unwrap_or(1024);
    Ok(Function {
        module_handle: 0,
        kernel,
        registers: resources.map_or(0, |r| r.registers),
        static_smem: resources.map_or(0, |r| r.shared_bytes),
        local_bytes: resources.map_or(0, |r| r.stack_bytes),
        max_threads,
        max_dynamic_smem: DEFAULT_DYNAMIC_SMEM - resources.map_or(0, |r| r.shared_bytes),
    })
}

/// The static report (threads per CTA from `__launch_bounds__`), computed once.
fn static_report() -> &'static [report::StaticKernel] {
    static REPORT: OnceLock<Vec<report::StaticKernel>> = OnceLock::new();
    REPORT.get_or_init(|| report::report(&[]))
}

impl Function {
    pub fn attribute(&self, raw: u32) -> Option<i32> {
        let is = |a: F| a as u32 == raw;
        Some(if is(F::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK) {
            self.max_threads as i32
        } else if is(F::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) {
            self.static_smem as i32
        } else if is(F::CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES) {
            0
        } else if is(F::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES) {
            self.local_bytes as i32
        } else if is(F::CU_FUNC_ATTRIBUTE_NUM_REGS) {
            self.registers as i32
        } else if is(F::CU_FUNC_ATTRIBUTE_PTX_VERSION) || is(F::CU_FUNC_ATTRIBUTE_BINARY_VERSION) {
            90
        } else if is(F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
            self.max_dynamic_smem as i32
        } else {
            return None;
        })
    }

    /// `cuFuncSetAttribute`: only the dynamic shared-memory opt-in, within the SM's limit.
    pub fn set_attribute(&mut self, raw: u32, value: i32) -> R {
        if raw != F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as u32 {
            return Err(Failure::new(
                CUresult::CUDA_ERROR_NOT_SUPPORTED,
                format!("attribute {raw} (only the dynamic shared-memory opt-in is emulated)"),
            ));
        }
        let too_much = || {
            Failure::invalid(format!(
                "{value} bytes of dynamic shared memory: with {} static, a block has {} at most",
                self.static_smem, SM90.max_shared_bytes_per_cta
            ))
        };
        let value = u32::try_from(value).map_err(|_| too_much())?;
        if value.saturating_add(self.static_smem) > SM90.max_shared_bytes_per_cta {
            return Err(too_much());
        }
        self.max_dynamic_smem = value;
        Ok(())
    }

    /// CTAs of this kernel one SM holds (the occupancy calculator's answer).
    pub fn occupancy(&self, threads: u32, dynamic_smem: u32) -> u32 {
        occupancy(
            &SM90,
            &CtaShape {
                threads,
                registers_per_thread: self.registers,
                static_shared_bytes: self.static_smem,
                dynamic_shared_bytes: dynamic_smem,
            },
        )
        .ctas_per_sm
    }
}
