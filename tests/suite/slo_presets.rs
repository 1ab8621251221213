//! SLO presets and Mooncake's TBT: the engine's TBT against token times observed from outside it;
//! each preset as `sim engine` resolves it, overrides named, bad input refused; the sweep's preset
//! per trace and its first line when no block size meets the SLOs; docs/sweep.md's table against
//! the presets' own words. Small workloads: about two seconds in all (debug build).

use crate::cli;

use pagedkv::sim::engine::{
    Clock, Distribution, Engine, EngineConfig, Recording, Slo, SloPreset, SloTargets,
};
use pagedkv::workload::serving::{Prompt, ServingRequest};
use rand::{Rng, SeedableRng};
use std::collections::HashMap;

/// The mean of the longest ceil(n / 10) of `times`' n intervals, by sorting them all.
fn tbt_by_sorting(times: &[f64]) -> Option<f64> {
    let mut gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_by(|a, b| b.total_cmp(a));
    let k = gaps.len().div_ceil(10);
    (k > 0).then(|| gaps[..k].iter().sum::<f64>() / k as f64)
}

/// Random small workloads under a step clock, pools small enough to preempt (recomputing, so a
/// preempted request's next token comes late), synchronous and async: every output token's time
/// is read from outside the engine after each step (a token sampled in step `s` is stamped
/// `s + 1`), and each request's TBT, the report's TBT distribution and the share within a TBT
/// objective are recomputed from those times.
#[test]
fn tbt_matches_token_times_observed_outside_the_engine() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(2025);
    let mut preempted_runs = 0;
    for case in 0..60 {
        let n = rng.random_range(1..12);
        let reqs: Vec<ServingRequest> = (0..n)
            .map(|i| ServingRequest {
                id: format!("r{i}"),
                arrival: f64::from(rng.random_range(0..20u32)),
                prompt: Prompt::Unique(rng.random_range(1..40)),
                output_len: rng.random_range(1..60),
                priority: 0,
            })
            .collect();
        let block_size = 4;
        let peak = reqs
            .iter()
            .map(|r| r.prompt.len() + r.output_len as usize)
            .max()
            .unwrap();
        let cfg = EngineConfig {
            block_size: pagedkv::kv::BlockSize::new(block_size as u64).unwrap(),
            num_gpu_blocks: peak.div_ceil(block_size) + 1 + rng.random_range(0..12),
            max_num_seqs: 8,
            max_num_batched_tokens: 32,
            async_scheduling: case % 2 == 1,
            ..EngineConfig::default()
        };
        let threshold = 2.0;
        let slo = Slo {
            tbt: Some(threshold),
            ..Slo::default()
        };
        let rec = Recording {
            steps: true,
            timeline: false,
        };
        let mut e = Engine::new(cfg, &reqs, Clock::Steps, rec, slo).unwrap();
        let mut times: HashMap<String, Vec<f64>> = HashMap::new();
        let mut seen = vec![0u32; n];
        while e.step().unwrap() {
            let at = e.last_record().unwrap().step as f64 + 1.0;
            for (i, r) in e.scheduler().reqs.iter().enumerate() {
                for _ in seen[i]..r.num_output {
                    times.entry(r.id.clone()).or_default().push(at);
                }
                seen[i] = r.num_output;
            }
        }
        let report = e.report();
        assert_eq!(report.completed, n);
        preempted_runs += usize::from(report.preemption.preemptions > 0);
        let mut want = Vec::new();
        let mut within = 0;
        for r in &e.scheduler().reqs {
            let t = times.get(&r.id).cloned().unwrap_or_default();
            assert_eq!(t.len(), r.num_output as usize, "case {case} {}", r.id);
            let oracle = tbt_by_sorting(&t);
            assert_eq!(r.gaps.tbt(), oracle, "case {case} {}: {t:?}", r.id);
            want.extend(oracle);
            within += usize::from(oracle.is_none_or(|x| x <= threshold));
        }
        assert_eq!(report.latency.tbt, Distribution::of(want), "case {case}");
        let share = report.objectives.slo_attainment_each.unwrap().tbt.unwrap();
        assert_eq!(share, within as f64 / n as f64, "case {case}");
        assert_eq!(report.objectives.slo_attainment, Some(share));
    }
    assert!(preempted_runs >= 5, "only {preempted_runs} runs preempted");
}

fn engine(args: &[&str]) -> std::process::Output {
    cli::pagedkv(&[&["sim", "engine", "--requests", "50"], args].concat())
}

/// `sim engine --json --slo P`'s resolved SLOs.
fn resolved(args: &[&str]) -> serde_json::Value {
    let v = cli::json(&engine(&[&["--json"], args].concat()));
    v["slo"].clone()
}

