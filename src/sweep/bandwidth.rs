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
//! One probe measures one device with one memory setting; [`probes_for`] picks them for a device
//! (the CPU: [`CpuProbe`] with and without huge pages; CUDA: [`GpuProbe`]) and is the one place a
//! new device plugs in.

use super::attention_probe::AttentionBatch;
use super::cpu_probe::CpuProbe;
use super::gpu_probe::GpuProbe;
use crate::device::cpu::pages::{thp_available, thp_mode, Pages};
use crate::device::cuda::gather::GatherError;
use crate::device::{Device, DeviceError};
use crate::kv::{KvSpec, SpecError, TableError, MAX_BLOCK_SIZE};
use serde::Serialize;
use thiserror::Error;

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

/// Probes for a device, first the one the table's main columns show, and notes about the choice.
pub type Probes = (Vec<Box<dyn BandwidthProbe>>, Vec<String>);

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

/// The probes for `device`, first the one the table's main columns show. The CPU gets two: with
/// transparent huge pages (when the kernel offers them) and with 4 KiB pages. A CUDA device gets
/// one, over its memory (HBM), running the paged gather and attention kernels. With
/// `opts.answer_only` the first alone: the answer reads no other.
pub fn probes_for(device: &Device, opts: &ProbeOptions) -> Result<Probes, ProbeError> {
    let (mut probes, mut notes) = device_probes(device, opts)?;
    if opts.answer_only && probes.len() > 1 {
        let left: Vec<String> = probes.split_off(1).iter().map(|p| p.memory()).collect();
        notes.push(format!(
            "--quick measures the {} probe alone (the one the answer reads): not the {} probe \
             (the sweep without --quick measures it)",
            probes[0].memory(),
            left.join(", ")
        ));
    }
    Ok((probes, notes))
}

/// The page sizes of the CPU probes a sweep with `opts` runs, the answer's first: huge pages where
/// the kernel offers them, then 4 KiB pages (not with `answer_only` when huge pages come first).
pub fn cpu_page_sizes(opts: &ProbeOptions) -> Vec<Pages> {
    match (thp_available(), opts.answer_only) {
        (true, true) => vec![Pages::Huge],
        (true, false) => vec![Pages::Huge, Pages::Small],
        (false, _) => vec![Pages::Small],
    }
}

fn device_probes(device: &Device, opts: &ProbeOptions) -> Result<Probes, ProbeError> {
    match device {
        Device::Cpu => {
            let mut notes = Vec::new();
            if !thp_available() {
                notes.push(format!(
                    "transparent huge pages unavailable (mode: {}): 4 KiB pages only",
                    thp_mode().unwrap_or_else(|| "unknown".into())
                ));
            }
            let pages = cpu_page_sizes(&ProbeOptions {
                answer_only: false,
                ..opts.clone()
            });
            // One limits' buffer for all of them (see `CpuProbe::beside`).
            let first = CpuProbe::new(pages[0], opts.clone())?;
            let others: Vec<CpuProbe> = pages[1..].iter().map(|&p| first.beside(p)).collect();
            let probes = std::iter::once(first)
                .chain(others)
                .map(|p| Box::new(p) as Box<dyn BandwidthProbe>)
                .collect();
            Ok((probes, notes))
        }
        Device::Cuda(dev) => Ok((
            vec![Box::new(GpuProbe::new(dev.clone(), opts.clone()))],
            Vec::new(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_only_keeps_the_first_probe_and_says_which_it_left_out() {
        let mut opts = ProbeOptions {
            pool_bytes: 1 << 20,
            reps: 1,
            rounds: 1,
            seq_tokens: 256,
            seed: 1,
            attention: None,
            answer_only: false,
        };
        // Nothing is mapped or measured until a probe is asked for a figure.
        let (all, _) = probes_for(&Device::Cpu, &opts).unwrap();
        let labels: Vec<String> = all.iter().map(|p| p.memory()).collect();
        opts.answer_only = true;
        let (first, notes) = probes_for(&Device::Cpu, &opts).unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].memory(), labels[0]);
        let said = notes.iter().any(|n| n.contains("--quick measures the"));
        assert_eq!(said, labels.len() > 1, "{notes:?}");
        for left in &labels[1..] {
            assert!(notes
                .iter()
                .any(|n| n.contains(&format!("not the {left} probe"))));
        }
    }
}
