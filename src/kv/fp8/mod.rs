//! fp8 KV elements (e4m3 and e5m2): conversions bit-exact with CUDA's `cuda_fp8.h`, vLLM's scale
//! convention, and calibration ([`calibrate_scale`], [`round_trip_error`]).
//!
//! What CUDA 13.0 does (recorded from its headers in `tests/data/fp8/` by
//! `scripts/record-fp8-reference`; `tests/suite/fp8_reference.rs` checks every row against this module):
//! - f32 -> fp8, `__nv_cvt_float_to_fp8(x, __NV_SATFINITE, ..)`: round to nearest, ties to even.
//!   Finite values beyond the largest code, and +-inf, saturate to +-448 (e4m3 `0x7e`/`0xfe`) or
//!   +-57344 (e5m2 `0x7b`/`0xfb`). Every NaN, of either sign and any payload, becomes `0x7f` in both
//!   formats (CUDA replaces a NaN by `0x7fffffff` before converting). -0 and negative values that
//!   round to zero give `0x80`.
//! - fp8 -> f16, `__nv_cvt_fp8_to_halfraw`: exact for every finite code; e5m2 `0x7c`/`0xfc` are
//!   +-inf; the NaN codes (e4m3 `0x7f`/`0xff`, e5m2 `0x7d..=0x7f`/`0xfd..=0xff`) give the
//!   canonical f16 NaN `0x7fff`, sign dropped; `__half2float` of that is `0x7fffffff`.
//!
//! Hand-written rather than taken from a crate: `float8` 0.7 (a port of the same header) matches
//! every finite, infinite and saturating row but not NaN: its `from_f32` keeps a NaN's sign
//! (e4m3 `-NaN -> 0xff`, 9 rows) and, for e5m2, derives the code from the payload (`0x7e`, `0xfe`,
//! `0xff`; 14 rows), and its `to_f32` of the NaN codes is `0x7fffe000` (8 rows). `microfloat` 0.1
//! converts without saturation (e4m3 above 464 -> NaN, 1258 rows; e5m2 -> inf, 481 rows) and
//! decodes NaN codes to `0x7fc00000`/`0xffc00000` (8 rows).

mod calibration;

pub use calibration::{calibrate_scale, round_trip_error, Fp8Error, RoundTripError};

use half::f16;
use serde::Serialize;

/// The two fp8 formats of a KV cache (cuda_fp8.h's `__NV_E4M3` and `__NV_E5M2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fp8Format {
    /// 4 exponent bits (bias 7), 3 mantissa bits; no infinities; NaN `0x7f`/`0xff`.
    E4M3,
    /// 5 exponent bits (bias 15), 2 mantissa bits; IEEE-like: inf `0x7c`, NaN above it.
    E5M2,
}

impl Fp8Format {
    pub const ALL: [Fp8Format; 2] = [Fp8Format::E4M3, Fp8Format::E5M2];

