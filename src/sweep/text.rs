//! The sweep's report in words: the verdict (the first line), the setting, the table (the columns
//! that carry the answer, or all of them), the key that says what each column is and against
//! which limit, and the lines under it. The CLI prints these; `index.html` shows the same.

use super::end_to_end::none_meets;
use super::{limit_medians, SweepReport, SweepRow};
use crate::kv::BlockSize;
use crate::report::Table;
use crate::sim::engine::SloTargets;

/// The width the default text report fits in.
pub const WIDTH: usize = 100;

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{:.0}%", 100.0 * v))
}

fn row_at(report: &SweepReport, block_size: BlockSize) -> Option<&SweepRow> {
    report.rows.iter().find(|r| r.block_size == block_size)
}

/// Requests per second with as many digits as its size needs (3 significant, at least 1).
fn rps(x: f64) -> String {
    let digits = if x >= 100.0 {
        0
    } else if x >= 10.0 {
        1
    } else {
        2
    };
    format!("{x:.digits$}")
}

/// The first line of the report: `recommended block size: N (vLLM's default: 16) — why`.
pub fn verdict(report: &SweepReport) -> String {
    if report.emulated {
        return format!(
            "recommended block size: none (vLLM's default: {}) — measured on the emulated GPU, \
             whose timings are the CPU's, not a GPU's",
            report.verdict.vllm_default_block_size
        );
    }
    let Some(pick) = &report.verdict.recommendation else {
        return "recommended block size: none (vLLM's default: 16) — the sweep has no row for 16"
            .into();
    };
    let why = if report.e2e.end_to_end.is_empty() {
        proxy_clause(report, pick.block_size)
    } else if none_meets(&report.e2e.end_to_end) {
        attainment_clause(report, pick.block_size, pick.beats_default)
    } else {
        capacity_clause(report, pick.block_size, pick.beats_default)
    };
    format!(
        "recommended block size: {} (vLLM's default: {}) — {why}",
        pick.block_size, report.verdict.vllm_default_block_size
    )
}

fn capacity_clause(report: &SweepReport, pick: BlockSize, beats: bool) -> String {
    let def = report.verdict.vllm_default_block_size;
    let (Some(p), Some(d)) = (row_at(report, pick), row_at(report, def)) else {
        return "no end-to-end figures".into();
    };
    let cap = |r: &SweepRow| r.capacity.slo_capacity_rps.unwrap_or(0.0);
    let band = |r: &SweepRow| {
        format!(
            "{}–{}",
            rps(r.capacity.slo_capacity_low_rps.unwrap_or(0.0)),
            rps(r.capacity.slo_capacity_high_rps.unwrap_or(0.0))
        )
    };
    if report.rows.iter().all(|r| cap(r) == 0.0) {
        return "no block size meets the SLOs at any rate searched".into();
    }
    if beats {
        format!(
            "it sustains {} req/s within the SLOs vs 16's {} ({:+.0}%), and beats 16 even across \
             the efficiency noise ({} vs {} req/s)",
            rps(cap(p)),
            rps(cap(d)),
            100.0 * (cap(p) / cap(d) - 1.0),
            band(p),
            band(d),
        )
    } else {
        let best = report
            .rows
            .iter()
            .max_by(|a, b| cap(a).total_cmp(&cap(b)))
            .unwrap_or(d);
        let best_note = if best.block_size == def || cap(best) <= cap(d) {
            String::new()
        } else {
            format!(", {} nominally {}", best.block_size, rps(cap(best)))
        };
        format!(
            "no block size sustains more load within the SLOs beyond the noise: 16 holds {} req/s \
             ({} at ±{:.0}% efficiency){best_note}",
            rps(cap(d)),
            band(d),
            100.0
                * report
                    .e2e
                    .end_to_end
                    .iter()
                    .find(|e| e.block_size == def)
                    .map_or(0.0, |e| e.noise),
        )
    }
}

