//! AVX2, FMA and F16C: the [`Lanes`] of [`kernels`] (8 f32 lanes, 16 registers), and the
//! kernels' entry points on them.
//!
//! The entry points and the helpers here carry the target features themselves; the kernels and
//! the [`Lanes`] methods are inlined into the entry points (a closure left to be inlined into a
//! feature-enabled frame once was not: `mul_add` became a call to software `fmaf`). They are
//! `unsafe` only because the features must be present: callers check with [`available`] first.

use super::kernels::{self, PoolRows};
use super::lanes::Lanes;
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

/// AVX2's lanes: 8 f32, 16 registers.
pub(super) struct Avx2;

impl Lanes for Avx2 {
    type V = __m256;
    type Accs = [__m256; 8];
    const LANES: usize = 8;
    const PAIRED_LOADS: bool = false;

    fn widest_pass(_g: usize) -> usize {
        2
    }
    fn widening<T: KvElem>() -> f32 {
        1.0
    }

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        _mm256_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        _mm256_storeu_ps(p, v)
    }
    #[inline(always)]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        _mm256_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: __m256, b: __m256) -> __m256 {
        _mm256_sub_ps(a, b)
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        _mm256_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn max(a: __m256, b: __m256) -> __m256 {
        _mm256_max_ps(a, b)
    }
    #[inline(always)]
    unsafe fn min(a: __m256, b: __m256) -> __m256 {
        _mm256_min_ps(a, b)
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        _mm256_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn fnmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        _mm256_fnmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn round(v: __m256) -> __m256 {
        _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v)
    }
    #[inline(always)]
    unsafe fn times_pow2(y: __m256, n: __m256) -> __m256 {
        let biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
        _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32::<23>(biased)))
    }
    #[inline(always)]
    unsafe fn zero_below(x: __m256, lo: f32, y: __m256) -> __m256 {
        _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(lo)), y)
    }
    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        hsum(v)
    }
    #[inline(always)]
    unsafe fn load_kv<T: KvElem, const NAN_CODES: bool>(p: *const T) -> __m256 {
        load8(p)
    }
    #[inline(always)]
    unsafe fn load_kv2<T: KvElem, const NAN_CODES: bool>(p: *const T) -> [__m256; 2] {
        [load8(p), load8(p.add(8))]
    }
    #[inline(always)]
    unsafe fn zero_accs() -> [__m256; 8] {
        [_mm256_setzero_ps(); 8]
    }
    #[inline(always)]
    unsafe fn sums(a: [__m256; 8]) -> __m256 {
        sum8(a)
    }
    #[inline(always)]
    unsafe fn max_across_rows<const G: usize>(v: __m256) -> __m256 {
        across_rows::<G>(v, |a, b| _mm256_max_ps(a, b))
    }
    #[inline(always)]
    unsafe fn sum_across_rows<const G: usize>(v: __m256) -> __m256 {
        across_rows::<G>(v, |a, b| _mm256_add_ps(a, b))
    }
}

/// Every lane becomes `op` (a maximum or a sum) over the lanes that hold the same head: lanes
/// `l`, `l + G`, `l + 2G`, ... for `G` heads in the `[row][head]` layout.
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

/// [`kernels::scores`] on AVX2, `R = 8 / G` rows at a time.
///
/// # Safety
/// [`available`]; as [`kernels::scores`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn scores<T: KvElem, const G: usize, const R: usize>(
    q: &[f32],
    k: PoolRows<T>,
    scale: f32,
    s: &mut [f32],
    ahead: &mut Ahead<T>,
) {
    kernels::scores::<Avx2, T, G, R, true>(q, k, scale, s, ahead)
}

/// [`kernels::softmax`] on AVX2.
///
/// # Safety
/// [`available`]; as [`kernels::softmax`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn softmax<const G: usize>(
    s: &mut [f32],
    maxs: &mut [f32; G],
    sums: &mut [f32; G],
) -> [f32; 4] {
    kernels::softmax::<Avx2, G>(s, maxs, sums)
}

/// [`kernels::accumulate`] on AVX2.
///
/// # Safety
/// [`available`]; as [`kernels::accumulate`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn accumulate<T: KvElem, const G: usize>(
    w: &[f32],
    v: PoolRows<T>,
    rescale: &[f32; 4],
    acc: &mut [f32],
    ahead: &mut Ahead<T>,
) {
    kernels::accumulate::<Avx2, T, G, true>(w, v, rescale, acc, ahead)
}

/// [`kernels::sum`] on AVX2.
///
/// # Safety
/// [`available`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn sum<T: KvElem>(x: &[T]) -> f32 {
    kernels::sum::<Avx2, T>(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn exp(x: __m256) -> __m256 {
        kernels::exp::<Avx2>(x)
    }

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
            unsafe { _mm256_storeu_ps(got.as_mut_ptr(), exp(_mm256_loadu_ps(c.as_ptr()))) };
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
