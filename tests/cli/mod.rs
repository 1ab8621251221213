//! How every CLI test runs the `pagedkv` binary (`mod cli;` in the test file).

use std::process::{Command, Output};

/// Runs `pagedkv` with `args` to the end; its exit status and output.
#[allow(dead_code)] // not every test file runs the binary this way
pub fn pagedkv(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pagedkv"))
        .args(args)
        .output()
        .expect("run pagedkv")
}

/// Runs `pagedkv` with `args` and the environment variable `key` set to `value`.
#[allow(dead_code)] // not every test file sets the environment
pub fn pagedkv_with_env(args: &[&str], key: &str, value: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pagedkv"))
        .args(args)
        .env(key, value)
        .output()
        .expect("run pagedkv")
}

/// The JSON `pagedkv` printed, after checking that it succeeded (its stderr in the message if not).
#[allow(dead_code)] // not every test file reads JSON
pub fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("pagedkv printed JSON")
}

/// Checks that `out` is bad input as the CLI reports it, and returns stderr: exit code 2 and
/// either our own error in one line (`pagedkv: ...`), or clap's usage error in clap's whole text
/// (`error: ...` to the pointer to --help), or the help of a command given no subcommand.
#[allow(dead_code)] // not every test file checks bad input
pub fn bad_input(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    if err.starts_with("error: ") {
        let last = err.trim_end().lines().last().unwrap_or_default();
        assert_eq!(
            last, "For more information, try '--help'.",
            "clap's text: {err}"
        );
    } else if err.contains("\nUsage: pagedkv") {
        assert!(
            err.contains("\nCommands:\n"),
            "a command's help lists its commands: {err}"
        );
    } else {
        assert!(err.starts_with("pagedkv: "), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    }
    err
}

/// Like [`bad_input`], and the error is our own one line (not clap's).
#[allow(dead_code)]
pub fn own_error(out: &Output) -> String {
    let err = bad_input(out);
    assert!(
        err.starts_with("pagedkv: "),
        "our own error, not clap's: {err}"
    );
    err
}

/// Like [`bad_input`], and the error is clap's.
#[allow(dead_code)]
pub fn clap_error(out: &Output) -> String {
    let err = bad_input(out);
    assert!(err.starts_with("error: "), "clap's error: {err}");
    err
}
