//! The attention and gather inner loops with AVX2, FMA and F16C intrinsics (see [`super`] for
//! the layouts).
//!
//! Every function here carries the target features itself, rather than relying on a caller's
//! closure being inlined into a feature-enabled frame (it was not: `mul_add` became a call to
//! software `fmaf`). They are `unsafe` only because the features must be present: callers check
//! with [`available`] first. Row slices are bounds-checked once per row; loads within a row use
//! raw pointers over the checked slice.

// Register arrays (`[__m256; G]`) are indexed by head and column in lockstep with pointers.
#![allow(clippy::needless_range_loop)]

use super::exp_consts::{EXP_HI, EXP_LN2_HI, EXP_LN2_LO, EXP_LO, EXP_POLY};
use super::Ahead;
use crate::kv::{Dtype, KvElem};
use std::arch::x86_64::*;

/// Whether this CPU can run the functions of this module.
pub fn available() -> bool {
    std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
}

/// Eight elements at `p` widened to f32, exactly: f16 and bf16 are subsets of f32, and every fp8
/// code is a float (decoded unscaled, by the bit moves below rather than a gather from a table of
/// the 256 codes: the gather cost more than the whole rest of attention's inner loop).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load8<T: KvElem>(p: *const T) -> __m256 {
    // `T::DTYPE` is a constant: the match folds away in each instance.
    match T::DTYPE {
        Dtype::F16 => _mm256_cvtph_ps(_mm_loadu_si128(p.cast())),
        Dtype::Bf16 => {
            let wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast()));
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(wide))
        }
        Dtype::F32 => _mm256_loadu_ps(p.cast()),
        // e5m2 is the high byte of an f16: the same sign, exponent (bias 15), infinities and NaNs.
        Dtype::Fp8E5m2 => _mm256_cvtph_ps(_mm_unpacklo_epi8(
            _mm_setzero_si128(),
            _mm_loadl_epi64(p.cast()),
        )),
        // e4m3 (S EEEE MMM, bias 7) placed as an f16 S 0EEEE MMM0000000 is the value / 2^8, the
        // subnormals included (f16's exponent 0 scales by 2^-14, e4m3's by 2^-6); S 1111 111 is
        // e4m3's only NaN (it has no infinities).
        Dtype::Fp8E4m3 => {
            let codes = _mm_unpacklo_epi8(_mm_loadl_epi64(p.cast()), _mm_setzero_si128());
            let magnitude = _mm_and_si128(codes, _mm_set1_epi16(0x7f));
            let sign = _mm_slli_epi16::<8>(_mm_and_si128(codes, _mm_set1_epi16(0x80)));
            let half = _mm_or_si128(sign, _mm_slli_epi16::<7>(magnitude));
            let value = _mm256_mul_ps(_mm256_cvtph_ps(half), _mm256_set1_ps(256.0));
            let nan = _mm_cmpeq_epi16(magnitude, _mm_set1_epi16(0x7f));
            _mm256_or_ps(value, _mm256_castsi256_ps(_mm256_cvtepi16_epi32(nan)))
        }
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

/// `out[i]` = the sum of the lanes of `v[i]`: eight horizontal sums for the price of about two.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn sum8(v: [__m256; 8]) -> __m256 {
    let t0 = _mm256_hadd_ps(v[0], v[1]);
    let t1 = _mm256_hadd_ps(v[2], v[3]);
    let t2 = _mm256_hadd_ps(v[4], v[5]);
    let t3 = _mm256_hadd_ps(v[6], v[7]);
    // [v0 v1 v2 v3 | v0 v1 v2 v3] (low and high halves' partial sums), then v4..v7 alike.
    let u0 = _mm256_hadd_ps(t0, t1);
    let u1 = _mm256_hadd_ps(t2, t3);
    let low = _mm256_permute2f128_ps::<0x20>(u0, u1);
    let high = _mm256_permute2f128_ps::<0x31>(u0, u1);
    _mm256_add_ps(low, high)
}

