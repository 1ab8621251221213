//! `pagedkv sim engine` from the command line: bad input is one line and exit code 2; a scenario's
//! step log through the CLI equals vLLM's recording; JSON, plots and several block sizes.

use crate::cli;

use std::path::PathBuf;

fn engine(args: &[&str]) -> std::process::Output {
    cli::pagedkv(&[&["sim", "engine"], args].concat())
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pagedkv-engine-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn data(name: &str) -> String {
    format!("{}/tests/data/engine/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn bad_input_is_one_line_and_exit_code_2() {
    let dir = temp_dir("bad");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let ok_req = r#"{"id": "a", "prompt_len": 4, "output_len": 2}"#;
    let unknown = write(
        "unknown.json",
        &format!(r#"{{"requests": [{ok_req}], "colour": 1}}"#),
    );
    let unknown_engine = write(
        "unknown_engine.json",
        &format!(r#"{{"engine": {{"blocks": 4}}, "requests": [{ok_req}]}}"#),
    );
    let negative = write(
        "negative.json",
        r#"{"requests": [{"id": "a", "prompt_len": -4, "output_len": 2}]}"#,
    );
    let negative_out = write(
        "negative_out.json",
        r#"{"requests": [{"id": "a", "prompt": [1, 2], "output_len": -1}]}"#,
    );
    let too_long = write(
        "too_long.json",
        r#"{"engine": {"block_size": 4, "num_gpu_blocks": 3},
            "requests": [{"id": "a", "prompt_len": 20, "output_len": 2}]}"#,
    );
    let zero_budget = write(
        "zero_budget.json",
        &format!(r#"{{"engine": {{"max_num_batched_tokens": 0}}, "requests": [{ok_req}]}}"#),
    );
    let bad_policy = write(
        "bad_policy.json",
        &format!(r#"{{"engine": {{"scheduling_policy": "lifo"}}, "requests": [{ok_req}]}}"#),
    );
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/data/azure_llm_2023_conv.csv");
    let cases: Vec<Vec<&str>> = vec![
        vec!["--scenario", &unknown],
        vec!["--scenario", &unknown_engine],
        vec!["--scenario", &negative],
        vec!["--scenario", &negative_out],
        vec!["--scenario", &too_long, "--clock", "steps"],
        vec!["--scenario", &zero_budget],
        vec!["--scenario", &bad_policy],
        vec!["--scenario", "/nonexistent/s.json"],
        vec!["--max-num-batched-tokens", "0"],
        vec!["--max-num-seqs", "0"],
        vec!["--scheduling-policy", "lifo"],
        vec!["--block-size", "0"],
        vec!["--block-sizes", "8,0"],
        vec!["--num-gpu-blocks-override", "1"],
        vec!["--num-gpu-blocks-override", "40"],
        vec!["--preset", "tpu"],
        vec!["--model", "gpt-9"],
        vec!["--model", "llama-3-70b"],
        vec!["--gpu", "v100"],
        vec!["--kv-cache-dtype", "int4"],
        vec!["--profile", "/nonexistent/p.json"],
        vec!["--rate-scale", "0"],
        vec!["--poisson", "0"],
        vec!["--requests", "0"],
        vec!["--tp", "0"],
        vec!["--watermark", "1.5"],
        vec!["--gpu-memory-utilization", "2"],
        vec!["--slo-ttft", "-1"],
        vec![
            "--no-enable-chunked-prefill",
            "--max-num-batched-tokens",
            "64",
        ],
        vec!["--trace", "/nonexistent/t.csv"],
        vec!["--block-sizes", "8,16", "--step-log", "/tmp/x.jsonl"],
        vec!["--trace", trace, "--scenario", &unknown],
        vec!["--frobnicate"],
    ];
    for case in cases {
        let mut args = case.clone();
        if !case.contains(&"--requests") && !case.contains(&"--scenario") {
            args.extend(["--requests", "50"]);
        }
        let out = engine(&args);
        cli::bad_input(&out);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_scenario_step_log_through_the_cli_equals_vllm() {
    let dir = temp_dir("log");
    // With the requests vLLM's server refused and shortened (its .api.vllm.jsonl).
    for (scenario, golden, extra, refused_shortened) in [
        (
            "random_mix.scenario.json",
            "random_mix.vllm.jsonl",
            None,
            (0, 0),
        ),
        (
            "priority.scenario.json",
            "priority.async.vllm.jsonl",
            Some("--async-scheduling"),
            (0, 0),
        ),
        (
            "length_issue_example.scenario.json",
            "length_issue_example.vllm.jsonl",
            None,
            (0, 1),
        ),
        (
            "length_limits.scenario.json",
            "length_limits.async.vllm.jsonl",
            Some("--async-scheduling"),
            (5, 3),
        ),
    ] {
        let log = dir.join("steps.jsonl");
        let mut args = vec![
            "--scenario".to_string(),
            data(scenario),
            "--clock".into(),
            "steps".into(),
            "--json".into(),
            "--step-log".into(),
            log.display().to_string(),
        ];
        args.extend(extra.map(String::from));
        let out = engine(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let run = &cli::json(&out)["runs"][0];
        let counts = (run["rejected"].as_u64(), run["shortened"].as_u64());
        let (refused, shortened) = refused_shortened;
        assert_eq!(counts, (Some(refused), Some(shortened)), "{scenario}");
        let parse = |text: String| -> Vec<serde_json::Value> {
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        };
        let ours = parse(std::fs::read_to_string(&log).unwrap());
        let want = parse(std::fs::read_to_string(data(golden)).unwrap());
        assert_eq!(ours.len(), want.len(), "{golden}");
        // serde_json's maps are ordered by key here; the replay test compares order too.
        assert_eq!(ours, want, "{golden}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn json_plots_and_several_block_sizes() {
    let dir = temp_dir("out");
    let out = engine(&[
        "--requests",
        "300",
        "--block-sizes",
        "8,16,528",
        "--json",
        "--slo-ttft",
        "0.2",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let v = cli::json(&out);
    let runs = v["runs"].as_array().unwrap();
    let sizes: Vec<u64> = runs
        .iter()
        .map(|r| r["block_size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [8, 16, 528]);
    for r in runs {
        assert_eq!(r["completed"], 300);
        for key in [
            "requests_per_time",
            "output_tokens_per_time",
            "makespan",
            "mean_kv_utilization",
        ] {
            assert!(r[key].as_f64().unwrap() > 0.0, "{key}: {r}");
        }
        for key in ["ttft", "tpot", "e2e"] {
            let d = &r[key];
            let (p50, p99) = (d["p50"].as_f64().unwrap(), d["p99"].as_f64().unwrap());
            assert!(0.0 < p50 && p50 <= p99, "{key}: {d}");
        }
        let good = r["slo_attainment"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&good));
    }
    // Pools shrink in blocks as blocks grow: 8 → 16 halves it.
    let blocks: Vec<u64> = runs
        .iter()
        .map(|r| r["num_gpu_blocks"].as_u64().unwrap())
        .collect();
    assert!(
        blocks[0] / 2 == blocks[1] || blocks[0] / 2 == blocks[1] + 1,
        "{blocks:?}"
    );
    assert!(v["profile_measured"] == false);
    for f in ["engine.json", "throughput.svg", "latency.svg"] {
        assert!(dir.join(f).exists(), "{f}");
    }
    let out = engine(&["--requests", "200", "--out", dir.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("an assumption") && text.contains("200 of 200 requests"),
        "{text}"
    );
    for f in ["kv_utilization.svg", "batch.svg"] {
        assert!(dir.join(f).exists(), "{f}");
    }
    // Tensor parallelism lets a 70B model fit; async scheduling and swap preemption run too.
    let out = engine(&[
        "--requests",
        "100",
        "--model",
        "llama-3-70b",
        "--tp",
        "2",
        "--async-scheduling",
        "--swap-preemption",
        "--json",
    ]);
    let v = cli::json(&out);
    assert_eq!(v["runs"][0]["completed"], 100);
    assert_eq!(v["tp"], 2);
    // An fp8 KV cache stores a token in half the bytes: the same memory holds twice the blocks
    // (one fewer or more from rounding), and under pressure no fewer requests a second.
    let run = |dtype: &str| {
        let out = engine(&[
            "--requests",
            "300",
            "--kv-cache-dtype",
            dtype,
            "--gpu-memory-utilization",
            "0.6",
            "--json",
        ]);
        let v = cli::json(&out);
        assert_eq!(v["model"]["dtype"], dtype);
        let r = &v["runs"][0];
        (
            r["num_gpu_blocks"].as_u64().unwrap(),
            r["requests_per_time"].as_f64().unwrap(),
        )
    };
    let ((f16_blocks, f16_rate), (fp8_blocks, fp8_rate)) = (run("f16"), run("fp8_e4m3"));
    assert!(
        fp8_blocks.abs_diff(2 * f16_blocks) <= 1,
        "{f16_blocks} vs {fp8_blocks}"
    );
    assert!(fp8_rate >= f16_rate * 0.999, "{f16_rate} vs {fp8_rate}");
    // Multi-turn conversations share prefixes: the cache finds some.
    let out = engine(&["--multiturn", "20", "--requests", "300", "--json"]);
    let v = cli::json(&out);
    let hit = v["runs"][0]["prefix_cache_hit_ratio"].as_f64().unwrap();
    assert!(hit > 0.2, "multi-turn hit ratio {hit}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_host_tier_on_the_mooncake_trace_runs_and_says_which_mode_it_used() {
    let trace = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/mooncake/conversation_trace.jsonl"
    );
    // A small GPU pool: prefixes leave the GPU cache and come back from host memory. The
    // server's length rule refuses the prompts the pool cannot hold (Mooncake's reach 120k
    // tokens); the conversations start reusing their turns after the first few hundred.
    let base = [
        "--trace",
        trace,
        "--requests",
        "400",
        "--num-gpu-blocks-override",
        "3000",
        "--max-model-len",
        "32768",
    ];
    let run = |extra: &[&str]| cli::json(&engine(&[&base[..], extra, &["--json"]].concat()));
    let v = run(&["--kv-offloading-size", "64"]);
    let r = &v["runs"][0];
    assert!(r["rejected"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["completed"], r["requests"]);
    assert_eq!(r["offload_mode"], "native");
    let t = &r["tier"];
    assert_eq!(t["mode"], "native");
    let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}: {v}"));
    assert!(
        n(t, "stored_chunks") > 0 && n(t, "loaded_chunks") > 0,
        "{t}"
    );
    // Llama 3.1 8B: 128 KiB of KV per token, 2 MiB per 16-token block.
    assert_eq!(n(t, "stored_bytes"), n(t, "stored_blocks") << 21);
    // Host hits are vLLM's external prefix cache hits, not prefix-cache hits.
    let hits = n(r, "external_prefix_cache_hits");
    assert!(
        hits > 0 && hits <= n(r, "external_prefix_cache_queries"),
        "{r}"
    );
    assert_eq!(
        n(r, "offload_hit_tokens"),
        hits + n(r, "preempted_external_prefix_cache_hits")
    );
    assert_eq!(
        v["without_tier"][0]["offload_mode"],
        serde_json::Value::Null
    );

    let v = run(&[
        "--kv-offloading-size",
        "64",
        "--cpu-offload-mode",
        "store-on-evict",
    ]);
    let r = &v["runs"][0];
    assert_eq!(
        (&r["offload_mode"], &r["tier"]["mode"]),
        (&"store-on-evict".into(), &"store-on-evict".into())
    );
    assert!(n(&r["tier"], "loaded_blocks") > 0);

    let out = engine(
        &[
            &base[..],
            &["--kv-offloading-size", "64", "--cpu-offload-policy", "arc"],
        ]
        .concat(),
    );
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "host tier: native",
        "host tier (native)",
        "external prefix cache",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    for bad in [
        vec![
            "--kv-offloading-size",
            "8",
            "--kv-offloading-backend",
            "lmcache",
        ],
        vec!["--kv-offloading-size", "8", "--cpu-offload-policy", "fifo"],
        vec!["--kv-offloading-size", "8", "--offload-block-size", "24"],
        vec!["--kv-offloading-size", "0"],
        vec!["--kv-offloading-size", "8", "--cpu-offload-blocks", "8"],
        vec!["--offload-blocks-per-chunk", "2"],
        vec![
            "--kv-offloading-size",
            "8",
            "--cpu-offload-mode",
            "store-on-evict",
            "--offload-blocks-per-chunk",
            "2",
        ],
        vec!["--kv-offloading-size", "8", "--swap-preemption"],
    ] {
        cli::bad_input(&engine(&[&base[..], &bad].concat()));
    }
}

#[test]
fn sim_engine_refuses_and_shortens_requests_as_vllms_server_and_counts_them() {
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/data/azure_llm_2023_conv.csv");
    let v = cli::json(&engine(&[
        "--requests",
        "300",
        "--max-model-len",
        "1500",
        "--json",
    ]));
    // Independently, among the first 300 rows: refused when the prompt reaches 1500 or the
    // output alone is over it; shortened when both fit and their sum does not.
    let text = std::fs::read_to_string(trace).unwrap();
    let (mut refused, mut shortened) = (0u64, 0u64);
    for l in text.lines().skip(1).take(300) {
        let f: Vec<u64> = l
            .split(',')
            .skip(1)
            .map(|x| x.trim().parse().unwrap())
            .collect();
        let (p, o) = (f[0].max(1), f[1].max(1));
        if p >= 1500 || o > 1500 {
            refused += 1;
        } else if p + o > 1500 {
            shortened += 1;
        }
    }
    let r = &v["runs"][0];
    assert!(refused > 0 && shortened > 0, "{refused} {shortened}");
    assert_eq!(r["rejected"].as_u64().unwrap(), refused);
    assert_eq!(r["shortened"].as_u64().unwrap(), shortened);
    assert_eq!(r["requests"].as_u64().unwrap(), 300 - refused);
    assert_eq!(r["completed"].as_u64().unwrap(), 300 - refused);
    // The default (Llama 3.1's 131,072) refuses and shortens nothing on the first rows.
    let d = cli::json(&engine(&["--requests", "300", "--json"]));
    assert_eq!(d["runs"][0]["rejected"], 0);
    assert_eq!(d["runs"][0]["shortened"], 0);
    assert_eq!(d["max_model_len_source"], "llama-3.1-8b's context length");
}
