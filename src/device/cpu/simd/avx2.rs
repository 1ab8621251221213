//! The attention and gather inner loops with AVX2, FMA and F16C intrinsics.
//!
//! Every function here carries the target features itself, rather than relying on a caller's
//! closure being inlined into a feature-enabled frame (it was not: `mul_add` became a call to
//! software `fmaf`). They are `unsafe` only because the features must be present: callers check
//! with [`available`] first. Row slices are bounds-checked once per row; loads within a row use
//! raw pointers over the checked slice.

// Register arrays (`[__m256; G]`) are indexed by head and column in lockstep with pointers.
#![allow(clippy::needless_range_loop)]

use crate::kv::{Dtype, KvElem};
use std::arch::x86_64::*;

/// Whether this CPU can run the functions of this module.
pub fn available() -> bool {
    std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
}

/// Eight elements at `p` widened to f32 (exactly: f16 and bf16 are subsets of f32).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load8<T: KvElem>(p: *const T) -> __m256 {
    // `T::DTYPE` is a constant: the match folds away in each instance.
    match T::DTYPE {
        Dtype::F16 => _mm256_cvtph_ps(_mm_loadu_si128(p.cast())),
        Dtype::Bf16 => {
            let wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast()));
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(wide))
        }
        Dtype::F32 => _mm256_loadu_ps(p.cast()),
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Asks for every cache line of `buf[r..r + hd]` to be brought in, for each `r` in `rows`;
/// rows that do not lie in `buf` are skipped.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn prefetch_row<T>(buf: &[T], r: usize, hd: usize) {
    if let Some(row) = buf.get(r..r + hd) {
        let bytes = std::mem::size_of_val(row);
        let p = row.as_ptr().cast::<i8>();
        for off in (0..bytes).step_by(64) {
            // SAFETY: `off` lies inside `row`; a prefetch never faults anyway.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(off)) };
        }
    }
}

/// Rows to fetch ahead of use while a kernel works: row `c` of `rows` is requested as row `c`
/// of the kernel's own work is read, so the requests are spread over the kernel's run.
#[derive(Clone, Copy)]
pub struct Prefetch<'a, T> {
    pub buf: &'a [T],
    pub rows: &'a [usize],
}

impl<T> Prefetch<'_, T> {
    pub fn none() -> Self {
        Prefetch {
            buf: &[],
            rows: &[],
        }
    }
}

/// `scores[g * stride + c] = scale * q[g] · rows[c]` for `G` query heads (`q` is `[G, hd]`).
/// Two accumulator sets per head hide the FMA latency; `hd` is a multiple of 8.
///
/// # Safety
/// AVX2, FMA and F16C must be available; `hd % 8 == 0`; `q.len() >= G * hd`;
/// `scores.len() >= (G - 1) * stride + rows.len()`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn scores<T: KvElem, const G: usize>(
    q: &[f32],
    k: &[T],
    rows: &[usize],
    hd: usize,
    scale: f32,
    scores: &mut [f32],
    stride: usize,
    ahead: Prefetch<T>,
) {
    debug_assert!(hd.is_multiple_of(8) && q.len() >= G * hd);
    debug_assert!(scores.len() >= (G - 1) * stride + rows.len());
    let q = q.as_ptr();
    for (c, &r) in rows.iter().enumerate() {
        if let Some(&p) = ahead.rows.get(c) {
            prefetch_row(ahead.buf, p, hd);
        }
        let row = k[r..r + hd].as_ptr();
        let mut a0 = [_mm256_setzero_ps(); G];
        let mut a1 = [_mm256_setzero_ps(); G];
        let mut d = 0;
        while d + 16 <= hd {
            let x0 = load8(row.add(d));
            let x1 = load8(row.add(d + 8));
            for g in 0..G {
                let qg = q.add(g * hd + d);
                a0[g] = _mm256_fmadd_ps(_mm256_loadu_ps(qg), x0, a0[g]);
                a1[g] = _mm256_fmadd_ps(_mm256_loadu_ps(qg.add(8)), x1, a1[g]);
            }
            d += 16;
        }
        if d < hd {
            let x0 = load8(row.add(d));
            for g in 0..G {
                a0[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(g * hd + d)), x0, a0[g]);
            }
        }
        for g in 0..G {
            *scores.get_unchecked_mut(g * stride + c) = hsum(_mm256_add_ps(a0[g], a1[g])) * scale;
        }
    }
}

