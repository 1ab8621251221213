//! What a sweep reports ([`SweepReport`], also the JSON), and the sentences and figures the text
//! report derives from it.

use super::{
    end_to_end, MemoryBandwidth, MemoryConfig, ModelShape, ProbeOptions, SweepRow,
    VLLM_DEFAULT_BLOCK_SIZE,
};
use serde::Serialize;

/// Everything a sweep reports.
#[derive(Debug, Clone, Serialize)]
pub struct SweepReport {
    pub device: String,
    /// From the end-to-end simulation when it ran ([`end_to_end::pick`]), else from the proxy.
    pub recommended_block_size: Option<usize>,
    /// What the throughput proxy alone would recommend.
    pub proxy_recommended_block_size: Option<usize>,
    pub vllm_default_block_size: usize,
    /// The bandwidth measurement's typical noise across rounds, relative (at least 1%).
    pub noise_tolerance: f64,
    /// Block sizes whose proxy is within that noise of the best: not told apart by this run.
    pub within_noise_block_sizes: Vec<usize>,
    pub model: ModelShape,
    pub pool_bytes: u64,
    /// How the pool size was chosen.
    pub pool_source: String,
    pub workload: String,
    pub requests: usize,
    /// The workload's mean prompt and output tokens (the text report's; not in the JSON, whose
    /// keys stay as they were).
    #[serde(skip)]
    pub mean_prompt_tokens: f64,
    #[serde(skip)]
    pub mean_output_tokens: f64,
    pub config: MemoryConfig,
    pub probe: Option<ProbeOptions>,
    pub proxy: String,
    /// The end-to-end runs (empty when skipped) and the recommendation made from them.
    pub end_to_end: Vec<end_to_end::EndToEnd>,
    pub end_to_end_pick: Option<end_to_end::EndToEndPick>,
    /// What the end-to-end runs simulated, and where their efficiency came from.
    pub end_to_end_setup: Option<String>,
    pub notes: Vec<String>,
    pub rows: Vec<SweepRow>,
}

/// One line comparing the end-to-end recommendation with vLLM's default; `None` when the
/// end-to-end runs were skipped.
pub fn end_to_end_line(report: &SweepReport) -> Option<String> {
    let pick = report.end_to_end_pick.as_ref()?;
    let find = |bs| report.end_to_end.iter().find(|e| e.block_size == bs);
    let (rec, def) = (find(pick.block_size)?, find(VLLM_DEFAULT_BLOCK_SIZE)?);
    let pct = |a: f64, b: f64| 100.0 * (a / b - 1.0);
    let figures = |e: &end_to_end::EndToEnd| {
        format!(
            "{:.0} output tok/s, p99 TTFT {:.1} ms, p99 TPOT {:.2} ms",
            e.nominal.output_tokens_per_s,
            1e3 * e.nominal.p99_ttft_s,
            1e3 * e.nominal.p99_tpot_s
        )
    };
    // Each block size's runs span its own noise band (end_to_end.rs).
    let band = if rec.block_size == def.block_size {
        format!(
            "attention efficiency ±{:.0}% at 16, each block size its own",
            100.0 * def.noise
        )
    } else {
        format!(
            "attention efficiency ±{:.0}% at {}, ±{:.0}% at 16",
            100.0 * rec.noise,
            rec.block_size,
            100.0 * def.noise
        )
    };
    let mut line = if pick.beats_default {
        format!(
            "end to end: recommended block size {} beats vLLM's 16 beyond this run's noise ({band}): {} vs {} ({:+.1}% throughput, {:+.1}% p99 TPOT)",
            rec.block_size,
            figures(rec),
            figures(def),
            pct(rec.nominal.output_tokens_per_s, def.nominal.output_tokens_per_s),
            pct(rec.nominal.p99_tpot_s, def.nominal.p99_tpot_s),
        )
    } else {
        let best = report
            .end_to_end
            .iter()
            .max_by(|a, b| {
                a.nominal
                    .output_tokens_per_s
                    .total_cmp(&b.nominal.output_tokens_per_s)
                    .then(b.nominal.p99_tpot_s.total_cmp(&a.nominal.p99_tpot_s))
            })
            .unwrap_or(def);
        format!(
            "end to end: vLLM's 16 is as good as any: no block size beats it beyond this run's noise ({band}); 16: {}; nominally best {}: {} ({:+.1}% throughput, {:+.1}% p99 TPOT)",
            figures(def),
            best.block_size,
            figures(best),
            pct(best.nominal.output_tokens_per_s, def.nominal.output_tokens_per_s),
            pct(best.nominal.p99_tpot_s, def.nominal.p99_tpot_s),
        )
    };
    if !pick.tied_with_default.is_empty() {
        let tied: Vec<String> = pick
            .tied_with_default
            .iter()
            .map(|b| b.to_string())
            .collect();
        line += &format!("; not told apart from 16: {}", tied.join(", "));
    }
    Some(line)
}

