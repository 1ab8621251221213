//! Choosing an fp8 scale for a tensor and measuring what a quantise-dequantise round trip loses.
//!
//! [`calibrate_scale`] is per-tensor max calibration, `amax / max_finite` (448 for e4m3, 57344 for
//! e5m2), as vLLM computes a dynamic per-tensor fp8 scale and as calibrated checkpoints store
//! `k_scale`/`v_scale`: the largest magnitude lands on the largest code, so nothing saturates.
//! (vLLM's on-the-fly `calculate_kv_scales` divides amax by `K_SCALE_CONSTANT`/`V_SCALE_CONSTANT`,
//! 200/100 by default, instead: more headroom, less precision.)

use super::Fp8Format;
use serde::Serialize;
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum Fp8Error {
    #[error("cannot calibrate an fp8 scale over an empty tensor")]
    Empty,
    #[error("element {index} is {value}: an fp8 scale needs finite values")]
    NonFinite { index: usize, value: f32 },
    #[error("fp8 scale {0} is not a finite positive number")]
    BadScale(f32),
}

/// `amax / format.max_finite()` over `values`; 1 for an all-zero tensor (any scale is exact for
/// it). The result is at least the smallest positive normal f32, so dividing by it is finite.
pub fn calibrate_scale(format: Fp8Format, values: &[f32]) -> Result<f32, Fp8Error> {
    if values.is_empty() {
        return Err(Fp8Error::Empty);
    }
    let mut amax = 0.0f32;
    for (index, &value) in values.iter().enumerate() {
        if !value.is_finite() {
            return Err(Fp8Error::NonFinite { index, value });
        }
        amax = amax.max(value.abs());
    }
    if amax == 0.0 {
        return Ok(1.0);
    }
    Ok((amax / format.max_finite()).max(f32::MIN_POSITIVE))
}

/// What `decode_scaled(encode_scaled(x, scale), scale)` did to a tensor, in f64.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RoundTripError {
    /// `||x - x'||_2 / ||x||_2` (0 for an all-zero tensor).
    pub relative_l2: f64,
    /// The largest `|x - x'|`.
    pub max_abs: f64,
    /// Elements whose `|x / scale|` exceeded the largest finite code and were clipped to it.
    pub saturated: usize,
}