/// Scores of `rows` for `G` heads, `R = 8 / G` rows at a time: one accumulator per (row, head),
/// reduced together by [`sum8`] into `s[c * G..][..8]`, the `[row][head]` layout. Each K row is
/// converted once for all `G` heads; each query vector is loaded once for `R` rows. Past the last
/// row the last row is read again (its lanes are overwritten by the caller).
///
/// # Safety
/// AVX2, FMA and F16C must be available; `hd % 8 == 0`; `G * R == 8`; `q.len() >= G * hd`;
/// every row lies in `k`; `s.len() >= rows.len().div_ceil(R) * 8`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn scores<T: KvElem, const G: usize, const R: usize>(
    q: &[f32],
    k: &[T],
    rows: &[usize],
    hd: usize,
    scale: f32,
    s: &mut [f32],
    ahead: &mut Ahead<T>,
) {
    debug_assert!(G * R == 8 && hd.is_multiple_of(8) && q.len() >= G * hd);
    debug_assert!(s.len() >= rows.len().div_ceil(R) * 8);
    let (q, kp, n) = (q.as_ptr(), k.as_ptr(), rows.len());
    let scale = _mm256_set1_ps(scale);
    for c in (0..n).step_by(R) {
        ahead.beat();
        let mut row = [kp; R];
        for (i, p) in row.iter_mut().enumerate() {
            *p = kp.add(*rows.get_unchecked((c + i).min(n - 1)));
        }
        let mut a = [_mm256_setzero_ps(); 8];
        for d in (0..hd).step_by(8) {
            let mut x = [_mm256_setzero_ps(); R];
            for i in 0..R {
                x[i] = load8(row[i].add(d));
            }
            for h in 0..G {
                let qh = _mm256_loadu_ps(q.add(h * hd + d));
                for i in 0..R {
                    a[i * G + h] = _mm256_fmadd_ps(qh, x[i], a[i * G + h]);
                }
            }
        }
        _mm256_storeu_ps(s.as_mut_ptr().add(c * G), _mm256_mul_ps(sum8(a), scale));
    }
}

/// Every lane becomes the maximum (or sum) over the lanes that hold the same head: lanes `l`,
/// `l + G`, `l + 2G`, ... for `G` heads in the `[row][head]` layout.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn across_rows<const G: usize>(v: __m256, op: impl Fn(__m256, __m256) -> __m256) -> __m256 {
    let mut v = op(v, _mm256_permute2f128_ps::<1>(v, v));
    if G <= 2 {
        v = op(v, _mm256_permute_ps::<0b01_00_11_10>(v));
    }
    if G == 1 {
        v = op(v, _mm256_permute_ps::<0b10_11_00_01>(v));
    }
    v
}

/// A vector whose lane `l` holds `x[l % G]`: one value per head, in the `[row][head]` layout.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn per_lane<const G: usize>(x: &[f32; G]) -> __m256 {
    let lanes: [f32; 8] = std::array::from_fn(|l| x[l % G]);
    // SAFETY: eight f32 from a local array.
    unsafe { _mm256_loadu_ps(lanes.as_ptr()) }
}

/// [`super::Kernels::softmax`] over whole vectors of `[row][head]` scores (padding lanes -inf).
///
/// # Safety
/// AVX2, FMA and F16C must be available; `s.len() % 8 == 0`; `G` one of 1, 2, 4.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn softmax<const G: usize>(
    s: &mut [f32],
    maxs: &mut [f32; G],
    sums: &mut [f32; G],
) -> [f32; 4] {
    debug_assert!(s.len().is_multiple_of(8));
    let mut m = _mm256_set1_ps(f32::NEG_INFINITY);
    for c in s.chunks_exact(8) {
        m = _mm256_max_ps(m, _mm256_loadu_ps(c.as_ptr()));
    }
    let old = per_lane(maxs);
    let new = _mm256_max_ps(across_rows::<G>(m, |a, b| _mm256_max_ps(a, b)), old);
    // 0 on the first step (max was -inf), when the sums and accumulators are still 0.
    let rescale = exp8(_mm256_sub_ps(old, new));
    let mut sum = _mm256_setzero_ps();
    for c in s.chunks_exact_mut(8) {
        let w = exp8(_mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), new));
        _mm256_storeu_ps(c.as_mut_ptr(), w);
        sum = _mm256_add_ps(sum, w);
    }
    let sum = across_rows::<G>(sum, |a, b| _mm256_add_ps(a, b));
    let (mut new_l, mut rescale_l, mut sum_l) = ([0f32; 8], [0f32; 4], [0f32; 8]);
    _mm256_storeu_ps(new_l.as_mut_ptr(), new);
    _mm_storeu_ps(rescale_l.as_mut_ptr(), _mm256_castps256_ps128(rescale));
    _mm256_storeu_ps(sum_l.as_mut_ptr(), sum);
    for h in 0..G {
        maxs[h] = new_l[h];
        sums[h] = sums[h] * rescale_l[h] + sum_l[h];
    }
    rescale_l
}