/// `acc[g] += Σ_c weights[g * stride + c] * rows[c]` for `G` query heads (`acc` is `[G, hd]`).
///
/// Column-blocked: `W` vectors of each head's accumulator stay in registers while every row of
/// the chunk passes (the chunk is in L1 after the first pass), so the inner loop has no stores.
///
/// # Safety
/// As [`scores`], with `acc.len() >= G * hd` and `weights` in place of `scores`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn accumulate<T: KvElem, const G: usize>(
    weights: &[f32],
    stride: usize,
    v: &[T],
    rows: &[usize],
    hd: usize,
    acc: &mut [f32],
    ahead: Prefetch<T>,
) {
    debug_assert!(hd.is_multiple_of(8) && acc.len() >= G * hd);
    debug_assert!(weights.len() >= (G - 1) * stride + rows.len());
    assert!(rows.iter().all(|&r| r + hd <= v.len()), "row out of range");
    // The requests ride on the first pass, the one that waits for memory.
    let mut ahead = ahead;
    let mut d = 0;
    while d + 16 <= hd {
        columns::<T, G, 2>(weights, stride, v, rows, hd, acc, d, ahead);
        ahead = Prefetch::none();
        d += 16;
    }
    if d < hd {
        columns::<T, G, 1>(weights, stride, v, rows, hd, acc, d, ahead);
    }
}

/// Columns `d..d + 8 W` of [`accumulate`].
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn columns<T: KvElem, const G: usize, const W: usize>(
    weights: &[f32],
    stride: usize,
    v: &[T],
    rows: &[usize],
    hd: usize,
    acc: &mut [f32],
    d: usize,
    ahead: Prefetch<T>,
) {
    let (vp, ap, wp) = (v.as_ptr(), acc.as_mut_ptr(), weights.as_ptr());
    let mut a = [[_mm256_setzero_ps(); W]; G];
    for g in 0..G {
        for j in 0..W {
            a[g][j] = _mm256_loadu_ps(ap.add(g * hd + d + 8 * j));
        }
    }
    for (c, &r) in rows.iter().enumerate() {
        if let Some(&p) = ahead.rows.get(c) {
            prefetch_row(ahead.buf, p, hd);
        }
        let mut x = [_mm256_setzero_ps(); W];
        for (j, xj) in x.iter_mut().enumerate() {
            *xj = load8(vp.add(r + d + 8 * j));
        }
        for g in 0..G {
            let w = _mm256_broadcast_ss(&*wp.add(g * stride + c));
            for j in 0..W {
                a[g][j] = _mm256_fmadd_ps(w, x[j], a[g][j]);
            }
        }
    }
    for g in 0..G {
        for j in 0..W {
            _mm256_storeu_ps(ap.add(g * hd + d + 8 * j), a[g][j]);
        }
    }
}

/// `e^x` for eight lanes (Cephes' `expf`: range reduction by ln 2, degree-6 polynomial; about
/// 2 ulp). Lanes below -87.3 (including -inf) give 0.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn exp8(x: __m256) -> __m256 {
    const LO: f32 = -87.336_55;
    let underflow = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(LO));
    let x = _mm256_min_ps(
        _mm256_max_ps(x, _mm256_set1_ps(LO)),
        _mm256_set1_ps(88.376_26),
    );
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    // r = x - n ln 2, with ln 2 split in two so the product is exact.
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm256_set1_ps(1.987_569_1e-4);
    for c in [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let r2 = _mm256_mul_ps(r, r);
    let y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0));
    let pow2n = _mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    ));
    let y = _mm256_mul_ps(y, _mm256_castsi256_ps(pow2n));
    _mm256_andnot_ps(underflow, y)
}

