//! Step profiles: per-op kernel times on one GPU, the tables the measured step-time model sums
//! ([`super::measured`]). One JSON document per GPU (`--step-profile FILE`; the shipped ones,
//! converted from AIConfigurator's database by `scripts/import-aiconfigurator`, are in
//! `data/step-profiles/`; `docs/step-profiles.md` says how to measure and write one):
//!
//! ```text
//! { "format": "pagedkv-step-profile", "version": 1,
//!   "gpu": "h200",            one of pagedkv's GPUs (src/hw.rs)
//!   "label": "...",           a short name reports print ("step times: measured, <label>")
//!   "source": "...",          where the figures come from
//!   "framework": "vllm 0.24.0", the engine the kernels ran under
//!   "block_size": 16,         the KV block size the attention rows were measured at
//!   "gemm": [{"dtype": "bf16"|"fp8", "n": N, "k": K, "m": [..], "ms": [..]}],
//!   "decode_attention": [{"kv_dtype": "bf16"|"fp8", "heads": H, "kv_heads": KV, "head_dim": D,
//!                         "block_size": B (optional: rows measured at another block size),
//!                         "batch": [..], "kv_len": [..], "ms": [[..per kv_len..] per batch]}],
//!   "prefill_attention": [{"kv_dtype", "heads", "kv_heads", "head_dim", "qk_norm": false,
//!                          "fixed_ms": F, "batch": [..], "tokens": [..], "ms": [[..]..]}],
//!   "allreduce": [{"gpus": G, "bytes": [..], "ms": [..]}],
//!   "elementwise": [{"op": "embedding"|"add_rmsnorm"|"silu_and_mul", "width": W,
//!                    "tokens": [..], "ms": [..]}] }
//! ```
//!
//! Every figure is milliseconds for one call of one op on one GPU (one layer's, for per-layer
//! ops), with the op's shape as that GPU sees it under tensor parallelism (heads and widths per
//! GPU). Decode attention: `batch` requests each reading `kv_len` tokens of KV (context + 1).
//! Prefill attention: `batch` requests each attending causally over `tokens` tokens with nothing
//! cached; with `p` of `s + p` tokens cached the time is `fixed + (table(s + p) − fixed) × ((s +
//! p)² − p²) / (s + p)²` (AIConfigurator's rule, the score pairs left; `fixed`: a part of each
//! call that does not scale, 0 unless known). Axes: strictly increasing positive numbers; tables
//! as many values as their axes say; no two entries for one key. A file that breaks a rule is
//! refused with the entry and the rule it breaks.

use super::interp::{Axis, Beyond, Curve, Surface};
use serde::Deserialize;
use std::collections::HashSet;
use std::path::Path;

pub const FORMAT: &str = "pagedkv-step-profile";
pub const VERSION: u32 = 1;

/// The profiles pagedkv ships: AIConfigurator 0.12.0's vLLM 0.24.0 database for each GPU.
pub const SHIPPED: &[(&str, &str)] = &[
    (
        "h200",
        include_str!("../../../data/step-profiles/aic-0.12.0-vllm-0.24.0-h200_sxm.json"),
    ),
    (
        "h100",
        include_str!("../../../data/step-profiles/aic-0.12.0-vllm-0.24.0-h100_sxm.json"),
    ),
];

