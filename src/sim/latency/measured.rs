//! Step times summed from measured kernel times ([`StepProfile`]), op by op, as vLLM runs a
//! Llama-style decoder step on one of `tp` GPUs (the ops and their order as AIConfigurator's
//! `LLAMAModel` lists them for vLLM, aic-core `sdk/models/llama.py`; vLLM 0.33
//! `model_executor/models/llama.py`):
//!
//! ```text
//! step = embedding(T) + layers × layer + LM head GEMM(R) + [tp > 1] (2 × layers + 1) × all-reduce(T)
//! layer = 2 × add_rmsnorm(T) + GEMM qkv(T) + attention + GEMM o_proj(T)
//!         + GEMM gate_up(T) + silu_and_mul(T) + GEMM down(T)
//! attention = decode attention(b_d requests at their mean KV length) × block-size factor
//!           + prefill attention(b_p chunks at their mean shape) × their score pairs / the mean's
//! ```
//!
//! with `T` the step's new tokens (every GEMM and elementwise op runs over all of them at once,
//! prefill and decode mixed, as vLLM batches them), `R` its requests (vLLM computes logits at
//! each request's last scheduled token), decodes the requests computing one token (a query of
//! one) and prefill chunks the rest. The all-reduces are the embedding's (vocabulary-parallel) and
//! each layer's two row-parallel outputs (o_proj, down), of `T × hidden × 2` bytes. The LM head
//! stays bf16 under fp8 weights, as vLLM keeps it.
//!
//! The block size enters through pagedkv's attention efficiency per block size: decode attention
//! takes `efficiency(profile's block size) / efficiency(block size)` times the table's time (the
//! prefill attention, bound by compute, is not scaled).
//!
//! What it leaves out (and AIConfigurator too): sampling, the logits' gather over the GPUs,
//! CUDA-graph padding of the batch, kernel-launch gaps between ops beyond what each op's time
//! holds; the host's own time per step is [`crate::sim::engine::step_time::StepModel`]'s
//! `cpu_overhead_s`.

use super::batch::BatchShape;
use super::interp::{Curve, Surface};
use super::profile::{AttentionKey, Elementwise, GemmClass, KvClass, PrefillTable, StepProfile};
use crate::kv::model::{ModelShape, Weights};
use crate::kv::Dtype;

/// One model's ops on one GPU, their curves taken out of a profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub label: String,
    layers: f64,
    hidden: f64,
    qkv: Curve,
    o_proj: Curve,
    gate_up: Curve,
    down: Curve,
    lm_head: Curve,
    embedding: Curve,
    add_rmsnorm: Curve,
    silu_and_mul: Curve,
    decode: Surface,
    /// Decode attention measured at other block sizes than the profile's.
    decode_by_block: Vec<(usize, Surface)>,
    /// The block size `decode` was measured at.
    decode_block_size: usize,
    prefill: PrefillTable,
    allreduce: Option<Curve>,
    /// Multiplies decode attention ([`Measured::at_block_size`]).
    pub attention_scale: f64,
}

fn kv_class(d: Dtype) -> Option<KvClass> {
    match d {
        Dtype::F16 | Dtype::Bf16 => Some(KvClass::Bits16),
        Dtype::Fp8E4m3 | Dtype::Fp8E5m2 => Some(KvClass::Fp8),
        Dtype::F32 => None,
    }
}

/// What a step profile's tables lack for a run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{profile} has no {what}")]
pub struct Lacks {
    /// The profile's label.
    pub profile: String,
    pub what: String,
}