#[test]
fn each_preset_as_the_cli_resolves_it() {
    let t = |v: &serde_json::Value, k: &str| v["targets"][k].as_f64();
    let m = resolved(&["--slo", "mlperf"]);
    assert_eq!((t(&m, "ttft_s"), t(&m, "tpot_s")), (Some(2.0), Some(0.1)));
    assert_eq!(
        (t(&m, "attainment"), &m["targets"]["judged"]),
        (Some(0.99), &"each_objective".into())
    );
    assert!(m["source"].as_str().unwrap().contains("mlperf.conf"));
    // DistServe's row by the simulated model's size.
    for (model, ttft, tpot, row) in [
        ("llama-3.1-8b", 0.25, 0.1, "OPT-13B"),
        ("llama-3.1-70b", 0.4, 0.1, "OPT-66B"),
    ] {
        let d = resolved(&["--slo", "distserve-chatbot", "--model", model, "--tp", "4"]);
        assert_eq!(
            (t(&d, "ttft_s"), t(&d, "tpot_s")),
            (Some(ttft), Some(tpot)),
            "{model}"
        );
        assert_eq!(t(&d, "attainment"), Some(0.9));
        assert!(d["set_for"].as_str().unwrap().starts_with(row), "{d}");
    }
    for (name, tbt) in [
        ("mooncake", 0.2),
        ("mooncake-100", 0.1),
        ("mooncake-200", 0.2),
        ("mooncake-300", 0.3),
    ] {
        let k = resolved(&["--slo", name]);
        assert_eq!(
            (t(&k, "ttft_s"), t(&k, "tbt_s")),
            (Some(30.0), Some(tbt)),
            "{name}"
        );
        assert!(k["targets"]["tpot_s"].is_null());
        assert_eq!(t(&k, "attainment"), Some(0.9));
    }
    // The flags alone are custom, with no value of their own added.
    let c = resolved(&["--slo-tpot", "0.05"]);
    assert_eq!(c["preset"], "custom");
    assert!(c["targets"]["ttft_s"].is_null() && t(&c, "tpot_s") == Some(0.05));
    // No SLO flag: no SLOs, as before.
    let v = cli::json(&engine(&["--json"]));
    assert!(v.get("slo").is_none() && v["runs"][0]["goodput"].is_null());
    // The TBT distribution is always reported.
    assert!(v["runs"][0]["tbt"]["p99"].as_f64().unwrap() > 0.0);
}

