//! The roofline of a CPU decode-attention run: the time its K and V bytes take at the read-only
//! stream, the time its FMAs take at the measured FMA limit, and the time the kernel itself takes
//! over the same tokens when K and V stay in cache (its instructions with no wait for memory:
//! conversions, reductions, the softmax, the addresses, as well as the FMAs), all measured in the
//! same run; the longest binds, and the paged kernel's time is compared with it.

use super::{Problem, ProblemOptions};
use crate::device::cpu::attention::PARTITION;
use crate::device::cpu::fma::FmaLimit;
use crate::kv::KvElem;
use crate::launch::Layout;
use crate::timing::best_secs;
use serde::Serialize;

/// K and V bytes per thread in [`in_cache_secs_per_token`]'s problem: half of a 2 MiB L2, so
/// that they stay there between runs.
const IN_CACHE_BYTES: usize = 1 << 20;

/// Which limit a run's roofline puts first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// K and V take longest to read at the stream limit.
    Memory,
    /// The FMAs take longest at the FMA limit.
    Fma,
    /// The kernel takes longest with K and V in cache: its instructions bind.
    Instructions,
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Bound::Memory => "memory",
            Bound::Fma => "FMA",
            Bound::Instructions => "the kernel's instructions",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Roofline {
    /// Lane-FMAs of one decode step: per token and query head, `head_dim` for the score and
    /// `head_dim` for the weighted sum of V.
    pub lane_fmas: f64,
    /// The FMA limit of the run (all cores).
    pub fma: FmaLimit,
    /// K and V bytes over the read-only stream limit.
    pub memory_us: f64,
    /// [`Self::lane_fmas`] over the FMA limit.
    pub fma_us: f64,
    /// The paged kernel over the same tokens with K and V in cache ([`in_cache_secs_per_token`]).
    pub in_cache_us: f64,
    /// K and V read in the kernel's order with no arithmetic, paged and contiguous
    /// ([`crate::device::cpu::attention::read_rows`]): what each layout costs to read here.
    pub paged_read_us: f64,
    pub contiguous_read_us: f64,
    pub binds: Bound,
    /// The bound (the longest of the three) over the paged kernel's time.
    pub paged_frac_of_bound: f64,
    /// The paged read over the paged kernel's time: the kernel against what its layout costs to
    /// read.
    pub paged_frac_of_read: f64,
}

/// The two layouts' read times ([`Roofline::paged_read_us`], [`Roofline::contiguous_read_us`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadTimes {
    pub paged_us: f64,
    pub contiguous_us: f64,
}

/// Lane-FMAs of a decode step over `tokens` tokens with `num_heads` query heads of `head_dim`.
pub fn attention_lane_fmas(tokens: usize, num_heads: usize, head_dim: usize) -> f64 {
    2.0 * tokens as f64 * num_heads as f64 * head_dim as f64
}

impl Roofline {
    /// The roofline of `kv_bytes` read at `stream_gbps`, `lane_fmas` at `fma` and the kernel's
    /// `in_cache_us`, against a paged time of `paged_us`.
    pub fn new(
        kv_bytes: f64,
        stream_gbps: f64,
        lane_fmas: f64,
        fma: FmaLimit,
        in_cache_us: f64,
        reads: ReadTimes,
        paged_us: f64,
    ) -> Self {
        let memory_us = kv_bytes / stream_gbps / 1e3;
        let fma_us = fma.secs(lane_fmas) * 1e6;
        let (binds, bound) = [
            (Bound::Memory, memory_us),
            (Bound::Fma, fma_us),
            (Bound::Instructions, in_cache_us),
        ]
        .into_iter()
        .fold((Bound::Memory, f64::NEG_INFINITY), |best, b| {
            if b.1 > best.1 {
                b
            } else {
                best
            }
        });
        Roofline {
            lane_fmas,
            fma,
            memory_us,
            fma_us,
            in_cache_us,
            paged_read_us: reads.paged_us,
            contiguous_read_us: reads.contiguous_us,
            binds,
            paged_frac_of_bound: bound / paged_us,
            paged_frac_of_read: reads.paged_us / paged_us,
        }
    }
}