/// Why a profile cannot be used.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
#[error("{name}: {detail}")]
pub struct ProfileError {
    pub name: String,
    pub detail: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct GemmRow {
    dtype: String,
    n: u64,
    k: u64,
    m: Vec<f64>,
    ms: Vec<f64>,
    #[serde(default)]
    #[allow(dead_code)]
    origin: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct DecodeRow {
    kv_dtype: String,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    #[serde(default)]
    block_size: Option<u64>,
    batch: Vec<f64>,
    kv_len: Vec<f64>,
    ms: Vec<Vec<f64>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct PrefillRow {
    kv_dtype: String,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    #[serde(default)]
    qk_norm: bool,
    #[serde(default)]
    fixed_ms: f64,
    batch: Vec<f64>,
    tokens: Vec<f64>,
    ms: Vec<Vec<f64>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct AllReduceRow {
    gpus: u64,
    bytes: Vec<f64>,
    ms: Vec<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ElementwiseRow {
    op: String,
    width: u64,
    tokens: Vec<f64>,
    ms: Vec<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    format: String,
    version: u32,
    gpu: String,
    label: String,
    source: String,
    framework: String,
    block_size: u64,
    #[serde(default)]
    gemm: Vec<GemmRow>,
    #[serde(default)]
    decode_attention: Vec<DecodeRow>,
    #[serde(default)]
    prefill_attention: Vec<PrefillRow>,
    #[serde(default)]
    allreduce: Vec<AllReduceRow>,
    #[serde(default)]
    elementwise: Vec<ElementwiseRow>,
}

/// The shape of an attention table's key: per-GPU heads as the kernel sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttentionKey {
    pub kv_dtype: KvClass,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
}

/// How the KV cache is stored, as the tables tell it apart (f16 and bf16 move the same bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KvClass {
    Bits16,
    Fp8,
}

/// How the weights of a GEMM are stored, as the tables tell it apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GemmClass {
    Bits16,
    Fp8,
}

/// The elementwise ops a layer runs outside its GEMMs and attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Elementwise {
    /// The token embedding's lookup.
    Embedding,
    /// The residual add fused with RMSNorm (vLLM's `fused_add_rms_norm`).
    AddRmsNorm,
    /// SiLU of the gate times up (vLLM's `silu_and_mul`).
    SiluAndMul,
}

impl Elementwise {
    fn parse(s: &str) -> Option<Elementwise> {
        match s {
            "embedding" => Some(Elementwise::Embedding),
            "add_rmsnorm" => Some(Elementwise::AddRmsNorm),
            "silu_and_mul" => Some(Elementwise::SiluAndMul),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Elementwise::Embedding => "embedding",
            Elementwise::AddRmsNorm => "add_rmsnorm",
            Elementwise::SiluAndMul => "silu_and_mul",
        }
    }
}

/// A prefill attention table with its fixed part.
#[derive(Debug, Clone, PartialEq)]
pub struct PrefillTable {
    pub fixed_ms: f64,
    pub table: Surface,
}

/// A loaded, checked profile.
#[derive(Debug, Clone, PartialEq)]
pub struct StepProfile {
    pub gpu: String,
    pub label: String,
    pub source: String,
    pub framework: String,
    /// The KV block size its attention rows were measured at.
    pub block_size: usize,
    pub gemm: Vec<((GemmClass, u64, u64), Curve)>,
    /// Decode attention per shape, at the profile's block size (`None`) or at one of its own.
    pub decode: Vec<((AttentionKey, Option<usize>), Surface)>,
    pub prefill: Vec<((AttentionKey, bool), PrefillTable)>,
    pub allreduce: Vec<(u64, Curve)>,
    pub elementwise: Vec<((Elementwise, u64), Curve)>,
}

impl StepProfile {
    /// The shipped profile of `gpu`, if any.
    pub fn shipped(gpu: &str) -> Option<StepProfile> {
        let (_, text) = SHIPPED.iter().find(|(g, _)| *g == gpu)?;
        Some(StepProfile::parse(text, "shipped profile").expect("a shipped profile is valid"))
    }

    /// Reads and checks a profile file.
    pub fn read(path: &Path) -> Result<StepProfile, ProfileError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ProfileError {
            name: name.clone(),
            detail: e.to_string(),
        })?;
        StepProfile::parse(&text, &name)
    }

    /// Checks a profile's text; `name` says where it came from in errors.
    pub fn parse(text: &str, name: &str) -> Result<StepProfile, ProfileError> {
        let err = |detail: String| ProfileError {
            name: name.into(),
            detail,
        };
        let value = crate::workload::strict_json::from_str(text).map_err(|e| err(e.to_string()))?;
        let doc: Document =
            serde_path_to_error::deserialize(value).map_err(|e| err(e.to_string()))?;
        if doc.format != FORMAT || doc.version != VERSION {
            return Err(err(format!(
                "format {:?} version {}, want {FORMAT:?} version {VERSION}",
                doc.format, doc.version
            )));
        }
        if crate::hw::gpu(&doc.gpu).is_none() {
            return Err(err(format!(
                "gpu {:?} is none of pagedkv's ({})",
                doc.gpu,
                crate::hw::gpu_names().join(", ")
            )));
        }
        if doc.block_size == 0 {
            return Err(err("block_size must be at least 1".into()));
        }
        build(doc).map_err(err)
    }
}

fn kv_class(s: &str) -> Result<KvClass, String> {
    match s {
        "bf16" | "f16" => Ok(KvClass::Bits16),
        "fp8" => Ok(KvClass::Fp8),
        _ => Err(format!("kv_dtype {s:?} is none of bf16, f16, fp8")),
    }
}

