//! A run spelled as a library spec (`sim::run_spec`), without clap: resolved and run, it gives the
//! JSON `pagedkv sim engine --json` prints for the same flags, and a bad spec the CLI's message.

use pagedkv::sim::run_spec::{resolve, RunSpec, SpecError};
use pagedkv::workload::trace::read_trace;
use std::process::Command;

const TRACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/azure_llm_2023_conv.csv");

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pagedkv"))
        .args(args)
        .output()
        .expect("pagedkv runs")
}

#[test]
fn a_spec_from_json_runs_as_the_cli_runs_its_flags() {
    let spec: RunSpec = serde_json::from_str(
        r#"{
            "preset": "h100",
            "block_size": 32,
            "max_num_seqs": 64,
            "enable_prefix_caching": false,
            "scheduling_policy": "sjf",
            "predict_sigma": 0.5,
            "step_times": "roofline",
            "tier": { "cpu_offload_gib": 1.0 },
            "slo": { "ttft_s": 2.0, "tpot_s": 0.05 }
        }"#,
    )
    .unwrap();
    let seed = 3;
    let resolved = resolve(&spec, None, seed).unwrap();
    let mut trace = read_trace(TRACE).unwrap();
    trace.truncate(60);
    let (requests, fixed) = trace.serving();
    assert_eq!(fixed.empty_prompts + fixed.empty_outputs, 0);
    let s = &resolved.settings;
    let runs = [s
        .run(resolved.block_size, &requests, false, None, |_, _| {})
        .unwrap()];
    let without = [s
        .without_host_tier()
        .run(resolved.block_size, &requests, false, None, |_, _| {})
        .unwrap()];
    let mut want = serde_json::to_value(resolved.header("azure_llm_2023_conv.csv")).unwrap();
    let map = want.as_object_mut().unwrap();
    map.insert("slo".into(), serde_json::to_value(&resolved.slo).unwrap());
    map.insert("runs".into(), serde_json::to_value(runs).unwrap());
    map.insert(
        "without_tier".into(),
        serde_json::to_value(without).unwrap(),
    );

    let out = cli(&[
        "sim",
        "engine",
        "--json",
        "--trace",
        TRACE,
        "--requests",
        "60",
        "--seed",
        "3",
        "--preset",
        "h100",
        "--block-size",
        "32",
        "--max-num-seqs",
        "64",
        "--no-enable-prefix-caching",
        "--scheduling-policy",
        "sjf",
        "--predict-sigma",
        "0.5",
        "--step-times",
        "roofline",
        "--cpu-offload-gib",
        "1",
        "--slo-ttft",
        "2",
        "--slo-tpot",
        "0.05",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got, want);
}

#[test]
fn an_empty_spec_is_the_clis_defaults_and_its_errors_are_the_clis() {
    let empty: RunSpec = serde_json::from_str("{}").unwrap();
    assert_eq!(empty, RunSpec::default());
    assert!(serde_json::from_str::<RunSpec>(r#"{"kv_cache_dtype": "fp4"}"#).is_err());
    assert!(serde_json::from_str::<RunSpec>(r#"{"max_num_seq": 4}"#).is_err());

    for (spec, flags) in [
        (
            RunSpec {
                preset: "h300".into(),
                ..RunSpec::default()
            },
            vec!["--preset", "h300"],
        ),
        (
            RunSpec {
                gpu_memory_utilization: Some(1.5),
                ..RunSpec::default()
            },
            vec!["--gpu-memory-utilization", "1.5"],
        ),
        (
            RunSpec {
                block_size: Some(0),
                ..RunSpec::default()
            },
            vec!["--block-size", "0"],
        ),
    ] {
        let e: SpecError = resolve(&spec, None, 1).unwrap_err();
        let mut args = vec!["sim", "engine", "--trace", TRACE, "--requests", "2"];
        args.extend(flags);
        let out = cli(&args);
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!("pagedkv: {e}\n")
        );
    }
}
