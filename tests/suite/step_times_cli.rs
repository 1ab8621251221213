//! The step-time flags through the CLI (`--step-times`, `--step-profile`, `--model` as a
//! config.json, `--quantization`): which model made the times is named in text and JSON, a run the
//! tables do not cover falls back with the reason, a user's profile replaces the shipped one, and
//! every bad input is one line and exit 2 (or clap's text).

use crate::cli;

use cli::{bad_input, clap_error, json, own_error, pagedkv};
use std::path::{Path, PathBuf};

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pagedkv-steps-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// `sim engine` on 40 Poisson requests with `extra` flags.
fn engine(extra: &[&str]) -> std::process::Output {
    let base = ["sim", "engine", "--poisson", "5", "--requests", "40"];
    pagedkv(&[&base[..], extra].concat())
}

fn stdout(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_report_names_the_model_that_made_its_times() {
    let text = stdout(&engine(&[]));
    assert!(
        text.contains("step times: measured, aiconfigurator 0.12.0 vllm 0.24.0 h200_sxm"),
        "{text}"
    );
    assert!(
        text.contains("beside the roofline at block size 16: a decode step"),
        "{text}"
    );
    let v = json(&engine(&["--json"]));
    assert_eq!(v["step_times"]["model"], "measured");
    assert!(v["step_times"]["source"]
        .as_str()
        .unwrap()
        .contains("AIConfigurator 0.12.0"));
    let r = json(&engine(&["--json", "--step-times", "roofline"]));
    assert_eq!(r["step_times"]["model"], "roofline");
    assert!(r["step_times"]["label"].is_null());
    // The measured steps are slower than the roofline's: so is the run.
    let e2e = |v: &serde_json::Value| v["runs"][0]["e2e"]["mean"].as_f64().unwrap();
    assert!(e2e(&v) > e2e(&r), "{} vs {}", e2e(&v), e2e(&r));
    let c = json(&pagedkv(&[
        "sim",
        "cluster",
        "--poisson",
        "5",
        "--requests",
        "40",
        "--replicas",
        "2",
        "--json",
    ]));
    assert_eq!(c["step_times"]["model"], "measured");
}

#[test]
fn what_the_tables_do_not_cover_falls_back_and_says_why() {
    // An A100 has no shipped tables; f32 KV has no rows on an H200.
    let text = stdout(&engine(&["--gpu", "a100"]));
    assert!(
        text.contains("step times: roofline — no measured tables for a100"),
        "{text}"
    );
    let text = stdout(&engine(&["--kv-cache-dtype", "f32"]));
    assert!(
        text.contains("step times: roofline — ") && text.contains("f32"),
        "{text}"
    );
    // A config.json of a shape no preset has loads, and runs on the roofline.
    let dir = temp_dir("fallback");
    let cfg = write(
        &dir,
        "config.json",
        r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 3072, "intermediate_size": 8192,
            "num_hidden_layers": 28, "num_attention_heads": 24, "num_key_value_heads": 8,
            "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}"#,
    );
    let v = json(&engine(&["--model", &cfg, "--json"]));
    assert_eq!(v["step_times"]["model"], "roofline");
    assert_eq!(v["model"]["layers"], 28);
    assert!(
        v["step_times"]["line"].as_str().unwrap().contains("k=3072"),
        "{v}"
    );
    // --step-times measured refuses instead.
    let e = own_error(&engine(&["--model", &cfg, "--step-times", "measured"]));
    assert!(
        e.contains("--step-times measured: ") && e.contains("has no"),
        "{e}"
    );
    // fp8 weights are covered.
    let v = json(&engine(&["--quantization", "fp8", "--json"]));
    assert_eq!(v["step_times"]["model"], "measured");
    assert_eq!(v["model"]["weights"], "fp8");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_users_profile_replaces_the_shipped_one() {
    let dir = temp_dir("own");
    // Only the shipped H200 profile's label changed: the same times, named as the user's.
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/step-profiles/aic-0.12.0-vllm-0.24.0-h200_sxm.json"
    ))
    .unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&shipped).unwrap();
    v["label"] = "my H200".into();
    let own = write(&dir, "mine.json", &v.to_string());
    let mine = json(&engine(&["--step-profile", &own, "--json"]));
    let theirs = json(&engine(&["--json"]));
    assert_eq!(mine["step_times"]["label"], "my H200");
    assert_eq!(mine["runs"], theirs["runs"]);
    // For another GPU: refused.
    v["gpu"] = "h100".into();
    let h100 = write(&dir, "h100.json", &v.to_string());
    let e = own_error(&engine(&["--step-profile", &h100]));
    assert!(e.contains("is for h100, the run's GPU is h200"), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_profiles_and_models_are_one_line_and_exit_2() {
    let dir = temp_dir("bad");
    let profile = |name: &str, body: &str| write(&dir, name, body);
    let head = r#""format": "pagedkv-step-profile", "version": 1, "gpu": "h200", "label": "x",
                  "source": "x", "framework": "x", "block_size": 16"#;
    let gemm = |m: &str, ms: &str| {
        format!(
            r#"{{{head}, "gemm": [{{"dtype": "bf16", "n": 1, "k": 1, "m": {m}, "ms": {ms}}}]}}"#
        )
    };
    let cases = [
        (profile("missing.json", "{"), "EOF"),
        (
            profile("negative.json", &gemm("[1, 2]", "[1, -1]")),
            "positive",
        ),
        (
            profile("decreasing.json", &gemm("[2, 1]", "[1, 1]")),
            "must increase",
        ),
        (
            profile("short.json", &gemm("[1, 2]", "[1]")),
            "1 values for 2",
        ),
        (
            profile(
                "twice.json",
                &format!(
                    r#"{{{head}, "gemm": [{{"dtype": "bf16", "n": 1, "k": 1, "m": [1], "ms": [1]}},
                                       {{"dtype": "bf16", "n": 1, "k": 1, "m": [1], "ms": [1]}}]}}"#
                ),
            ),
            "appears twice",
        ),
        (
            profile("dupkey.json", &format!("{{{head}, \"block_size\": 8}}")),
            "duplicate key",
        ),
        (
            dir.join("absent.json").display().to_string(),
            "No such file",
        ),
    ];
    for (path, why) in &cases {
        let e = own_error(&engine(&["--step-profile", path]));
        assert!(e.contains(why), "{path}: {e}");
    }
    // A profile that loads but lacks the run's rows: auto falls back with the reason.
    let lacking = profile("lacking.json", &gemm("[1, 2]", "[1, 1]"));
    let text = stdout(&engine(&["--step-profile", &lacking]));
    assert!(
        text.contains("step times: roofline — x has no bf16 GEMM n=6144 k=4096"),
        "{text}"
    );
    // Models.
    let e = own_error(&engine(&["--model", "no-such-model"]));
    assert!(e.contains("unknown model \"no-such-model\""), "{e}");
    let moe = write(
        &dir,
        "moe.json",
        r#"{"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
            "max_position_embeddings": 32768, "num_local_experts": 8}"#,
    );
    let e = own_error(&engine(&["--model", &moe]));
    assert!(e.contains("mixture-of-experts"), "{e}");
    let e = own_error(&pagedkv(&["sweep", "--model", &moe, "--no-bandwidth"]));
    assert!(e.contains("mixture-of-experts"), "{e}");
    clap_error(&engine(&["--step-times", "fast"]));
    clap_error(&engine(&["--quantization", "int4"]));
    bad_input(&engine(&[
        "--step-times",
        "roofline",
        "--step-profile",
        &lacking,
    ]));
    std::fs::remove_dir_all(dir).unwrap();
}

