//! Paged decode attention as a bandwidth probe: one layer of the model's shape (query heads, KV
//! heads, head dim, dtype) over a batch of sequences, K and V bytes read per second.
//!
//! The batch ([`AttentionBatch`]) is a fixed context per sequence, or the context lengths of a
//! trace's first requests (prompt + output tokens, capped). The CPU measurement lives here; the
//! GPU's is in [`super::gpu_probe`]. Both build the same [`Problem`] (random queries, shuffled
//! physical blocks, NaN in every slot no token owns), so a kernel that reads a wrong slot shows
//! as a non-finite output, which is an error rather than a figure.

use super::probe_error::ProbeError;
use crate::attention::{AttentionShape, Problem};
use crate::device::cpu::attention::{decode_attention_scaled, PagedRows};
use crate::device::cpu::pages::{HostBuf, Pages};
use crate::kv::{KvElem, KvSpec};
use crate::timing::median_secs;
use serde::Serialize;

/// The decode batch attention is measured on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttentionBatch {
    /// Query heads (a multiple of the model's KV heads).
    pub num_heads: usize,
    /// Tokens of each sequence.
    pub lens: Vec<usize>,
    /// Where the lengths come from, for the report.
    pub source: String,
}

impl AttentionBatch {
    /// `batch` sequences of `context` tokens each.
    pub fn fixed(num_heads: usize, batch: usize, context: usize) -> Self {
        AttentionBatch {
            num_heads,
            lens: vec![context; batch],
            source: format!("{batch} sequences × {context} tokens"),
        }
    }

    /// The attention shape for one layer of `spec`, softmax scale 1/sqrt(head dim).
    pub fn shape(&self, spec: &KvSpec) -> AttentionShape {
        AttentionShape {
            num_heads: self.num_heads,
            num_kv_heads: spec.num_kv_heads,
            head_dim: spec.head_dim,
            scale: 1.0 / (spec.head_dim as f32).sqrt(),
        }
    }

    /// The problem at `spec`'s block size, q of `T`, K and V stored as `KV` (`spec.dtype`).
    pub fn problem<T: KvElem, KV: KvElem>(
        &self,
        spec: &KvSpec,
        seed: u64,
    ) -> Result<Problem<T, KV>, ProbeError> {
        Problem::<T, KV>::new(self.shape(spec), spec.block_size, &self.lens, seed)
            .map_err(|e| ProbeError::Attention(e.to_string()))
    }
}

/// Fails unless every output element is finite.
pub fn check_finite<T: KvElem>(out: &[T], what: &str) -> Result<(), ProbeError> {
    match out.iter().position(|x| !x.to_f32().is_finite()) {
        None => Ok(()),
        Some(i) => Err(ProbeError::Check(format!(
            "{what}: output element {i} is not finite (a slot no token owns was read, or one was \
             never written)"
        ))),
    }
}

/// The CPU decode attention over `batch` at `spec`'s shape, K and V pools in memory with `pages`;
/// GB/s of K and V read (the median of `reps` runs after a warm-up).
pub fn cpu_attention_gbps<T: KvElem, KV: KvElem>(
    spec: &KvSpec,
    batch: &AttentionBatch,
    pages: Pages,
    reps: usize,
    seed: u64,
) -> Result<f64, ProbeError> {
    let p = batch.problem::<T, KV>(spec, seed)?;
    // The pools move into buffers of the probe's page size, so the TLB's share shows here too.
    let bytes = std::mem::size_of_val(p.k.as_slice());
    let map = || HostBuf::new(bytes, pages).map_err(|source| ProbeError::Memory { bytes, source });
    let (mut k, mut v) = (map()?, map()?);
    k.as_mut_slice::<KV>().copy_from_slice(&p.k);
    v.as_mut_slice::<KV>().copy_from_slice(&p.v);
    let rows = PagedRows {
        spec: &p.spec,
        table: &p.table,
    };
    let mut out = vec![T::from_f32(f32::NAN); p.q.len()];
    let (k, v) = (k.as_slice::<KV>(), v.as_slice::<KV>());
    let (ks, vs) = (&p.k_scale, &p.v_scale);
    let seconds = median_secs(1, reps, || {
        decode_attention_scaled(&p.shape, &p.q, k, v, ks, vs, &p.lens, &rows, &mut out)
    });
    check_finite(&out, "CPU paged attention")?;
    Ok(p.kv_bytes() as f64 / seconds / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::{attention_f64, relative_error, tolerance};
    use crate::kv::Dtype;

    #[test]
    fn the_batch_builds_the_model_shape_and_the_cpu_measures_a_correct_kernel() {
        let spec = KvSpec::new(2, 32, 4, Dtype::F32).unwrap();
        let batch = AttentionBatch {
            num_heads: 8,
            lens: vec![5, 0, 37],
            source: "test".into(),
        };
        let s = batch.shape(&spec);
        assert_eq!((s.num_heads, s.num_kv_heads, s.head_dim), (8, 2, 32));
        let p = batch.problem::<f32, f32>(&spec, 3).unwrap();
        assert_eq!(p.kv_bytes(), (5 + 37) * 2 * 32 * 2 * 4);
        // The kernel the probe times agrees with the f64 oracle on the probe's own problem.
        let mut out = vec![f32::NAN; p.q.len()];
        let rows = PagedRows {
            spec: &p.spec,
            table: &p.table,
        };
        crate::device::cpu::attention::decode_attention(
            &p.shape, &p.q, &p.k, &p.v, &p.lens, &rows, &mut out,
        );
        assert!(relative_error(&out, &attention_f64(&p)) < tolerance(Dtype::F32));
        let gbps = cpu_attention_gbps::<f32, f32>(&spec, &batch, Pages::Small, 1, 3).unwrap();
        assert!(gbps.is_finite() && gbps > 0.0);
        let bad = AttentionBatch {
            num_heads: 3,
            ..batch
        };
        assert!(matches!(
            bad.problem::<f32, f32>(&spec, 1),
            Err(ProbeError::Attention(_))
        ));
    }

    #[test]
    fn non_finite_outputs_are_errors() {
        assert!(check_finite(&[1.0f32, 2.0], "x").is_ok());
        assert!(matches!(
            check_finite(&[1.0f32, f32::NAN], "x"),
            Err(ProbeError::Check(_))
        ));
    }
}
