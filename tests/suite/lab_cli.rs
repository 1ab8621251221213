//! `pagedkv lab ...` end to end at tiny sizes: the JSON keys the issue names are present and
//! numeric, the numbers agree with each other (faults >= pages touched with 4 KiB pages, RSS grown
//! by what was written, every chase cycle visits every line, each shared file page counted once),
//! and bad input is one line with exit code 2. Consistency only, never speed: these run on a
//! loaded 2-core machine.

use crate::cli;

use serde_json::Value;
use std::process::Output;

fn pagedkv(args: &[&str]) -> Output {
    cli::pagedkv(&[&["lab"], args].concat())
}

/// Runs a lab with `--json`; its output parsed (exit code 0 required).
fn json(args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let out = pagedkv(&a);
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {v}"))
}

/// Exit code 2 and the error as the CLI gives bad input (tests/cli/mod.rs).
fn bad_input(args: &[&str]) {
    cli::bad_input(&pagedkv(args));
}

fn no_contradiction(v: &Value) {
    for c in v["checks"].as_array().expect("checks") {
        assert_ne!(c["status"], "contradicted", "{c}");
    }
}

#[test]
fn faults_count_one_per_small_page_and_fill_the_rss() {
    let v = json(&["faults", "--size", "8M", "--file-size", "1M"]);
    for key in ["pages", "faults_4k", "thp_share", "ns_per_fault_4k"] {
        num(&v, key);
    }
    let pages = num(&v, "pages");
    assert_eq!(pages, 2048.0);
    assert!(num(&v, "faults_4k") >= pages);
    let rss = num(&v["anon_4k"], "rss_bytes");
    assert!(
        (rss - 8.0 * 1048576.0).abs() <= 0.1 * 8.0 * 1048576.0,
        "{rss}"
    );
    let share = num(&v, "thp_share");
    assert!((0.0..=1.0).contains(&share));
    match v["thp_enabled"].as_str() {
        Some("always" | "madvise") => {
            let thp = num(&v, "faults_thp");
            // Each huge page granted replaces 512 faults by one.
            if share > 0.9 {
                assert!(thp < pages / 2.0, "{thp} faults with {share} in huge pages");
            }
        }
        _ => assert!(v["faults_thp"].is_null()),
    }
    assert!(num(&v["second_touch"], "minor_faults") <= pages / 100.0 + 16.0);
    assert_eq!(num(&v["file"]["warm"], "major_faults"), 0.0);
    assert!(v["machine"]["page_bytes"].as_u64().is_some());
    no_contradiction(&v);
}

#[test]
fn faults_bad_input() {
    bad_input(&["faults", "--size", "0"]);
    bad_input(&["faults", "--size", "64T"]);
    bad_input(&["faults", "--size", "lots"]);
}

#[test]
fn overcommit_rss_follows_the_writes_not_the_reservation() {
    let v = json(&["overcommit", "--write", "16M"]);
    for key in [
        "reserved_bytes",
        "written_bytes",
        "rss_before_bytes",
        "rss_after_bytes",
        "overcommit_memory",
    ] {
        num(&v, key);
    }
    let reserved = num(&v, "reserved_bytes");
    let total = num(&v["machine"]["memory"], "mem_total_bytes");
    assert!(
        reserved > total,
        "{reserved} reserved, {total} in the machine"
    );
    if v["reservation_granted"] == true {
        let written = num(&v, "written_bytes");
        assert_eq!(written, 16.0 * 1048576.0);
        let growth = num(&v, "rss_after_bytes") - num(&v, "rss_before_bytes");
        assert!(
            (growth - written).abs() <= 0.1 * written,
            "grew {growth} for {written}"
        );
        assert_eq!(num(&v, "mapping_rss_reserved_bytes"), 0.0);
    } else {
        assert_eq!(num(&v, "overcommit_memory"), 2.0);
    }
    no_contradiction(&v);
}

#[test]
fn overcommit_bad_input() {
    bad_input(&["overcommit", "--reserve", "1M", "--write", "2M"]);
    bad_input(&["overcommit", "--write", "0"]);
    bad_input(&["overcommit", "--reserve", "100T"]);
}

