//! The CPU's arithmetic limit: lane-FMAs per second on every core, measured the way
//! [`super::stream`] measures the memory's, so that a CPU kernel's roofline is two ratios from one
//! run: its bytes over the read-only stream, its FMAs over this.
//!
//! Set up to reach the limit: one task per thread of the global pool (`rayon::broadcast`, one
//! thread per core); on each, [`CHAINS`] independent FMA chains (more than latency times
//! throughput, 4 x 2 on current cores) on the widest vectors the attention kernels use; the best
//! of several passes.

use crate::timing::best_secs;
use serde::Serialize;

/// Independent accumulators per thread: enough to hide the FMA latency on two FMA units.
pub const CHAINS: usize = 12;
/// Rounds of [`CHAINS`] FMAs per thread and pass: about a millisecond at 100 G lane-FMA/s.
const ROUNDS: usize = 1 << 19;

/// The measured FMA limit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FmaLimit {
    /// Lane-FMAs (one multiply-add of one f32 lane) per second, all cores together.
    pub lane_fmas_per_s: f64,
    /// Cores (threads of the global pool) that ran.
    pub threads: usize,
    /// f32 lanes per instruction: 16 (AVX-512), 8 (AVX2 + FMA) or 1 (scalar multiply-add).
    pub lanes: usize,
}

impl FmaLimit {
    /// Seconds `lane_fmas` take at this limit.
    pub fn secs(&self, lane_fmas: f64) -> f64 {
        lane_fmas / self.lane_fmas_per_s
    }
}

/// The best of `passes` (at least 3) passes on every thread of the global pool, after one untimed
/// pass.
pub fn fma_limit(passes: usize) -> FmaLimit {
    let lanes = widest_lanes();
    let threads = rayon::current_num_threads();
    let secs = best_secs(1, passes.max(3), || {
        rayon::broadcast(|_| std::hint::black_box(chains(lanes)));
    });
    FmaLimit {
        lane_fmas_per_s: (threads * ROUNDS * CHAINS * lanes) as f64 / secs,
        threads,
        lanes,
    }
}

/// The widest FMA this CPU runs, in f32 lanes, no wider than the kernels may use
/// ([`super::KERNELS_ENV`]).
fn widest_lanes() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        use super::Isa;
        if super::simd::avx512_available() && Isa::Avx512.allowed() {
            return 16;
        }
        if super::simd::avx2_available() && Isa::Avx2.allowed() {
            return 8;
        }
    }
    1
}

/// [`ROUNDS`] rounds of [`CHAINS`] FMAs `lanes` wide; returns a value that depends on all.
fn chains(lanes: usize) -> f32 {
    #[cfg(target_arch = "x86_64")]
    match lanes {
        // SAFETY: `widest_lanes` found the features.
        16 => return unsafe { x86::chains_avx512() },
        // SAFETY: as above.
        8 => return unsafe { x86::chains_avx2() },
        _ => {}
    }
    let mut a = [1.0f32; CHAINS];
    let (b, c) = (std::hint::black_box(0.999_999f32), 1e-7f32);
    for _ in 0..ROUNDS {
        for x in a.iter_mut() {
            *x = x.mul_add(b, c);
        }
    }
    a.iter().sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{CHAINS, ROUNDS};
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX-512 F must be available.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn chains_avx512() -> f32 {
        let mut a = [_mm512_set1_ps(1.0); CHAINS];
        let (b, c) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
        for _ in 0..ROUNDS {
            for x in a.iter_mut() {
                *x = _mm512_fmadd_ps(*x, b, c);
            }
        }
        let sum = a
            .iter()
            .fold(_mm512_setzero_ps(), |s, &x| _mm512_add_ps(s, x));
        _mm512_reduce_add_ps(sum)
    }

    /// # Safety
    /// AVX2 and FMA must be available.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn chains_avx2() -> f32 {
        let mut a = [_mm256_set1_ps(1.0); CHAINS];
        let (b, c) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
        for _ in 0..ROUNDS {
            for x in a.iter_mut() {
                *x = _mm256_fmadd_ps(*x, b, c);
            }
        }
        let sum = a
            .iter()
            .fold(_mm256_setzero_ps(), |s, &x| _mm256_add_ps(s, x));
        let mut lanes = [0f32; 8];
        // SAFETY: eight floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
        lanes.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chains_compute_what_they_claim() {
        // Every lane of every chain follows x -> 0.999999 x + 1e-7 from 1 (a fixed point at 0.1):
        // the vector and scalar chains agree with an f64 recurrence to f32 rounding.
        let mut x = 1.0f64;
        for _ in 0..ROUNDS {
            x = x * 0.999_999f32 as f64 + 1e-7f32 as f64;
        }
        let lanes = widest_lanes();
        let want = x * (CHAINS * lanes) as f64;
        let got = chains(lanes) as f64;
        assert!((got - want).abs() < 1e-2 * want, "{got} vs {want}");
        let scalar = chains(1) as f64;
        assert!((scalar - x * CHAINS as f64).abs() < 1e-2 * x * CHAINS as f64);
    }

    #[test]
    fn the_limit_is_positive_and_names_its_width() {
        let l = fma_limit(1);
        assert!(l.lane_fmas_per_s > 0.0 && l.lane_fmas_per_s.is_finite());
        assert_eq!(l.threads, rayon::current_num_threads());
        assert!([1, 8, 16].contains(&l.lanes));
        assert_eq!(l.secs(l.lane_fmas_per_s), 1.0);
    }
}
