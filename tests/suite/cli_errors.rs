//! How the CLI meets mistakes and closed pipes: clap's usage errors keep clap's whole text (what is
//! missing, "did you mean", the usage line), a missing subcommand lists the commands, negative
//! numbers meet the option's range, our own errors are one line, sizes beyond the memory
//! available are refused before anything is allocated, and a closed stdout ends the run quietly.

use crate::cli;

use cli::{bad_input, clap_error, own_error, pagedkv};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Output, Stdio};

#[test]
fn a_missing_subcommand_lists_the_commands() {
    for (args, names) in [
        (&[][..], &["attention", "sweep", "sim", "lab", "info"][..]),
        (&["sim"], &["sched", "cache", "engine", "radix", "alloc"]),
        (&["lab"], &["switch", "faults", "tlb", "overcommit"]),
        (&["translate"], &["page", "kv", "x86"]),
    ] {
        let err = bad_input(&pagedkv(args));
        assert!(err.contains("Commands:"), "{args:?}: {err}");
        for name in names {
            assert!(
                err.lines().any(|l| l.trim_start().starts_with(name)),
                "{args:?} lists {name}: {err}"
            );
        }
    }
}

#[test]
fn missing_arguments_are_listed_and_misspellings_get_a_suggestion() {
    let err = clap_error(&pagedkv(&["sim", "cache"]));
    assert!(
        err.contains("the following required arguments were not provided:"),
        "{err}"
    );
    for arg in ["--policy", "--workload", "--capacity"] {
        assert!(err.contains(arg), "{arg} listed: {err}");
    }
    let err = clap_error(&pagedkv(&["sweep", "--qiuck"]));
    assert!(err.contains("unexpected argument '--qiuck'"), "{err}");
    assert!(err.contains("similar argument exists: '--quick'"), "{err}");
    let err = clap_error(&pagedkv(&["sim", "engin"]));
    assert!(err.contains("similar subcommand exists: 'engine'"), "{err}");
}

#[test]
fn negative_numbers_meet_the_range_of_the_option() {
    for (args, want) in [
        (
            &["attention", "--batch", "-4"][..],
            "invalid value '-4' for '--batch <BATCH>': must be at least 1",
        ),
        (
            &["attention", "--heads", "-4"],
            "invalid value '-4' for '--heads <HEADS>': must be at least 0",
        ),
        (
            &["swap", "--iters", "-1"],
            "invalid value '-1' for '--iters <ITERS>': must be 1 to 1000",
        ),
        (
            &["sim", "alloc", "--capacity", "-4"],
            "invalid value '-4' for '--capacity <CAPACITY>': must be at least 0",
        ),
    ] {
        let err = clap_error(&pagedkv(args));
        assert!(
            err.starts_with(&format!("error: {want}\n")),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn our_own_errors_are_one_line() {
    let err = own_error(&pagedkv(&[
        "attention",
        "--device",
        "cpu",
        "--heads",
        "3",
        "--kv-heads",
        "2",
    ]));
    assert!(
        err.contains("--heads 3 is not a multiple of --kv-heads 2"),
        "{err}"
    );
}

/// Runs `pagedkv` with its address space limited to `bytes` (RLIMIT_AS): an allocation beyond it
/// fails at once (and aborts), so a run that ends with our exit code 2 allocated nothing that big.
fn pagedkv_limited(args: &[&str], bytes: u64) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pagedkv"));
    cmd.args(args);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.output().expect("run pagedkv")
}

#[test]
fn sizes_beyond_the_memory_available_are_refused_before_allocating() {
    const LIMIT: u64 = 2 << 30;
    for (args, what) in [
        (
            &["attention", "--device", "cpu", "--batch", "100000"][..],
            "attention (batch 100000, longest context 4096) needs",
        ),
        (
            &[
                "attention",
                "--device",
                "cpu",
                "--context",
                "1000000000",
                "--batch",
                "1",
            ],
            "attention (batch 1, longest context 1000000000) needs",
        ),
        (
            &["sleep-wake", "--device", "cpu", "--pool-mib", "100000000"],
            "sleep-wake --pool-mib 100000000 needs",
        ),
        (
            &[
                "sleep-wake",
                "--device",
                "cpu",
                "--chunk-sweep",
                "--sweep-pool-mib",
                "100000000",
                // A pool of its own that fits in the limit, so that the sweep's is the one refused.
                "--pool-mib",
                "64",
            ],
            "sleep-wake --sweep-pool-mib 100000000 needs",
        ),
        (
            &[
                "swap",
                "--device",
                "cpu",
                "--swap-mib",
                "16384",
                "--pool-factor",
                "4",
            ],
            "a swap over a pool of 64 GiB needs",
        ),
        (
            &[
                "sweep",
                "--device",
                "cpu",
                "--probe-mib",
                "65536",
                "--no-end-to-end",
            ],
            "the CPU bandwidth probe of 64 GiB needs",
        ),
    ] {
        let out = pagedkv_limited(args, LIMIT);
        let err = own_error(&out);
        assert!(err.contains(what), "{args:?}: {err}");
        assert!(err.contains("of memory, more than the"), "{args:?}: {err}");
        assert!(err.trim_end().ends_with("available"), "{args:?}: {err}");
    }
    // What no command checks itself meets the allocator's backstop: one request over the memory
    // available is refused before it is tried.
    for args in [
        &["sim", "sched", "--jobs", "4000000000"][..],
        &["attention", "--device", "cpu", "--batch", "1099511627776"],
    ] {
        let err = own_error(&pagedkv_limited(args, LIMIT));
        assert!(
            err.contains("pagedkv: one allocation of "),
            "{args:?}: {err}"
        );
        assert!(
            err.contains("of memory available; choose smaller sizes"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    for args in [&["info"][..], &["info", "--json"]] {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader); // closed before pagedkv writes its first byte
        let out = Command::new(env!("CARGO_BIN_EXE_pagedkv"))
            .args(args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .expect("run pagedkv");
        let err = String::from_utf8_lossy(&out.stderr);
        let quiet = out.status.code() == Some(0) || out.status.signal() == Some(libc::SIGPIPE);
        assert!(quiet, "{args:?}: {:?}: {err}", out.status);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