fn gemm_class(s: &str) -> Result<GemmClass, String> {
    match s {
        "bf16" | "f16" => Ok(GemmClass::Bits16),
        "fp8" => Ok(GemmClass::Fp8),
        _ => Err(format!("dtype {s:?} is none of bf16, f16, fp8")),
    }
}

/// An axis checked: points strictly increasing, positive and finite.
fn axis(what: &str, points: Vec<f64>, beyond: Beyond) -> Result<Axis, String> {
    if points.is_empty() {
        return Err(format!("{what} is empty"));
    }
    if let Some(p) = points.iter().find(|p| !(p.is_finite() && **p > 0.0)) {
        return Err(format!(
            "{what} holds {p}: axis points must be positive numbers"
        ));
    }
    if let Some(w) = points.windows(2).find(|w| w[1] <= w[0]) {
        return Err(format!(
            "{what} goes {} then {}: axis points must increase",
            w[0], w[1]
        ));
    }
    Ok(Axis::new(points, beyond))
}

/// Values checked: as many as the axis has points, each a positive number of milliseconds.
fn values(what: &str, v: Vec<f64>, len: usize) -> Result<Vec<f64>, String> {
    if v.len() != len {
        return Err(format!(
            "{what} has {} values for {len} axis points",
            v.len()
        ));
    }
    if let Some(x) = v.iter().find(|x| !(x.is_finite() && **x > 0.0)) {
        return Err(format!(
            "{what} holds {x}: times must be positive milliseconds"
        ));
    }
    Ok(v)
}

fn rows(what: &str, v: Vec<Vec<f64>>, rows: usize, cols: usize) -> Result<Vec<Vec<f64>>, String> {
    if v.len() != rows {
        return Err(format!(
            "{what} has {} rows for {rows} axis points",
            v.len()
        ));
    }
    v.into_iter()
        .enumerate()
        .map(|(i, r)| values(&format!("{what} row {i}"), r, cols))
        .collect()
}

fn once<K: std::hash::Hash + Eq>(seen: &mut HashSet<K>, key: K, what: &str) -> Result<(), String> {
    if seen.insert(key) {
        Ok(())
    } else {
        Err(format!("{what} appears twice"))
    }
}

/// One table of the profile, by key, or the first fault found in it.
type Keyed<K, V> = Result<Vec<(K, V)>, String>;

fn build(doc: Document) -> Result<StepProfile, String> {
    let block_size = doc.block_size as usize;
    Ok(StepProfile {
        gemm: gemm_curves(doc.gemm)?,
        decode: decode_surfaces(doc.decode_attention, block_size)?,
        prefill: prefill_tables(doc.prefill_attention)?,
        allreduce: allreduce_curves(doc.allreduce)?,
        elementwise: elementwise_curves(doc.elementwise)?,
        gpu: crate::hw::gpu(&doc.gpu).expect("checked").name.to_string(),
        label: doc.label,
        source: doc.source,
        framework: doc.framework,
        block_size,
    })
}

/// The GEMM times, one curve over m per (dtype class, n, k).
fn gemm_curves(rows: Vec<GemmRow>) -> Keyed<(GemmClass, u64, u64), Curve> {
    let mut gemm = Vec::new();
    let mut seen = HashSet::new();
    for (i, g) in rows.into_iter().enumerate() {
        let what = format!("gemm[{i}] ({} n={} k={})", g.dtype, g.n, g.k);
        let key = (
            gemm_class(&g.dtype).map_err(|e| format!("{what}: {e}"))?,
            g.n,
            g.k,
        );
        once(&mut seen, key, &what)?;
        let ax = axis(&format!("{what} m"), g.m, Beyond::Proportional)?;
        let v = values(&format!("{what} ms"), g.ms, ax.points().len())?;
        gemm.push((
            key,
            Curve {
                axis: ax,
                values: v,
            },
        ));
    }
    Ok(gemm)
}

/// An attention table's key, its sizes checked.
fn attention_key(what: &str, kv: &str, h: u64, kvh: u64, d: u64) -> Result<AttentionKey, String> {
    if h == 0 || kvh == 0 || d == 0 || !h.is_multiple_of(kvh) {
        return Err(format!(
            "{what}: heads {h}, kv_heads {kvh}, head_dim {d}: need positive sizes, heads a multiple of kv_heads"
        ));
    }
    Ok(AttentionKey {
        kv_dtype: kv_class(kv).map_err(|e| format!("{what}: {e}"))?,
        heads: h,
        kv_heads: kvh,
        head_dim: d,
    })
}

