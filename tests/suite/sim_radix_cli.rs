//! `pagedkv sim radix` end to end: JSON keys, words in --show-tree, one-line errors with exit 2.

use crate::cli;

fn pagedkv(args: &[&str]) -> std::process::Output {
    cli::pagedkv(&[&["sim", "radix"], args].concat())
}

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("pagedkv-radix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn json_reports_every_capacity() {
    let out = pagedkv(&[
        "--requests",
        "200",
        "--capacity",
        "1024,8192",
        "--page-size",
        "4",
        "--json",
    ]);
    let v = cli::json(&out);
    assert_eq!(v["requests"], 200);
    let rows = v["capacities"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (row, cap) in rows.iter().zip([1024, 8192]) {
        assert_eq!(row["capacity"], cap);
        for key in [
            "requests",
            "tokens_naive",
            "tokens_stored",
            "nodes",
            "prefix_hit_ratio",
            "whole_match_hit_ratio",
        ] {
            assert!(row.get(key).is_some(), "missing {key}");
        }
        let h = row["prefix_hit_ratio"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&h));
        assert!(row["tokens_stored"].as_u64().unwrap() <= cap);
    }
    // Same seed, same output.
    let again = pagedkv(&[
        "--requests",
        "200",
        "--capacity",
        "1024,8192",
        "--page-size",
        "4",
        "--json",
    ]);
    assert_eq!(out.stdout, again.stdout);
}

#[test]
fn word_files_show_their_words_in_the_tree() {
    let path = temp_file(
        "words.txt",
        "you are helpful . what is rust\nyou are helpful . what is go\n\n",
    );
    let arg = format!("file:{}", path.display());
    let out = pagedkv(&["--workload", &arg, "--capacity", "64", "--show-tree"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("[6] you are helpful . what is"), "{text}");
    assert!(
        text.contains("[1] rust") && text.contains("[1] go"),
        "{text}"
    );
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let empty = temp_file("empty.txt", "\n  \n");
    let empty_arg = format!("file:{}", empty.display());
    let cases: Vec<Vec<&str>> = vec![
        vec!["--capacity", "0"],
        vec!["--capacity", "8", "--page-size", "16"],
        vec!["--page-size", "0"],
        vec!["--requests", "0"],
        vec!["--workload", "bogus"],
        vec!["--workload", "file:/nonexistent/requests.txt"],
        vec!["--workload", &empty_arg],
        vec!["--min-turns", "3", "--max-turns", "1"],
        vec!["--popular-prob", "1.5"],
        vec!["--in-flight", "0"],
        vec!["--capacity", "12,x"],
    ];
    for args in cases {
        let out = pagedkv(&args);
        cli::bad_input(&out);
    }
}