/// No block size meets the SLOs at any rate: so it says, then ranks by the share within them at the
/// trace's own rate (the recommendation's figure then).
fn attainment_clause(report: &SweepReport, pick: BlockSize, beats: bool) -> String {
    let slo = report
        .e2e
        .end_to_end_settings
        .as_ref()
        .map_or_else(String::new, |s| {
            format!(" ({}: {})", s.slo.preset.name(), s.slo.targets.describe())
        });
    let of = |b: BlockSize| report.e2e.end_to_end.iter().find(|e| e.block_size == b);
    let (Some(p), Some(d)) = (of(pick), of(report.verdict.vllm_default_block_size)) else {
        return format!("no block size meets the SLOs{slo} at any rate searched");
    };
    let pct = |x: f64| format!("{:.1}%", 100.0 * x);
    let band = |e: &super::end_to_end::EndToEnd| {
        let b = e.attainment_banded();
        format!("{}–{}", pct(b.low), pct(b.high))
    };
    let ranking = if beats {
        format!(
            "{pick} reaches {} of requests within them vs 16's {}, beyond the noise ({} vs {})",
            pct(p.natural.attainment),
            pct(d.natural.attainment),
            band(p),
            band(d)
        )
    } else {
        let best = report
            .e2e
            .end_to_end
            .iter()
            .max_by(|a, b| a.natural.attainment.total_cmp(&b.natural.attainment))
            .unwrap_or(d);
        let best_note = if best.natural.attainment > d.natural.attainment {
            format!(
                ", {} nominally {}",
                best.block_size,
                pct(best.natural.attainment)
            )
        } else {
            String::new()
        };
        format!(
            "16 reaches {} of requests within them ({} at ±{:.0}% efficiency), none more beyond \
             the noise{best_note}",
            pct(d.natural.attainment),
            band(d),
            100.0 * d.noise
        )
    };
    format!(
        "no block size meets the SLOs{slo} at any rate searched; ranked at the trace's own rate: \
         {ranking}"
    )
}

fn proxy_clause(report: &SweepReport, pick: BlockSize) -> String {
    let (Some(p), Some(d)) = (
        row_at(report, pick),
        row_at(report, report.verdict.vllm_default_block_size),
    ) else {
        return "no proxy figures".into();
    };
    format!(
        "end to end skipped, so by the throughput proxy: {:.3} vs 16's {:.3} (noise ±{:.0}%)",
        p.proxy,
        d.proxy,
        100.0 * report.verdict.noise_tolerance
    )
}

/// The setting: device, model, pool (naming the GPU it sizes), workload, SLOs; one line each
/// (unwrapped: [`wrap`] them for a terminal).
pub fn setting(report: &SweepReport) -> Vec<String> {
    let m = &report.setting.model;
    let mut lines = vec![
        format!("device measured: {}", report.device),
        format!(
            "model: {} ({} layers, {} KV heads, head dim {}, {}; {} KiB of KV per token)",
            m.name,
            m.layers,
            m.kv_heads,
            m.head_dim,
            m.dtype,
            m.kv_bytes_per_token() / 1024
        ),
        format!(
            "KV pool: {:.2} GiB = {}",
            report.setting.pool_bytes as f64 / (1u64 << 30) as f64,
            report.setting.pool_source
        ),
        format!(
            "workload: {} — {} requests, mean prompt {:.0} tokens, mean output {:.0} tokens",
            report.setting.workload,
            report.setting.requests,
            report.setting.mean_prompt_tokens,
            report.setting.mean_output_tokens
        ),
    ];
    if let Some(s) = &report.e2e.end_to_end_settings {
        lines.push(format!(
            "{}; engine simulated on {}; capacity searched over the first {} requests (their own \
             rate {} req/s = rate scale 1){}",
            s.slo.describe(),
            report.setting.engine_gpu,
            s.capacity_requests,
            rps(s.base_rps),
            if s.spaced {
                " (arrivals spaced 1 s apart: the workload has no times)"
            } else {
                ""
            }
        ));
    }
    if let Some(c) = &report.e2e.step_times {
        lines.push(c.line.clone());
    }
    lines
}