/// `scripts/gpu-check`'s flow on the CPU: pagedkv's own decode attention, one run per block size ×
/// batch × context, merged into the shipped profile; a run at block size 1 then times decode
/// attention from those rows (named in the label), and a grid with a hole is refused.
#[test]
fn attention_runs_become_a_profiles_rows_per_block_size() {
    let dir = temp_dir("rows");
    let runs = dir.join("runs.jsonl");
    let mut lines = String::new();
    for bs in ["1", "16"] {
        for b in ["1", "2"] {
            for c in ["64", "128"] {
                let out = pagedkv(&[
                    "attention",
                    "--device",
                    "cpu",
                    "--json",
                    "--no-check",
                    "--heads",
                    "32",
                    "--kv-heads",
                    "8",
                    "--block-size",
                    bs,
                    "--batch",
                    b,
                    "--context",
                    c,
                ]);
                lines += &json(&out).to_string();
                lines.push('\n');
            }
        }
    }
    std::fs::write(&runs, &lines).unwrap();
    let merged = dir.join("merged.json");
    let out = pagedkv(&[
        "step-profile",
        "from-attention",
        "--gpu",
        "h200",
        "--what",
        "this CPU",
        "--out",
        merged.to_str().unwrap(),
        runs.to_str().unwrap(),
    ]);
    assert!(stdout(&out).contains("8 runs as decode-attention rows"));
    let v = json(&engine(&[
        "--step-profile",
        merged.to_str().unwrap(),
        "--block-size",
        "1",
        "--json",
    ]));
    let label = v["step_times"]["label"].as_str().unwrap();
    assert!(
        label.ends_with("+ pagedkv decode attention (this CPU)"),
        "{label}"
    );
    let text = stdout(&pagedkv(&[
        "step-profile",
        "check",
        "--step-profile",
        merged.to_str().unwrap(),
        "--model",
        "llama-3.1-8b",
    ]));
    assert!(
        text.contains("llama-3.1-8b   1  bf16     f16       yes"),
        "{text}"
    );
    // One run fewer: batch 2 at context 128 of block 16 is missing.
    let holed: Vec<&str> = lines.lines().take(7).collect();
    std::fs::write(&runs, holed.join("\n") + "\n").unwrap();
    let e = own_error(&pagedkv(&[
        "step-profile",
        "from-attention",
        "--gpu",
        "h200",
        "--out",
        merged.to_str().unwrap(),
        runs.to_str().unwrap(),
    ]));
    assert!(e.contains("no run at batch 2 and context 128"), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
}