#[test]
fn an_explicit_value_overrides_the_preset_and_the_report_says_so() {
    let k = resolved(&["--slo", "mooncake", "--slo-ttft", "10", "--slo-tbt", "0.2"]);
    assert_eq!(k["targets"]["ttft_s"], 10.0);
    assert_eq!(k["overrides"], serde_json::json!(["--slo-ttft"]));
    let out = engine(&["--slo", "mooncake", "--slo-ttft", "10"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        text.contains("SLOs: mooncake (--slo): TTFT ≤ 10 s and TBT ≤ 200 ms for ≥ 90% of requests")
            && text.contains("--slo-ttft override the preset")
            && text.contains("TBT p50/p90/p99 ms"),
        "{text}"
    );
    let m = resolved(&["--slo", "mlperf", "--slo-attainment", "0.9"]);
    assert_eq!(m["targets"]["judged"], "joint");
    assert_eq!(m["overrides"], serde_json::json!(["--slo-attainment"]));
    // sim cluster takes the same flags and prints the same line.
    let out = cli::pagedkv(&[
        "sim",
        "cluster",
        "--requests",
        "40",
        "--replicas",
        "1",
        "--router",
        "round-robin",
        "--slo",
        "mooncake-100",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("SLOs: mooncake-100 (--slo): TTFT ≤ 30 s and TBT ≤ 100 ms"),
        "{text}"
    );
    assert!(text.contains("within the SLOs; ≥ 90.0% asked:"), "{text}");
}

#[test]
fn bad_slo_input_is_one_line_and_exit_code_2() {
    let err = cli::clap_error(&engine(&["--slo", "mooncake-400"]));
    assert!(
        err.contains("possible values: mlperf, distserve-chatbot, mooncake"),
        "{err}"
    );
    for (args, want) in [
        (
            vec!["--slo", "custom"],
            "--slo custom needs --slo-ttft, --slo-tpot or --slo-tbt",
        ),
        (
            vec!["--slo", "mooncake", "--slo-tbt", "0"],
            "--slo-tbt must be a positive number, got 0",
        ),
        (
            vec!["--slo", "mlperf", "--slo-attainment", "2"],
            "--slo-attainment must be in (0, 1], got 2",
        ),
    ] {
        let err = cli::own_error(&engine(&args));
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let err = cli::own_error(&cli::pagedkv(&[
        "sweep",
        "--no-bandwidth",
        "--requests",
        "20",
        "--slo-tbt",
        "nan",
    ]));
    assert!(err.contains("--slo-tbt must be a positive number"), "{err}");
}

/// `pagedkv sweep ARGS --json` on a few requests, no bandwidth probes.
fn sweep_json(args: &[&str]) -> serde_json::Value {
    let base = ["sweep", "--no-bandwidth", "--quick", "--json"];
    cli::json(&cli::pagedkv_with_env(
        &[&base[..], args].concat(),
        "PAGEDKV_LLC",
        "1M",
    ))
}

#[test]
fn the_sweep_takes_the_preset_that_fits_the_trace() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mooncake = format!("{root}/data/mooncake/conversation_trace.jsonl");
    let few = ["--requests", "24", "--capacity-requests", "24"];
    let v = sweep_json(&[&["--trace", &mooncake][..], &few].concat());
    let slo = &v["end_to_end_settings"]["slo"];
    assert_eq!(slo["preset"], "mooncake");
    assert!(
        slo["why"].as_str().unwrap().contains("Mooncake trace"),
        "{slo}"
    );
    assert_eq!(slo["targets"]["tbt_s"], 0.2);
    let v = sweep_json(&few);
    let slo = &v["end_to_end_settings"]["slo"];
    assert_eq!(slo["preset"], "custom");
    let default = SloTargets::default();
    assert_eq!(slo["targets"]["ttft_s"].as_f64(), default.ttft_s);
    assert_eq!(slo["targets"]["tpot_s"].as_f64(), default.tpot_s);
    assert!(slo["why"]
        .as_str()
        .unwrap()
        .contains("--slo mlperf --slo-attainment 0.9"));
}

/// A TTFT objective under the prefill time of the longer half of the prompts: no rate meets it
/// for 90% of requests, so the first line says so and the block sizes are ranked (the one rule,
/// recomputed here) by the share within it at the workload's own rate.
#[test]
fn when_nothing_meets_the_slos_line_one_says_so_and_ranks_by_attainment() {
    let args = [
        "--synthetic",
        "uniform:100,8000",
        "--synthetic-output",
        "fixed:4",
        "--requests",
        "40",
        "--slo-ttft",
        "0.05",
    ];
    let out = cli::pagedkv_with_env(
        &[&["sweep", "--no-bandwidth", "--quick"][..], &args].concat(),
        "PAGEDKV_LLC",
        "1M",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = text.lines().next().unwrap();
    assert!(
        first.contains("— no block size meets the SLOs (custom: TTFT ≤ 0.05 s and TPOT ≤ 100 ms")
            && first.contains("at any rate searched; ranked at the trace's own rate: "),
        "{first}"
    );
    let v = sweep_json(&args);
    assert_eq!(v["basis"], "SLO attainment at the trace's own rate");
    let mut figures = Vec::new();
    for e in v["end_to_end"].as_array().unwrap() {
        assert_eq!(e["capacity"]["rate_scale"], 0.0);
        let nominal = e["natural"]["attainment"].as_f64().unwrap();
        let lo = e["natural_attainment_low"].as_f64().unwrap().min(nominal);
        let hi = e["natural_attainment_high"].as_f64().unwrap().max(nominal);
        assert!(nominal > 0.0 && nominal < 0.9, "{e}");
        figures.push((e["block_size"].as_u64().unwrap(), nominal, lo, hi));
    }
    // The rule: 16 unless a low end beats 16's high end by more than the resolution; then the
    // highest nominal (ties: the larger block).
    let res = v["resolution"].as_f64().unwrap();
    let def = figures.iter().find(|f| f.0 == 16).unwrap().3;
    let pick = figures
        .iter()
        .filter(|f| f.2 > def * (1.0 + res))
        .max_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
        .map_or(16, |f| f.0);
    assert_eq!(v["recommended_block_size"].as_u64(), Some(pick));
}

#[test]
fn the_sweep_doc_states_every_preset_as_the_code_does() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/sweep.md")).unwrap();
    for p in [
        SloPreset::Mlperf,
        SloPreset::DistserveChatbot,
        SloPreset::Mooncake,
        SloPreset::Mooncake100,
        SloPreset::Mooncake200,
        SloPreset::Mooncake300,
        SloPreset::Custom,
    ] {
        let line = format!("| `{}` | {} |", p.name(), p.help());
        assert!(doc.contains(&line), "docs/sweep.md lacks: {line}");
    }
}
