//! `--report-format llmd` (sim engine, sim cluster) and serve's `--llmd-report`: llm-d's
//! benchmark report v0.2.1, checked against its package's own validator as recorded by
//! scripts/record-llmd-schema (llmd-benchmark-report 0.2.1 from PyPI, never a CI dependency):
//! the JSON schema it writes (structure, types, bounds, no unknown fields outside the free
//! ones), and the units its Python validators accept for each statistic we write.

use crate::cli;
use crate::serve_common;

use cli::{json, own_error, pagedkv};
use pagedkv::report::llmd::{benchmark_report, EngineStack};
use pagedkv::serve::summary::{read_log, summarize, ServedRun};
use serde_json::{json, Value};
use serve_common::*;
use std::collections::BTreeMap;

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/data/llmd/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Every statistic of a report (an object with units and a mean), by its path (array indices
/// as `[]`), as scripts/record-llmd-schema names them.
fn statistics(v: &Value, path: &mut Vec<String>, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            if let (Some(Value::String(u)), true) = (m.get("units"), m.contains_key("mean")) {
                out.push((path.join("."), u.clone()));
            }
            for (k, x) in m {
                path.push(k.clone());
                statistics(x, path, out);
                path.pop();
            }
        }
        Value::Array(a) => {
            for x in a {
                path.push("[]".into());
                statistics(x, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

/// What the package's validator would say of `report`: nothing when it passes.
fn problems(report: &Value) -> Vec<String> {
    let validator = jsonschema::validator_for(&fixture("br_v0_2_1.schema.json")).unwrap();
    let mut out: Vec<String> = validator
        .iter_errors(report)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    let allowed: BTreeMap<String, Vec<String>> =
        serde_json::from_value(fixture("units.json")).unwrap();
    let mut stats = Vec::new();
    statistics(report, &mut Vec::new(), &mut stats);
    for (path, units) in stats {
        match allowed.get(&path) {
            None => out.push(format!("{path}: a statistic the recording has not seen")),
            Some(a) if !a.contains(&units) => {
                out.push(format!("{path}: units {units} not in {a:?}"))
            }
            Some(_) => {}
        }
    }
    out
}

fn valid(report: &Value) {
    let p = problems(report);
    assert!(p.is_empty(), "{p:#?}\n{report:#}");
}

#[test]
fn sim_engine_writes_a_report_the_package_accepts_with_its_own_figures() {
    let args = [
        "sim",
        "engine",
        "--poisson",
        "4",
        "--requests",
        "60",
        "--slo-ttft",
        "0.5",
    ];
    let report = json(&pagedkv(
        &[&args[..], &["--report-format", "llmd"]].concat(),
    ));
    valid(&report);
    // The same run in the harness's own JSON: the report carries its figures.
    let own = json(&pagedkv(&[&args[..], &["--json"]].concat()));
    let run = &own["runs"][0];
    let agg = &report["results"]["request_performance"]["aggregate"];
    assert_eq!(agg["requests"]["total"], 60);
    assert_eq!(
        agg["latency"]["time_to_first_token"]["mean"],
        run["ttft"]["mean"]
    );
    assert_eq!(agg["latency"]["request_latency"]["p99"], run["e2e"]["p99"]);
    assert_eq!(
        agg["throughput"]["request_rate"]["mean"],
        run["requests_per_time"]
    );
    let extra = &report["results"]["observability"]["pagedkv"];
    assert_eq!(extra["slo_attainment"], run["slo_attainment"]);
    assert_eq!(extra["goodput_requests_per_s"], run["goodput"]);
    let stack = &report["scenario"]["stack"][0]["standardized"];
    assert_eq!(
        (&stack["tool"], &stack["tool_version"]),
        (&json!("vllm"), &json!("0.33.0"))
    );
    assert_eq!(
        report["scenario"]["load"]["standardized"]["source"],
        "random"
    );
}

#[test]
fn sim_cluster_writes_a_report_the_package_accepts() {
    let report = json(&pagedkv(&[
        "sim",
        "cluster",
        "--poisson",
        "8",
        "--requests",
        "80",
        "--replicas",
        "2",
        "--router",
        "prefix-aware",
        "--report-format",
        "llmd",
    ]));
    valid(&report);
    let components = report["results"]["observability"]["components"]
        .as_array()
        .unwrap();
    assert_eq!(components.len(), 2);
    assert_eq!(
        report["scenario"]["stack"][1]["standardized"]["kind"],
        "generic"
    );
    assert_eq!(
        report["scenario"]["stack"][0]["standardized"]["replicas"],
        2
    );
}

#[test]
fn runs_a_report_cannot_hold_are_refused_in_one_line() {
    let e = own_error(&pagedkv(&[
        "sim",
        "engine",
        "--poisson",
        "4",
        "--requests",
        "10",
        "--block-sizes",
        "16,32",
        "--report-format",
        "llmd",
    ]));
    assert!(e.contains("one run"), "{e}");
    let e = own_error(&pagedkv(&[
        "sim",
        "engine",
        "--poisson",
        "4",
        "--requests",
        "10",
        "--clock",
        "steps",
        "--report-format",
        "llmd",
    ]));
    assert!(e.contains("seconds"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_runs_summary_is_a_report_the_package_accepts() {
    let log = Buffer::default();
    let mut cfg = config(settings(4096, 1 << 12, 256));
    cfg.request_log = Some(log.sink());
    let server = start(cfg).await;
    let (c, a) = (client(), server.addrs[0]);
    for i in 0..20 {
        let ask = json!({"prompt": format!("served {i}"), "max_tokens": 1 + i % 6});
        assert_eq!(
            post(&c, a, "/v1/completions", &ask.to_string()).await.0,
            200
        );
    }
    assert_eq!(
        post(&c, a, "/v1/completions", r#"{"prompt": 5}"#).await.0,
        400
    );
    let refused = server.refused.load(std::sync::atomic::Ordering::Relaxed);
    server.stop();
    server.wait().await.unwrap();
    let text = log.lines().join("\n");
    let run = summarize(
        &read_log(&text).unwrap(),
        ServedRun {
            engine: EngineStack {
                tool: "vllm".into(),
                tool_version: "0.33.0".into(),
                model: MODEL.into(),
                accelerator: "h200".into(),
                tp: 1,
                replicas: 1,
                native: json!({}),
            },
            refused,
            time_scale: 1000.0,
            uid: "test".into(),
        },
    );
    let report = benchmark_report(&run);
    valid(&report);
    let requests = &report["results"]["request_performance"]["aggregate"]["requests"];
    assert_eq!(
        (&requests["total"], &requests["failures"]),
        (&json!(21), &json!(1))
    );
    let out_len = &requests["output_length"];
    // 1 + i % 6 over i < 20: 1..6 three times, then 1, 2.
    assert_eq!(out_len["max"], 6.0);
    assert_eq!(out_len["mean"], (3 * 21 + 3) as f64 / 20.0);
}

#[test]
fn the_recorded_validator_rejects_what_the_package_rejects() {
    let good = json(&pagedkv(&[
        "sim",
        "engine",
        "--poisson",
        "4",
        "--requests",
        "20",
        "--report-format",
        "llmd",
    ]));
    valid(&good);
    let broken = |f: &dyn Fn(&mut Value)| {
        let mut r = good.clone();
        f(&mut r);
        problems(&r)
    };
    // An unknown field where the schema forbids extra ones; none under observability, where it
    // allows them.
    assert!(
        !broken(&|r| r["results"]["request_performance"]["aggregate"]["speed"] = json!(1))
            .is_empty()
    );
    assert!(broken(&|r| r["results"]["observability"]["anything"] = json!(1)).is_empty());
    // A missing required field, a negative count, a unit of the wrong kind.
    assert!(!broken(&|r| drop(r["run"].as_object_mut().unwrap().remove("uid"))).is_empty());
    assert!(!broken(
        &|r| r["results"]["request_performance"]["aggregate"]["requests"]["total"] = json!(-1)
    )
    .is_empty());
    let p = broken(&|r| {
        r["results"]["request_performance"]["aggregate"]["latency"]["time_to_first_token"]
            ["units"] = json!("tokens/s")
    });
    assert!(p.iter().any(|e| e.contains("units tokens/s")), "{p:?}");
}