/// Decode attention's times, a surface over (batch, kv_len) per key and block size (`None`:
/// the profile's own, `default_block`).
fn decode_surfaces(
    table: Vec<DecodeRow>,
    default_block: usize,
) -> Keyed<(AttentionKey, Option<usize>), Surface> {
    let mut decode = Vec::new();
    let mut seen = HashSet::new();
    for (i, a) in table.into_iter().enumerate() {
        let what = format!(
            "decode_attention[{i}] ({} {}/{}/{}{})",
            a.kv_dtype,
            a.heads,
            a.kv_heads,
            a.head_dim,
            a.block_size
                .map_or(String::new(), |b| format!(" block {b}"))
        );
        let key = attention_key(&what, &a.kv_dtype, a.heads, a.kv_heads, a.head_dim)?;
        if a.block_size == Some(0) {
            return Err(format!("{what}: block_size must be at least 1"));
        }
        // Rows at the profile's own block size are its default rows.
        let block = a
            .block_size
            .map(|b| b as usize)
            .filter(|&b| b != default_block);
        once(&mut seen, (key, block), &what)?;
        let b = axis(&format!("{what} batch"), a.batch, Beyond::Linear)?;
        let s = axis(&format!("{what} kv_len"), a.kv_len, Beyond::Linear)?;
        let v = rows(
            &format!("{what} ms"),
            a.ms,
            b.points().len(),
            s.points().len(),
        )?;
        decode.push((
            (key, block),
            Surface {
                rows: b,
                cols: s,
                values: v,
            },
        ));
    }
    Ok(decode)
}

/// Prefill attention's times, a surface over (batch, tokens) above a fixed time, per key and
/// qk_norm.
fn prefill_tables(table: Vec<PrefillRow>) -> Keyed<(AttentionKey, bool), PrefillTable> {
    let mut prefill = Vec::new();
    let mut seen = HashSet::new();
    for (i, a) in table.into_iter().enumerate() {
        let what = format!(
            "prefill_attention[{i}] ({} {}/{}/{} qk_norm {})",
            a.kv_dtype, a.heads, a.kv_heads, a.head_dim, a.qk_norm
        );
        let key = attention_key(&what, &a.kv_dtype, a.heads, a.kv_heads, a.head_dim)?;
        once(&mut seen, (key, a.qk_norm), &what)?;
        if !(a.fixed_ms.is_finite() && a.fixed_ms >= 0.0) {
            return Err(format!("{what}: fixed_ms {} must be >= 0", a.fixed_ms));
        }
        let b = axis(&format!("{what} batch"), a.batch, Beyond::Linear)?;
        let s = axis(&format!("{what} tokens"), a.tokens, Beyond::Quadratic)?;
        let v = rows(
            &format!("{what} ms"),
            a.ms,
            b.points().len(),
            s.points().len(),
        )?;
        if let Some(x) = v.iter().flatten().find(|x| **x < a.fixed_ms) {
            return Err(format!(
                "{what}: a time of {x} ms is below its fixed_ms {}",
                a.fixed_ms
            ));
        }
        prefill.push((
            (key, a.qk_norm),
            PrefillTable {
                fixed_ms: a.fixed_ms,
                table: Surface {
                    rows: b,
                    cols: s,
                    values: v,
                },
            },
        ));
    }
    Ok(prefill)
}

/// The all-reduce times, one curve over bytes per GPU count.
fn allreduce_curves(rows: Vec<AllReduceRow>) -> Keyed<u64, Curve> {
    let mut allreduce = Vec::new();
    let mut seen = HashSet::new();
    for (i, a) in rows.into_iter().enumerate() {
        let what = format!("allreduce[{i}] ({} GPUs)", a.gpus);
        if a.gpus < 2 {
            return Err(format!("{what}: an all-reduce needs at least 2 GPUs"));
        }
        once(&mut seen, a.gpus, &what)?;
        let ax = axis(&format!("{what} bytes"), a.bytes, Beyond::Proportional)?;
        let v = values(&format!("{what} ms"), a.ms, ax.points().len())?;
        allreduce.push((
            a.gpus,
            Curve {
                axis: ax,
                values: v,
            },
        ));
    }
    Ok(allreduce)
}

