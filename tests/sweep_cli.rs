//! `pagedkv sweep` end to end: bad input exits 2 with one line; JSON carries the promised keys and
//! figures that agree with a count made here from the trace file; the recommendation follows the
//! end-to-end rule (recomputed here from the JSON), the proxy's pick the proxy rule; `--out` writes
//! every file. Tiny probe pools and truncated traces keep it fast.

mod cli;

fn sweep(args: &[&str]) -> std::process::Output {
    cli::pagedkv(&[&["sweep"], args].concat())
}

const TINY: [&str; 10] = [
    "--probe-mib",
    "4",
    "--reps",
    "1",
    "--requests",
    "300",
    "--attention-batch",
    "2",
    "--attention-context",
    "300",
];

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("pagedkv-sweep-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn bad_input_is_one_line_and_exit_code_2() {
    let dir = temp_dir("bad");
    let bad_trace = dir.join("bad.csv");
    std::fs::write(&bad_trace, "prompt_tokens,output_tokens\n10,2\n7,x\n").unwrap();
    let empty = dir.join("empty.csv");
    std::fs::write(&empty, "").unwrap();
    let cases: Vec<Vec<String>> = vec![
        vec!["--frobnicate".into()],
        vec!["--model".into(), "gpt-9".into()],
        vec!["--synthetic".into(), "normal:1,2".into()],
        vec!["--pool-gib".into(), "-1".into()],
        vec!["--pool-gib".into(), "0".into()],
        vec!["--gpu-util".into(), "1.5".into()],
        vec!["--model".into(), "llama-3-70b".into()],
        vec!["--head-dim".into(), "100".into()],
        vec!["--layers".into(), "0".into()],
        vec!["--turns".into(), "0".into()],
        vec!["--rate".into(), "0".into()],
        vec!["--requests".into(), "0".into()],
        vec!["--reps".into(), "0".into()],
        vec!["--rounds".into(), "0".into()],
        vec!["--pool-gib".into(), "0.0001".into()],
        // 30 query heads over Llama-3-8B's 8 KV heads: no whole group.
        vec!["--heads".into(), "30".into()],
        vec!["--attention-batch".into(), "0".into()],
        vec!["--attention-context".into(), "0".into()],
        vec!["--trace".into(), "/nonexistent/trace.csv".into()],
        vec!["--trace".into(), bad_trace.display().to_string()],
        vec!["--trace".into(), empty.display().to_string()],
        vec![
            "--dtype".into(),
            "f16".into(),
            "--kv-dtype".into(),
            "fp8_e4m3".into(),
        ],
        vec!["--kv-dtype".into(), "int4".into()],
        vec!["--kv-dtype".into(), "f16,fp8_e4m3,f16".into()],
        // A 1 MiB probe holds fewer than 256 tokens of 32 KV heads.
        vec![
            "--probe-mib".into(),
            "1".into(),
            "--kv-heads".into(),
            "32".into(),
        ],
    ];
    let mut cases = cases;
    if let Err(e) = pagedkv::device::cuda::CudaDevice::open(0) {
        // Without a GPU, asking for one is bad input.
        println!("--device cuda expected to fail: {e}");
        cases.push(vec!["--device".into(), "cuda".into()]);
    }
    for case in cases {
        let mut args: Vec<&str> = case.iter().map(String::as_str).collect();
        // Small and fast unless the case sets these itself.
        if !case.iter().any(|a| a == "--requests" || a == "--reps") {
            args.extend(["--requests", "50", "--reps", "1"]);
        }
        let out = sweep(&args);
        cli::bad_input(&out);
    }
    let out = sweep(&["--trace", bad_trace.to_str().unwrap(), "--no-bandwidth"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 3"));
    std::fs::remove_dir_all(dir).unwrap();
}

/// Internal waste at block size `bs` counted here from the CSV text, independently of the crate.
fn waste_pct_from_csv(path: &str, first: usize, bs: u64) -> f64 {
    let text = std::fs::read_to_string(path).unwrap();
    let (mut used, mut slots) = (0u64, 0u64);
    for line in text.lines().skip(1).take(first) {
        let f: Vec<u64> = line
            .split(',')
            .skip(1)
            .map(|x| x.trim().parse().unwrap())
            .collect();
        let n = f[0] + f[1];
        used += n;
        slots += n.div_ceil(bs) * bs;
    }
    100.0 * (slots - used) as f64 / slots as f64
}

#[test]
fn quick_json_has_every_key_and_exact_waste() {
    let mut args = vec!["--quick", "--json"];
    args.extend(TINY);
    let out = sweep(&args);
    let v = cli::json(&out);
    assert!(v["device"].as_str().unwrap().starts_with("cpu"));
    assert_eq!(v["vllm_default_block_size"], 16);
    let rec = v["proxy_recommended_block_size"].as_u64().unwrap();
    assert!(rec.is_power_of_two() && rec <= 256);
    assert_eq!(v["recommended_block_size"].as_u64(), Some(e2e_pick(&v)));
    let rows = v["rows"].as_array().unwrap();
    let sizes: Vec<u64> = rows
        .iter()
        .map(|r| r["block_size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, vec![1, 2, 4, 8, 16, 32, 64, 128, 256]);
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/data/azure_llm_2023_conv.csv");
    for r in rows {
        for key in [
            "internal_waste_pct",
            "concurrent_requests",
            "prefix_share_lost_pct",
            "gather_gbps",
            "stream_gbps",
            "copy_gbps",
            "tw_concurrent_requests",
            "block_table_bytes_per_request",
            "block_table_bytes_pool",
        ] {
            assert!(r[key].as_f64().is_some(), "{key} in {r}");
        }
        // Attention measured on the CPU, as a fraction of the stream measured beside it (the
        // median over three rounds of each round's fraction), with the spread of the rounds.
        let a = r["attention_gbps"].as_f64().unwrap();
        let frac = r["attention_frac_of_stream"].as_f64().unwrap();
        assert!(a.is_finite() && a > 0.0, "{r}");
        assert!(frac.is_finite() && frac > 0.0, "{r}");
        let noise = r["efficiency_noise"].as_f64().unwrap();
        assert!(noise.is_finite() && noise >= 0.0, "{r}");
        let bs = r["block_size"].as_u64().unwrap();
        let want = waste_pct_from_csv(trace, 300, bs);
        let got = r["internal_waste_pct"].as_f64().unwrap();
        assert!((got - want).abs() < 1e-9, "bs {bs}: {got} vs {want}");
        let labels: Vec<&str> = r["memory"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["memory"].as_str().unwrap())
            .collect();
        assert!(labels.contains(&"4k"), "{labels:?}");
        for key in [
            "e2e_output_tokens_per_s",
            "e2e_p99_ttft_s",
            "e2e_p99_tpot_s",
        ] {
            let x = r[key].as_f64().unwrap();
            assert!(x.is_finite() && x > 0.0, "{key} in {r}");
        }
    }
    // The end-to-end runs used the efficiency measured at their block size, scaled by 1 -/+ that
    // row's own noise (at least the run's band) for the pessimistic/optimistic runs.
    let noise = v["noise_tolerance"].as_f64().unwrap();
    assert!(noise > 0.0);
    for (e, r) in v["end_to_end"].as_array().unwrap().iter().zip(rows) {
        let frac = r["attention_frac_of_stream"].as_f64().unwrap().min(1.0);
        assert!(
            (e["efficiency"].as_f64().unwrap() - frac).abs() < 1e-12,
            "{e}"
        );
        let own = r["efficiency_noise"].as_f64().unwrap();
        assert_eq!(e["noise"].as_f64().unwrap(), noise.max(own), "{e}");
    }
    // The recommendation weighs concurrency by attention's fraction (capped at 1), recomputed here.
    let raw: Vec<f64> = rows
        .iter()
        .map(|r| {
            let frac = r["attention_frac_of_stream"].as_f64().unwrap().min(1.0);
            r["concurrent_requests"].as_f64().unwrap() * frac
        })
        .collect();
    let best = raw.iter().copied().fold(0.0, f64::max);
    let want = rows
        .iter()
        .zip(&raw)
        .filter(|(_, &x)| x >= 0.99 * best)
        .map(|(r, _)| r["block_size"].as_u64().unwrap())
        .max();
    assert_eq!(Some(rec), want);
    // The noise band: the median row noise (at least 1%), and the block sizes within it.
    let mut noise: Vec<f64> = rows
        .iter()
        .map(|r| r["efficiency_noise"].as_f64().unwrap())
        .collect();
    noise.sort_by(f64::total_cmp);
    let tolerance = noise[noise.len() / 2].max(0.01);
    assert!((v["noise_tolerance"].as_f64().unwrap() - tolerance).abs() < 1e-12);
    let band: Vec<u64> = rows
        .iter()
        .zip(&raw)
        .filter(|(_, &x)| x / best >= 1.0 - tolerance)
        .map(|(r, _)| r["block_size"].as_u64().unwrap())
        .collect();
    let got: Vec<u64> = v["within_noise_block_sizes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .collect();
    assert_eq!(got, band);
    assert!(band.contains(&rec));
}

#[test]
fn attention_can_take_its_contexts_from_the_trace_or_be_skipped() {
    let mut args = vec!["--json", "--attention-trace-context"];
    args.extend(TINY);
    let out = sweep(&args);
    let v = cli::json(&out);
    // The first two requests of the trace, prompt + output, capped at 300: counted here.
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/data/azure_llm_2023_conv.csv");
    let text = std::fs::read_to_string(trace).unwrap();
    let want: Vec<u64> = text
        .lines()
        .skip(1)
        .take(2)
        .map(|l| {
            let f: Vec<u64> = l.split(',').skip(1).map(|x| x.parse().unwrap()).collect();
            (f[0] + f[1]).min(300)
        })
        .collect();
    let lens: Vec<u64> = v["probe"]["attention"]["lens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(lens, want);
    assert_eq!(v["probe"]["attention"]["num_heads"], 32);
    assert!(v["rows"][0]["attention_gbps"].as_f64().is_some());

    let mut args = vec!["--json", "--no-attention"];
    args.extend(TINY);
    let out = sweep(&args);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["attention_gbps"].is_null()));
    assert!(rows.iter().all(|r| r["gather_gbps"].as_f64().is_some()));
}

#[test]
fn out_dir_gets_csv_json_and_plots_and_no_bandwidth_still_recommends() {
    let dir = temp_dir("out");
    let mut args = vec![
        "--synthetic",
        "lognormal:800,400",
        "--synthetic-output",
        "uniform:0,300",
        "--rate",
        "10",
        "--out",
        dir.to_str().unwrap(),
    ];
    args.extend(TINY);
    let out = sweep(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("<- vLLM default") && text.contains("<- recommended"),
        "{text}"
    );
    for f in [
        "sweep.csv",
        "sweep.json",
        "waste_concurrency.svg",
        "bandwidth.svg",
    ] {
        let p = dir.join(f);
        assert!(
            std::fs::metadata(&p).map(|m| m.len() > 0).unwrap_or(false),
            "{f}"
        );
    }
    let csv = std::fs::read_to_string(dir.join("sweep.csv")).unwrap();
    assert_eq!(csv.lines().count(), 10);
    assert!(csv.lines().next().unwrap().contains("gather_gbps_4k"));

    for f in ["end_to_end.svg", "attention_profile.json"] {
        assert!(dir.join(f).exists(), "{f}");
    }
    let profile = pagedkv::sim::engine::load_profile(&dir.join("attention_profile.json")).unwrap();
    assert!(profile.measured && profile.efficiency.len() == 9);

    let out = sweep(&["--no-bandwidth", "--json", "--requests", "300"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["recommended_block_size"].as_u64(), Some(e2e_pick(&v)));
    let rows = v["rows"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["gather_gbps"].is_null()));
    // Concurrency alone: the largest block size within 1% of the best concurrency.
    let best = rows
        .iter()
        .map(|r| r["concurrent_requests"].as_f64().unwrap())
        .fold(0.0, f64::max);
    let want = rows
        .iter()
        .filter(|r| r["concurrent_requests"].as_f64().unwrap() >= 0.99 * best)
        .map(|r| r["block_size"].as_u64().unwrap())
        .max();
    assert_eq!(v["proxy_recommended_block_size"].as_u64(), want);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn one_sweep_per_kv_dtype_and_whether_the_pick_moves() {
    let mut args = vec!["--quick", "--json", "--kv-dtype", "f16,fp8_e4m3"];
    args.extend(TINY);
    let out = sweep(&args);
    let v = cli::json(&out);
    let reports = v["kv_dtypes"].as_array().unwrap();
    let per = v["summary"]["per_dtype"].as_array().unwrap();
    assert_eq!((reports.len(), per.len()), (2, 2));
    for (r, (p, dtype)) in reports.iter().zip(per.iter().zip(["f16", "fp8_e4m3"])) {
        assert_eq!(r["model"]["dtype"], dtype);
        assert_eq!(p["kv_dtype"], dtype);
        assert_eq!(p["recommended_block_size"], r["recommended_block_size"]);
        assert_eq!(r["recommended_block_size"].as_u64(), Some(e2e_pick(r)));
        // The probes read the dtype asked for.
        assert!(r["rows"][0]["attention_gbps"].as_f64().unwrap() > 0.0);
    }
    let bytes = |i: usize| per[i]["kv_bytes_per_token"].as_u64().unwrap();
    assert_eq!(bytes(0), 2 * bytes(1));
    // The same pool holds about twice the requests (whole blocks, so not exactly).
    let conc = |i: usize| per[i]["concurrent_requests_at_16"].as_f64().unwrap();
    assert!(
        (conc(1) / conc(0) - 2.0).abs() < 0.1,
        "{} vs {}",
        conc(0),
        conc(1)
    );
    let moves = per[0]["recommended_block_size"] != per[1]["recommended_block_size"];
    assert_eq!(v["summary"]["recommendation_moves"], moves);
}

/// The end-to-end rule from the JSON: a block size beats 16 when its pessimistic run is no worse
/// than 16's optimistic run on throughput, p99 TTFT and p99 TPOT (within 0.5%) and better on one
/// by more than 0.5%; the best such (throughput, then p99 TPOT), else 16.
fn e2e_pick(v: &serde_json::Value) -> u64 {
    let e2e = v["end_to_end"].as_array().unwrap();
    assert_eq!(e2e.len(), 9);
    let f = |e: &serde_json::Value, run: &str, k: &str| e[run][k].as_f64().unwrap();
    let def = e2e.iter().find(|e| e["block_size"] == 16).unwrap();
    let beats = |e: &serde_json::Value| {
        let keys = ["output_tokens_per_s", "p99_ttft_s", "p99_tpot_s"];
        let (x, y): (Vec<f64>, Vec<f64>) = keys
            .iter()
            .map(|k| (f(e, "pessimistic", k), f(def, "optimistic", k)))
            .unzip();
        let no_worse = x[0] >= y[0] * 0.995 && x[1] <= y[1] * 1.005 && x[2] <= y[2] * 1.005;
        no_worse && (x[0] > y[0] * 1.005 || x[1] < y[1] * 0.995 || x[2] < y[2] * 0.995)
    };
    let mut winners: Vec<&serde_json::Value> = e2e.iter().filter(|e| beats(e)).collect();
    winners.sort_by(|a, b| {
        let (ta, tb) = (
            f(a, "nominal", "output_tokens_per_s"),
            f(b, "nominal", "output_tokens_per_s"),
        );
        if (ta / tb - 1.0).abs() <= 0.005 {
            f(a, "nominal", "p99_tpot_s").total_cmp(&f(b, "nominal", "p99_tpot_s"))
        } else {
            tb.total_cmp(&ta)
        }
    });
    let pick = winners
        .first()
        .map_or(16, |w| w["block_size"].as_u64().unwrap());
    assert_eq!(v["end_to_end_pick"]["block_size"].as_u64(), Some(pick));
    pick
}