/// A column: header, key text, and the cell of a row.
struct Column {
    header: String,
    key: String,
    cell: Box<dyn Fn(&SweepRow) -> String>,
}

fn col(header: &str, key: &str, cell: impl Fn(&SweepRow) -> String + 'static) -> Column {
    Column {
        header: header.into(),
        key: key.into(),
        cell: Box::new(cell),
    }
}

/// The table's columns: the default's carry the answer; `wide` adds every other figure.
fn columns(report: &SweepReport, wide: bool) -> Vec<Column> {
    let e2e = !report.e2e.end_to_end.is_empty();
    let mut c = layout_columns(wide);
    if wide {
        memory_columns(report, &mut c);
    }
    if report.rows.iter().any(|r| r.efficiency().is_some()) {
        c.push(efficiency_column(report));
    }
    if wide || !e2e {
        c.push(col(
            "proxy",
            "throughput proxy: concurrent × min(1, attn), over the best row (supporting only)",
            |r| format!("{:.3}", r.proxy),
        ));
    }
    if e2e {
        let slo = report
            .e2e
            .end_to_end_settings
            .as_ref()
            .map(|s| s.slo.targets)
            .unwrap_or_default();
        natural_rate_columns(report, wide, slo, &mut c);
        capacity_columns(wide, slo, &mut c);
    }
    c
}

/// The block layout's columns, exact from the trace: waste, and (`wide`) the pool, concurrency,
/// prefix sharing and block table.
fn layout_columns(wide: bool) -> Vec<Column> {
    let mut c = vec![col("block", "tokens per KV block", |r| {
        r.block_size.to_string()
    })];
    if wide {
        c.push(col(
            "pool blk",
            "blocks the KV pool holds at this size",
            |r| r.pool_blocks.to_string(),
        ));
    }
    c.push(col(
        "waste",
        "internal fragmentation: unused slots of the last blocks over all slots allocated, every \
         request of the trace at its full length (exact)",
        |r| format!("{:.2}%", r.pool.internal_waste_pct),
    ));
    if wide {
        c.push(col(
            "concurrent",
            "the pool's blocks over the mean blocks a request of the trace holds at full length (exact)",
            |r| format!("{:.1}", r.pool.concurrent_requests),
        ));
        c.push(col(
            "tw concurrent",
            "the same, weighting each request by how long it stays (replay at --decode-ms)",
            |r| opt(r.pool.tw_concurrent_requests, 1),
        ));
        c.push(col(
            "prefix lost",
            "shared prefix tokens (multi-turn conversations) in partial blocks, so not shared",
            |r| {
                r.pool
                    .prefix_share_lost_pct
                    .map_or("-".into(), |x| format!("{x:.2}%"))
            },
        ));
        c.push(col(
            "table B/req",
            "block table bytes per request (4-byte entries)",
            |r| format!("{:.0}", r.pool.block_table_bytes_per_request),
        ));
    }
    c
}

