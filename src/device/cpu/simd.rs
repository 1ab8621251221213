//! The two inner loops of CPU attention, written so LLVM vectorises them, and a runtime switch that
//! compiles the caller with AVX2 and FMA where the CPU has them (the default target has neither).

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
            acc[i] = x[i].mul_add(y[i], acc[i]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `y += a * x`.
#[inline(always)]
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi = xi.mul_add(a, *yi);
    }
}

/// Runs `f` compiled for AVX2 + FMA when the CPU supports them, else as compiled by default.
/// `f` must be `#[inline(always)]` all the way down for the target features to reach its loops.
#[inline(always)]
pub fn dispatch<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            #[target_feature(enable = "avx2,fma")]
            unsafe fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
                f()
            }
            // SAFETY: the features were detected on this CPU just above.
            return unsafe { with_avx2(f) };
        }
    }
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_and_axpy_match_plain_loops() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.5 - 3.0).collect();
        let b: Vec<f32> = (0..37).map(|i| (i as f32).sin()).collect();
        let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
        assert!((dot(&a, &b) as f64 - want).abs() < 1e-4);
        let mut y = b.clone();
        axpy(2.0, &a, &mut y);
        for i in 0..37 {
            assert_eq!(y[i], a[i].mul_add(2.0, b[i]));
        }
    }
}