impl Measured {
    /// `model` on one of `tp` GPUs from `profile`'s tables at the profile's block size, or what
    /// they lack (one line).
    pub fn new(profile: &StepProfile, model: &ModelShape, tp: usize) -> Result<Measured, Lacks> {
        let tp = tp.max(1);
        let lacks = |what: String| Lacks {
            profile: profile.label.clone(),
            what,
        };
        let weights = match model.weights {
            Weights::Bf16 | Weights::F16 => GemmClass::Bits16,
            Weights::Fp8 => GemmClass::Fp8,
        };
        let wname = if weights == GemmClass::Fp8 {
            "fp8"
        } else {
            "bf16"
        };
        let gemm = |(n, k): (usize, usize), class: GemmClass, name: &str| {
            profile
                .gemm
                .iter()
                .find(|((c, gn, gk), _)| *c == class && *gn == n as u64 && *gk == k as u64)
                .map(|(_, c)| c.clone())
                .ok_or_else(|| {
                    let dt = if class == GemmClass::Fp8 {
                        "fp8"
                    } else {
                        "bf16"
                    };
                    lacks(format!(
                        "{dt} GEMM n={n} k={k} ({name} of {} at tp {tp})",
                        model.name
                    ))
                })
        };
        let g = model.layer_gemms(tp);
        let qkv = gemm(g.qkv, weights, "qkv_proj")?;
        let o_proj = gemm(g.o_proj, weights, "o_proj")?;
        let gate_up = gemm(g.gate_up, weights, "gate_up_proj")?;
        let down = gemm(g.down, weights, "down_proj")?;
        let lm_head = gemm(g.lm_head, GemmClass::Bits16, "lm_head").map_err(|e| Lacks {
            what: format!("{} (the LM head stays bf16 under {wname} weights)", e.what),
            ..e
        })?;
        let kv = kv_class(model.dtype)
            .ok_or_else(|| lacks(format!("attention over a {} KV cache", model.dtype)))?;
        let key = AttentionKey {
            kv_dtype: kv,
            heads: (model.num_heads / tp) as u64,
            kv_heads: model.kv_heads_per_gpu(tp) as u64,
            head_dim: model.head_dim as u64,
        };
        let shape = format!(
            "{}/{}/{} heads ({} KV)",
            key.heads,
            key.kv_heads,
            key.head_dim,
            if kv == KvClass::Fp8 { "fp8" } else { "16-bit" }
        );
        let decode = profile
            .decode
            .iter()
            .find(|((k, b), _)| *k == key && b.is_none())
            .map(|(_, s)| s.clone())
            .ok_or_else(|| lacks(format!("decode attention for {shape}")))?;
        let decode_by_block = profile
            .decode
            .iter()
            .filter_map(|((k, b), s)| Some((b.filter(|_| *k == key)?, s.clone())))
            .collect();
        let prefill = profile
            .prefill
            .iter()
            .find(|((k, q), _)| *k == key && *q == model.qk_norm)
            .map(|(_, t)| t.clone())
            .ok_or_else(|| lacks(format!("prefill attention for {shape}")))?;
        let elementwise = |op: Elementwise, width: usize| {
            profile
                .elementwise
                .iter()
                .find(|((o, w), _)| *o == op && *w == width as u64)
                .map(|(_, c)| c.clone())
                .ok_or_else(|| lacks(format!("{} of width {width}", op.name())))
        };
        let allreduce = if tp > 1 {
            Some(
                profile
                    .allreduce
                    .iter()
                    .find(|(gpus, _)| *gpus == tp as u64)
                    .map(|(_, c)| c.clone())
                    .ok_or_else(|| lacks(format!("all-reduce over {tp} GPUs")))?,
            )
        } else {
            None
        };
        Ok(Measured {
            label: profile.label.clone(),
            layers: model.layers as f64,
            hidden: model.hidden_size as f64,
            qkv,
            o_proj,
            gate_up,
            down,
            lm_head,
            embedding: elementwise(Elementwise::Embedding, model.hidden_size)?,
            add_rmsnorm: elementwise(Elementwise::AddRmsNorm, model.hidden_size)?,
            silu_and_mul: elementwise(Elementwise::SiluAndMul, model.intermediate_size / tp)?,
            decode,
            decode_by_block,
            decode_block_size: profile.block_size,
            prefill,
            allreduce,
            attention_scale: 1.0,
        })
    }

    /// The same model at a run's block size: its own decode rows when the profile has some
    /// measured at it, else the profile's scaled by `efficiency(profile's block size) /
    /// efficiency(block_size)` (pagedkv's attention efficiency per block size).
    pub fn at_block_size(mut self, block_size: usize, efficiency: impl Fn(usize) -> f64) -> Self {
        if let Some((_, s)) = self.decode_by_block.iter().find(|(b, _)| *b == block_size) {
            self.decode = s.clone();
            self.attention_scale = 1.0;
        } else {
            self.attention_scale = efficiency(self.decode_block_size) / efficiency(block_size);
        }
        self
    }

