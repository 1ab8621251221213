//! The CUDA kernels of `kernels/*.cu`, run on the CPU.
//!
//! build.rs compiles every kernel file a second time with the host C++ compiler against
//! `kernels/emu/` (fibers for CUDA threads, real barriers, warp-synchronous shuffles, bounds-checked
//! buffers; see `kernels/emu/README.md`) and links the result into this crate. [`Launch`] calls any
//! of those kernels by name with checked arguments, so tests run the real kernel code without a GPU
//! and compare it with the CPU reference ([`crate::device::cpu`]).
//!
//! ```
//! use pagedkv::emu::Launch;
//! let input: Vec<f32> = (0..64).map(|i| i as f32).collect();
//! let mut out = vec![f32::NAN; 64];
//! Launch::new("emu_selftest_reverse_synced")
//!     .grid(1)
//!     .block(64)
//!     .buf(&input)
//!     .buf_mut(&mut out)
//!     .run()
//!     .unwrap();
//! assert_eq!(out[0], 63.0);
//! ```

pub mod attention;
pub mod cache_ops;
mod ffi;
pub mod gather;
mod kernel;
mod launch;

pub use kernel::{kernels, Elem, EmuElem, KernelInfo, Param, ParamKind, Scalar};
pub use launch::{Dim3, EmuError, Launch, Schedule};
