//! How a lab fails, as values. Bad input ([`LabError::Invalid`]) and a missing facility
//! ([`LabError::Unavailable`]: no GPU, no kernels) are told apart so the CLI can say "skipped".

use thiserror::Error;

#[derive(Debug, Error)]
pub enum LabError {
    /// The arguments make no sense (a zero size, a working set beyond the machine).
    #[error("{0}")]
    Invalid(String),
    /// The lab cannot run here at all; the reason is reported as a skip, not a failure.
    #[error("{0}")]
    Unavailable(String),
    #[error("{op} failed: {source}")]
    Os {
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A CUDA driver call failed (the error names the function and the object).
    #[error(transparent)]
    Device(crate::device::DeviceError),
    /// A GPU pool operation failed after the GPU was found (a real failure, not a skip).
    #[error(transparent)]
    Vmm(crate::vmm::VmmError),
    /// A child process of a lab misbehaved (died, sent a short report).
    #[error("child process: {0}")]
    Child(String),
}

impl LabError {
    /// The error of the libc call `op` that just failed (from `errno`).
    pub(crate) fn last_os(op: &'static str) -> LabError {
        LabError::Os {
            op,
            source: std::io::Error::last_os_error(),
        }
    }

    pub(crate) fn io(op: &'static str) -> impl FnOnce(std::io::Error) -> LabError {
        move |source| LabError::Os { op, source }
    }
}

/// No GPU or no kernels is a skip; a failed driver call a failure.
impl From<crate::device::DeviceError> for LabError {
    fn from(e: crate::device::DeviceError) -> Self {
        use crate::device::DeviceError as D;
        match e {
            D::NoGpu(why) => LabError::Unavailable(format!("no usable CUDA GPU: {why}")),
            D::NoKernels => LabError::Unavailable(D::NoKernels.to_string()),
            D::Invalid(why) => LabError::Invalid(why),
            e @ D::Driver { .. } => LabError::Device(e),
        }
    }
}

/// `Invalid` unless `value` is positive.
pub(crate) fn positive(value: usize, what: &str) -> Result<usize, LabError> {
    if value == 0 {
        Err(LabError::Invalid(format!("{what} must be positive")))
    } else {
        Ok(value)
    }
}

/// `Invalid` when `bytes` (described by `what`, e.g. "a mapping of") exceed half the machine's
/// memory, `mem_total` (unknown: no limit): a lab must not push the machine into swapping.
pub(crate) fn at_most_half_memory(
    bytes: u64,
    what: &str,
    mem_total: Option<u64>,
) -> Result<(), LabError> {
    match mem_total.filter(|&total| bytes > total / 2) {
        Some(total) => Err(LabError::Invalid(format!(
            "{what} {} is more than half the machine's memory ({})",
            super::machine::bytes(bytes),
            super::machine::bytes(total)
        ))),
        None => Ok(()),
    }
}
