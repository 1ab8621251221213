//! One layer's K and V pools in host memory, laid out as [`KvSpec::elem_offset`] says.

use super::{Dtype, Fp8E4m3, Fp8E5m2, KvElem, KvSpec, SpecError};
use half::{bf16, f16};
use rand::{Rng, SeedableRng};

/// Storage for one pool, typed by the spec's dtype.
#[derive(Debug, Clone, PartialEq)]
pub enum PoolData {
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
    F32(Vec<f32>),
    Fp8E4m3(Vec<Fp8E4m3>),
    Fp8E5m2(Vec<Fp8E5m2>),
}

impl PoolData {
    fn zeros(dtype: Dtype, n: usize) -> Self {
        match dtype {
            Dtype::F16 => PoolData::F16(vec![f16::ZERO; n]),
            Dtype::Bf16 => PoolData::Bf16(vec![bf16::ZERO; n]),
            Dtype::F32 => PoolData::F32(vec![0.0; n]),
            Dtype::Fp8E4m3 => PoolData::Fp8E4m3(vec![Fp8E4m3::default(); n]),
            Dtype::Fp8E5m2 => PoolData::Fp8E5m2(vec![Fp8E5m2::default(); n]),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            PoolData::F16(v) => v.len(),
            PoolData::Bf16(v) => v.len(),
            PoolData::F32(v) => v.len(),
            PoolData::Fp8E4m3(v) => v.len(),
            PoolData::Fp8E5m2(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn as_bytes(&self) -> &[u8] {
        match self {
            PoolData::F16(v) => bytemuck::cast_slice(v),
            PoolData::Bf16(v) => bytemuck::cast_slice(v),
            PoolData::F32(v) => bytemuck::cast_slice(v),
            PoolData::Fp8E4m3(v) => bytemuck::cast_slice(v),
            PoolData::Fp8E5m2(v) => bytemuck::cast_slice(v),
        }
    }

    /// Element `i` as f32.
    pub fn get_f32(&self, i: usize) -> f32 {
        match self {
            PoolData::F16(v) => v[i].to_f32(),
            PoolData::Bf16(v) => v[i].to_f32(),
            PoolData::F32(v) => v[i],
            PoolData::Fp8E4m3(v) => v[i].to_f32(),
            PoolData::Fp8E5m2(v) => v[i].to_f32(),
        }
    }

    /// Fills with uniform values in [-1, 1), rounded to the storage type.
    pub fn fill_random(&mut self, rng: &mut impl Rng) {
        fn fill<T: KvElem>(v: &mut [T], rng: &mut impl Rng) {
            v.iter_mut()
                .for_each(|x| *x = T::from_f32(rng.random_range(-1.0..1.0)));
        }
        match self {
            PoolData::F16(v) => fill(v, rng),
            PoolData::Bf16(v) => fill(v, rng),
            PoolData::F32(v) => fill(v, rng),
            PoolData::Fp8E4m3(v) => fill(v, rng),
            PoolData::Fp8E5m2(v) => fill(v, rng),
        }
    }
}

/// K and V pools of one layer.
#[derive(Debug, Clone, PartialEq)]
pub struct HostPool {
    pub spec: KvSpec,
    pub num_blocks: usize,
    /// `[num_blocks, num_kv_heads, block_size, head_dim]`
    pub k: PoolData,
    /// `[num_blocks, num_kv_heads, block_size, head_dim]`
    pub v: PoolData,
}

impl HostPool {
    pub fn zeros(spec: KvSpec, num_blocks: usize) -> Result<Self, SpecError> {
        let n = spec.pool_elems(num_blocks)?;
        Ok(HostPool {
            spec,
            num_blocks,
            k: PoolData::zeros(spec.dtype, n),
            v: PoolData::zeros(spec.dtype, n),
        })
    }

    /// A pool filled with random values from `seed`.
    pub fn random(spec: KvSpec, num_blocks: usize, seed: u64) -> Result<Self, SpecError> {
        let mut pool = Self::zeros(spec, num_blocks)?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        pool.k.fill_random(&mut rng);
        pool.v.fill_random(&mut rng);
        Ok(pool)
    }

    /// Bytes of K and V together.
    pub fn bytes(&self) -> usize {
        self.k.as_bytes().len() + self.v.as_bytes().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_pools_differ_by_seed_and_round_to_dtype() {
        let spec = KvSpec::new(2, 16, 4, Dtype::Bf16).unwrap();
        let a = HostPool::random(spec, 3, 1).unwrap();
        let b = HostPool::random(spec, 3, 2).unwrap();
        assert_ne!(a, b);
        assert_eq!(a.bytes(), 2 * 3 * 2 * 4 * 16 * 2);
        let x = a.k.get_f32(5);
        assert_eq!(bf16::from_f32(x).to_f32(), x);
        assert!((-1.0..1.0).contains(&x));
    }
}