/// Quantises `values` with `scale` (vLLM's convention, [`Fp8Format::encode_scaled`]), dequantises
/// them and measures the error.
pub fn round_trip_error(
    format: Fp8Format,
    values: &[f32],
    scale: f32,
) -> Result<RoundTripError, Fp8Error> {
    if !(scale.is_finite() && scale > 0.0) {
        return Err(Fp8Error::BadScale(scale));
    }
    let (mut error_sq, mut norm_sq, mut max_abs, mut saturated) = (0.0f64, 0.0f64, 0.0f64, 0);
    for (index, &value) in values.iter().enumerate() {
        if !value.is_finite() {
            return Err(Fp8Error::NonFinite { index, value });
        }
        saturated += usize::from((value / scale).abs() > format.max_finite());
        let back = format.decode_scaled(format.encode_scaled(value, scale), scale);
        let error = f64::from(value) - f64::from(back);
        error_sq += error * error;
        norm_sq += f64::from(value) * f64::from(value);
        max_abs = max_abs.max(error.abs());
    }
    let relative_l2 = if norm_sq > 0.0 {
        (error_sq / norm_sq).sqrt()
    } else {
        0.0
    };
    Ok(RoundTripError {
        relative_l2,
        max_abs,
        saturated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use rand_distr::{Distribution, Normal};

    /// Activations like a KV projection's: N(0, 1) with a few outlier channels near +-1000.
    fn activations_with_outliers(rng: &mut StdRng, tokens: usize, dim: usize) -> Vec<f32> {
        let normal = Normal::new(0.0f32, 1.0).unwrap();
        let outlier_channels = [3, dim / 2 + 1];
        (0..tokens * dim)
            .map(|i| {
                if outlier_channels.contains(&(i % dim)) {
                    rng.random_range(900.0f32..1100.0)
                        * if rng.random_bool(0.5) { 1.0 } else { -1.0 }
                } else {
                    normal.sample(rng)
                }
            })
            .collect()
    }

    #[test]
    fn unscaled_e4m3_saturates_outliers_and_a_calibrated_scale_keeps_them() {
        let mut rng = StdRng::seed_from_u64(17);
        let x = activations_with_outliers(&mut rng, 64, 128);
        let format = Fp8Format::E4M3;

        let unscaled = round_trip_error(format, &x, 1.0).unwrap();
        assert_eq!(unscaled.saturated, 2 * 64, "every outlier clips to 448");
        // Outliers of ~1000 come back as 448: they dominate the norm, so about half is lost.
        assert!(unscaled.relative_l2 > 0.4, "{unscaled:?}");
        assert!(unscaled.max_abs > 400.0, "{unscaled:?}");

        let scale = calibrate_scale(format, &x).unwrap();
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert_eq!(scale, amax / 448.0);
        let calibrated = round_trip_error(format, &x, scale).unwrap();
        assert_eq!(calibrated.saturated, 0);
        // Within the format's precision: no element is off by more than half an ulp of its own
        // value (2^-4 relative) or, below the normal range, half the smallest subnormal x scale.
        assert!(
            calibrated.relative_l2 <= format.unit_roundoff(),
            "{calibrated:?}"
        );
        for &v in &x {
            let back = format.decode_scaled(format.encode_scaled(v, scale), scale);
            let bound = (format.unit_roundoff() * f64::from(v.abs()))
                .max(format.min_subnormal() / 2.0 * f64::from(scale));
            // Slack of a few f32 ulps for the division and multiplication by the scale.
            let slack = 4.0 * f64::from(f32::EPSILON) * f64::from(v.abs());
            assert!(
                (f64::from(v) - f64::from(back)).abs() <= bound + slack,
                "{v} -> {back}"
            );
        }
    }

    #[test]
    fn e5m2_keeps_outliers_unscaled_but_rounds_coarser() {
        let mut rng = StdRng::seed_from_u64(18);
        let x = activations_with_outliers(&mut rng, 32, 64);
        let e5m2 = round_trip_error(Fp8Format::E5M2, &x, 1.0).unwrap();
        assert_eq!(e5m2.saturated, 0, "57344 is far above 1000");
        assert!(e5m2.relative_l2 <= Fp8Format::E5M2.unit_roundoff());
        let scale = calibrate_scale(Fp8Format::E4M3, &x).unwrap();
        let e4m3 = round_trip_error(Fp8Format::E4M3, &x, scale).unwrap();
        assert!(e4m3.relative_l2 < e5m2.relative_l2, "{e4m3:?} {e5m2:?}");
    }

    #[test]
    fn calibration_edges_and_errors() {
        let f = Fp8Format::E5M2;
        assert_eq!(calibrate_scale(f, &[0.0, -0.0]), Ok(1.0));
        assert_eq!(calibrate_scale(f, &[1.0, -57344.0 * 4.0]), Ok(4.0));
        assert_eq!(calibrate_scale(f, &[]), Err(Fp8Error::Empty));
        assert!(matches!(
            calibrate_scale(f, &[1.0, f32::NAN]),
            Err(Fp8Error::NonFinite { index: 1, .. })
        ));
        assert_eq!(calibrate_scale(f, &[1e-44]), Ok(f32::MIN_POSITIVE));
        assert_eq!(
            round_trip_error(f, &[1.0], 0.0),
            Err(Fp8Error::BadScale(0.0))
        );
        assert_eq!(
            round_trip_error(f, &[1.0], f32::NAN).map_err(|e| e.to_string()),
            Err("fp8 scale NaN is not a finite positive number".into())
        );
        let zeros = round_trip_error(f, &[0.0; 4], 1.0).unwrap();
        assert_eq!(
            (zeros.relative_l2, zeros.max_abs, zeros.saturated),
            (0.0, 0.0, 0)
        );
    }
}
