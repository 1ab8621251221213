//! Element types a KV cache can hold, and their conversions to and from f32.

use half::{bf16, f16};
use serde::{Deserialize, Serialize};

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    F16,
    Bf16,
    F32,
    /// fp8 e4m3 with a scale (vLLM's `fp8` / `fp8_e4m3`): K and V only, q stays f16 or bf16.
    #[serde(rename = "fp8_e4m3")]
    #[value(name = "fp8_e4m3")]
    Fp8E4m3,
    /// fp8 e5m2 with a scale (vLLM's `fp8_e5m2`).
    #[serde(rename = "fp8_e5m2")]
    #[value(name = "fp8_e5m2")]
    Fp8E5m2,
}

impl Dtype {
    pub const fn bytes(self) -> usize {
        match self {
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::F32 => 4,
            Dtype::Fp8E4m3 | Dtype::Fp8E5m2 => 1,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
            Dtype::F32 => "f32",
            Dtype::Fp8E4m3 => "fp8_e4m3",
            Dtype::Fp8E5m2 => "fp8_e5m2",
        }
    }

    /// The fp8 format of a quantised dtype; None for f16, bf16, f32.
    pub const fn fp8(self) -> Option<super::Fp8Format> {
        match self {
            Dtype::Fp8E4m3 => Some(super::Fp8Format::E4M3),
            Dtype::Fp8E5m2 => Some(super::Fp8Format::E5M2),
            _ => None,
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A KV element: stored as `Self`, computed with in f32 (as the kernels do).
pub trait KvElem: Copy + Send + Sync + bytemuck::Pod + Default + 'static {
    const DTYPE: Dtype;
    fn to_f32(self) -> f32;
    /// Round to nearest even, as CUDA's `__float2half_rn` and `__float2bfloat16_rn`.
    fn from_f32(x: f32) -> Self;
    /// Converts a run of elements; the 16-bit types use `half`'s SIMD conversions.
    fn slice_to_f32(src: &[Self], dst: &mut [f32]) {
        dst.iter_mut().zip(src).for_each(|(d, s)| *d = s.to_f32());
    }
    /// [`Self::from_f32`] over a run; the 16-bit types use `half`'s SIMD conversions (one call
    /// per element cost the CPU decode a few microseconds a call in its outputs alone).
    fn slice_from_f32(src: &[f32], dst: &mut [Self]) {
        dst.iter_mut()
            .zip(src)
            .for_each(|(d, &s)| *d = Self::from_f32(s));
    }
}

impl KvElem for f16 {
    const DTYPE: Dtype = Dtype::F16;
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
    fn slice_to_f32(src: &[Self], dst: &mut [f32]) {
        half::slice::HalfFloatSliceExt::convert_to_f32_slice(src, dst);
    }
    fn slice_from_f32(src: &[f32], dst: &mut [Self]) {
        half::slice::HalfFloatSliceExt::convert_from_f32_slice(dst, src);
    }
}

impl KvElem for bf16 {
    const DTYPE: Dtype = Dtype::Bf16;
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
    fn slice_to_f32(src: &[Self], dst: &mut [f32]) {
        half::slice::HalfFloatSliceExt::convert_to_f32_slice(src, dst);
    }
    fn slice_from_f32(src: &[f32], dst: &mut [Self]) {
        half::slice::HalfFloatSliceExt::convert_from_f32_slice(dst, src);
    }
}

impl KvElem for f32 {
    const DTYPE: Dtype = Dtype::F32;
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(x: f32) -> Self {
        x
    }
    fn slice_to_f32(src: &[Self], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
    fn slice_from_f32(src: &[f32], dst: &mut [Self]) {
        dst.copy_from_slice(src);
    }
}

/// An fp8 element of format `F` (cuda_fp8.h's byte code): `to_f32` decodes it unscaled,
/// `from_f32` encodes with round-to-nearest-even and saturation, as CUDA does; the caller divides
/// by the scale first (vLLM's convention: stored = fp8(x / scale)).
macro_rules! fp8_elem {
    ($name:ident, $dtype:ident, $format:expr) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, bytemuck::Pod, bytemuck::Zeroable)]
        #[repr(transparent)]
        pub struct $name(pub u8);

        impl KvElem for $name {
            const DTYPE: Dtype = Dtype::$dtype;
            fn to_f32(self) -> f32 {
                // A table of the 256 codes: the portable CPU loops widen every element this way.
                super::fp8::decode_table($format)[self.0 as usize]
            }
            fn from_f32(x: f32) -> Self {
                $name($format.encode(x))
            }
        }
    };
}
fp8_elem!(Fp8E4m3, Fp8E4m3, super::Fp8Format::E4M3);
fp8_elem!(Fp8E5m2, Fp8E5m2, super::Fp8Format::E5M2);

// SAFETY: one plain byte, as a kernel reads it (`unsigned char`); all-zero is the code of +0.
unsafe impl cudarc::driver::DeviceRepr for Fp8E4m3 {}
unsafe impl cudarc::driver::DeviceRepr for Fp8E5m2 {}
unsafe impl cudarc::driver::ValidAsZeroBits for Fp8E4m3 {}
unsafe impl cudarc::driver::ValidAsZeroBits for Fp8E5m2 {}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A run converted at once equals each element converted alone, bit for bit (a NaN stays a
    /// NaN), over random values of every magnitude and the special ones.
    fn slices_convert_as_elements<T: KvElem + std::fmt::Debug>() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut src: Vec<f32> = (0..1000)
            .map(|_| f32::from_bits(rng.random::<u32>()))
            .collect();
        src.extend([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            65520.0,
            1e-8,
        ]);
        src.extend((0..200).map(|_| rng.random_range(-70_000.0f32..70_000.0)));
        let mut got = vec![T::default(); src.len()];
        T::slice_from_f32(&src, &mut got);
        for (x, g) in src.iter().zip(&got) {
            let want = T::from_f32(*x);
            let same = if want.to_f32().is_nan() {
                g.to_f32().is_nan()
            } else {
                bytemuck::bytes_of(g) == bytemuck::bytes_of(&want)
            };
            assert!(same, "{:?} {x}: {g:?} vs {want:?}", T::DTYPE);
        }
    }

    #[test]
    fn slices_convert_from_f32_as_elements_do() {
        slices_convert_as_elements::<f16>();
        slices_convert_as_elements::<bf16>();
        slices_convert_as_elements::<f32>();
        slices_convert_as_elements::<Fp8E4m3>();
        slices_convert_as_elements::<Fp8E5m2>();
    }
}
