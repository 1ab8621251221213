//! `pagedkv attention --trace FILE`: a ragged batch from a trace's first requests (prompt + output
//! tokens, capped by --max-context), on the CPU; bad traces exit 2 with one line.

use crate::cli;

use pagedkv::attention::tolerance;
use pagedkv::kv::Dtype;

fn attention(args: &[&str]) -> std::process::Output {
    cli::pagedkv(&[&["attention"], args].concat())
}

const TRACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/azure_llm_2023_conv.csv");

/// The first `n` requests' prompt + output tokens, read here from the CSV text.
fn first_contexts(n: usize) -> Vec<u64> {
    std::fs::read_to_string(TRACE)
        .unwrap()
        .lines()
        .skip(1)
        .take(n)
        .map(|l| {
            l.split(',')
                .skip(1)
                .map(|x| x.trim().parse::<u64>().unwrap())
                .sum()
        })
        .collect()
}

#[test]
fn a_trace_batch_is_the_first_requests_contexts_and_passes_the_oracle() {
    let small = ["--heads", "8", "--kv-heads", "2", "--iters", "1"];
    let mut args = vec![
        "--trace", TRACE, "--batch", "4", "--device", "cpu", "--json",
    ];
    args.extend(small);
    let v = cli::json(&attention(&args));
    let want = first_contexts(4);
    assert_eq!(v["batch"], 4);
    assert_eq!(v["total_tokens"].as_u64(), Some(want.iter().sum()));
    assert_eq!(v["max_context"].as_u64(), want.iter().copied().max());
    // The CLI's default dtype, f16.
    assert!(v["max_rel_error"].as_f64().unwrap() <= tolerance(Dtype::F16));

    // Capped: every context at most 100 tokens.
    let mut args = vec!["--trace", TRACE, "--batch", "4", "--max-context", "100"];
    args.extend(["--device", "cpu", "--json"]);
    args.extend(small);
    let v = cli::json(&attention(&args));
    let capped: u64 = want.iter().map(|&c| c.min(100)).sum();
    assert_eq!(v["total_tokens"].as_u64(), Some(capped));
    assert_eq!(v["max_context"], 100);
}

#[test]
fn bad_traces_exit_2_with_one_line() {
    let dir = std::env::temp_dir().join(format!("pagedkv-attn-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.csv");
    std::fs::write(&bad, "prompt_tokens,output_tokens\n10,2\n7,x\n").unwrap();
    let empty = dir.join("empty.csv");
    std::fs::write(&empty, "").unwrap();
    let (bad, empty) = (bad.to_str().unwrap(), empty.to_str().unwrap());
    for case in [
        vec!["--trace", bad],
        vec!["--trace", empty],
        vec!["--trace", "/nonexistent/trace.csv"],
        vec!["--trace", TRACE, "--max-context", "0"],
        vec!["--trace", TRACE, "--batch", "0"],
    ] {
        let mut args = case.clone();
        args.extend(["--device", "cpu", "--json"]);
        let out = attention(&args);
        cli::bad_input(&out);
    }
    // A trace excludes --context and --lens (clap's own usage error, also exit 2).
    let out = attention(&["--trace", TRACE, "--context", "10"]);
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(dir).unwrap();
}
