//! `pagedkv sim cache` end to end: JSON rows, the FIFO anomaly through the CLI, curves written with
//! --out, determinism, and one-line errors with exit code 2 on bad input.

use crate::cli;

use serde_json::Value;
use std::process::Output;

fn pagedkv(args: &[&str]) -> Output {
    cli::pagedkv(&[&["sim", "cache"], args].concat())
}

fn json_rows(args: &[&str]) -> Vec<Value> {
    let mut a = args.to_vec();
    a.push("--json");
    let out = pagedkv(&a);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    match serde_json::from_slice(&out.stdout).expect("JSON") {
        Value::Array(rows) => rows,
        v => panic!("not an array: {v}"),
    }
}

#[test]
fn json_rows_show_fifos_anomaly() {
    let rows = json_rows(&[
        "--policy",
        "fifo",
        "--workload",
        "seq:1,2,3,4,1,2,5,1,2,3,4,5",
        "--capacity",
        "3,4",
    ]);
    let misses: Vec<u64> = rows.iter().map(|r| r["misses"].as_u64().unwrap()).collect();
    assert_eq!(misses, [9, 10]);
    for r in &rows {
        for field in ["policy", "capacity", "requests", "hits", "hit_ratio"] {
            assert!(!r[field].is_null(), "{field} missing in {r}");
        }
        assert_eq!(r["requests"], 12);
    }
}

#[test]
fn all_policies_give_one_row_per_capacity_and_are_deterministic() {
    let args = [
        "--policy",
        "all",
        "--workload",
        "drift",
        "--keys",
        "2000",
        "--requests",
        "20000",
        "--capacity",
        "50,5%",
        "--seed",
        "3",
    ];
    let rows = json_rows(&args);
    assert_eq!(rows.len(), 16);
    assert_eq!(rows[1]["capacity"], 100);
    for r in &rows {
        let h = r["hit_ratio"].as_f64().unwrap();
        assert!(h <= r["opt_hit_ratio"].as_f64().unwrap() + 1e-12, "{r}");
    }
    assert_eq!(rows, json_rows(&args));
    let mut other = args;
    other[11] = "4";
    assert_ne!(rows, json_rows(&other));
}

#[test]
fn out_writes_the_curves() {
    let dir = std::env::temp_dir().join(format!("pagedkv-cache-cli-{}", std::process::id()));
    let out = pagedkv(&[
        "--policy",
        "lru,opt,sieve",
        "--workload",
        "zipf",
        "--keys",
        "3000",
        "--requests",
        "30000",
        "--capacity",
        "300",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(dir.join("cache_mrc.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("sieve") && svg.contains("one pass"));
    let curves: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cache_mrc.json")).unwrap())
            .unwrap();
    assert_eq!(curves.as_array().unwrap().len(), 3);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_input_is_one_line_and_exit_code_2() {
    let dir = std::env::temp_dir().join(format!("pagedkv-cache-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let partial = dir.join("p.oracleGeneral.bin");
    std::fs::write(&partial, [0u8; 25]).unwrap();
    let empty = dir.join("e.txt");
    std::fs::write(&empty, "").unwrap();
    let partial = format!("trace:{}", partial.display());
    let empty = format!("trace:{}", empty.display());
    let cases: Vec<Vec<&str>> = vec![
        vec!["--policy", "lru", "--workload", "zipf", "--capacity", "0"],
        vec!["--policy", "lru", "--workload", "zipf", "--capacity", "ten"],
        vec!["--policy", "mru", "--workload", "zipf", "--capacity", "5"],
        vec![
            "--policy",
            "lru",
            "--workload",
            "zipfian",
            "--capacity",
            "5",
        ],
        vec![
            "--policy",
            "lru",
            "--workload",
            "seq:1,x",
            "--capacity",
            "5",
        ],
        vec![
            "--policy",
            "lru",
            "--workload",
            "zipf",
            "--capacity",
            "5",
            "--alpha",
            "-1",
        ],
        vec![
            "--policy",
            "lru",
            "--workload",
            "zipf",
            "--capacity",
            "5",
            "--keys",
            "0",
        ],
        vec![
            "--policy",
            "lru",
            "--workload",
            "trace:/no/such/file.csv",
            "--capacity",
            "5",
        ],
        vec!["--policy", "lru", "--workload", &partial, "--capacity", "5"],
        vec!["--policy", "lru", "--workload", &empty, "--capacity", "5"],
        vec![
            "--policy",
            "lru",
            "--workload",
            &empty,
            "--capacity",
            "5",
            "--trace-params",
            "x=1",
        ],
        vec![
            "--policy",
            "lru",
            "--workload",
            "trace:noext",
            "--capacity",
            "5",
        ],
        vec![
            "--policy",
            "lru",
            "--workload",
            "zipf",
            "--capacity",
            "5",
            "--format",
            "zip",
        ],
        vec![
            "--policy",
            "lru",
            "--workload",
            "zipf",
            "--capacity",
            "5",
            "--miss-cost",
            "nan",
        ],
    ];
    for args in cases {
        let out = pagedkv(&args);
        cli::bad_input(&out);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_written_trace_replays_the_same_and_the_core_loop_is_timed() {
    let dir = std::env::temp_dir().join(format!("pagedkv-cache-write-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("z.oracleGeneral.bin");
    let path = file.to_str().unwrap();
    let common = ["--policy", "all", "--capacity", "40,200"];
    let generated = json_rows(
        &[
            &common[..],
            &["--workload", "zipf", "--keys", "500", "--requests", "5000"],
            &["--write-trace", path],
        ]
        .concat(),
    );
    let workload = format!("trace:{path}");
    let replayed = json_rows(&[&common[..], &["--workload", &workload]].concat());
    assert_eq!(generated, replayed);
    // OPT runs only where it is asked for.
    let timed = json_rows(&[
        "--policy",
        "fifo,lru,lfu,clock,arc,s3fifo,sieve",
        "--capacity",
        "40,200",
        "--workload",
        &workload,
        "--no-opt",
        "--time-core",
    ]);
    let others: Vec<&Value> = generated.iter().filter(|r| r["policy"] != "opt").collect();
    assert_eq!(timed.len(), others.len());
    for (t, g) in timed.iter().zip(others) {
        assert_eq!(t["policy"], g["policy"], "{t}");
        assert_eq!(t["hits"], g["hits"], "{t}");
        assert!(t.get("opt_hit_ratio").is_none(), "{t}");
        for clock in ["cpu_s", "wall_s"] {
            let s = t["core_time"][clock].as_f64().unwrap();
            assert!((0.0..60.0).contains(&s), "{t}");
        }
    }
    let out = pagedkv(&[
        "--policy",
        "lru",
        "--workload",
        "zipf",
        "--capacity",
        "5",
        "--write-trace",
        dir.join("no/such/dir/t.bin").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cannot write") && err.lines().count() == 1,
        "{err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
