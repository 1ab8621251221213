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