/// The bandwidth measured beside each row, per memory: stream limit, gathers and their shares
/// of it; then paged attention's read rate.
fn memory_columns(report: &SweepReport, c: &mut Vec<Column>) {
    let labels: Vec<String> = report
        .rows
        .first()
        .map(|r| r.memory.iter().map(|m| m.memory.clone()).collect())
        .unwrap_or_default();
    type Figure = fn(&super::MemoryBandwidth) -> Option<f64>;
    for (i, l) in labels.iter().enumerate() {
        let at = move |r: &SweepRow, f: Figure| r.memory.get(i).and_then(f);
        // Columns no row measured (`--quick` leaves the gathers out beside attention) go.
        let any = |f: Figure| report.rows.iter().any(|r| at(r, f).is_some());
        let gbps = move |f: Figure| move |r: &SweepRow| opt(at(r, f), 2);
        let share = move |f: Figure| move |r: &SweepRow| pct(at(r, f));
        c.push(col(
            &format!("stream {l}"),
            &format!("read-only stream limit measured next to this row's rates ({l}), GB/s"),
            gbps(|m| Some(m.stream_gbps)),
        ));
        if any(|m| m.gather_gbps) {
            c.push(col(
                &format!("gather {l}"),
                &format!("read-only paged gather, GB/s ({l})"),
                gbps(|m| m.gather_gbps),
            ));
            c.push(col(
                &format!("g/stream {l}"),
                "the gather over this row's stream limit",
                share(|m| m.gather_frac_of_stream),
            ));
        }
        if any(|m| m.gather_copy_frac_of_copy) {
            c.push(col(
                &format!("copy/copy {l}"),
                "paged gather copied out, over the copy limit (read + write) measured beside it",
                share(|m| m.gather_copy_frac_of_copy),
            ));
        }
    }
    c.push(col(
        "attn GB/s",
        "paged decode attention's KV read rate, GB/s",
        |r| opt(r.first_probe.attention_gbps, 2),
    ));
}

/// The answer's bandwidth figure: paged attention's (or the gather's) share of the stream
/// limit, ± its noise.
fn efficiency_column(report: &SweepReport) -> Column {
    let what = if report
        .rows
        .iter()
        .any(|r| r.first_probe.attention_frac_of_stream.is_some())
    {
        "paged attention's"
    } else {
        "the read-only paged gather's"
    };
    col(
        "attn ±noise",
        &format!(
            "{what} read rate as a share of the read-only stream limit measured beside it \
             on this device (median of the rounds), ± half its range over the rounds"
        ),
        |r| {
            let e = r
                .efficiency()
                .map_or("-".into(), |e| format!("{:.0}%", 100.0 * e));
            match r.first_probe.efficiency_noise {
                Some(n) => format!("{e} ±{:.0}", 100.0 * n),
                None => e,
            }
        },
    )
}

/// The end-to-end run at the trace's own rate (`wide`), and its SLO attainment when no block
/// size meets the SLOs.
fn natural_rate_columns(report: &SweepReport, wide: bool, slo: SloTargets, c: &mut Vec<Column>) {
    if wide {
        c.push(col(
            "nat tok/s",
            "at the trace's own rate: output tokens/s",
            |r| opt(r.at_trace_rate.e2e_output_tokens_per_s, 0),
        ));
        c.push(col(
            "nat TTFT ms",
            "at the trace's rate: p99 TTFT, ms",
            |r| opt(r.at_trace_rate.e2e_p99_ttft_s.map(|x| 1e3 * x), 1),
        ));
        c.push(col(
            "nat TPOT ms",
            "at the trace's rate: p99 TPOT, ms",
            |r| opt(r.at_trace_rate.e2e_p99_tpot_s.map(|x| 1e3 * x), 2),
        ));
        c.push(col(
            "nat KV",
            "at the trace's rate: peak share of the pool's blocks in use",
            |r| pct(r.at_trace_rate.e2e_kv_peak),
        ));
    }
    if wide || none_meets(&report.e2e.end_to_end) {
        c.push(col(
            "nat SLO",
            "at the trace's rate: share of all requests within the SLOs (the figure ranked when \
             no block size meets them at any rate)",
            |r| pct(r.at_trace_rate.e2e_slo_attainment),
        ));
    }
    if wide && slo.tbt_s.is_some() {
        c.push(col(
            "nat TBT ms",
            "at the trace's rate: p99 of Mooncake's TBT (a request's mean of its longest 10% \
             of token intervals), ms",
            |r| opt(r.at_trace_rate.e2e_p99_tbt_s.map(|x| 1e3 * x), 1),
        ));
    }
}

