//! `pagedkv info --sass FILE`: the static report of a file's kernels through cuobjdump. On this
//! build's own fatbin (written out from the library) it must give the figures `pagedkv info` gives
//! for the same kernels; bad input is one line and exit code 2. Skips, saying why, what needs the
//! kernels or cuobjdump when the build had neither.

use crate::cli;

use pagedkv::kernels::{self, foreign, report};

/// This build's `module` fatbin written to a file of its own, and the directory to remove.
fn fatbin_file(module: &str, tag: &str) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    if !kernels::KERNELS_BUILT || report::availability().is_err() {
        eprintln!("skipping: no kernels or no static report in this build");
        return None;
    }
    if foreign::cuobjdump().is_none() {
        eprintln!("skipping: no cuobjdump");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("pagedkv-info-sass-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{module}.fatbin"));
    std::fs::write(&path, kernels::module(module).unwrap().fatbin).unwrap();
    Some((path, dir))
}

#[test]
fn our_fatbin_read_as_a_foreign_file_gives_the_builds_figures() {
    let Some((path, dir)) = fatbin_file("paged_attention", "same") else {
        return;
    };
    let smem = kernels::ATTENTION_SMEM_BYTES.to_string();
    let out = cli::pagedkv(&[
        "info",
        "--sass",
        path.to_str().unwrap(),
        "--kernel",
        "paged_attention_f16_d128_g",
        "--dynamic-smem",
        &smem,
        "--json",
    ]);
    let json = cli::json(&out);
    let found = json["kernels"].as_array().unwrap();
    let names: Vec<&str> = found
        .iter()
        .map(|k| k["kernel"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [1, 2, 4, 8].map(|g| format!("paged_attention_f16_d128_g{g}")),
        "every group, nothing else"
    );
    for k in found {
        let built = report::kernel(k["kernel"].as_str().unwrap()).unwrap();
        for (key, figure) in [
            ("issue_per_token", built.issue_per_token),
            ("issue_budget_per_token", built.issue_budget_per_token),
            ("bytes_in_flight_per_sm", built.bytes_in_flight_per_sm),
        ] {
            let (a, b) = (k[key].as_f64().unwrap(), figure.unwrap());
            assert!(
                (a - b).abs() <= 1e-9 * b,
                "{} {key}: {a} vs {b}",
                built.kernel
            );
        }
        assert_eq!(k["registers"].as_u64(), Some(u64::from(built.registers)));
        assert_eq!(k["ctas_per_sm"].as_u64(), built.ctas_per_sm.map(u64::from));
        assert_eq!(k["threads_from"], "launch_bounds");
        assert!(k["spill_bytes"].is_null(), "unknown for a foreign file");
    }
    // Read once per query head (vLLM's way) at group 4: four times the cost of a token.
    let out = cli::pagedkv(&[
        "info",
        "--sass",
        path.to_str().unwrap(),
        "--kernel",
        "paged_attention_f16_d128_g4",
        "--group",
        "4",
        "--heads-per-cta",
        "1",
        "--bytes-per-token",
        "512",
        "--json",
    ]);
    let json = cli::json(&out);
    let k = &json["kernels"][0];
    let built = report::kernel("paged_attention_f16_d128_g4").unwrap();
    let a = k["issue_per_token"].as_f64().unwrap();
    let b = 4.0 * built.issue_per_token.unwrap();
    assert!((a - b).abs() <= 1e-9 * b, "{a} vs {b}");
    // The table: the same columns as `pagedkv info`, the names under it.
    let out = cli::pagedkv(&[
        "info",
        "--sass",
        path.to_str().unwrap(),
        "--kernel",
        "paged_attention_bf16_d128_g8",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("issue/tok") && text.contains("budget"),
        "{text}"
    );
    assert!(text.contains("#1 paged_attention_bf16_d128_g8"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_files_and_names_are_one_line_with_exit_code_2() {
    // Needs no kernels: a file that is not there, and no cuobjdump.
    let out = cli::pagedkv(&["info", "--sass", "/nonexistent/x.cubin"]);
    let err = cli::own_error(&out);
    assert!(err.contains("cannot read /nonexistent/x.cubin"), "{err}");
    let out = cli::pagedkv(&["info", "--sass", "tests"]);
    assert!(cli::own_error(&out).contains("cannot read tests: not a file"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pagedkv"))
        .args(["info", "--sass", "Cargo.toml"])
        .env("PAGEDKV_SKIP_SASS", "1")
        .output()
        .unwrap();
    let err = cli::own_error(&out);
    assert!(err.contains("no cuobjdump"), "{err}");
    let out = cli::pagedkv(&[
        "info",
        "--sass",
        "Cargo.toml",
        "--group",
        "4",
        "--heads-per-cta",
        "3",
    ]);
    assert!(cli::own_error(&out).contains("must divide"));
    // Clap's whole text for options without --sass, or half of a pair.
    for args in [
        &["info", "--kernel", "x"][..],
        &["info", "--sass", "Cargo.toml", "--head-dim", "128"],
        &[
            "info",
            "--sass",
            "Cargo.toml",
            "--head-dim",
            "128",
            "--bytes-per-token",
            "512",
        ],
        &["info", "--sass", "Cargo.toml", "--threads", "0"],
    ] {
        let err = cli::bad_input(&cli::pagedkv(args));
        assert!(err.starts_with("error: "), "{args:?}: {err}");
    }
    if foreign::cuobjdump().is_none() {
        eprintln!("skipping the rest: no cuobjdump");
        return;
    }
    let out = cli::pagedkv(&["info", "--sass", "Cargo.toml"]);
    let err = cli::own_error(&out);
    assert!(err.contains("no sm_90 device code"), "{err}");
    let Some((path, dir)) = fatbin_file("stream", "names") else {
        return;
    };
    let out = cli::pagedkv(&[
        "info",
        "--sass",
        path.to_str().unwrap(),
        "--kernel",
        "stream_reed",
    ]);
    let err = cli::own_error(&out);
    assert!(
        err.contains("matches 'stream_reed'") && err.contains("stream_read"),
        "near names: {err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
