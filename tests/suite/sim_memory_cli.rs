//! The memory commands end to end: JSON that parses, plots written, bad input as exit code 2.

use crate::cli;

fn pagedkv(args: &[&str]) -> (i32, String, String) {
    let out = cli::pagedkv(args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(args: &[&str]) -> serde_json::Value {
    let (code, out, err) = pagedkv(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

#[test]
fn json_rows_for_each_command() {
    let rows = json(&[
        "sim",
        "alloc",
        "--requests",
        "200",
        "--capacity",
        "16384",
        "--page-sizes",
        "1,16,256",
        "--check",
        "--json",
    ]);
    // Three fits, one reservation, three page sizes.
    assert_eq!(rows.as_array().unwrap().len(), 7);
    assert_eq!(rows[4]["policy"], "paged-1");
    let rows = json(&["sim", "cow", "--steps", "20", "--output", "20", "--json"]);
    assert_eq!(rows.as_array().unwrap().len(), 5);
    let r = json(&[
        "sim",
        "thrash",
        "--phases",
        "2",
        "--phase-len",
        "2000",
        "--json",
    ]);
    assert!(r["rows"].as_array().unwrap().len() > 5);
    let r = json(&[
        "translate",
        "kv",
        "--block-size",
        "16",
        "--table",
        "7,3,9",
        "37",
        "--json",
    ]);
    assert_eq!(r[0]["physical_slot"], 149);
    let r = json(&[
        "translate",
        "page",
        "--table",
        "5,9,-,2",
        "0x1234",
        "0x2000",
        "--json",
    ]);
    assert_eq!(r[0]["physical"], 0x9234);
    assert!(r[1]["fault"].is_string());
    let r = json(&["translate", "x86", "0x7fff12345678", "--huge", "--json"]);
    assert_eq!(r[1]["offset"], 0x145678);
}

#[test]
fn plots_are_written() {
    let dir = std::env::temp_dir().join(format!("pagedkv-memory-{}", std::process::id()));
    let d = dir.to_str().unwrap();
    let (code, _, err) = pagedkv(&["sim", "alloc", "--requests", "100", "--out", d]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = pagedkv(&[
        "sim",
        "thrash",
        "--phases",
        "1",
        "--phase-len",
        "500",
        "--out",
        d,
    ]);
    assert_eq!(code, 0, "{err}");
    for f in [
        "alloc_rejections.svg",
        "alloc_data_share.svg",
        "thrash_fault_rate.svg",
    ] {
        let svg = std::fs::read_to_string(dir.join(f)).unwrap();
        assert!(svg.starts_with("<svg"), "{f}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let empty = std::env::temp_dir().join(format!("pagedkv-empty-{}.csv", std::process::id()));
    std::fs::write(&empty, "").unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["sim", "alloc", "--capacity", "0"],
        vec!["sim", "alloc", "--capacity", "1000"],
        vec!["sim", "alloc", "--trace", "/nonexistent/trace.csv"],
        vec!["sim", "alloc", "--trace", empty.to_str().unwrap()],
        vec!["sim", "alloc", "--page-sizes", "0"],
        vec!["sim", "alloc", "--step-ms", "-1"],
        vec!["sim", "cow", "--block-sizes", "0"],
        vec!["sim", "cow", "--width", "0"],
        vec!["sim", "cow", "--samples", "0"],
        vec!["sim", "thrash", "--working-set", "0"],
        vec!["sim", "thrash", "--random-share", "2"],
        vec!["sim", "thrash", "--universe", "10", "--working-set", "20"],
        vec![
            "sim",
            "alloc",
            "--capacity",
            "1099511627776",
            "--page-sizes",
            "1",
        ],
        vec!["sim", "alloc", "--requests", "1000000000000"],
        vec!["sim", "cow", "--prompt", "18446744073709551615"],
        vec!["sim", "cow", "--width", "100000000", "--steps", "1000"],
        vec!["sim", "thrash", "--phase-len", "1000000000000"],
        vec!["sim", "thrash", "--frames", "1000000000000"],
        vec!["translate", "x86", "0x800000000000"],
        vec!["translate", "x86", "zz"],
        vec!["translate", "page", "--page-size", "0", "--table", "1", "5"],
        vec!["translate", "kv", "--table", "1,x", "5"],
    ];
    for args in cases {
        cli::bad_input(&cli::pagedkv(&args));
    }
    std::fs::remove_file(empty).unwrap();
}
