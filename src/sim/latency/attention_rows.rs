//! Decode-attention rows from pagedkv's own kernel: `pagedkv attention --json` runs (one per
//! batch × context × block size, uniform contexts) turned into a step profile's
//! `decode_attention` entries, merged into another profile (the shipped one of the same GPU), so
//! that a run's decode attention is the kernel measured at its own block size instead of the
//! profile's rows scaled by efficiency. `scripts/gpu-check` measures them on a lent GPU;
//! `pagedkv step-profile from-attention` merges them.

use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Why reports do not become rows; a cell names its shape as "KV dtype heads/KV heads/head dim,
/// block N".
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AttentionRowsError {
    #[error("an attention report without a positive {0:?}")]
    NotPositive(&'static str),
    #[error("KV dtype {0:?} has no step-profile rows")]
    KvDtype(Option<String>),
    #[error(
        "a ragged batch ({tokens} tokens over {batch} requests of at most {context}): rows need \
         one context per run"
    )]
    Ragged {
        tokens: u64,
        batch: u64,
        context: u64,
    },
    #[error("the profile has no decode_attention list")]
    NoDecodeList,
    #[error("two runs at batch {batch} and context {context} ({cell})")]
    TwoRuns {
        batch: u64,
        context: u64,
        cell: String,
    },
    #[error(
        "no run at batch {batch} and context {context} ({cell}): the rows need every batch at \
         every context"
    )]
    Hole {
        batch: u64,
        context: u64,
        cell: String,
    },
}

/// One decode-attention measurement, as the rows need it.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionRun {
    /// "bf16" (16-bit KV) or "fp8".
    pub kv_dtype: &'static str,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub block_size: u64,
    pub batch: u64,
    /// Tokens of KV each request reads.
    pub kv_len: u64,
    /// One call, milliseconds.
    pub ms: f64,
}

impl AttentionRun {
    /// A run from one `pagedkv attention --json` report.
    pub fn from_report(v: &Value) -> Result<AttentionRun, AttentionRowsError> {
        let num = |k: &'static str| {
            v.get(k)
                .and_then(Value::as_u64)
                .filter(|&n| n > 0)
                .ok_or(AttentionRowsError::NotPositive(k))
        };
        let kv_dtype = match v.get("kv_dtype").and_then(Value::as_str) {
            Some("f16" | "bf16") => "bf16",
            Some("fp8_e4m3" | "fp8_e5m2") => "fp8",
            other => return Err(AttentionRowsError::KvDtype(other.map(String::from))),
        };
        let (batch, context) = (num("batch")?, num("max_context")?);
        let tokens = num("total_tokens")?;
        if tokens != batch * context {
            return Err(AttentionRowsError::Ragged {
                tokens,
                batch,
                context,
            });
        }
        let us = v
            .get("paged_us")
            .and_then(Value::as_f64)
            .filter(|t| t.is_finite() && *t > 0.0)
            .ok_or(AttentionRowsError::NotPositive("paged_us"))?;
        Ok(AttentionRun {
            kv_dtype,
            heads: num("num_heads")?,
            kv_heads: num("num_kv_heads")?,
            head_dim: num("head_dim")?,
            block_size: num("block_size")?,
            batch,
            kv_len: context,
            ms: us / 1e3,
        })
    }
}