/// The SLO capacity the rate-scale search finds, its band, and the figures at it.
fn capacity_columns(wide: bool, slo: SloTargets, c: &mut Vec<Column>) {
    c.push(col(
        "SLO req/s",
        &format!(
            "SLO capacity: the highest request rate the simulated engine sustains with {} \
             (rate-scale search, nominal efficiency)",
            slo.describe()
        ),
        |r| r.capacity.slo_capacity_rps.map_or("-".into(), rps),
    ));
    if wide {
        c.push(col(
            "× rate",
            "the capacity as a multiple of the trace's rate",
            |r| {
                r.capacity
                    .slo_capacity_rate_scale
                    .map_or("-".into(), |x| format!("{x:.2}×"))
            },
        ));
    }
    c.push(col(
        "band req/s",
        "the capacity at efficiency × (1 − noise) and × (1 + noise): what the rule compares",
        |r| match (
            r.capacity.slo_capacity_low_rps,
            r.capacity.slo_capacity_high_rps,
        ) {
            (Some(a), Some(b)) => format!("{}–{}", rps(a), rps(b)),
            _ => "-".into(),
        },
    ));
    c.push(col(
        "goodput",
        "at the capacity: requests/s finished within the SLOs",
        |r| r.capacity.goodput_at_capacity_rps.map_or("-".into(), rps),
    ));
    c.push(col(
        "KV peak",
        "at the capacity: peak share of the pool's blocks in use",
        |r| pct(r.capacity.kv_peak_at_capacity),
    ));
    c.push(col(
        "preempt",
        "at the capacity: preemptions (recompute), count over the run",
        |r| {
            r.capacity
                .preemptions_at_capacity
                .map_or("-".into(), |x| x.to_string())
        },
    ));
}

/// The marker of a row: the recommended block size and vLLM's default.
pub fn marker(report: &SweepReport, r: &SweepRow) -> &'static str {
    let rec = Some(r.block_size) == report.verdict.recommended_block_size;
    let def = r.block_size == report.verdict.vllm_default_block_size;
    match (rec, def) {
        (true, true) => "◀ recommended = vLLM's",
        (true, false) => "◀ recommended",
        (false, true) => "◀ vLLM's default",
        _ => "",
    }
}

/// The table: the default's columns carry the answer; `wide` shows every figure.
pub fn table(report: &SweepReport, wide: bool) -> Table {
    let cols = columns(report, wide);
    let mut header: Vec<String> = cols.iter().map(|c| c.header.clone()).collect();
    header.push(String::new());
    let mut t = Table::new(header);
    for r in &report.rows {
        let mut cells: Vec<String> = cols.iter().map(|c| (c.cell)(r)).collect();
        cells.push(marker(report, r).into());
        t.row(cells);
    }
    t
}

/// What each column of [`table`] is, and against which limit, one wrapped entry per column.
pub fn key(report: &SweepReport, wide: bool) -> Vec<String> {
    let cols = columns(report, wide);
    let w = cols
        .iter()
        .map(|c| c.header.chars().count())
        .max()
        .unwrap_or(0);
    let mut lines = vec!["key:".to_string()];
    let indent = " ".repeat(w + 4);
    for c in &cols {
        let body = wrap_indent(&c.key, WIDTH - indent.len(), "");
        for (i, l) in body.iter().enumerate() {
            if i == 0 {
                lines.push(format!("  {:<w$}  {l}", c.header));
            } else {
                lines.push(format!("{indent}{l}"));
            }
        }
    }
    lines
}

