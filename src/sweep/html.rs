//! `index.html`: the sweep's report to open in a browser, offline: the verdict, the setting, the
//! table with its key, the plots (linked relatively: the SVGs written beside it) and the run's
//! settings. The words are the text report's ([`super::text`]).

use super::plot_files::plots;
use super::{text, SweepReport};
use crate::report::escape_html;

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;\
padding:0 1em;color:#222}h1{font-size:1.35em;line-height:1.4}h2{font-size:1.1em;margin-top:2em}\
table{border-collapse:collapse;font-size:.9em;margin:.5em 0}th,td{padding:.25em .6em;\
border-bottom:1px solid #ddd;white-space:nowrap}th{text-align:left;background:#f4f4f4}\
td.num{text-align:right;font-variant-numeric:tabular-nums}tr.pick td{background:#eef6ee;\
font-weight:600}pre{background:#f8f8f8;padding:.8em;overflow-x:auto;font-size:.85em}\
img{max-width:100%;border:1px solid #eee;margin:.5em 0}.scroll{overflow-x:auto}";

fn lines(lines: &[String]) -> String {
    lines
        .iter()
        .map(|l| escape_html(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The report page.
pub fn index(report: &SweepReport) -> String {
    let verdict = text::verdict(report);
    let mut h = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>pagedkv sweep: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        escape_html(&verdict)
    );
    h += &format!("<h1>{}</h1>\n", escape_html(&verdict));
    h += "<p>";
    h += &text::setting(report)
        .iter()
        .map(|l| escape_html(l.trim_start()))
        .collect::<Vec<_>>()
        .join("<br>\n");
    h += "</p>\n";
    h += "<h2>Block sizes</h2>\n<div class=\"scroll\">\n";
    h += &mark_pick(text::table(report, false).to_html(), report);
    h += "</div>\n";
    h += &format!("<pre>{}</pre>\n", lines(&text::key(report, false)));
    h += &format!("<pre>{}</pre>\n", lines(&text::footer(report)));
    h += "<h2>Plots</h2>\n";
    for (file, what) in plots(report) {
        h += &format!("<p><a href=\"{file}\"><img src=\"{file}\" alt=\"{what}\"></a></p>\n");
    }
    h += "<h2 id=\"every\">Every column</h2>\n<div class=\"scroll\">\n";
    h += &mark_pick(text::table(report, true).to_html(), report);
    h += "</div>\n";
    h += &format!("<pre>{}</pre>\n", lines(&text::key(report, true)));
    h += "<h2 id=\"settings\">Run settings</h2>\n";
    let settings = serde_json::json!({
        "memory": report.setting.config,
        "probe": report.probe,
        "end_to_end": report.e2e.end_to_end_settings,
        "pool_bytes": report.setting.pool_bytes,
        "pool": report.setting.pool_source,
        "workload": report.setting.workload,
        "requests": report.setting.requests,
    });
    h += &format!(
        "<pre>{}</pre>\n",
        escape_html(&serde_json::to_string_pretty(&settings).unwrap_or_default())
    );
    h += "<p>Files beside this page: sweep.csv, sweep.json (every figure), the SVG plots.</p>\n";
    h + "</body>\n</html>\n"
}

/// Highlights the recommended row (the one whose marker cell names it).
fn mark_pick(table: String, report: &SweepReport) -> String {
    let Some(pick) = report.verdict.recommended_block_size else {
        return table;
    };
    table.replace(
        &format!("<tr><td class=\"num\">{pick}</td>"),
        &format!("<tr class=\"pick\"><td class=\"num\">{pick}</td>"),
    )
}