    pub const fn name(self) -> &'static str {
        match self {
            Fp8Format::E4M3 => "e4m3",
            Fp8Format::E5M2 => "e5m2",
        }
    }

    const fn mantissa_bits(self) -> u32 {
        match self {
            Fp8Format::E4M3 => 3,
            Fp8Format::E5M2 => 2,
        }
    }

    const fn bias(self) -> i32 {
        match self {
            Fp8Format::E4M3 => 7,
            Fp8Format::E5M2 => 15,
        }
    }

    /// The largest finite value: 448 or 57344; every larger magnitude saturates to it.
    pub const fn max_finite(self) -> f32 {
        match self {
            Fp8Format::E4M3 => 448.0,
            Fp8Format::E5M2 => 57344.0,
        }
    }

    /// The code of [`Self::max_finite`]: `0x7e` or `0x7b`.
    pub const fn max_code(self) -> u8 {
        match self {
            Fp8Format::E4M3 => 0x7e,
            Fp8Format::E5M2 => 0x7b,
        }
    }

    /// Half an ulp relative to the value (2^-(mantissa bits + 1)): the largest relative error of
    /// rounding a value in the normal range.
    pub fn unit_roundoff(self) -> f64 {
        0.5f64.powi(self.mantissa_bits() as i32 + 1)
    }

    /// The smallest positive (subnormal) value: 2^-9 or 2^-16.
    pub fn min_subnormal(self) -> f64 {
        2f64.powi(1 - self.bias() - self.mantissa_bits() as i32)
    }

    /// f32 -> fp8 code as CUDA's `__nv_cvt_float_to_fp8(x, __NV_SATFINITE, format)`.
    pub fn encode(self, x: f32) -> u8 {
        let bits = x.to_bits();
        let magnitude = bits & 0x7fff_ffff;
        if magnitude > 0x7f80_0000 {
            return 0x7f; // NaN, whatever its sign and payload
        }
        let sign = ((bits >> 24) & 0x80) as u8;
        if magnitude >= self.max_finite().to_bits() {
            return sign | self.max_code(); // inf included: rounding cannot go higher
        }
        let mantissa_bits = self.mantissa_bits();
        let exponent = (magnitude >> 23) as i32 - 127;
        let min_normal_exponent = 1 - self.bias();
        if exponent >= min_normal_exponent {
            // Rebias the exponent field and round the mantissa; a carry moves to the next
            // exponent, which the encoding does by itself.
            let rebased = magnitude - (((127 - self.bias()) as u32) << 23);
            return sign | round_shift_rne(rebased, 23 - mantissa_bits) as u8;
        }
        if exponent == -127 {
            return sign; // f32 zero or subnormal: far below half the smallest fp8 value
        }
        // Subnormal fp8: the value in units of the smallest subnormal.
        let significand = (magnitude & 0x7f_ffff) | 0x80_0000;
        let shift = 23 - mantissa_bits + (min_normal_exponent - exponent) as u32;
        if shift > 25 {
            return sign; // below a quarter of the smallest subnormal
        }
        sign | round_shift_rne(significand, shift) as u8
    }

    /// fp8 code -> f16 as CUDA's `__nv_cvt_fp8_to_halfraw` (NaN codes -> `0x7fff`).
    pub fn decode_to_f16(self, code: u8) -> f16 {
        match self {
            Fp8Format::E5M2 => {
                let h = u16::from(code) << 8; // e5m2 is the top byte of an f16
                f16::from_bits(if h & 0x7fff > 0x7c00 { 0x7fff } else { h })
            }
            Fp8Format::E4M3 if code & 0x7f == 0x7f => f16::from_bits(0x7fff),
            Fp8Format::E4M3 => {
                let (exponent, mantissa) = (i32::from((code >> 3) & 0xf), f32::from(code & 7));
                let magnitude = if exponent == 0 {
                    mantissa * 2f32.powi(-9)
                } else {
                    (8.0 + mantissa) * 2f32.powi(exponent - 10)
                };
                f16::from_f32(if code & 0x80 != 0 {
                    -magnitude
                } else {
                    magnitude
                }) // exact
            }
        }
    }

    /// fp8 code -> f32 as CUDA's `__half2float(__nv_cvt_fp8_to_halfraw(code))`: exact; NaN codes
    /// give `0x7fffffff`.
    pub fn decode(self, code: u8) -> f32 {
        let h = self.decode_to_f16(code);
        if h.is_nan() {
            f32::from_bits(0x7fff_ffff)
        } else {
            h.to_f32()
        }
    }

    /// vLLM's convention for `k_scale`/`v_scale`: a cache stores `fp8(x / scale)`. Division, as
    /// vLLM does: multiplying by `1 / scale` rounds differently unless the scale is a power of two.
    pub fn encode_scaled(self, x: f32, scale: f32) -> u8 {
        self.encode(x / scale)
    }

    /// vLLM's convention: a cache reads `float(code) * scale`.
    pub fn decode_scaled(self, code: u8, scale: f32) -> f32 {
        self.decode(code) * scale
    }
}

