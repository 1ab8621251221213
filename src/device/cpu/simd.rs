//! The inner loops of CPU attention and gathers, over rows of `hd` elements: the AVX2 + FMA + F16C
//! kernels of [`avx2`] where the CPU has them and `hd` is a multiple of 8, portable loops otherwise.
//! The choice is made once per call ([`Kernels::detect`]); both give the same results up to f32
//! rounding, and a given choice is deterministic.

#[cfg(target_arch = "x86_64")]
mod avx2;

use crate::kv::KvElem;

/// Rows to request from memory while a kernel works on others: `rows` of `buf`.
#[derive(Clone, Copy)]
pub struct Ahead<'a, T> {
    pub buf: &'a [T],
    pub rows: &'a [usize],
}

impl<'a, T> Ahead<'a, T> {
    pub fn none() -> Self {
        Ahead {
            buf: &[],
            rows: &[],
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn avx2(self) -> avx2::Prefetch<'a, T> {
        avx2::Prefetch {
            buf: self.buf,
            rows: self.rows,
        }
    }
}

/// The row kernels chosen for one call, for rows of `hd` elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kernels {
    avx2: bool,
    hd: usize,
}

/// Query heads are taken at most four at a time: 2 x 4 accumulators, a K row and a query vector
/// fit the 16 AVX2 registers. A group of 8 reads each row twice, the second time from L1.
fn group_runs(group: usize) -> impl Iterator<Item = (usize, usize)> {
    let mut g0 = 0;
    std::iter::from_fn(move || {
        let n = match group - g0 {
            0 => return None,
            1 => 1,
            2 | 3 => 2,
            _ => 4,
        };
        g0 += n;
        Some((g0 - n, n))
    })
}

impl Kernels {
    /// The fastest kernels this CPU runs for rows of `hd` elements.
    pub fn detect(hd: usize) -> Self {
        #[cfg(target_arch = "x86_64")]
        if hd.is_multiple_of(8) && avx2::available() {
            return Kernels { avx2: true, hd };
        }
        Self::portable(hd)
    }

    /// The portable loops, whatever the CPU.
    pub fn portable(hd: usize) -> Self {
        Kernels { avx2: false, hd }
    }

    #[cfg(test)]
    pub fn is_avx2(&self) -> bool {
        self.avx2
    }

    /// `scores[g * stride + c] = scale * q[g] · k[rows[c]..][..hd]` for the `group` heads of `q`
    /// (`[group, hd]`), requesting the rows of `ahead` meanwhile.
    #[allow(clippy::too_many_arguments)]
    pub fn scores<T: KvElem>(
        self,
        q: &[f32],
        group: usize,
        k: &[T],
        rows: &[usize],
        scale: f32,
        scores: &mut [f32],
        stride: usize,
        ahead: Ahead<T>,
    ) {
        let hd = self.hd;
        assert!(q.len() >= group * hd && rows.len() <= stride);
        assert!(group == 0 || scores.len() >= (group - 1) * stride + rows.len());
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            for (g0, n) in group_runs(group) {
                let (q, s) = (&q[g0 * hd..], &mut scores[g0 * stride..]);
                // Only the first run of heads requests rows; later runs read from cache.
                let pf = if g0 == 0 { ahead } else { Ahead::none() }.avx2();
                // SAFETY: `detect` found the features and `hd % 8 == 0`; lengths asserted above.
                unsafe {
                    match n {
                        1 => avx2::scores::<T, 1>(q, k, rows, hd, scale, s, stride, pf),
                        2 => avx2::scores::<T, 2>(q, k, rows, hd, scale, s, stride, pf),
                        _ => avx2::scores::<T, 4>(q, k, rows, hd, scale, s, stride, pf),
                    }
                }
            }
            return;
        }
        let mut buf = vec![0f32; hd];
        for (c, &r) in rows.iter().enumerate() {
            T::slice_to_f32(&k[r..r + hd], &mut buf);
            for g in 0..group {
                scores[g * stride + c] = dot(&q[g * hd..(g + 1) * hd], &buf) * scale;
            }
        }
    }

    /// `acc[g] += Σ_c weights[g * stride + c] * v[rows[c]..][..hd]` for `group` heads
    /// (`acc` is `[group, hd]`), requesting the rows of `ahead` meanwhile.
    #[allow(clippy::too_many_arguments)]
    pub fn accumulate<T: KvElem>(
        self,
        weights: &[f32],
        stride: usize,
        group: usize,
        v: &[T],
        rows: &[usize],
        acc: &mut [f32],
        ahead: Ahead<T>,
    ) {
        let hd = self.hd;
        assert!(acc.len() >= group * hd && rows.len() <= stride);
        assert!(group == 0 || weights.len() >= (group - 1) * stride + rows.len());
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            for (g0, n) in group_runs(group) {
                let (w, a) = (&weights[g0 * stride..], &mut acc[g0 * hd..]);
                let pf = if g0 == 0 { ahead } else { Ahead::none() }.avx2();
                // SAFETY: as in `scores`.
                unsafe {
                    match n {
                        1 => avx2::accumulate::<T, 1>(w, stride, v, rows, hd, a, pf),
                        2 => avx2::accumulate::<T, 2>(w, stride, v, rows, hd, a, pf),
                        _ => avx2::accumulate::<T, 4>(w, stride, v, rows, hd, a, pf),
                    }
                }
            }
            return;
        }
        let mut buf = vec![0f32; hd];
        for (c, &r) in rows.iter().enumerate() {
            T::slice_to_f32(&v[r..r + hd], &mut buf);
            for g in 0..group {
                axpy(
                    weights[g * stride + c],
                    &buf,
                    &mut acc[g * hd..(g + 1) * hd],
                );
            }
        }
    }

    /// `x[i] = e^(x[i] - shift)`; returns the sum of the new values.
    pub fn exp_shifted(self, x: &mut [f32], shift: f32) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `detect` found the features.
            return unsafe { avx2::exp_shifted(x, shift) };
        }
        let mut sum = 0.0;
        for v in x.iter_mut() {
            *v = (*v - shift).exp();
            sum += *v;
        }
        sum
    }

    /// The f32 sum of `x` (any length).
    pub fn sum<T: KvElem>(self, x: &[T]) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `detect` found the features.
            return unsafe { avx2::sum(x) };
        }
        x.iter().map(|e| e.to_f32()).sum()
    }
}

