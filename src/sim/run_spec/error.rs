//! Why a spec is no run: each a one-line message naming the flag it came from, as the CLI says
//! it.

use crate::kv::model::ModelError;
use crate::sim::engine::config::ConfigError;
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
    #[error("{0}")]
    TensorParallel(String),
    /// vLLM's checks of the engine's settings.
    #[error(transparent)]
    Engine(#[from] ConfigError),
    #[error("block sizes must be at least 1")]
    ZeroBlockSize,
    #[error("--swap-space-gib must be >= 0, got {0}")]
    SwapSpace(f64),
    #[error("--gpu-memory-utilization must be in (0, 1], got {0}")]
    GpuMemoryUtilization(f64),
    #[error("--step-overhead-ms must be >= 0, got {0}")]
    StepOverhead(f64),
    /// The host tier's size, chunking or bandwidth.
    #[error("{0}")]
    HostTier(String),
    /// A step profile unread, or tables that do not cover the run.
    #[error("{0}")]
    StepTimes(String),
    /// An efficiency profile unread.
    #[error("{0}")]
    Profile(String),
    #[error("{0}")]
    Slo(String),
}
