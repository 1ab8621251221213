//! The roofline of a CPU decode-attention run: the time its K and V bytes take at the read-only
//! stream and the time its FMAs take at the measured FMA limit, both limits measured in the same
//! run; the longer of the two binds, and a kernel's time is compared with it.

use crate::device::cpu::fma::FmaLimit;
use serde::Serialize;

/// Which limit a run's roofline puts first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// K and V take longer to read at the stream limit than their FMAs at the FMA limit.
    Memory,
    Fma,
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Bound::Memory => "memory",
            Bound::Fma => "FMA",
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
    pub binds: Bound,
    /// The bound (the longer of the two) over the paged kernel's time.
    pub paged_frac_of_bound: f64,
}

/// Lane-FMAs of a decode step over `tokens` tokens with `num_heads` query heads of `head_dim`.
pub fn attention_lane_fmas(tokens: usize, num_heads: usize, head_dim: usize) -> f64 {
    2.0 * tokens as f64 * num_heads as f64 * head_dim as f64
}

impl Roofline {
    /// The roofline of `kv_bytes` read at `stream_gbps` and `lane_fmas` at `fma`, against a
    /// paged time of `paged_us`.
    pub fn new(
        kv_bytes: f64,
        stream_gbps: f64,
        lane_fmas: f64,
        fma: FmaLimit,
        paged_us: f64,
    ) -> Self {
        let memory_us = kv_bytes / stream_gbps / 1e3;
        let fma_us = fma.secs(lane_fmas) * 1e6;
        let (binds, bound) = if memory_us >= fma_us {
            (Bound::Memory, memory_us)
        } else {
            (Bound::Fma, fma_us)
        };
        Roofline {
            lane_fmas,
            fma,
            memory_us,
            fma_us,
            binds,
            paged_frac_of_bound: bound / paged_us,
        }
    }
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
        let r = Roofline::new(bytes, 24.0, fmas, limit(92.0), 10_000.0);
        assert_eq!(r.binds, Bound::Memory);
        assert!((r.memory_us - bytes / 24e3).abs() < 1e-9);
        assert!((r.fma_us - fmas / 92e3).abs() < 1e-9);
        assert!((r.paged_frac_of_bound - r.memory_us / 10_000.0).abs() < 1e-12);
        // A slow FMA limit binds instead.
        let r = Roofline::new(bytes, 24.0, fmas, limit(10.0), 40_000.0);
        assert_eq!(r.binds, Bound::Fma);
        assert!((r.paged_frac_of_bound - r.fma_us / 40_000.0).abs() < 1e-12);
    }
}
