//! The spec's own choices that no simulator type names: how weights are stored, what the clock
//! counts, which host-tier backend.

use serde::Serialize;

/// vLLM's `--quantization` methods pagedkv models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Quantization {
    /// fp8 weights with per-tensor scales (vLLM's `Fp8Config`): linear layers at 1 byte.
    Fp8,
}

/// What the simulated clock counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Clock {
    /// Seconds from the step-time model; arrivals in seconds.
    #[default]
    Seconds,
    /// Every step one unit; arrivals are step indices (exact comparisons).
    Steps,
}

/// vLLM's `--kv-offloading-backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// vLLM's OffloadingConnector (the simulator's default tier).
    Native,
    /// An external LMCache server: not modelled.
    Lmcache,
}
