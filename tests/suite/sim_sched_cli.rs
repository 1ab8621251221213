//! `pagedkv sim sched` end to end: JSON shape, per-class rows, bad input as one line and exit 2,
//! the load-sweep plot.

use crate::cli;

use cli::pagedkv;

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("pagedkv-sched-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn json_has_one_row_per_policy_with_the_named_fields() {
    let out = pagedkv(&["sim", "sched", "--jobs", "2000", "--json", "--seed", "3"]);
    let rows = cli::json(&out);
    let rows = rows.as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["policy"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "fcfs",
            "sjf",
            "srpt",
            "rr",
            "mlfq",
            "prio",
            "aging",
            "srpt-pred"
        ]
    );
    for r in rows {
        for field in [
            "mean_response",
            "p99_response",
            "mean_slowdown",
            "large_slowdown",
            "max_first_wait",
        ] {
            assert!(r[field].as_f64().unwrap() >= 0.0, "{field} in {r}");
        }
        assert_eq!(r["per_class"].as_array().unwrap().len(), 2);
    }
    // Same seed, same output.
    let again = pagedkv(&["sim", "sched", "--jobs", "2000", "--json", "--seed", "3"]);
    assert_eq!(out.stdout, again.stdout);
}

#[test]
fn jobs_file_runs_and_a_malformed_one_names_its_line() {
    let dir = temp_dir("csv");
    let good = dir.join("good.csv");
    std::fs::write(
        &good,
        "arrival,size,class\n0,4,batch\n1,3,interactive\n2,1,batch\n",
    )
    .unwrap();
    let out = pagedkv(&[
        "sim",
        "sched",
        "--policy",
        "fcfs",
        "--jobs-file",
        good.to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success());
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // FCFS by hand: completions 4, 7, 8 for arrivals 0, 1, 2.
    assert_eq!(
        rows[0]["mean_response"].as_f64().unwrap(),
        (4.0 + 6.0 + 6.0) / 3.0
    );

    let bad = dir.join("bad.csv");
    std::fs::write(&bad, "0,1\n\n2,-1\n").unwrap();
    let out = pagedkv(&["sim", "sched", "--jobs-file", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("line 3"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn unstable_load_and_bad_parameters_exit_2() {
    for args in [
        &["--load", "1.0"][..],
        &["--load", "-0.5"],
        &["--jobs", "0"],
        &["--quantum", "0"],
        &["--dist", "pareto", "--pareto-alpha", "1"],
        &["--policy", "lottery"],
    ] {
        let mut full = vec!["sim", "sched"];
        if !args.contains(&"--jobs") {
            full.extend(["--jobs", "100"]);
        }
        full.extend_from_slice(args);
        cli::bad_input(&pagedkv(&full));
    }
}

#[test]
fn out_writes_the_load_sweep_plot() {
    let dir = temp_dir("plot");
    let out = pagedkv(&[
        "sim",
        "sched",
        "--policy",
        "srpt",
        "--jobs",
        "2000",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(dir.join("sched_mean_response_vs_load.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("srpt") && svg.contains("P-K"));
    std::fs::remove_dir_all(dir).unwrap();
}
