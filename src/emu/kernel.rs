//! The table of emulated kernels that build.rs generates: names, C entry points, parameter kinds.

use super::ffi::{EmuArg, EmuLaunch};
use half::{bf16, f16};

/// Element type of a buffer parameter (`GPTR(T)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    F16,
    Bf16,
    F32,
    I32,
    U32,
    I64,
    U64,
    U8,
}

/// Type of a scalar parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar {
    I32,
    U32,
    F32,
    I64,
    U64,
}

/// A kernel parameter: a buffer of `Elem` (writable or not) or a scalar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    Buf(Elem, bool),
    Scalar(Scalar),
}

impl std::fmt::Display for ParamKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParamKind::Buf(e, true) => write!(f, "mutable buffer of {e:?}"),
            ParamKind::Buf(e, false) => write!(f, "buffer of {e:?}"),
            ParamKind::Scalar(s) => write!(f, "scalar {s:?}"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Param {
    pub name: &'static str,
    pub kind: ParamKind,
}

pub(super) type Entry = unsafe extern "C" fn(
    *const EmuLaunch,
    *const EmuArg,
    *mut std::ffi::c_char,
    usize,
) -> std::ffi::c_int;

/// One `extern "C" __global__` kernel compiled for the emulator.
#[derive(Clone, Copy)]
pub struct KernelInfo {
    pub name: &'static str,
    pub(super) entry: Entry,
    pub params: &'static [Param],
}

impl std::fmt::Debug for KernelInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelInfo")
            .field("name", &self.name)
            .field("params", &self.params)
            .finish()
    }
}

include!(concat!(env!("OUT_DIR"), "/emu_kernels.rs"));

/// Every kernel the emulator can run (those of `kernels/*.cu` and its own self-tests).
pub fn kernels() -> &'static [KernelInfo] {
    KERNELS
}

/// Types a buffer argument may hold.
pub trait EmuElem: bytemuck::Pod {
    const ELEM: Elem;
}

macro_rules! emu_elem {
    ($($t:ty => $e:ident),*) => { $(impl EmuElem for $t { const ELEM: Elem = Elem::$e; })* };
}
emu_elem!(f16 => F16, bf16 => Bf16, f32 => F32, i32 => I32, u32 => U32, i64 => I64, u64 => U64, u8 => U8);
// fp8 elements are bytes to a kernel (`GPTR(const unsigned char)`).
emu_elem!(crate::kv::Fp8E4m3 => U8, crate::kv::Fp8E5m2 => U8);