/// One line comparing the proxy's pick with vLLM's default.
pub fn comparison_line(report: &SweepReport) -> String {
    let find = |bs| report.rows.iter().find(|r| r.block_size == bs);
    let (Some(rec), Some(def)) = (
        report.proxy_recommended_block_size.and_then(find),
        find(VLLM_DEFAULT_BLOCK_SIZE),
    ) else {
        return "no recommendation: no block size has a positive throughput proxy".into();
    };
    let pct = |a: f64, b: f64| 100.0 * (a / b - 1.0);
    let mut line = format!(
        "proxy: block size {} vs vLLM's {}: {:.1} vs {:.1} concurrent requests ({:+.1}%), waste {:.2}% vs {:.2}%",
        rec.block_size,
        def.block_size,
        rec.concurrent_requests,
        def.concurrent_requests,
        pct(rec.concurrent_requests, def.concurrent_requests),
        rec.internal_waste_pct,
        def.internal_waste_pct,
    );
    if let (Some(a), Some(b)) = (rec.efficiency(), def.efficiency()) {
        let what = if rec.attention_frac_of_stream.is_some() {
            "attention"
        } else {
            "read-only gather"
        };
        line += &format!(
            ", {what} at {:.0}% vs {:.0}% of stream",
            100.0 * a,
            100.0 * b
        );
    }
    line += &format!(", proxy {:+.1}%", pct(rec.proxy, def.proxy));
    let others: Vec<String> = report
        .within_noise_block_sizes
        .iter()
        .filter(|&&b| b != rec.block_size)
        .map(|b| b.to_string())
        .collect();
    if !others.is_empty() {
        line += &format!(
            "; within this run's noise (±{:.0}%) of it: {}",
            100.0 * report.noise_tolerance,
            others.join(", ")
        );
    }
    line
}

/// One memory setting's limits over the sweep: the middle value (the upper middle for an even
/// count) of the measurements taken next to each block size's gathers; `None` when none.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitMedians {
    pub memory: String,
    pub copy_gbps: Option<f64>,
    pub stream_gbps: Option<f64>,
    pub convert_stream_gbps: Option<f64>,
}

/// The limits of every memory setting the first row measured, in its order.
pub fn limit_medians(report: &SweepReport) -> Vec<LimitMedians> {
    let labels: Vec<String> = report
        .rows
        .first()
        .map(|r| r.memory.iter().map(|x| x.memory.clone()).collect())
        .unwrap_or_default();
    labels
        .into_iter()
        .enumerate()
        .map(|(i, memory)| {
            let middle = |f: &dyn Fn(&MemoryBandwidth) -> Option<f64>| {
                let mut v: Vec<f64> = report
                    .rows
                    .iter()
                    .filter_map(|r| r.memory.get(i).and_then(f))
                    .collect();
                v.sort_by(f64::total_cmp);
                (!v.is_empty()).then(|| v[v.len() / 2])
            };
            LimitMedians {
                memory,
                copy_gbps: middle(&|m| Some(m.copy_gbps)),
                stream_gbps: middle(&|m| Some(m.stream_gbps)),
                convert_stream_gbps: middle(&|m| m.convert_stream_gbps),
            }
        })
        .collect()
}

/// What changes from one KV cache dtype to the next (`sweep --kv-dtype f16,fp8_e4m3`).
#[derive(Debug, Clone, Serialize)]
pub struct KvDtypeSummary {
    /// Per dtype: the recommended block size and the concurrent requests at vLLM's 16.
    pub per_dtype: Vec<KvDtypeRow>,
    /// Whether any dtype's recommendation differs from the first's.
    pub recommendation_moves: bool,
    /// The sentence the text report ends with.
    pub line: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct KvDtypeRow {
    pub kv_dtype: crate::kv::Dtype,
    pub kv_bytes_per_token: u64,
    pub recommended_block_size: Option<usize>,
    pub concurrent_requests_at_16: Option<f64>,
}

/// The summary of one sweep per KV dtype, the first the reference.
pub fn kv_dtype_summary(reports: &[SweepReport]) -> KvDtypeSummary {
    let per_dtype: Vec<KvDtypeRow> = reports
        .iter()
        .map(|r| KvDtypeRow {
            kv_dtype: r.model.dtype,
            kv_bytes_per_token: r.model.kv_bytes_per_token(),
            recommended_block_size: r.recommended_block_size,
            concurrent_requests_at_16: r
                .rows
                .iter()
                .find(|row| row.block_size == VLLM_DEFAULT_BLOCK_SIZE)
                .map(|row| row.concurrent_requests),
        })
        .collect();
    let first = per_dtype.first().and_then(|r| r.recommended_block_size);
    let moves = per_dtype.iter().any(|r| r.recommended_block_size != first);
    let parts: Vec<String> = per_dtype
        .iter()
        .map(|r| {
            let block = r
                .recommended_block_size
                .map_or("none".to_string(), |b| b.to_string());
            let conc = r.concurrent_requests_at_16.map_or(String::new(), |c| {
                format!(", {c:.0} concurrent requests at 16")
            });
            format!(
                "{} → {block} ({} KiB per token{conc})",
                r.kv_dtype,
                r.kv_bytes_per_token / 1024
            )
        })
        .collect();
    let verdict = if moves {
        "the recommended block size moves"
    } else {
        "the recommended block size does not move"
    };
    KvDtypeSummary {
        line: format!("per KV cache dtype: {}; {verdict}", parts.join("; ")),
        per_dtype,
        recommendation_moves: moves,
    }
}