/// Seconds per token (all heads) of the paged kernel over `p`'s shape, dtypes and block size when
/// K and V stay in cache, on every core of the global pool: one core's time over one sequence of
/// [`IN_CACHE_BYTES`] of K and V (at most a partition), the best of `passes` (at least 3) runs
/// after one untimed run, divided among the cores (each has an L2 of its own). The runs are timed
/// on a pool of one thread, from inside it, so that no run waits for a sleeping thread to wake.
pub fn in_cache_secs_per_token<T: KvElem, KV: KvElem>(
    p: &Problem<T, KV>,
    passes: usize,
) -> Result<f64, InCacheError> {
    let token_bytes = p.spec.elems_per_token() * 2 * std::mem::size_of::<KV>();
    let tokens = (IN_CACHE_BYTES / token_bytes.max(1)).clamp(1, PARTITION);
    let opts = ProblemOptions::default();
    let small = Problem::<T, KV>::with_options(p.shape, p.spec.block_size, &[tokens], 1, opts)?;
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let mut out = vec![T::from_f32(0.0); small.q.len()];
    let secs = one.install(|| {
        best_secs(1, passes.max(3), || {
            small.attend_cpu(Layout::Paged, &mut out)
        })
    });
    Ok(secs / tokens as f64 / rayon::current_num_threads() as f64)
}

/// Why [`in_cache_secs_per_token`] could not measure.
#[derive(Debug, thiserror::Error)]
pub enum InCacheError {
    #[error(transparent)]
    Problem(#[from] super::ProblemError),
    #[error("a thread for the in-cache run: {0}")]
    Thread(#[from] rayon::ThreadPoolBuildError),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(g: f64) -> FmaLimit {
        FmaLimit {
            lane_fmas_per_s: g * 1e9,
            threads: 2,
            lanes: 16,
        }
    }

    #[test]
    fn the_longer_time_binds_and_the_kernel_is_measured_against_it() {
        // The shape: batch 8 x 4096, 32 query heads of 128, f16 K and V of 8 KV heads.
        let tokens = 8 * 4096;
        let fmas = attention_lane_fmas(tokens, 32, 128);
        assert_eq!(fmas, 268_435_456.0);
        let bytes = (tokens * 8 * 128 * 2 * 2) as f64;
        let reads = ReadTimes {
            paged_us: 6_000.0,
            contiguous_us: 5_000.0,
        };
        let r = Roofline::new(bytes, 24.0, fmas, limit(92.0), 4_000.0, reads, 10_000.0);
        assert_eq!(r.binds, Bound::Memory);
        assert!((r.memory_us - bytes / 24e3).abs() < 1e-9);
        assert!((r.fma_us - fmas / 92e3).abs() < 1e-9);
        assert!((r.paged_frac_of_bound - r.memory_us / 10_000.0).abs() < 1e-12);
        assert!((r.paged_frac_of_read - 0.6).abs() < 1e-12);
        assert_eq!((r.paged_read_us, r.contiguous_read_us), (6_000.0, 5_000.0));
        // A slow FMA limit binds instead.
        let r = Roofline::new(bytes, 24.0, fmas, limit(10.0), 4_000.0, reads, 40_000.0);
        assert_eq!(r.binds, Bound::Fma);
        assert!((r.paged_frac_of_bound - r.fma_us / 40_000.0).abs() < 1e-12);
        // And a kernel slower in cache than either limit binds itself.
        let r = Roofline::new(bytes, 24.0, fmas, limit(92.0), 30_000.0, reads, 40_000.0);
        assert_eq!(r.binds, Bound::Instructions);
        assert!((r.paged_frac_of_bound - 0.75).abs() < 1e-12);
    }
}
