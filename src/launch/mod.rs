//! How each kernel family is launched, stated once, below both launchers: which kernel (by name,
//! from the list build.rs generates out of kernels/*.cu), its grid, block and dynamic shared
//! memory, its scalar arguments in the order of its signature, and the sizes of the buffers it
//! writes. The CUDA launchers (`device::cuda`) and the emulated ones (`emu`) only bind their
//! buffers to these plans, so the two cannot drift apart; neither depends on anything above it.
//!
//! - [`instances`]: the kernels compiled, and the decode-attention instances among them;
//! - [`attention`] and [`split`]: decode attention, its split-K plan and the merge;
//! - [`gather`]: the paged gather probes; [`cache_ops`]: slot writes and block copies.

pub mod attention;
pub mod cache_ops;
pub mod gather;
pub mod instances;
pub mod split;

pub use attention::{
    AttentionData, AttentionLaunch, AttentionShape, Engine, KernelLaunch, Layout, Scalar,
};
pub use split::{split_plan, SplitPlan, CHUNK, FULL_WAVE};

use thiserror::Error;

/// A launch no kernel can take: no instance for the shape, or sizes past what its arguments or
/// grid hold.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum LaunchError {
    #[error("{0}")]
    NoInstance(String),
    #[error("{0}")]
    Geometry(String),
}

/// `x` as a kernel's `int` argument.
pub(crate) fn to_i32(what: &str, x: usize) -> Result<i32, LaunchError> {
    i32::try_from(x)
        .map_err(|_| LaunchError::Geometry(format!("{what} = {x} does not fit a kernel's i32")))
}

/// `x` as a grid dimension.
pub(crate) fn to_u32(what: &str, x: usize) -> Result<u32, LaunchError> {
    u32::try_from(x)
        .map_err(|_| LaunchError::Geometry(format!("{what} = {x} does not fit a grid dimension")))
}