    /// One layer's attention, milliseconds.
    fn attention_ms(&self, b: &BatchShape) -> f64 {
        let mut ms = 0.0;
        if b.decode > 0 {
            let kv = b.decode_kv as f64 / b.decode as f64;
            ms += self.decode.at(f64::from(b.decode), kv) * self.attention_scale;
        }
        if b.prefill > 0 {
            let n = b.prefill as f64;
            let (s, p) = (b.prefill_tokens as f64 / n, b.prefill_context as f64 / n);
            let full = s + p;
            // The score pairs the mean chunk computes, as a share of attention over all its
            // tokens, and the batch's pairs over b_p mean chunks' (1 when they are alike).
            let mean_pairs = s * p + s * s / 2.0;
            let work = mean_pairs / (full * full / 2.0);
            let spread = b.prefill_pairs / (n * mean_pairs);
            let t = &self.prefill;
            let table = t.table.at(n, full);
            ms += t.fixed_ms + (table - t.fixed_ms) * work * spread;
        }
        ms
    }

    /// The step's GPU time, seconds: (compute, communication).
    pub fn forward(&self, b: &BatchShape) -> (f64, f64) {
        if b.requests == 0 {
            return (0.0, 0.0);
        }
        let t = b.tokens as f64;
        let layer = 2.0 * self.add_rmsnorm.at(t)
            + self.qkv.at(t)
            + self.attention_ms(b)
            + self.o_proj.at(t)
            + self.gate_up.at(t)
            + self.silu_and_mul.at(t)
            + self.down.at(t);
        let compute =
            self.embedding.at(t) + self.layers * layer + self.lm_head.at(f64::from(b.requests));
        let comm = self.allreduce.as_ref().map_or(0.0, |ar| {
            (2.0 * self.layers + 1.0) * ar.at(t * self.hidden * 2.0)
        });
        (compute * 1e-3, comm * 1e-3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::model::preset;
    use serde_json::json;

    /// Llama 3.1 8B at tp 2, every op a flat or simple curve so each step's sum is worked by hand.
    fn profile() -> StepProfile {
        let flat = |ms: f64| json!({"m": [1, 100000], "ms": [ms, ms]});
        let gemm = |n: u64, k: u64, dtype: &str, ms: f64| {
            let mut g = flat(ms);
            g["n"] = json!(n);
            g["k"] = json!(k);
            g["dtype"] = json!(dtype);
            g
        };
        let ew = |op: &str, width: u64, ms: f64| json!({"op": op, "width": width, "tokens": [1, 100000], "ms": [ms, ms]});
        let doc = json!({
            "format": "pagedkv-step-profile", "version": 1, "gpu": "h200", "label": "by hand",
            "source": "a test", "framework": "vllm", "block_size": 16,
            "gemm": [gemm(3072, 4096, "bf16", 1.0), gemm(4096, 2048, "bf16", 2.0),
                     gemm(14336, 4096, "bf16", 3.0), gemm(4096, 7168, "bf16", 4.0),
                     gemm(64128, 4096, "bf16", 5.0)],
            // Decode: 0.01 ms per request and 0.001 per thousand KV tokens each.
            "decode_attention": [
                {"kv_dtype": "bf16", "heads": 16, "kv_heads": 4, "head_dim": 128,
                 "batch": [1, 2], "kv_len": [1000, 2000], "ms": [[0.011, 0.012], [0.022, 0.024]]},
                {"kv_dtype": "bf16", "heads": 16, "kv_heads": 4, "head_dim": 128, "block_size": 1,
                 "batch": [1, 2], "kv_len": [1000, 2000], "ms": [[1.0, 1.0], [1.0, 1.0]]}],
            // Prefill: 0.1 fixed, then 1 ms per million score pairs at batch 1 (t² / 2 pairs).
            "prefill_attention": [
                {"kv_dtype": "bf16", "heads": 16, "kv_heads": 4, "head_dim": 128,
                 "fixed_ms": 0.1, "batch": [1, 2], "tokens": [1000, 2000],
                 "ms": [[0.6, 2.1], [1.1, 4.1]]}],
            "allreduce": [{"gpus": 2, "bytes": [8192, 16384], "ms": [0.5, 1.0]}],
            "elementwise": [ew("embedding", 4096, 0.25), ew("add_rmsnorm", 4096, 0.5),
                            ew("silu_and_mul", 7168, 0.75)],
        });
        StepProfile::parse(&doc.to_string(), "by hand").unwrap()
    }

    fn ms(m: &Measured, entries: &[(u32, u32)]) -> f64 {
        let (c, a) = m.forward(&BatchShape::of(entries.iter().copied()));
        (c + a) * 1e3
    }

    #[test]
    fn a_step_is_the_sum_of_its_ops_worked_by_hand() {
        let model = preset("llama-3.1-8b").unwrap();
        let m = Measured::new(&profile(), &model, 2).unwrap();
        // Per layer without attention: 2 × 0.5 norms + 1 + 2 + 3 + 4 GEMMs + 0.75 = 11.75.
        // Two decodes at KV lengths 1000 and 2000: batch 2 at the mean 1500, 0.023. 32 layers;
        // embedding 0.25, LM head 5; 65 all-reduces of 2 tokens × 4096 × 2 = 16 KiB: 1 ms each.
        let want = 0.25 + 32.0 * (11.75 + 0.023) + 5.0 + 65.0 * 1.0;
        let got = ms(&m, &[(1, 999), (1, 1999)]);
        assert!((got - want).abs() < 1e-9, "{got} vs {want}");
        // One prefill of 1000 after 1000 cached: table(1, 2000) = 2.1, its pairs (1000 × 1000 +
        // 1000² / 2) over 2000² / 2 = 0.75: 0.1 + 2.0 × 0.75 = 1.6. 1000 tokens: the
        // all-reduces of 8 MB are past the curve's end: 1 ms × 8,192,000 / 16,384 each.
        let ar = 1.0 * 1000.0 * 4096.0 * 2.0 / 16384.0;
        let want = 0.25 + 32.0 * (11.75 + 1.6) + 5.0 + 65.0 * ar;
        let got = ms(&m, &[(1000, 1000)]);
        assert!((got - want).abs() < 1e-9, "{got} vs {want}");
        // Two unlike prefill chunks (500 and 1500 new, none cached) take the mean chunk's table
        // value, 1000 tokens at batch 2 (1.1), times their pairs over two mean chunks':
        // (500² + 1500²) / 2 over 2 × 1000² / 2 = 1.25: 0.1 + 1.0 × 1.25.
        let attn = 0.1 + (1.1 - 0.1) * 1.25;
        let ar = 2000.0 * 4096.0 * 2.0 / 16384.0;
        let want = 0.25 + 32.0 * (11.75 + attn) + 5.0 + 65.0 * ar;
        let got = ms(&m, &[(500, 0), (1500, 0)]);
        assert!((got - want).abs() < 1e-9, "{got} vs {want}");
    }

    #[test]
    fn the_block_size_takes_its_own_rows_or_scales_by_efficiency() {
        let model = preset("llama-3.1-8b").unwrap();
        let base = Measured::new(&profile(), &model, 2).unwrap();
        let one = ms(&base, &[(1, 999)]);
        // Block 1 has rows of its own: 1 ms per layer instead of 0.011.
        let b1 = base.clone().at_block_size(1, |_| unreachable!());
        assert!((ms(&b1, &[(1, 999)]) - (one + 32.0 * (1.0 - 0.011))).abs() < 1e-9);
        // Block 64 has none: efficiency 0.8 at 16 over 0.9 at 64.
        let b64 = base.at_block_size(64, |b| if b == 16 { 0.8 } else { 0.9 });
        let want = one - 32.0 * 0.011 * (1.0 - 0.8 / 0.9);
        assert!((ms(&b64, &[(1, 999)]) - want).abs() < 1e-9);
    }

    #[test]
    fn a_missing_row_is_named() {
        let model = preset("llama-3.1-8b").unwrap();
        let e = Measured::new(&profile(), &model, 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("bf16 GEMM n=6144 k=4096 (qkv_proj of llama-3.1-8b at tp 1)"),
            "{e}"
        );
        let e = Measured::new(&profile(), &model, 4)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("by hand has no"), "{e}");
    }
}
