//! The bandwidth side of the sweep: what a device achieves reading KV through block tables, next to
//! the limits measured in the same run.
//!
//! Conventions (the same for every probe):
//! - `copy_gbps`: a plain copy of as many bytes as one pool (K) holds, counting bytes read and
//!   bytes written (as STREAM's copy does);
//! - `stream_gbps`: a contiguous read-only pass over as many bytes as the K and V pools hold, as
//!   raw words: the memory's own read limit (on the CPU both are the crate's one limit,
//!   [`crate::device::cpu::stream`]: every core, wide loads, huge pages, best pass, at least 4x
//!   the last-level cache; and `convert_stream_gbps`: the pools themselves converted element by
//!   element to f32 with scalar code, for reference: the vectorised CPU kernels beat it; no rate
//!   divides by it, and it does not depend on the block size, so the sweep measures it once per
//!   probe and round);
//! - the copy and stream limits are measured next to every block size's gathers and attention
//!   (the sweep pairs them; [`LimitSet`]: the copy only where a copy-out gather is measured);
//! - gather copy-out (`copy_gbps` of [`GatherRates`]): the paged copy-out gather of K through a
//!   shuffled block table, bytes read + written, to be compared with the copy limit;
//! - gather read-only (`read_gbps`): the paged sum over K and V through the same table, bytes read,
//!   to be compared with the stream limit;
//! - attention: bytes of K and V read by decode attention per second, against the stream limit.
//!
//! One probe measures one device with one memory setting; [`super::probes::probes_for`] picks them for a device
//! (the CPU: [`super::cpu_probe::CpuProbe`] with and without huge pages; CUDA:
//! [`super::gpu_probe::GpuProbe`]) and is the one place a
//! new device plugs in.

use super::attention_probe::AttentionBatch;
pub use super::probe_error::ProbeError;
use crate::kv::{KvSpec, MAX_BLOCK_SIZE};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Limits {
    /// `None` when [`LimitSet::Stream`] asked for the stream alone.
    pub copy_gbps: Option<f64>,
    pub stream_gbps: f64,
}

/// The limits [`BandwidthProbe::limits`] measures: the read-only stream always (what attention
/// and the read-only gather are fractions of), the copy only where a copy-out gather is measured
/// beside it (its one use).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitSet {
    Stream,
    CopyAndStream,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GatherRates {
    /// Copy-out gather, bytes read + written per second (GB/s).
    pub copy_gbps: f64,
    /// Read-only gather, bytes read per second (GB/s).
    pub read_gbps: f64,
}

/// Sizes and repetitions of a measurement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeOptions {
    /// Bytes of K and V together (each pool gets half; the copy-out buffer another half).
    pub pool_bytes: usize,
    /// Timed repetitions after one warm-up; the median is reported.
    pub reps: usize,
    /// Passes over every block size (see [`super::measure_bandwidth`]).
    pub rounds: usize,
    /// Tokens per sequence in the gather's block table.
    pub seq_tokens: usize,
    pub seed: u64,
    /// The decode batch paged attention is measured on; `None`: attention is not measured.
    pub attention: Option<AttentionBatch>,
    /// Measure only what the recommendation reads (`--quick`): the first probe, its attention
    /// and the stream limit beside it (its read-only gather instead where attention is not
    /// measured); no other probe, no gather beside attention, no scalar conversion pass. See
    /// [`super::measure_bandwidth`].
    pub answer_only: bool,
}

/// One pool's bytes (K or V) in a probe of `pool_bytes`: half, in whole 4-byte words (the copy-out
/// buffer takes another half).
pub fn half_pool_bytes(pool_bytes: usize) -> usize {
    pool_bytes / 2 / 4 * 4
}

/// Checks, before any probe runs, that each pool of a probe of `pool_bytes` holds one block of
/// the largest block size of tokens of `token_bytes` (what every probe's block table needs).
pub fn check_pool_size(pool_bytes: usize, token_bytes: usize) -> Result<(), ProbeError> {
    let block_bytes = token_bytes.saturating_mul(MAX_BLOCK_SIZE);
    match half_pool_bytes(pool_bytes) {
        half if half < block_bytes => Err(ProbeError::PoolTooSmall {
            pool_bytes: half,
            block_bytes,
        }),
        _ => Ok(()),
    }
}

pub trait BandwidthProbe {
    /// The device measured, e.g. `cpu (2 threads)`.
    fn device(&self) -> String;
    /// The memory setting, distinguishing probes of one device (e.g. `thp`, `4k`, `hbm`).
    fn memory(&self) -> String;
    /// Facts worth printing with the results (page sizes obtained, what is not measured).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// The copy (when `set` asks for it) and read-only stream limits, for a layer of `spec`.
    fn limits(&mut self, spec: &KvSpec, set: LimitSet) -> Result<Limits, ProbeError>;
    /// The pools of `spec`'s dtype summed after converting each element to f32 with scalar code
    /// (GB/s, for reference: no rate divides by it); `None` where the probe has no such pass.
    fn convert_stream_gbps(&mut self, _spec: &KvSpec) -> Result<Option<f64>, ProbeError> {
        Ok(None)
    }
    /// Paged gather rates for one layer of shape `spec` (its block size included).
    fn gather(&mut self, spec: &KvSpec) -> Result<GatherRates, ProbeError>;
    /// Paged decode attention, K and V bytes read per second (GB/s); `None` when this probe has
    /// no attention kernel to run.
    fn attention_gbps(&mut self, _spec: &KvSpec) -> Result<Option<f64>, ProbeError> {
        Ok(None)
    }
}