/// Adds `runs` to the profile document `doc` as `decode_attention` entries, one per shape and
/// block size, each a full grid of the runs' batches × KV lengths (a missing or repeated cell is
/// an error naming it). An entry replaces the document's of the same shape and block size; the
/// label says the rows are pagedkv's (`what`: where they were measured).
pub fn merge_decode_rows(
    doc: &mut Value,
    runs: &[AttentionRun],
    what: &str,
) -> Result<(), AttentionRowsError> {
    type Key = (&'static str, u64, u64, u64, u64);
    let mut groups: BTreeMap<Key, Vec<&AttentionRun>> = BTreeMap::new();
    for r in runs {
        let key = (r.kv_dtype, r.heads, r.kv_heads, r.head_dim, r.block_size);
        groups.entry(key).or_default().push(r);
    }
    let own_block = doc.get("block_size").and_then(Value::as_u64).unwrap_or(0);
    let entries = doc
        .get_mut("decode_attention")
        .and_then(Value::as_array_mut)
        .ok_or(AttentionRowsError::NoDecodeList)?;
    for ((kv, h, kvh, d, bs), group) in groups {
        let axis = |f: fn(&AttentionRun) -> u64| {
            let mut a: Vec<u64> = group.iter().map(|r| f(r)).collect();
            a.sort_unstable();
            a.dedup();
            a
        };
        let (batches, lens) = (axis(|r| r.batch), axis(|r| r.kv_len));
        let cell = || format!("{kv} {h}/{kvh}/{d}, block {bs}");
        let mut ms = vec![vec![f64::NAN; lens.len()]; batches.len()];
        for r in &group {
            let i = batches.binary_search(&r.batch).expect("an axis point");
            let j = lens.binary_search(&r.kv_len).expect("an axis point");
            if !ms[i][j].is_nan() {
                return Err(AttentionRowsError::TwoRuns {
                    batch: r.batch,
                    context: r.kv_len,
                    cell: cell(),
                });
            }
            ms[i][j] = r.ms;
        }
        for (i, row) in ms.iter().enumerate() {
            if let Some(j) = row.iter().position(|x| x.is_nan()) {
                return Err(AttentionRowsError::Hole {
                    batch: batches[i],
                    context: lens[j],
                    cell: cell(),
                });
            }
        }
        let same = |e: &Value| {
            let b = e
                .get("block_size")
                .and_then(Value::as_u64)
                .unwrap_or(own_block);
            e["kv_dtype"] == kv
                && e["heads"] == h
                && e["kv_heads"] == kvh
                && e["head_dim"] == d
                && b == bs
        };
        entries.retain(|e| !same(e));
        let mut entry = json!({"kv_dtype": kv, "heads": h, "kv_heads": kvh, "head_dim": d,
                               "batch": batches, "kv_len": lens, "ms": ms});
        if bs != own_block {
            entry["block_size"] = bs.into();
        }
        entries.push(entry);
    }
    let label = doc["label"].as_str().unwrap_or("a profile").to_string();
    doc["label"] = format!("{label} + pagedkv decode attention ({what})").into();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::latency::StepProfile;

    fn report(batch: u64, ctx: u64, block: u64, us: f64) -> Value {
        json!({"kv_dtype": "f16", "num_heads": 32, "num_kv_heads": 8, "head_dim": 128,
               "block_size": block, "batch": batch, "max_context": ctx,
               "total_tokens": batch * ctx, "paged_us": us})
    }

    #[test]
    fn runs_become_rows_at_their_block_sizes_and_replace_the_profiles_own() {
        let mut doc: Value =
            serde_json::from_str(crate::sim::latency::profile::SHIPPED[0].1).unwrap();
        let before = doc["decode_attention"].as_array().unwrap().len();
        let mut runs = Vec::new();
        for block in [1, 16] {
            for (b, c) in [(1, 512), (1, 4096), (64, 512), (64, 4096)] {
                let us = (block as f64).recip() * 1000.0 + (b * c) as f64 / 100.0;
                runs.push(AttentionRun::from_report(&report(b, c, block, us)).unwrap());
            }
        }
        merge_decode_rows(&mut doc, &runs, "a test").unwrap();
        // Block 16 is the profile's own: it replaced AIConfigurator's 32/8/128 entry; block 1
        // was added.
        assert_eq!(
            doc["decode_attention"].as_array().unwrap().len(),
            before + 1
        );
        let p = StepProfile::parse(&doc.to_string(), "merged").unwrap();
        assert!(p.label.ends_with("+ pagedkv decode attention (a test)"));
        let model = crate::kv::model::preset("llama-3.1-8b").unwrap();
        let m = crate::sim::latency::Measured::new(&p, &model, 1).unwrap();
        let one = m.clone().at_block_size(1, |_| unreachable!());
        let step = |m: &crate::sim::latency::Measured| {
            let b = crate::sim::latency::BatchShape::of([(1u32, 4095u32); 64]);
            m.forward(&b).0
        };
        // Block 1's rows are 1 ms slower per layer than block 16's, over 32 layers.
        assert!(
            (step(&one) - step(&m) - 32.0 * (1.0 - 1000.0 / 16.0 / 1000.0) * 1e-3).abs() < 1e-9
        );
    }

    #[test]
    fn holes_repeats_and_ragged_runs_are_named() {
        let mut doc: Value =
            serde_json::from_str(crate::sim::latency::profile::SHIPPED[0].1).unwrap();
        let r = |b, c| AttentionRun::from_report(&report(b, c, 1, 10.0)).unwrap();
        let cell = || "bf16 32/8/128, block 1".to_string();
        let e = merge_decode_rows(&mut doc, &[r(1, 512), r(1, 1024), r(2, 512)], "t").unwrap_err();
        assert_eq!(
            e,
            AttentionRowsError::Hole {
                batch: 2,
                context: 1024,
                cell: cell()
            }
        );
        assert!(e
            .to_string()
            .starts_with("no run at batch 2 and context 1024 (bf16 32/8/128"));
        let e = merge_decode_rows(&mut doc, &[r(1, 512), r(1, 512)], "t").unwrap_err();
        assert_eq!(
            e,
            AttentionRowsError::TwoRuns {
                batch: 1,
                context: 512,
                cell: cell()
            }
        );
        let mut ragged = report(2, 512, 16, 1.0);
        ragged["total_tokens"] = 700.into();
        assert_eq!(
            AttentionRun::from_report(&ragged).unwrap_err(),
            AttentionRowsError::Ragged {
                tokens: 700,
                batch: 2,
                context: 512
            }
        );
        let mut f32 = report(1, 512, 16, 1.0);
        f32["kv_dtype"] = "f32".into();
        assert_eq!(
            AttentionRun::from_report(&f32).unwrap_err(),
            AttentionRowsError::KvDtype(Some("f32".into()))
        );
        let mut slow = report(1, 512, 16, 1.0);
        slow["paged_us"] = 0.0.into();
        let e = AttentionRun::from_report(&slow).unwrap_err();
        assert_eq!(
            e.to_string(),
            "an attention report without a positive \"paged_us\""
        );
        assert!(merge_decode_rows(&mut json!({}), &[r(1, 512)], "t").is_err());
    }
}