/// `x[i] = e^(x[i] - shift)`; returns the sum of the new values.
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn exp_shifted(x: &mut [f32], shift: f32) -> f32 {
    let m = _mm256_set1_ps(shift);
    let mut sum = _mm256_setzero_ps();
    let mut chunks = x.chunks_exact_mut(8);
    for c in &mut chunks {
        let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), m));
        _mm256_storeu_ps(c.as_mut_ptr(), e);
        sum = _mm256_add_ps(sum, e);
    }
    let tail = chunks.into_remainder();
    if !tail.is_empty() {
        // Padding with -inf makes the padded lanes 0, so the tail takes the same path.
        let mut buf = [f32::NEG_INFINITY; 8];
        buf[..tail.len()].copy_from_slice(tail);
        let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(buf.as_ptr()), m));
        _mm256_storeu_ps(buf.as_mut_ptr(), e);
        tail.copy_from_slice(&buf[..tail.len()]);
        sum = _mm256_add_ps(sum, e);
    }
    hsum(sum)
}

/// The f32 sum of `x`, four vector accumulators wide.
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn sum<T: KvElem>(x: &[T]) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut chunks = x.chunks_exact(32);
    for c in &mut chunks {
        let p = c.as_ptr();
        for (j, a) in acc.iter_mut().enumerate() {
            *a = _mm256_add_ps(*a, load8(p.add(8 * j)));
        }
    }
    let mut rest = chunks.remainder().chunks_exact(8);
    for c in &mut rest {
        acc[0] = _mm256_add_ps(acc[0], load8(c.as_ptr()));
    }
    let total = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    hsum(total) + rest.remainder().iter().map(|e| e.to_f32()).sum::<f32>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn exp_is_accurate_and_underflows_to_zero() {
        if !available() {
            eprintln!("skipped: no AVX2/FMA/F16C");
            return;
        }
        let mut x: Vec<f32> = (0..2003).map(|i| -100.0 + i as f32 * 0.05).collect();
        x.push(f32::NEG_INFINITY);
        // The reference starts from the f32 difference the kernel sees.
        let want: Vec<f64> = x.iter().map(|&v| ((v - 1.5) as f64).exp()).collect();
        let sum = unsafe { exp_shifted(&mut x, 1.5) };
        for (got, want) in x.iter().zip(&want) {
            if *want < 1.2e-38 {
                assert!(*got < 1.2e-38, "{got} vs {want}");
            } else {
                assert!(
                    ((*got as f64 - want) / want).abs() < 5e-7,
                    "{got} vs {want}"
                );
            }
        }
        let want_sum: f64 = want.iter().sum();
        assert!(((sum as f64 - want_sum) / want_sum).abs() < 1e-5);
    }

    #[test]
    fn conversions_and_sums_are_exact_on_dyadic_values() {
        if !available() {
            eprintln!("skipped: no AVX2/FMA/F16C");
            return;
        }
        // Multiples of 1/4 in [-32, 32): exact in every dtype and in any summation order.
        let vals: Vec<f32> = (0..77)
            .map(|i| ((i * 37) % 256) as f32 / 4.0 - 32.0)
            .collect();
        let want: f32 = vals.iter().sum();
        let h: Vec<f16> = vals.iter().map(|&x| f16::from_f32(x)).collect();
        let b: Vec<bf16> = vals.iter().map(|&x| bf16::from_f32(x)).collect();
        unsafe {
            assert_eq!(sum(&h), want);
            assert_eq!(sum(&b), want);
            assert_eq!(sum(&vals), want);
        }
    }
}