/// Dot product with eight independent partial sums, so the loop vectorises.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            // Not `mul_add`: without FMA in the target that is a call to software `fmaf`.
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `y += a * x`.
#[inline(always)]
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};
    use rand::{Rng, SeedableRng};

    #[test]
    fn dot_and_axpy_match_plain_loops() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.5 - 3.0).collect();
        let b: Vec<f32> = (0..37).map(|i| (i as f32).sin()).collect();
        let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
        assert!((dot(&a, &b) as f64 - want).abs() < 1e-4);
        let mut y = b.clone();
        axpy(2.0, &a, &mut y);
        for i in 0..37 {
            assert_eq!(y[i], a[i] * 2.0 + b[i]);
        }
    }

    #[test]
    fn group_runs_cover_the_group_in_fours_twos_and_ones() {
        for group in 0..20 {
            let runs: Vec<_> = group_runs(group).collect();
            let mut next = 0;
            for &(g0, n) in &runs {
                assert_eq!(g0, next);
                assert!([1, 2, 4].contains(&n));
                next += n;
            }
            assert_eq!(next, group);
        }
    }

    /// Both kernel sets against f64 loops over the same rows, for every group size and dtype.
    fn check_rows<T: KvElem>(kernels: Kernels, rng: &mut impl Rng) {
        let hd = kernels.hd;
        let n_rows = 13;
        let k: Vec<T> = (0..n_rows * hd + 5)
            .map(|_| T::from_f32(rng.random_range(-1.0..1.0)))
            .collect();
        let rows: Vec<usize> = (0..n_rows)
            .map(|_| rng.random_range(0..=n_rows * hd + 5 - hd))
            .collect();
        let kf = |r: usize, d: usize| k[r + d].to_f32() as f64;
        for group in [1, 2, 3, 4, 5, 8] {
            let stride = 16;
            let q: Vec<f32> = (0..group * hd)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            let mut s = vec![f32::NAN; group * stride];
            kernels.scores(&q, group, &k, &rows, 0.3, &mut s, stride, Ahead::none());
            for g in 0..group {
                for (c, &r) in rows.iter().enumerate() {
                    let want: f64 = (0..hd)
                        .map(|d| q[g * hd + d] as f64 * kf(r, d))
                        .sum::<f64>()
                        * 0.3;
                    let got = s[g * stride + c] as f64;
                    assert!(
                        (got - want).abs() < 1e-5 * (1.0 + want.abs()),
                        "{kernels:?} g{group}: {got} vs {want}"
                    );
                }
            }
            let w: Vec<f32> = (0..group * stride)
                .map(|_| rng.random_range(0.0..1.0))
                .collect();
            let init: Vec<f32> = (0..group * hd)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            let mut acc = init.clone();
            kernels.accumulate(
                &w,
                stride,
                group,
                &k,
                &rows,
                &mut acc,
                Ahead {
                    buf: &k,
                    rows: &rows,
                },
            );
            for g in 0..group {
                for d in 0..hd {
                    let want = init[g * hd + d] as f64
                        + rows
                            .iter()
                            .enumerate()
                            .map(|(c, &r)| w[g * stride + c] as f64 * kf(r, d))
                            .sum::<f64>();
                    let got = acc[g * hd + d] as f64;
                    assert!(
                        (got - want).abs() < 1e-5 * (1.0 + want.abs()),
                        "{kernels:?} g{group}: {got} vs {want}"
                    );
                }
            }
        }
        let want: f64 = k.iter().map(|x| x.to_f32() as f64).sum();
        let got = kernels.sum(&k) as f64;
        assert!(
            (got - want).abs() < 1e-4 * (1.0 + want.abs()),
            "{got} vs {want}"
        );
    }

    #[test]
    fn every_kernel_set_matches_f64_loops() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for hd in [8, 16, 24, 64, 128, 12] {
            for kernels in [Kernels::detect(hd), Kernels::portable(hd)] {
                check_rows::<f16>(kernels, &mut rng);
                check_rows::<bf16>(kernels, &mut rng);
                check_rows::<f32>(kernels, &mut rng);
            }
        }
        if Kernels::detect(128).is_avx2() {
            assert!(!Kernels::detect(12).is_avx2());
        } else {
            eprintln!("AVX2 kernels not tested: this CPU lacks AVX2/FMA/F16C");
        }
    }

    #[test]
    fn exp_shifted_agrees_between_kernel_sets() {
        let x: Vec<f32> = (0..29).map(|i| -(i as f32) * 0.7).collect();
        let (mut a, mut b) = (x.clone(), x);
        let sa = Kernels::detect(8).exp_shifted(&mut a, 0.25);
        let sb = Kernels::portable(8).exp_shifted(&mut b, 0.25);
        assert!((sa - sb).abs() < 1e-6 * sb);
        for (p, q) in a.iter().zip(&b) {
            assert!((p - q).abs() <= 1e-6 * q.abs() + 1e-30);
        }
    }
}
