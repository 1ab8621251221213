//! Why a spec is no run: each a one-line message naming the flag it came from, as the CLI says
//! it.

use super::tier::HostTierError;
use crate::kv::model::{ModelError, TensorParallelError};
use crate::kv::BlockSizeError;
use crate::sim::engine::config::ConfigError;
use crate::sim::engine::{ProfileFileError, SloError};
use crate::sim::latency::StepTimesError;
use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
pub enum SpecError {
    #[error("unknown preset {name:?} (one of {known})")]
    UnknownPreset { name: String, known: String },
    #[error("unknown GPU {name:?} ({known})")]
    UnknownGpu { name: String, known: String },
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The model's heads do not split over the GPUs.
    #[error(transparent)]
    TensorParallel(#[from] TensorParallelError),
    /// vLLM's checks of the engine's settings.
    #[error(transparent)]
    Engine(#[from] ConfigError),
    #[error(transparent)]
    BlockSize(#[from] BlockSizeError),
    #[error("--swap-space-gib must be >= 0, got {0}")]
    SwapSpace(f64),
    #[error("--gpu-memory-utilization must be in (0, 1], got {0}")]
    GpuMemoryUtilization(f64),
    #[error("--step-overhead-ms must be >= 0, got {0}")]
    StepOverhead(f64),
    /// The host tier's size, chunking or bandwidth.
    #[error(transparent)]
    HostTier(#[from] HostTierError),
    /// A step profile unread, or tables that do not cover the run.
    #[error(transparent)]
    StepTimes(#[from] StepTimesError),
    /// An efficiency profile unread.
    #[error(transparent)]
    Profile(#[from] ProfileFileError),
    #[error(transparent)]
    Slo(#[from] SloError),
}
