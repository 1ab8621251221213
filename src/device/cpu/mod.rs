//! CPU implementations of every device operation: the fallback without a GPU and the reference the
//! GPU and emulated kernels are tested against. f32 accumulation, multi-threaded with rayon.

pub mod attention;
pub mod cache_ops;
pub mod env_setting;
pub mod fma;
pub mod gather;
pub mod last_level_cache;
pub mod pages;
mod simd;
pub use simd::{kernels_cap, Isa, KERNELS_ENV};
pub mod stream;
pub mod topology;
mod wide;