#[test]
fn tlb_chases_visit_every_line() {
    let v = json(&[
        "tlb", "--min", "4K", "--max", "256K", "--steps", "4000", "--reps", "2",
    ]);
    let rows = v["rows"].as_array().expect("rows");
    let small: Vec<&Value> = rows.iter().filter(|r| r["page_bytes"] == 4096).collect();
    let sizes: Vec<u64> = small
        .iter()
        .map(|r| r["working_set_bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [4096, 8192, 16384, 32768, 65536, 131072, 262144]);
    for r in rows {
        for key in ["working_set_bytes", "page_bytes", "ns_per_access"] {
            assert!(num(r, key) > 0.0, "{key} in {r}");
        }
        assert_eq!(r["cycle_verified"], true, "{r}");
        assert_eq!(num(r, "lines") * 64.0, num(r, "working_set_bytes"));
    }
    assert!(rows.len() == small.len() || rows.len() == 2 * small.len());
    no_contradiction(&v);
}

#[test]
fn tlb_bad_input() {
    bad_input(&["tlb", "--max", "1T"]);
    bad_input(&["tlb", "--min", "0"]);
    bad_input(&["tlb", "--min", "64K", "--max", "16K"]);
}

#[test]
fn switch_reports_round_trips_and_copy_on_write() {
    let v = json(&[
        "switch",
        "--iters",
        "40",
        "--reps",
        "3",
        "--cow-pages",
        "16",
    ]);
    for key in [
        "function_call_ns",
        "thread_round_trip_ns",
        "process_round_trip_ns",
    ] {
        assert!(num(&v, key) > 0.0, "{key}");
    }
    let rows = v["rows"].as_array().expect("rows");
    let cpus = v["machine"]["cpus_allowed"].as_array().unwrap().len();
    assert_eq!(rows.len(), 5 * cpus.min(2));
    for r in rows {
        let s = &r["ns"];
        assert!(num(s, "p10") <= num(s, "median") && num(s, "median") <= num(s, "p90"));
        assert_eq!(num(s, "samples"), 3.0);
        assert!(num(r, "iters") >= 20.0 && num(r, "iters") <= 40.0);
    }
    let cow = &v["cow"];
    assert_eq!(cow["thread_write_seen"], true);
    assert_eq!(cow["child_saw_parent_data"], true);
    assert_eq!(num(cow, "child_writes_seen_by_parent"), 0.0);
    assert!(num(cow, "child_minor_faults") >= 16.0);
    no_contradiction(&v);
}

#[test]
fn switch_bad_input() {
    bad_input(&["switch", "--iters", "0"]);
    bad_input(&["switch", "--reps", "0"]);
    bad_input(&["switch", "--cow-pages", "0"]);
}

#[test]
fn mmap_share_counts_each_file_page_once() {
    let v = json(&[
        "mmap-share",
        "--processes",
        "3",
        "--file-size",
        "4M",
        "--shared",
        "1M",
    ]);
    let mib = 1048576.0;
    // Never more than was read (fault-around maps no neighbour: the slices are aligned to its
    // window); at most 1% less, for the few clean file pages the kernel may reclaim or migrate
    // between the reads and the parent's look at smaps.
    let read = |got: f64, want: f64| got <= want && got >= 0.99 * want;
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3);
    for r in rows {
        assert!(read(num(r, "rss_bytes"), 2.0 * mib), "{r}");
        assert!(read(num(r, "shared_clean_bytes"), mib), "{r}");
    }
    assert!(read(num(&v, "sum_rss_bytes"), 6.0 * mib), "{v}");
    let pss = num(&v, "sum_pss_bytes");
    assert!((pss - 4.0 * mib).abs() <= 0.1 * 4.0 * mib, "{pss}");
    assert!(num(&v, "file_cached_after_bytes") >= 4.0 * mib);
    no_contradiction(&v);
}

#[test]
fn mmap_share_bad_input() {
    bad_input(&["mmap-share", "--processes", "0"]);
    bad_input(&["mmap-share", "--file-size", "64K", "--shared", "64K"]);
    bad_input(&["mmap-share", "--file-size", "64T"]);
}

#[test]
fn text_output_names_the_machine_and_the_checks() {
    let out = pagedkv(&[
        "mmap-share",
        "--processes",
        "2",
        "--file-size",
        "1M",
        "--shared",
        "256K",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("machine: "), "{text}");
    assert!(
        text.contains("checks:") && text.contains("[holds]"),
        "{text}"
    );
}