/// The natural-rate line: what the trace's own rate gives, and whether it leaves the pool mostly
/// empty (then it cannot separate block sizes, which is why the capacity is searched).
pub fn natural_rate(report: &SweepReport) -> Option<String> {
    let e = report
        .e2e
        .end_to_end
        .iter()
        .find(|e| e.block_size == report.verdict.vllm_default_block_size)?;
    let peak = report
        .e2e
        .end_to_end
        .iter()
        .map(|e| e.natural.kv_peak)
        .fold(0.0, f64::max);
    let tok: Vec<f64> = report
        .e2e
        .end_to_end
        .iter()
        .map(|e| e.natural.output_tokens_per_s)
        .collect();
    let (lo, hi) = tok
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
    let tbt = report
        .e2e
        .end_to_end_settings
        .as_ref()
        .is_some_and(|s| s.slo.targets.tbt_s.is_some());
    let tbt = if tbt {
        format!(", p99 TBT {:.1} ms", 1e3 * e.natural.p99_tbt_s)
    } else {
        String::new()
    };
    let mut line = format!(
        "at the trace's own rate: 16 gives {:.0} output tok/s, p99 TTFT {:.0} ms, p99 TPOT {:.1} ms\
         {tbt}, {:.1}% of requests within the SLOs; every block size {:.0}–{:.0} output tok/s; the \
         pool peaks at {:.1}% full",
        e.natural.output_tokens_per_s,
        1e3 * e.natural.p99_ttft_s,
        1e3 * e.natural.p99_tpot_s,
        100.0 * e.natural.attainment,
        lo,
        hi,
        100.0 * peak
    );
    if peak < super::end_to_end::MOSTLY_EMPTY {
        line += " — mostly empty, so that rate cannot separate block sizes; the SLO capacity above does";
    }
    Some(line)
}

/// The limits, notes and the rule under the table.
pub fn footer(report: &SweepReport) -> Vec<String> {
    let mut lines = Vec::new();
    lines.push(report.verdict.rule.clone());
    if let Some(l) = natural_rate(report) {
        lines.push(l);
    }
    if let Some(s) = &report.e2e.end_to_end_setup {
        lines.push(format!("end to end: {s}"));
    }
    for l in limit_medians(report) {
        let mut parts = Vec::new();
        if let Some(copy) = l.copy_gbps {
            parts.push(format!("copy {copy:.2} GB/s (read + write)"));
        }
        parts.push(format!("read-only stream {} GB/s", opt(l.stream_gbps, 2)));
        if let Some(convert) = l.convert_stream_gbps {
            parts.push(format!(
                "scalar {}-to-f32 pass {convert:.2} GB/s (for reference, once per round)",
                report.setting.model.dtype
            ));
        }
        lines.push(format!(
            "limits ({}, median over block sizes): {}",
            l.memory,
            parts.join("; ")
        ));
    }
    for note in &report.notes {
        lines.push(format!("note: {note}"));
    }
    lines.iter().flat_map(|l| wrap(l, WIDTH)).collect()
}

/// `text` in lines of at most `width` characters, broken at spaces (a word longer than the width
/// stands alone); continuation lines are indented by two spaces.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let lead: String = text.chars().take_while(|c| *c == ' ').collect();
    wrap_indent(text, width, &format!("{lead}  "))
}

/// [`wrap`] with continuation lines indented by `indent`.
fn wrap_indent(text: &str, width: usize, indent: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    let lead: String = text.chars().take_while(|c| *c == ' ').collect();
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let n = line.chars().count();
        if n > 0 && n + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if line.is_empty() {
            line = if lines.is_empty() {
                lead.clone()
            } else {
                indent.to_string()
            };
            line += word;
        } else {
            line.push(' ');
            line += word;
        }
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_keeps_words_whole_and_lines_short() {
        let text = "one two three four five six seven eight nine ten eleven twelve";
        let lines = wrap(text, 20);
        assert!(lines.iter().all(|l| l.chars().count() <= 20), "{lines:?}");
        assert_eq!(lines[0], "one two three four");
        assert!(lines[1].starts_with("  five"));
        let joined: Vec<&str> = lines.iter().flat_map(|l| l.split_whitespace()).collect();
        assert_eq!(joined.join(" "), text);
        assert_eq!(wrap("", 10), vec![String::new()]);
        assert_eq!(wrap("abcdefghijkl", 5), vec!["abcdefghijkl".to_string()]);
    }
}
