//! How every CLI test runs the `pagedkv` binary (`mod cli;` in the test file).

use std::process::{Command, Output};

/// Runs `pagedkv` with `args` to the end; its exit status and output.
pub fn pagedkv(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pagedkv"))
        .args(args)
        .output()
        .expect("run pagedkv")
}