/// `acc[h] = acc[h] * rescale[h] + Σ_c w[c * G + h] * v[rows[c]]` for `G` heads (`acc` is
/// `[G, hd]`), sixteen columns at a time: each head's columns stay in registers while every row
/// passes (the step's rows are in L1 after the first column block).
///
/// # Safety
/// AVX2, FMA and F16C must be available; `hd % 8 == 0`; `acc.len() == G * hd`; every row lies in
/// `v`; `w.len() >= rows.len() * G`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn accumulate<T: KvElem, const G: usize>(
    w: &[f32],
    v: &[T],
    rows: &[usize],
    hd: usize,
    rescale: &[f32; 4],
    acc: &mut [f32],
    ahead: &mut Ahead<T>,
) {
    debug_assert!(hd.is_multiple_of(8) && acc.len() == G * hd && w.len() >= rows.len() * G);
    let mut d = 0;
    while d + 16 <= hd {
        ahead.beat();
        columns::<T, G, 2>(w, v, rows, hd, rescale, acc, d);
        d += 16;
    }
    if d < hd {
        ahead.beat();
        columns::<T, G, 1>(w, v, rows, hd, rescale, acc, d);
    }
}

/// Columns `d..d + 8 W` of [`accumulate`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn columns<T: KvElem, const G: usize, const W: usize>(
    w: &[f32],
    v: &[T],
    rows: &[usize],
    hd: usize,
    rescale: &[f32; 4],
    acc: &mut [f32],
    d: usize,
) {
    let (vp, ap, wp) = (v.as_ptr(), acc.as_mut_ptr(), w.as_ptr());
    let mut a = [[_mm256_setzero_ps(); W]; G];
    for h in 0..G {
        let r = _mm256_set1_ps(rescale[h]);
        for j in 0..W {
            a[h][j] = _mm256_mul_ps(r, _mm256_loadu_ps(ap.add(h * hd + d + 8 * j)));
        }
    }
    for (c, &r) in rows.iter().enumerate() {
        let mut x = [_mm256_setzero_ps(); W];
        for (j, xj) in x.iter_mut().enumerate() {
            *xj = load8(vp.add(r + d + 8 * j));
        }
        for h in 0..G {
            let wh = _mm256_broadcast_ss(&*wp.add(c * G + h));
            for j in 0..W {
                a[h][j] = _mm256_fmadd_ps(wh, x[j], a[h][j]);
            }
        }
    }
    for h in 0..G {
        for j in 0..W {
            _mm256_storeu_ps(ap.add(h * hd + d + 8 * j), a[h][j]);
        }
    }
}

/// `e^x` for eight lanes (Cephes' `expf`: range reduction by ln 2, degree-6 polynomial; about
/// 2 ulp). Lanes below -87.3 (including -inf) give 0.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn exp8(x: __m256) -> __m256 {
    let underflow = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(EXP_LO));
    let x = _mm256_min_ps(
        _mm256_max_ps(x, _mm256_set1_ps(EXP_LO)),
        _mm256_set1_ps(EXP_HI),
    );
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    // r = x - n ln 2, with ln 2 split in two so the product is exact.
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_LO), r);
    let mut p = _mm256_set1_ps(EXP_POLY[0]);
    for c in &EXP_POLY[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
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
        x.extend([f32::NEG_INFINITY; 5]);
        for c in x.chunks_exact(8) {
            let mut got = [0f32; 8];
            unsafe { _mm256_storeu_ps(got.as_mut_ptr(), exp8(_mm256_loadu_ps(c.as_ptr()))) };
            for (got, &arg) in got.iter().zip(c) {
                let want = (arg as f64).exp();
                if want < 1.2e-38 {
                    assert!(*got < 1.2e-38, "{got} vs {want}");
                } else {
                    assert!(
                        ((*got as f64 - want) / want).abs() < 5e-7,
                        "{got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn eight_sums_at_once_are_the_eight_sums() {
        if !available() {
            eprintln!("skipped: no AVX2/FMA/F16C");
            return;
        }
        // Small integers: exact in any order.
        let v: [[f32; 8]; 8] = std::array::from_fn(|i| std::array::from_fn(|l| (i * 8 + l) as f32));
        let mut got = [0f32; 8];
        unsafe {
            let vecs = v.map(|x| _mm256_loadu_ps(x.as_ptr()));
            _mm256_storeu_ps(got.as_mut_ptr(), sum8(vecs));
        }
        for i in 0..8 {
            assert_eq!(got[i], v[i].iter().sum::<f32>());
        }
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
