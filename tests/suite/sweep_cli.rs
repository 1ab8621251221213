//! `pagedkv sweep` end to end: bad input exits 2 with one line; JSON carries the promised keys and
//! figures that agree with a count made here from the trace file; the recommendation follows the
//! one rule (recomputed here from the JSON) over the SLO capacity, or over the proxy when end to
//! end is skipped; the text starts with the verdict, its default table fits in 100 columns and
//! marks the rule's pick; `--out` writes every file and an index.html holding the verdict. Tiny
//! probe pools and truncated traces keep it fast.

use crate::cli;

/// `pagedkv sweep ARGS` with the last-level cache taken as 1 MiB: these tests check the report,
/// not the memory's speed, and limits over 4x a large server cache cost seconds per probe.
fn sweep(args: &[&str]) -> std::process::Output {
    cli::pagedkv_with_env(&[&["sweep"], args].concat(), "PAGEDKV_LLC", "1M")
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
        vec!["--slo-ttft".into(), "0".into()],
        vec!["--slo-tpot".into(), "nan".into()],
        vec!["--slo-attainment".into(), "1.5".into()],
        vec!["--capacity-requests".into(), "0".into()],
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
    assert_eq!(v["basis"], "SLO capacity");
    assert_eq!(
        v["recommended_block_size"].as_u64(),
        Some(capacity_pick(&v))
    );
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
            "stream_gbps",
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
        // --quick measures only what the answer reads: the first probe's attention and the
        // stream limit beside it; not the other probe, the gathers, the copy limit or the scalar
        // conversion pass (the sweep without --quick does: see the other tests).
        assert_eq!(labels.len(), 1, "{labels:?}");
        for key in [
            "gather_gbps",
            "gather_copy_gbps",
            "copy_gbps",
            "convert_stream_gbps",
        ] {
            assert!(r[key].is_null(), "{key} in {r}");
        }
        for key in [
            "e2e_output_tokens_per_s",
            "e2e_p99_ttft_s",
            "e2e_p99_tpot_s",
            "slo_capacity_rps",
            "slo_capacity_rate_scale",
            "kv_peak_at_capacity",
            "goodput_at_capacity_rps",
        ] {
            let x = r[key].as_f64().unwrap();
            assert!(x.is_finite() && x > 0.0, "{key} in {r}");
        }
        // The capacity in requests per second is the rate scale times the searched requests'
        // own rate, counted here from the trace's timestamps (the first 300 requests).
        let base = v["end_to_end_settings"]["base_rps"].as_f64().unwrap();
        let scale = r["slo_capacity_rate_scale"].as_f64().unwrap();
        let cap = r["slo_capacity_rps"].as_f64().unwrap();
        assert!((cap - scale * base).abs() < 1e-9 * cap, "{r}");
        assert!(
            (base - rate_from_csv(trace, 300)).abs() < 1e-6 * base,
            "{base}"
        );
        assert!(r["kv_peak_at_capacity"].as_f64().unwrap() <= 1.0);
        let (lo, hi) = (
            r["slo_capacity_low_rps"].as_f64().unwrap(),
            r["slo_capacity_high_rps"].as_f64().unwrap(),
        );
        assert!(lo.is_finite() && hi.is_finite() && lo <= hi, "{r}");
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
    // The proxy weighs concurrency by attention's fraction (capped at 1), recomputed here.
    let raw: Vec<f64> = rows
        .iter()
        .map(|r| {
            let frac = r["attention_frac_of_stream"].as_f64().unwrap().min(1.0);
            r["concurrent_requests"].as_f64().unwrap() * frac
        })
        .collect();
    let best = raw.iter().copied().fold(0.0, f64::max);
    for (r, x) in rows.iter().zip(&raw) {
        assert!(
            (r["proxy"].as_f64().unwrap() - x / best).abs() < 1e-12,
            "{r}"
        );
    }
    // The noise band: the median row noise (at least 1%).
    let mut noise: Vec<f64> = rows
        .iter()
        .map(|r| r["efficiency_noise"].as_f64().unwrap())
        .collect();
    noise.sort_by(f64::total_cmp);
    let tolerance = noise[noise.len() / 2].max(0.01);
    assert!((v["noise_tolerance"].as_f64().unwrap() - tolerance).abs() < 1e-12);
    let notes: Vec<&str> = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let said = |s: &str| notes.iter().any(|n| n.contains(s));
    assert!(
        said("--quick measures only what the answer reads"),
        "{notes:?}"
    );
    assert!(said("copy limit"), "{notes:?}");
}