/// The elementwise ops' times, one curve over tokens per (op, width).
fn elementwise_curves(rows: Vec<ElementwiseRow>) -> Keyed<(Elementwise, u64), Curve> {
    let mut elementwise = Vec::new();
    let mut seen = HashSet::new();
    for (i, e) in rows.into_iter().enumerate() {
        let what = format!("elementwise[{i}] ({} width {})", e.op, e.width);
        let op = Elementwise::parse(&e.op).ok_or_else(|| {
            format!(
                "{what}: op {:?} is none of embedding, add_rmsnorm, silu_and_mul",
                e.op
            )
        })?;
        once(&mut seen, (op, e.width), &what)?;
        let ax = axis(&format!("{what} tokens"), e.tokens, Beyond::Proportional)?;
        let v = values(&format!("{what} ms"), e.ms, ax.points().len())?;
        elementwise.push((
            (op, e.width),
            Curve {
                axis: ax,
                values: v,
            },
        ));
    }
    Ok(elementwise)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn tiny() -> serde_json::Value {
        serde_json::json!({
            "format": FORMAT, "version": VERSION, "gpu": "h200", "label": "tiny",
            "source": "a test", "framework": "vllm 0.24.0", "block_size": 16,
            "gemm": [{"dtype": "bf16", "n": 8, "k": 4, "m": [1, 2], "ms": [1.0, 2.0]}],
            "decode_attention": [{"kv_dtype": "bf16", "heads": 2, "kv_heads": 1, "head_dim": 8,
                                  "batch": [1, 2], "kv_len": [1, 10], "ms": [[1, 2], [3, 4]]}],
            "allreduce": [{"gpus": 2, "bytes": [8], "ms": [0.01]}],
        })
    }

    fn refused(v: serde_json::Value) -> String {
        StepProfile::parse(&v.to_string(), "p.json")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn the_shipped_profiles_load() {
        for (gpu, _) in SHIPPED {
            let p = StepProfile::shipped(gpu).unwrap();
            assert_eq!(&p.gpu, gpu);
            assert_eq!(p.block_size, 16);
            assert!(p.gemm.len() > 100 && !p.decode.is_empty() && !p.prefill.is_empty());
            assert_eq!(p.allreduce.len(), 3, "2, 4 and 8 GPUs");
        }
        assert!(StepProfile::shipped("a100").is_none());
    }

    #[test]
    fn every_broken_rule_is_named() {
        StepProfile::parse(&tiny().to_string(), "p.json").unwrap();
        let with = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut v = tiny();
            f(&mut v);
            refused(v)
        };
        let e = with(&|v| v["gemm"][0]["m"] = serde_json::json!([2, 1]));
        assert!(e.contains("gemm[0] (bf16 n=8 k=4) m goes 2 then 1"), "{e}");
        let e = with(&|v| v["gemm"][0]["ms"] = serde_json::json!([1.0, -2.0]));
        assert!(e.contains("-2") && e.contains("positive"), "{e}");
        let e = with(&|v| v["gemm"][0]["ms"] = serde_json::json!([1.0]));
        assert!(e.contains("1 values for 2 axis points"), "{e}");
        let e = with(&|v| {
            let g = v["gemm"][0].clone();
            v["gemm"].as_array_mut().unwrap().push(g);
        });
        assert!(e.contains("appears twice"), "{e}");
        let e = with(&|v| v["decode_attention"][0]["ms"] = serde_json::json!([[1, 2]]));
        assert!(e.contains("1 rows for 2"), "{e}");
        let e = with(&|v| v["gpu"] = serde_json::json!("v100"));
        assert!(e.contains("v100"), "{e}");
        let e = with(&|v| v["version"] = serde_json::json!(2));
        assert!(e.contains("version 2"), "{e}");
        let e = with(&|v| v["gemm"][0]["dtype"] = serde_json::json!("int4"));
        assert!(e.contains("int4"), "{e}");
        let e = with(&|v| v["allreduce"][0]["gpus"] = serde_json::json!(1));
        assert!(e.contains("at least 2 GPUs"), "{e}");
        let e = with(&|v| v["extra"] = serde_json::json!(1));
        assert!(e.contains("unknown field"), "{e}");
        let e = StepProfile::parse("{\"format\": 1, \"format\": 2}", "p.json").unwrap_err();
        assert!(e.to_string().contains("duplicate key"), "{e}");
        assert!(StepProfile::parse("{", "p.json").is_err());
        for e in [
            refused(serde_json::json!([])),
            with(&|v| v["gemm"] = serde_json::json!(3)),
        ] {
            assert!(e.starts_with("p.json: ") && !e.contains('\n'), "{e}");
        }
    }
}
