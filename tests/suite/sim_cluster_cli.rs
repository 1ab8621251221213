//! `pagedkv sim cluster` from the command line: bad input is one line and exit code 2 (a
//! malformed trace line named); the request log and step log carry what they promise; several
//! routers and replica counts in one run; `sim engine` and `sim radix` read Mooncake traces too;
//! colocated runs give what main's binary recorded before disaggregation; a disaggregated run's
//! request log and its table in 100 columns; the KV pool's hits and bytes in the log and JSON;
//! `--search-capacity`: its errors, line 1 and table.

use crate::cli;

use std::path::PathBuf;

fn cluster(args: &[&str]) -> std::process::Output {
    cli::pagedkv(&[&["sim", "cluster"], args].concat())
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pagedkv-cluster-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

const MOONCAKE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/mooncake/conversation_trace.jsonl"
);

#[test]
fn bad_input_is_one_line_and_exit_code_2() {
    let dir = temp_dir("bad");
    let bad_trace = dir.join("bad.jsonl");
    std::fs::write(
        &bad_trace,
        "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [1, 2]}\n\
         {\"timestamp\": 5, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [1]}\n",
    )
    .unwrap();
    let bad_trace = bad_trace.display().to_string();
    for (case, want) in [
        (vec!["--router", "random"], "random"),
        (vec!["--replicas", "0"], "must be 1"),
        (vec!["--replicas", "4,0"], "must be 1"),
        (
            vec!["--cpu-offload-blocks", "100", "--offload-bandwidth", "0"],
            "offload-bandwidth",
        ),
        (vec!["--offload-bandwidth", "10"], "needs a tier"),
        (vec!["--cpu-offload-blocks", "0"], "cpu-offload-blocks"),
        (
            vec!["--cpu-offload-blocks", "8", "--cpu-offload-policy", "opt"],
            "opt",
        ),
        (vec!["--trace", &bad_trace], "line 2"),
        (vec!["--tp", "3"], "32 attention heads"),
        (vec!["--cache-threshold", "1.5"], "cache-threshold"),
        (vec!["--router", "conductor"], "needs disaggregated serving"),
        (vec!["--prefill-replicas", "0"], "prefill-replicas"),
        (vec!["--decode-replicas", "0"], "decode-replicas"),
        (vec!["--prefill-replicas", "2"], "--decode-replicas"),
        (
            vec![
                "--prefill-replicas",
                "1",
                "--decode-replicas",
                "1",
                "--replicas",
                "2",
            ],
            "cannot be used with",
        ),
        (
            vec!["--kv-transfer", "whole"],
            "needs disaggregated serving",
        ),
        (
            vec!["--kv-link-sharing", "fifo"],
            "needs disaggregated serving",
        ),
        (
            vec!["--max-local-prefill-length", "10"],
            "needs disaggregated",
        ),
        (
            vec![
                "--prefill-replicas",
                "1",
                "--decode-replicas",
                "1",
                "--kv-link-bandwidth",
                "0",
            ],
            "kv-link-bandwidth",
        ),
        (
            vec!["--kvcache-balancing-threshold", "2"],
            "needs disaggregated",
        ),
        (
            vec![
                "--prefill-replicas",
                "1",
                "--decode-replicas",
                "1",
                "--kvcache-balancing-threshold",
                "0.5",
            ],
            "ratio of prefix lengths, >= 1",
        ),
        (
            vec![
                "--prefill-replicas",
                "2",
                "--decode-replicas",
                "1",
                "--prefill-router",
                "conductor",
                "--kvcache-balancing-threshold",
                "2",
            ],
            "needs the KV pool",
        ),
        (
            vec![
                "--prefill-replicas",
                "2",
                "--decode-replicas",
                "1",
                "--prefill-router",
                "kv-aware",
                "--cpu-offload-gib",
                "8",
                "--cpu-offload-scope",
                "global",
            ],
            "needs --prefill-router conductor",
        ),
        (vec!["--max-num-batched-tokens", "512"], "max_num_seqs"),
        (
            vec!["--long-prefill-token-threshold", "200000"],
            "long_prefill_token_threshold",
        ),
        (
            vec![
                "--router",
                "kv-aware,round-robin",
                "--request-log",
                "/tmp/x",
            ],
            "one router",
        ),
    ] {
        let mut args = case.clone();
        args.extend(["--requests", "20"]);
        // Our own errors in one line, clap's in clap's words (tests/cli: bad_input).
        let err = cli::bad_input(&cluster(&args));
        assert!(err.contains(want), "{case:?}: {err}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn request_and_step_logs_name_each_replica() {
    let dir = temp_dir("logs");
    let (req_log, step_log) = (dir.join("requests.jsonl"), dir.join("steps.jsonl"));
    let v = cli::json(&cluster(&[
        "--requests",
        "150",
        "--replicas",
        "3",
        "--router",
        "kv-aware",
        "--cpu-offload-gib",
        "64",
        "--request-log",
        req_log.to_str().unwrap(),
        "--step-log",
        step_log.to_str().unwrap(),
        "--json",
    ]));
    let run = &v["runs"][0];
    assert_eq!(run["router"], "kv-aware");
    let per: Vec<u64> = run["per_replica"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["requests"].as_u64().unwrap())
        .collect();
    assert_eq!(per.iter().sum::<u64>(), 150);
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&req_log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 150);
    let mut counted = [0u64; 3];
    let (mut gpu_hits, mut host_hits) = (0, 0);
    for l in &lines {
        for key in [
            "id",
            "replica",
            "arrival",
            "first_token",
            "finish",
            "prompt_len",
            "output_len",
            "prefix_hit_tokens",
            "offload_hit_tokens",
            "preemptions",
        ] {
            assert!(!l[key].is_null(), "{key}: {l}");
        }
        counted[l["replica"].as_u64().unwrap() as usize] += 1;
        let (a, f, e) = (
            l["arrival"].as_f64().unwrap(),
            l["first_token"].as_f64().unwrap(),
            l["finish"].as_f64().unwrap(),
        );
        assert!(a < f && f <= e, "{l}");
        gpu_hits += l["prefix_hit_tokens"].as_u64().unwrap();
        host_hits += l["offload_hit_tokens"].as_u64().unwrap();
    }
    assert_eq!(counted.to_vec(), per);
    assert!(gpu_hits > 0, "Mooncake's prompts share prefixes");
    // The total's first-admission counts are the request log's sums.
    let total = &run["total"];
    let prompts: u64 = lines
        .iter()
        .map(|l| l["prompt_len"].as_u64().unwrap())
        .sum();
    let ratio = total["prompt_hit_ratio"].as_f64().unwrap();
    assert!((ratio - gpu_hits as f64 / prompts as f64).abs() < 1e-12);
    let host = total["offload_prompt_hit_ratio"].as_f64().unwrap();
    assert!((host - host_hits as f64 / prompts as f64).abs() < 1e-12);
    // Every step line names its replica, and each replica's steps run in order.
    let mut last = [None::<u64>; 3];
    let mut finished = 0;
    for l in std::fs::read_to_string(&step_log).unwrap().lines() {
        let s: serde_json::Value = serde_json::from_str(l).unwrap();
        let rep = s["replica"].as_u64().unwrap() as usize;
        let step = s["step"].as_u64().unwrap();
        assert!(last[rep].is_none_or(|p| step == p + 1), "{l}");
        last[rep] = Some(step);
        finished += s["finished"].as_array().unwrap().len();
    }
    assert_eq!(finished, 150);
    assert!(!v["without_tier"].as_array().unwrap().is_empty());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn routers_and_replica_counts_in_one_run_with_plots() {
    let dir = temp_dir("out");
    let v = cli::json(&cluster(&[
        "--requests",
        "120",
        "--replicas",
        "1,2",
        "--router",
        "round-robin,least-loaded,prefix-aware,kv-aware",
        "--out",
        dir.to_str().unwrap(),
        "--json",
    ]));
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 8);
    // One replica: every router gives the same run.
    let one: Vec<&serde_json::Value> = runs.iter().filter(|r| r["replicas"] == 1).collect();
    for r in &one[1..] {
        assert_eq!(r["total"], one[0]["total"]);
    }
    for name in ["cluster.json", "hit_ratio.svg", "load_kv-aware_2.svg"] {
        assert!(dir.join(name).exists(), "{name}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn engine_and_radix_read_mooncake_traces() {
    let v = cli::json(&cli::pagedkv(&[
        "sim",
        "engine",
        "--trace",
        MOONCAKE,
        "--requests",
        "100",
        "--json",
    ]));
    let r = &v["runs"][0];
    assert_eq!(r["completed"], 100);
    assert!(r["prefix_cache_hit_tokens"].as_u64().unwrap() > 0);
    let out = cli::pagedkv(&[
        "sim",
        "radix",
        "--workload",
        &format!("file:{MOONCAKE}"),
        "--requests",
        "50",
        "--capacity",
        "1000000",
        "--page-size",
        "16",
        "--json",
    ]);
    let v = cli::json(&out);
    assert_eq!(v["requests"], 50);
    assert!(v["dedup"].to_string().len() > 2);
}

fn data(name: &str) -> String {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/cluster/colocated/");
    std::fs::read_to_string(format!("{p}{name}")).unwrap()
}

/// `--replicas N` gives exactly what main's binary gave before disaggregation (the commands in
/// tests/data/cluster/colocated/README.md), on the roofline step times they were recorded with.
#[test]
fn colocated_runs_match_the_runs_recorded_before_disaggregation() {
    let out = cluster(&[
        "--requests",
        "200",
        "--replicas",
        "1,3",
        "--router",
        "round-robin,least-loaded,prefix-aware,kv-aware",
        "--step-times",
        "roofline",
        "--json",
    ]);
    let want: serde_json::Value = serde_json::from_str(&data("routers.json")).unwrap();
    assert_eq!(cli::json(&out), want);
    let dir = temp_dir("recorded");
    let log = dir.join("requests.jsonl");
    let out = cluster(&[
        "--requests",
        "200",
        "--replicas",
        "3",
        "--router",
        "kv-aware",
        "--cpu-offload-gib",
        "64",
        "--request-log",
        log.to_str().unwrap(),
        "--step-times",
        "roofline",
        "--json",
    ]);
    let want: serde_json::Value = serde_json::from_str(&data("tier.json")).unwrap();
    assert_eq!(cli::json(&out), want);
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        data("tier.requests.jsonl")
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_disaggregated_run_logs_each_move_and_fits_its_table_in_100_columns() {
    let dir = temp_dir("pd");
    let log = dir.join("requests.jsonl");
    let args = [
        "--requests",
        "120",
        "--prefill-replicas",
        "2",
        "--decode-replicas",
        "2",
        "--prefill-router",
        "kv-aware",
        "--cpu-offload-gib",
        "64",
    ];
    let v = cli::json(&cluster(
        &[
            &args[..],
            &["--json", "--request-log", log.to_str().unwrap()],
        ]
        .concat(),
    ));
    let run = &v["runs"][0];
    assert_eq!(run["replicas"], 4);
    let pd = &run["disagg"];
    assert_eq!(pd["prefill_replicas"], 2);
    assert_eq!(pd["kv_bytes_per_token"], 131072, "Llama-3.1-8B in bf16");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 120);
    let mut bytes = 0;
    for l in &lines {
        let moved = l["output_len"].as_u64().unwrap() > 1;
        assert!(l["prefill_replica"].as_u64().unwrap() < 2, "{l}");
        assert_eq!(l["rejected"], false);
        if moved {
            let d = l["decode_replica"].as_u64().unwrap();
            assert!((2..4).contains(&d), "{l}");
            let (s, e) = (
                l["transfer_start"].as_f64().unwrap(),
                l["transfer_end"].as_f64().unwrap(),
            );
            let (a, f) = (
                l["arrival"].as_f64().unwrap(),
                l["first_token"].as_f64().unwrap(),
            );
            // Layer by layer: the transfer starts with the prefill and ends after its first token.
            assert!(
                a <= s && s < f && f < e && e < l["finish"].as_f64().unwrap(),
                "{l}"
            );
            let tokens = l["prompt_len"].as_u64().unwrap();
            assert!(
                l["kv_bytes_moved"].as_u64().unwrap() <= tokens * 131072,
                "{l}"
            );
        } else {
            assert!(l["decode_replica"].is_null() && l["transfer_start"].is_null());
        }
        bytes += l["kv_bytes_moved"].as_u64().unwrap();
    }
    assert_eq!(pd["kv_bytes_moved"].as_u64().unwrap(), bytes);
    assert!(bytes > 0);
    // The default table in 100 columns; --wide shows more.
    let text = |extra: &[&str]| {
        let out = cluster(&[&args[..], extra].concat());
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let (narrow, wide) = (text(&[]), text(&["--wide"]));
    let table = |t: &str| -> Vec<String> {
        t.lines()
            .skip_while(|l| !l.starts_with("layout"))
            .take(3)
            .map(String::from)
            .collect()
    };
    for l in table(&narrow) {
        assert!(l.chars().count() <= 100, "{l}");
    }
    assert!(narrow.contains("KV GB: KV bytes moved"));
    assert!(table(&wide)[0].contains("xfer p50/p99 ms"));
    assert!(!table(&narrow)[0].contains("xfer"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_conductor_logs_the_requests_it_rejects_and_counts_them() {
    let dir = temp_dir("conductor");
    let log = dir.join("requests.jsonl");
    // 60 long prompts at 20× the trace's rate on one prefill instance: a 2 s TTFT turns some
    // away.
    let out = cluster(&[
        "--requests",
        "60",
        "--rate-scale",
        "20",
        "--prefill-replicas",
        "1",
        "--decode-replicas",
        "1",
        "--prefill-router",
        "conductor",
        "--slo-ttft",
        "2",
        "--json",
        "--request-log",
        log.to_str().unwrap(),
    ]);
    let v = cli::json(&out);
    let run = &v["runs"][0];
    let pd = &run["disagg"];
    let rejected = pd["rejected_ttft"].as_u64().unwrap() + pd["rejected_tbt"].as_u64().unwrap();
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let logged = lines.iter().filter(|l| l["rejected"] == true).count() as u64;
    assert!(rejected > 0 && rejected < 60, "{rejected}");
    assert_eq!(logged, rejected);
    for l in lines.iter().filter(|l| l["rejected"] == true) {
        assert!(
            l["first_token"].is_null() && l["prefill_replica"].is_null(),
            "{l}"
        );
        assert!(l["route"].as_str().unwrap().starts_with("rejected"), "{l}");
    }
    let total = &run["total"];
    assert_eq!(total["requests"], 60);
    assert_eq!(total["completed"].as_u64().unwrap() + rejected, 60);
}

/// `--search-capacity`: bad layouts and the flags a search cannot take are one line (or clap's
/// text) and exit code 2; a small search answers on line 1 with the layout the JSON ranks first
/// and prints one row per layout in 100 columns. Searches of 2, 2 and 4 layouts × ≤ 12 runs of
/// 100 requests: 0.2 s.
#[test]
fn a_capacity_search_answers_first_with_one_row_per_layout() {
    for (case, want) in [
        (vec!["--layouts", "4"], "--search-capacity"),
        (
            vec!["--search-capacity", "--layouts", "0:4"],
            "prefill instances must be 1",
        ),
        (vec!["--search-capacity", "--layouts", "3:"], "not a layout"),
        (
            vec!["--search-capacity", "--layouts", "4,x"],
            "not a layout",
        ),
        (
            vec!["--search-capacity", "--layouts", "2", "--replicas", "2"],
            "cannot be used with",
        ),
        (
            vec![
                "--search-capacity",
                "--layouts",
                "1:1",
                "--prefill-replicas",
                "1",
                "--decode-replicas",
                "1",
            ],
            "cannot be used with",
        ),
        (
            vec!["--search-capacity", "--rate-scale", "2"],
            "searches the rate scale",
        ),
        (vec!["--search-capacity", "--out", "/tmp/x"], "--out"),
        (
            vec!["--search-capacity", "--layouts", "2", "--decode-tp", "2"],
            "needs disaggregated",
        ),
    ] {
        let args = [&case[..], &["--requests", "20"]].concat();
        let err = cli::bad_input(&cluster(&args));
        assert!(err.contains(want), "{case:?}: {err}");
    }
    let azure = concat!(env!("CARGO_MANIFEST_DIR"), "/data/azure_llm_2023_conv.csv");
    let args = [
        "--search-capacity",
        "--layouts",
        "2,1:1",
        "--trace",
        azure,
        "--requests",
        "100",
        "--router",
        "least-loaded",
        "--slo-ttft",
        "0.25",
        "--slo-tpot",
        "0.008",
    ];
    let v = cli::json(&cluster(&[&args[..], &["--json"]].concat()));
    let layouts = v["layouts"].as_array().unwrap();
    assert_eq!(layouts.len(), 2);
    let f = |l: &serde_json::Value, k: &str| l[k].as_f64().unwrap();
    // Equal but for JSON's rounding of the last digit.
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs();
    for l in layouts {
        assert_eq!(l["gpus"], 2);
        assert!(f(l, "rate_scale") > 0.0 && l["resolved"] == true, "{l}");
        let rps = f(l, "requests_per_s");
        assert!(close(rps, f(l, "rate_scale") * f(&v, "base_rps")), "{l}");
        assert!(close(f(l, "requests_per_s_per_gpu"), rps / 2.0), "{l}");
    }
    let best = layouts
        .iter()
        .max_by(|a, b| f(a, "requests_per_s_per_gpu").total_cmp(&f(b, "requests_per_s_per_gpu")))
        .unwrap();
    let name = best["layout"].as_str().unwrap();
    let kind = if name.contains(':') {
        "P:D"
    } else {
        "colocated"
    };
    let out = cluster(&args);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let first = text.lines().next().unwrap();
    let want = format!(
        "{kind} {name} serves the most per GPU: {:.3} requests/s per GPU",
        f(best, "requests_per_s_per_gpu")
    );
    assert!(first.starts_with(&want), "{first}\nwanted {want}");
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("layout"))
        .take(4)
        .collect();
    assert!(table[0].contains("req/s/GPU") && table[1].starts_with("---"));
    assert!(table[2].trim_start().starts_with("2 ") && table[3].starts_with("1:1 "));
    for (row, l) in table[2..].iter().zip(layouts) {
        assert!(row.contains(&format!("{:.3}", f(l, "requests_per_s_per_gpu"))));
    }
    for l in &table {
        assert!(l.chars().count() <= 100, "{l}");
    }
    // The widest default table (two routers, a host tier, a split) still fits; different GPU
    // counts are allowed and said.
    let mut wide = args.to_vec();
    wide[2] = "1,1:1";
    wide[8] = "least-loaded,kv-aware";
    let out = cluster(&[&wide[..], &["--cpu-offload-gib", "16"]].concat());
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("layout"))
        .take(6)
        .collect();
    assert!(table[0].contains("router") && table[0].contains("hit % GPU/host"));
    assert!(table[0].contains("KV GB"));
    for l in &table {
        assert!(l.chars().count() <= 100, "{l}");
    }
    assert!(text.contains("different numbers of GPUs (1, 2)"), "{text}");
}

#[test]
fn the_kv_pool_reports_its_hits_and_bytes_per_request_and_in_total() {
    let dir = temp_dir("pool");
    let log = dir.join("requests.jsonl");
    // At 4× the trace's rate load sends some requests away from the node holding their prefix.
    let args = [
        "--requests",
        "150",
        "--rate-scale",
        "4",
        "--prefill-replicas",
        "3",
        "--decode-replicas",
        "1",
        "--prefill-router",
        "conductor",
        "--cpu-offload-gib",
        "64",
        "--cpu-offload-scope",
        "global",
    ];
    let v = cli::json(&cluster(
        &[
            &args[..],
            &["--json", "--request-log", log.to_str().unwrap()],
        ]
        .concat(),
    ));
    let pd = &v["runs"][0]["disagg"];
    assert_eq!(pd["pool"]["threshold"], 1.0);
    let h = &pd["tier_hits"];
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let sum = |key: &str| -> u64 { lines.iter().map(|l| l[key].as_u64().unwrap()).sum() };
    // Per request and in total alike; the pool's bytes apart from the KV to decode.
    assert_eq!(
        sum("remote_hit_tokens"),
        h["remote_hit_tokens"].as_u64().unwrap()
    );
    assert_eq!(
        sum("pool_bytes_moved"),
        h["pool_bytes_moved"].as_u64().unwrap()
    );
    assert_eq!(
        sum("kv_bytes_moved"),
        pd["kv_bytes_moved"].as_u64().unwrap()
    );
    assert_eq!(
        sum("prefix_hit_tokens"),
        h["gpu_hit_tokens"].as_u64().unwrap()
    );
    assert_eq!(
        sum("offload_hit_tokens"),
        h["local_host_hit_tokens"].as_u64().unwrap() + h["remote_hit_tokens"].as_u64().unwrap()
    );
    assert!(h["fetches"].as_u64().unwrap() > 0, "{h}");
    for l in &lines {
        assert!(
            l["remote_hit_tokens"].as_u64().unwrap() <= l["offload_hit_tokens"].as_u64().unwrap(),
            "{l}"
        );
    }
    // The default table in 100 columns; the pool's columns with --wide.
    let out = cluster(&[&args[..], &["--wide"]].concat());
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("pool hit %") && text.contains("remote pool"),
        "{text}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// `--kv-link-sharing fifo`: moved whole, each transfer holds its prefill node's NIC and its
/// decode node's for bytes / bandwidth before its end, so from the request log no two transfers
/// of one node overlap; with `own` links (the default) they do at this bandwidth, which is what
/// the flag changes. 200 requests at 1 GB/s, twice: about 1 s.
#[test]
fn fifo_links_carry_one_transfer_per_node_at_a_time() {
    let dir = temp_dir("fifo");
    let overlaps = |sharing: &str| {
        let log = dir.join(format!("{sharing}.jsonl"));
        let out = cluster(&[
            "--requests",
            "200",
            "--rate-scale",
            "4",
            "--prefill-replicas",
            "2",
            "--decode-replicas",
            "2",
            "--kv-transfer",
            "whole",
            "--kv-link-bandwidth",
            "1",
            "--kv-link-sharing",
            sharing,
            "--router",
            "least-loaded",
            "--request-log",
            log.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut busy: Vec<(String, f64, f64)> = Vec::new();
        for l in std::fs::read_to_string(&log).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let (Some(end), Some(bytes)) =
                (v["transfer_end"].as_f64(), v["kv_bytes_moved"].as_f64())
            else {
                continue;
            };
            let begin = end - bytes / 1e9;
            assert!(begin >= v["transfer_start"].as_f64().unwrap() - 1e-9, "{v}");
            for node in [
                format!("p{}", v["prefill_replica"]),
                format!("d{}", v["decode_replica"]),
            ] {
                busy.push((node, begin, end));
            }
        }
        busy.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        let overlapping = busy
            .windows(2)
            .filter(|w| w[0].0 == w[1].0 && w[1].1 < w[0].2 - 1e-9)
            .count();
        (overlapping, busy.len())
    };
    let (fifo, moved) = overlaps("fifo");
    assert!(moved > 100, "{moved}");
    assert_eq!(fifo, 0);
    assert!(overlaps("own").0 > 0);
    std::fs::remove_dir_all(dir).unwrap();
}
