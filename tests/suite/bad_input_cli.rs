//! Inputs that once crashed, hung or were silently accepted (issue 30's fuzzing), each run through
//! the CLI: now bad input ends in one line and exit code 2 (or clap's text), a run that cannot write
//! its output in one line and exit code 1, and a distant arrival costs two steps, not one a step.
//! Every case is small: the whole file runs in a few seconds.

use crate::cli;

use cli::{bad_input, own_error, pagedkv};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pagedkv-bad-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(dir: &Path, name: &str, bytes: impl AsRef<[u8]>) -> String {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p.display().to_string()
}

/// Runs `pagedkv` with its address space limited to 2 GiB: an allocation beyond that aborts, so
/// a run that ends in our exit code 2 refused its sizes before allocating them.
fn pagedkv_limited(args: &[&str]) -> Output {
    pagedkv_limited_to(
        2 << 30,
        Command::new(env!("CARGO_BIN_EXE_pagedkv")).args(args),
    )
}

/// Runs `cmd` with its address space limited to `bytes`.
fn pagedkv_limited_to(bytes: u64, cmd: &mut Command) -> Output {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            match libc::setrlimit(libc::RLIMIT_AS, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    cmd.output().expect("run pagedkv")
}

/// `pagedkv sim engine --scenario F ...` with a scenario of `engine` settings and one request.
fn scenario(dir: &Path, name: &str, engine: &str, arrival: &str) -> String {
    write(
        dir,
        name,
        format!(
            r#"{{"engine":{engine},"requests":[{{"id":"a","prompt_len":3,"output_len":2}},{{"id":"b","arrival":{arrival},"prompt_len":3,"output_len":2}}]}}"#
        ),
    )
}

#[test]
fn sizes_from_files_and_flags_are_range_checked_once() {
    let dir = temp_dir("sizes");
    // Was: exit 101, "attempt to divide by zero" (the block size cast to u32); 2^32 + 16 ran as
    // block 16.
    for bs in ["4294967296", "4294967312"] {
        let f = scenario(
            &dir,
            "s.json",
            &format!(r#"{{"block_size":{bs},"num_gpu_blocks":10}}"#),
            "0",
        );
        let err = own_error(&pagedkv(&["sim", "engine", "--scenario", &f]));
        assert!(
            err.contains(&format!("block size {bs} is more than")),
            "{err}"
        );
        let err = own_error(&pagedkv(&[
            "sim",
            "engine",
            "--poisson",
            "1",
            "--requests",
            "5",
            "--block-size",
            bs,
        ]));
        assert!(
            err.contains(&format!("block size {bs} is more than")),
            "{err}"
        );
    }
    let f = scenario(
        &dir,
        "p.json",
        r#"{"block_size":65536,"num_gpu_blocks":65536}"#,
        "0",
    );
    let err = own_error(&pagedkv(&["sim", "engine", "--scenario", &f]));
    assert!(
        err.contains("more than the 2^31 the engine counts"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_distant_arrival_is_reached_in_two_steps() {
    let dir = temp_dir("far");
    // Was: spun step by step with a step log growing by 450 MB in 15 s.
    let f = scenario(
        &dir,
        "far.json",
        r#"{"block_size":4,"num_gpu_blocks":10}"#,
        "1e15",
    );
    let log = dir.join("steps.jsonl");
    let out = pagedkv(&[
        "sim",
        "engine",
        "--scenario",
        &f,
        "--clock",
        "steps",
        "--step-log",
        log.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let steps: Vec<u64> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["step"]
                .as_u64()
                .unwrap()
        })
        .collect();
    // "a" in steps 0-1, the unreported finish in 2, idle from 3 to the step before "b" arrives.
    let arrival = 1_000_000_000_000_000;
    assert_eq!(steps, [0, 1, 2, 3, arrival - 1, arrival, arrival + 1]);
    // Past the clock's reach: refused, not wrapped round.
    let f = scenario(
        &dir,
        "farther.json",
        r#"{"block_size":4,"num_gpu_blocks":10}"#,
        "1e300",
    );
    let err = own_error(&pagedkv(&[
        "sim",
        "engine",
        "--scenario",
        &f,
        "--clock",
        "steps",
    ]));
    assert!(
        err.contains("beyond the step clock's last arrival"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn steps_and_times_that_cannot_end_are_refused() {
    let dir = temp_dir("hang");
    let trace = write(
        &dir,
        "t.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,2\n18446744073709551616,10,2\n",
    );
    // Was: sim alloc spun (the step index saturated and wrapped); sim sched never ended.
    for (args, want) in [
        (
            &["sim", "alloc", "--trace", &trace][..],
            "beyond the last step counted",
        ),
        (
            &["sim", "alloc", "--rate", "1e-300"],
            "beyond the last step counted",
        ),
        (
            &["sim", "alloc", "--step-ms", "1e-300"],
            "beyond the last step counted",
        ),
        (
            &[
                "sim",
                "sched",
                "--switch-cost",
                "1e308",
                "--policy",
                "srpt",
                "--jobs",
                "100",
            ],
            "the simulated time passes f64's largest value",
        ),
    ] {
        let err = own_error(&pagedkv(args));
        assert!(err.contains(want), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn counts_beyond_two_to_the_forty_are_refused_where_they_are_parsed() {
    // Was: exit 101, "capacity overflow", for counts >= 2^61 (lab switch: exit 2 with the panic).
    for args in [
        &[
            "sim",
            "cache",
            "--policy",
            "lru",
            "--workload",
            "zipf",
            "--capacity",
            "10",
            "--requests",
        ][..],
        &["sim", "radix", "--requests"],
        &["sim", "radix", "--apps"],
        &["sim", "radix", "--system-tokens"],
        &["sim", "engine", "--multiturn", "5", "--requests"],
        &[
            "sim",
            "cache",
            "--policy",
            "lru",
            "--workload",
            "zipf",
            "--capacity",
            "10",
            "--curve-points",
        ],
        &["attention", "--batch"],
        &["sleep-wake", "--cycles"],
        &["lab", "tlb", "--reps"],
        &["lab", "switch", "--reps"],
    ] {
        let mut argv = args.to_vec();
        argv.push("2305843009213693952");
        let err = bad_input(&pagedkv(&argv));
        assert!(
            err.contains("too large: at most 1099511627776"),
            "{argv:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{argv:?}: {err}");
    }
}

#[test]
fn memory_is_refused_from_what_the_input_asks_before_it_is_built() {
    let dir = temp_dir("memory");
    // One Mooncake line of 1.5 MB asks for 102,400,000 prompt tokens, twice: was 4 GB each, and
    // an abort for two. The prompts' tokens and the caches over them are counted first.
    let ids: Vec<String> = (0..200_000).map(|i| i.to_string()).collect();
    let line = |t: u32| {
        format!(
            "{{\"timestamp\": {t}, \"input_length\": 102400000, \"output_length\": 1, \"hash_ids\": [{}]}}\n",
            ids.join(",")
        )
    };
    let trace = write(&dir, "big.jsonl", line(0) + &line(1));
    let file = format!("file:{trace}");
    for (args, want) in [
        (
            &["sim", "radix", "--workload", &file][..],
            "(204800000 prompt tokens) needs",
        ),
        // Many small allocations, none large enough for the allocator's own check.
        (
            &["sim", "radix", "--requests", "100000000"],
            "sim radix with 100000000 multiturn requests",
        ),
        (
            &[
                "sim",
                "engine",
                "--multiturn",
                "5",
                "--requests",
                "100000000",
            ],
            "--multiturn with 100000000 requests",
        ),
        (
            &[
                "sim",
                "cache",
                "--policy",
                "lru",
                "--workload",
                "zipf",
                "--capacity",
                "10",
                "--requests",
                "274877906944",
            ],
            "sim cache with 274877906944 requests needs",
        ),
    ] {
        let err = own_error(&pagedkv_limited(args));
        assert!(
            err.contains(want) && err.contains("of memory, more than the"),
            "{args:?}: {err}"
        );
    }
    // Was: killed by the OOM killer. Replies of 2^32 tokens pass no bound computed beforehand
    // (a conversation of one turn has none): the generator stops where its tokens pass the memory.
    let args = [
        "sim",
        "radix",
        "--requests",
        "20",
        "--reply-tokens",
        "4294967296",
    ];
    let err = own_error(&pagedkv_limited(&args));
    assert!(
        err.contains("sim radix with 20 multiturn requests: the prompts grew past")
            && err.contains("need more than the"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_full_disk_is_one_line_and_exit_code_1() {
    let dir = temp_dir("full");
    let f = scenario(
        &dir,
        "s.json",
        r#"{"block_size":4,"num_gpu_blocks":10}"#,
        "3",
    );
    // Was: exit 101, "failed printing to stdout".
    for args in [
        &["info"][..],
        &["info", "--json"],
        &["sim", "engine", "--scenario", &f, "--clock", "steps"],
        &["sim", "sched", "--jobs", "100"],
        &["sim", "cluster", "--poisson", "2", "--requests", "10"],
        &["translate", "x86", "0x7f0012345678"],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_pagedkv"))
            .args(args)
            .stdout(full)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(
            err.trim_end(),
            "pagedkv: cannot write to standard output: No space left on device (os error 28)",
            "{args:?}"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn scales_that_are_not_numbers_are_bad_input() {
    // Was: exit 1, "relative error inf exceeds 2e-3", as if the kernels were wrong.
    for (flag, value) in [
        ("--scale", "NaN"),
        ("--scale", "inf"),
        ("--scale", "1e308"),
        ("--scale", "-1"),
        ("--outlier-magnitude", "NaN"),
        ("--activation-scale", "inf"),
    ] {
        let mut args = vec![
            "attention",
            "--device",
            "cpu",
            "--batch",
            "1",
            "--context",
            "16",
        ];
        args.extend([flag, value]);
        // Refused where the flag is parsed: with the values it shapes drawn or not.
        for values in ["activations", "uniform"] {
            let mut args = args.clone();
            args.extend(["--values", values]);
            let err = bad_input(&pagedkv(&args));
            assert!(
                err.contains("is not a positive finite number"),
                "{flag} {value}: {err}"
            );
        }
    }
}

#[test]
fn files_cut_short_marked_or_saying_a_thing_twice_are_refused() {
    let dir = temp_dir("files");
    // The last line cut inside a number ("44" of the full line), for each line-oriented reader.
    let azure = write(
        &dir,
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n0,374,44\n1,396,4",
    );
    let jobs = write(&dir, "j.csv", "arrival,size\n0,1.5\n1,2");
    let keys = write(&dir, "k.txt", "1\n2\n3");
    let words = write(&dir, "w.txt", "1 2 3\n1 2 4");
    let file = format!("file:{words}");
    for (args, line) in [
        (&["sim", "engine", "--trace", &azure][..], 3),
        (&["sim", "alloc", "--trace", &azure], 3),
        (&["sim", "sched", "--jobs-file", &jobs], 3),
        (
            &[
                "sim",
                "cache",
                "--policy",
                "lru",
                "--workload",
                &format!("trace:{keys}"),
                "--capacity",
                "2",
            ],
            3,
        ),
        (&["sim", "radix", "--workload", &file], 2),
    ] {
        let err = own_error(&pagedkv(args));
        assert!(
            err.contains(&format!("line {line}")) && err.contains("without a newline"),
            "{args:?}: {err}"
        );
    }
    // A byte-order mark: was read as a words file; now the Mooncake trace it is.
    let moon =
        "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [4, 9]}\n";
    let marked = write(&dir, "m.jsonl", format!("\u{feff}{moon}{moon}"));
    let out = pagedkv(&[
        "sim",
        "radix",
        "--workload",
        &format!("file:{marked}"),
        "--json",
    ]);
    let v = cli::json(&out);
    assert_eq!(
        (v["requests"].as_u64(), v["prompt_tokens"].as_u64()),
        (Some(2), Some(1200))
    );
    // A key twice: was "the last wins".
    let profile = write(
        &dir,
        "p.json",
        r#"{"device":"x","source":"y","measured":true,"efficiency":[{"block_size":16,"efficiency":0.5,"efficiency":0.9}]}"#,
    );
    let swap = write(
        &dir,
        "s.json",
        r#"{"device":"x","rows":[{"block_size":16,"swap_in":{"batched_gbps":10},"swap_out":{"batched_gbps":12,"batched_gbps":99}}]}"#,
    );
    for args in [
        &[
            "sim",
            "engine",
            "--poisson",
            "1",
            "--requests",
            "5",
            "--profile",
            &profile,
        ][..],
        &[
            "sim",
            "engine",
            "--poisson",
            "1",
            "--requests",
            "5",
            "--cpu-offload-blocks",
            "10",
            "--offload-bandwidth",
            &swap,
        ],
    ] {
        let err = own_error(&pagedkv(args));
        assert!(err.contains("duplicate key"), "{args:?}: {err}");
    }
    // A 4 MB field is quoted by its first characters and its size.
    let huge = "7".repeat(4 << 20);
    let wide = write(
        &dir,
        "w.csv",
        format!("TIMESTAMP,ContextTokens,GeneratedTokens\n0,{huge},4\n"),
    );
    let err = own_error(&pagedkv(&["sim", "engine", "--trace", &wide]));
    assert!(
        err.len() < 400 && err.contains("(4194304 characters)"),
        "{}",
        &err[..err.len().min(400)]
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_last_level_cache_setting_that_is_not_a_size_is_refused_before_any_command() {
    for value in ["big", "", "0", "5G", "-1M", "99999999999999999999G", "1.5M"] {
        let out = cli::pagedkv_with_env(&["info"], "PAGEDKV_LLC", value);
        let err = own_error(&out);
        assert!(
            err.contains("PAGEDKV_LLC must be a cache size"),
            "{value}: {err}"
        );
        assert!(out.stdout.is_empty(), "{value}: nothing ran");
    }
    // A valid one is taken: the sweep's probe note names it and the limits' bytes follow it.
    let out = cli::pagedkv_with_env(
        &[
            "sweep",
            "--json",
            "--no-end-to-end",
            "--no-attention",
            "--rounds",
            "1",
            "--reps",
            "1",
            "--requests",
            "50",
            "--probe-mib",
            "4",
        ],
        "PAGEDKV_LLC",
        "512K",
    );
    let v = cli::json(&out);
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("PAGEDKV_LLC sets the last-level cache to 512 KiB"),
        "{notes}"
    );
    assert!(notes.contains("limits over 4 MiB"), "{notes}");
}

#[test]
fn a_kernel_set_cap_that_names_no_set_is_refused_and_one_that_does_is_obeyed() {
    for value in ["avx", "", "AVX2", "sse", "avx512 "] {
        let out = cli::pagedkv_with_env(&["info"], "PAGEDKV_CPU_KERNELS", value);
        let err = own_error(&out);
        assert!(
            err.contains("PAGEDKV_CPU_KERNELS must be portable, avx2 or avx512"),
            "{value}: {err}"
        );
        assert!(out.stdout.is_empty(), "{value}: nothing ran");
    }
    // The portable loops, checked against the oracle, beside a one-lane FMA limit.
    let args = [
        "attention",
        "--device",
        "cpu",
        "--batch",
        "2",
        "--context",
        "100",
        "--json",
    ];
    let v = cli::json(&cli::pagedkv_with_env(
        &args,
        "PAGEDKV_CPU_KERNELS",
        "portable",
    ));
    assert_eq!(v["roofline"]["fma"]["lanes"], 1, "{v}");
    assert_eq!(v["checked"], true, "{v}");
}

#[test]
fn a_sweep_without_bandwidth_probes_does_not_ask_for_their_memory() {
    // Was: refused in 2 GiB for the probes' buffers (4x the last-level cache and more) that
    // --no-bandwidth never maps.
    let out = pagedkv_limited(&[
        "sweep",
        "--no-bandwidth",
        "--no-end-to-end",
        "--requests",
        "50",
        "--json",
    ]);
    let v = cli::json(&out);
    assert_eq!(v["basis"], "throughput proxy");
    // With the probes, a pool beyond the limit is refused before any probe runs, naming it.
    let out = pagedkv_limited(&["sweep", "--probe-mib", "4096", "--no-end-to-end"]);
    let err = own_error(&out);
    assert!(
        err.contains("the CPU bandwidth probe of 4 GiB needs"),
        "{err}"
    );
}

/// `pagedkv sweep --json --no-end-to-end ARGS`, one round of one repetition over 50 requests,
/// with a 16 MiB cache in 768 MiB of address space.
fn sweep_in_768_mib(args: &[&str]) -> serde_json::Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pagedkv"));
    cmd.env("PAGEDKV_LLC", "16M")
        .args([
            "sweep",
            "--json",
            "--no-end-to-end",
            "--rounds",
            "1",
            "--reps",
            "1",
        ])
        .args(["--requests", "50"])
        .args(args);
    cli::json(&pagedkv_limited_to(768 << 20, &mut cmd))
}

#[test]
fn a_default_probe_pool_too_large_for_the_memory_available_is_halved_with_a_note() {
    // With a 16 MiB cache the default pool is 128 MiB: two probes' K, V and copy-out (384 MiB)
    // and the limits' 64 MiB. In 768 MiB of address space, less what the binary maps at start,
    // they may take under 384 MiB: the pool is halved (was: refused, or mapped whole and the
    // sweep killed).
    let v = sweep_in_768_mib(&["--attention-batch", "2", "--attention-context", "300"]);
    let pool_mib = v["probe"]["pool_bytes"].as_u64().unwrap() >> 20;
    assert!([16, 32, 64].contains(&pool_mib), "{pool_mib} MiB");
    let notes = v["notes"].to_string();
    assert!(
        notes.contains(&format!(
            "probe pool {pool_mib} MiB instead of the default 128 MiB"
        )),
        "{notes}"
    );
    assert_eq!(v["cpu_last_level_cache"]["source"], "env");
    assert_eq!(v["cpu_last_level_cache"]["bytes"], 16 << 20);
    // Given with --probe-mib, a pool is never halved: refused (the 2 GiB test above), or taken.
    let v = sweep_in_768_mib(&["--no-attention", "--probe-mib", "8"]);
    assert_eq!(v["probe"]["pool_bytes"], 8 << 20);
    assert!(!v["notes"].to_string().contains("instead of the default"));
}
