//! What stops a bandwidth probe.

use crate::device::cuda::gather::GatherError;
use crate::device::DeviceError;
use crate::kv::{SpecError, TableError};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ProbeError {
    #[error("probe buffer of {bytes} bytes: {source}")]
    Memory {
        bytes: usize,
        source: std::io::Error,
    },
    #[error("probe pool of {pool_bytes} bytes is smaller than one block of {block_bytes} bytes; raise --probe-mib")]
    PoolTooSmall {
        pool_bytes: usize,
        block_bytes: usize,
    },
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Table(#[from] TableError),
    #[error("attention probe: {0}")]
    Attention(String),
    #[error("probe check failed: {0}")]
    Check(String),
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    Gather(#[from] GatherError),
}