impl std::fmt::Display for Fp8Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Rounds away the low `shift` bits of `m` to nearest, ties to even (`shift` in 1..=31).
fn round_shift_rne(m: u32, shift: u32) -> u32 {
    let (kept, rest, half) = (m >> shift, m & ((1 << shift) - 1), 1 << (shift - 1));
    kept + u32::from(rest > half || (rest == half && kept & 1 == 1))
}

/// Every code's value in `format` (unscaled), for table lookups: 1 KiB per format, built once.
pub fn decode_table(format: Fp8Format) -> &'static [f32; 256] {
    static TABLES: [std::sync::OnceLock<[f32; 256]>; 2] =
        [std::sync::OnceLock::new(), std::sync::OnceLock::new()];
    let i = format as usize;
    TABLES[i].get_or_init(|| std::array::from_fn(|code| format.decode(code as u8)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_codes() {
        use Fp8Format::*;
        // 1.0 = 2^0: e4m3 exponent field 7 -> 0x38; e5m2 field 15 -> 0x3c.
        assert_eq!((E4M3.encode(1.0), E5M2.encode(1.0)), (0x38, 0x3c));
        // 1.0625 is the midpoint of 1 and 1.125 (e4m3): ties to even 1.0; 1.0625 + ulp rounds up.
        assert_eq!(E4M3.encode(1.0625), 0x38);
        assert_eq!(E4M3.encode(f32::from_bits(1.0625f32.to_bits() + 1)), 0x39);
        // 1.1875 is the midpoint of 1.125 (odd 0x39) and 1.25: ties to even 1.25.
        assert_eq!(E4M3.encode(1.1875), 0x3a);
        // Smallest subnormals 2^-9 and 2^-16; half of them ties to zero, keeping the sign.
        assert_eq!(
            (E4M3.encode(2f32.powi(-9)), E5M2.encode(2f32.powi(-16))),
            (1, 1)
        );
        assert_eq!(
            (E4M3.encode(-(2f32.powi(-10))), E5M2.encode(2f32.powi(-17))),
            (0x80, 0)
        );
        assert_eq!(
            (E4M3.decode(1), E5M2.decode(0x81)),
            (2f32.powi(-9), -(2f32.powi(-16)))
        );
        // Saturation, and NaN of either sign.
        assert_eq!(
            (E4M3.encode(1e6), E4M3.encode(f32::NEG_INFINITY)),
            (0x7e, 0xfe)
        );
        assert_eq!(
            (E5M2.encode(f32::INFINITY), E5M2.encode(-60000.0)),
            (0x7b, 0xfb)
        );
        assert_eq!(
            (E4M3.encode(-f32::NAN), E5M2.encode(-f32::NAN)),
            (0x7f, 0x7f)
        );
        assert_eq!((E4M3.decode(0x7e), E5M2.decode(0x7b)), (448.0, 57344.0));
        assert_eq!(E5M2.decode(0xfc), f32::NEG_INFINITY);
        assert_eq!(E4M3.decode(0xff).to_bits(), 0x7fff_ffff);
    }

    #[test]
    fn every_finite_code_round_trips_and_codes_are_ordered() {
        for format in Fp8Format::ALL {
            let finite: Vec<u8> = (0..=0x7fu8)
                .filter(|&c| format.decode(c).is_finite())
                .collect();
            assert_eq!(finite.last(), Some(&format.max_code()));
            for pair in finite.windows(2) {
                assert!(
                    format.decode(pair[0]) < format.decode(pair[1]),
                    "{format} {pair:?}"
                );
            }
            for code in 0..=255u8 {
                let v = format.decode(code);
                if v.is_finite() {
                    assert_eq!(format.encode(v), code, "{format} {code:#04x}");
                }
            }
        }
    }
}