/// Requests over the arrival span of the trace's first `first` requests, from its timestamps
/// (`YYYY-MM-DD hh:mm:ss.fffffff`, all on one day in the shipped trace).
fn rate_from_csv(path: &str, first: usize) -> f64 {
    let text = std::fs::read_to_string(path).unwrap();
    let secs: Vec<f64> = text
        .lines()
        .skip(1)
        .take(first)
        .map(|l| {
            let time = l.split(',').next().unwrap().split(' ').nth(1).unwrap();
            let f: Vec<f64> = time.split(':').map(|x| x.parse().unwrap()).collect();
            3600.0 * f[0] + 60.0 * f[1] + f[2]
        })
        .collect();
    first as f64 / (secs[secs.len() - 1] - secs[0])
}

#[test]
fn attention_can_take_its_contexts_from_the_trace_or_be_skipped() {
    let mut args = vec!["--json", "--attention-trace-context", "--no-end-to-end"];
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

    let mut args = vec!["--json", "--no-attention", "--no-end-to-end"];
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
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("sweep.json")).unwrap()).unwrap();
    let rec = v["recommended_block_size"].as_u64().unwrap();
    assert_eq!(rec, capacity_pick(&v));
    check_text(&text, &v);
    // The report page: the verdict (its first line), the table, every plot it links.
    let verdict = text.lines().next().unwrap();
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    assert!(html.contains(&format!("<h1>{verdict}</h1>")), "{html}");
    assert!(html.contains("<table>") && html.contains(&v["rule"].as_str().unwrap()[..40]));
    for src in html.split("src=\"").skip(1) {
        let file = &src[..src.find('"').unwrap()];
        assert!(dir.join(file).exists(), "{file} linked but not written");
    }
    assert!(html.contains("src=\"end_to_end.svg\""));
    for f in [
        "sweep.csv",
        "sweep.json",
        "waste_concurrency.svg",
        "bandwidth.svg",
        "index.html",
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

    // Without the end to end, the same rule over the proxy (concurrency alone here), whose band
    // is the run's 1% floor: the first line says so.
    let out = sweep(&[
        "--no-bandwidth",
        "--no-end-to-end",
        "--requests",
        "300",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(v["basis"], "throughput proxy");
    let rows = v["rows"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["gather_gbps"].is_null()));
    let best = rows
        .iter()
        .map(|r| r["concurrent_requests"].as_f64().unwrap())
        .fold(0.0, f64::max);
    let figures: Vec<(u64, f64, f64, f64)> = rows
        .iter()
        .map(|r| {
            let p = r["concurrent_requests"].as_f64().unwrap() / best;
            (r["block_size"].as_u64().unwrap(), p, p * 0.99, p * 1.01)
        })
        .collect();
    assert_eq!(
        v["recommended_block_size"].as_u64(),
        Some(rule(&figures, 0.01))
    );
    assert!(text.lines().next().unwrap().contains("throughput proxy"));
    check_text(&text, &v);
    assert!(!dir.join("end_to_end.svg").exists() || v["end_to_end"].as_array().unwrap().is_empty());
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
        assert_eq!(r["recommended_block_size"].as_u64(), Some(capacity_pick(r)));
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

/// The rule, written out here from its statement: vLLM's 16 unless some block size's low end beats
/// 16's high end by more than `resolution`; then, of those, the highest nominal (ties: the larger
/// block). `figures`: (block size, nominal, low, high).
fn rule(figures: &[(u64, f64, f64, f64)], resolution: f64) -> u64 {
    let def = figures.iter().find(|f| f.0 == 16).unwrap();
    let mut winners: Vec<&(u64, f64, f64, f64)> = figures
        .iter()
        .filter(|f| f.2 > def.3 * (1.0 + resolution))
        .collect();
    winners.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
    winners.first().map_or(16, |w| w.0)
}

/// The rule over the JSON's SLO capacities (rate scales) and their bands.
fn capacity_pick(v: &serde_json::Value) -> u64 {
    let e2e = v["end_to_end"].as_array().unwrap();
    assert_eq!(e2e.len(), 9);
    let scale = |e: &serde_json::Value, k: &str| e[k]["rate_scale"].as_f64().unwrap();
    let figures: Vec<(u64, f64, f64, f64)> = e2e
        .iter()
        .map(|e| {
            // The band holds the nominal figure (each search is exact to its resolution only).
            let nominal = scale(e, "capacity");
            (
                e["block_size"].as_u64().unwrap(),
                nominal,
                scale(e, "capacity_low").min(nominal),
                scale(e, "capacity_high").max(nominal),
            )
        })
        .collect();
    let resolution = v["resolution"].as_f64().unwrap();
    assert_eq!(resolution, v["end_to_end_settings"]["search"]["resolution"]);
    let pick = rule(&figures, resolution);
    assert_eq!(v["recommendation"]["block_size"].as_u64(), Some(pick));
    pick
}

/// The text report: the verdict first (naming the JSON's pick), every line after it within 100
/// columns, the marker on the recommended row and on 16, and the rule's footnote.
fn check_text(text: &str, v: &serde_json::Value) {
    let rec = v["recommended_block_size"].as_u64().unwrap();
    let mut lines = text.lines();
    let first = lines.next().unwrap();
    assert!(
        first.starts_with(&format!(
            "recommended block size: {rec} (vLLM's default: 16) — "
        )),
        "{first}"
    );
    for l in lines {
        assert!(
            l.chars().count() <= 100,
            "{} columns: {l}",
            l.chars().count()
        );
    }
    let row = |bs: u64| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(&bs.to_string()))
            .unwrap_or_else(|| panic!("no row {bs} in {text}"))
    };
    assert!(row(rec).contains("◀ recommended"), "{text}");
    assert!(row(16).contains("vLLM's"), "{text}");
    let marked = text.lines().filter(|l| l.contains("◀ recommended")).count();
    assert_eq!(marked, 1, "{text}");
    assert!(text.contains(
        v["rule"]
            .as_str()
            .unwrap()
            .split(' ')
            .take(8)
            .collect::<Vec<_>>()
            .join(" ")
            .as_str()
    ));
}

#[test]
fn wide_prints_every_column_and_the_default_table_fewer() {
    // Not --quick: it measures the first probe alone.
    let mut args = vec!["--no-attention", "--rounds", "1"];
    args.extend(TINY);
    let narrow = sweep(&args);
    args.push("--wide");
    let wide = sweep(&args);
    let header = |o: &std::process::Output| {
        let t = String::from_utf8_lossy(&o.stdout).to_string();
        let h = t
            .lines()
            .find(|l| l.starts_with("block "))
            .unwrap()
            .to_string();
        h
    };
    let (n, w) = (header(&narrow), header(&wide));
    assert!(w.len() > n.len() + 50, "{n}\n{w}");
    for col in [
        "concurrent",
        "gather thp",
        "stream 4k",
        "proxy",
        "nat tok/s",
        "× rate",
    ] {
        assert!(w.contains(col), "{col}: {w}");
    }
    assert!(n.contains("SLO req/s") && n.contains("KV peak"), "{n}");
}
