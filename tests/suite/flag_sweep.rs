//! The flag sweep: every option of every simulator and of `translate`, found in the command's own
//! `--help`, given each of a few odd values (negative, zero, NaN, f64's largest and smallest,
//! 2^32) on a small run of its command, must end within its time with the command's answer or
//! our bad-input answer (exit code 2, one line or clap's text): no panic, no abort, no hang.
//! It found the hangs and panics of issue 30 in `sim sched`, `sim alloc` and `sim engine`.
//!
//! Cost: about 1,000 runs of a few tens of milliseconds, on every core: 10-20 s of CPU. The
//! hardware commands (attention, swap, sleep-wake, sweep, the labs) take seconds a run even when
//! small and are left to their own tests.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A command and the arguments that keep one run of it small.
const COMMANDS: &[(&[&str], &[&str])] = &[
    (&["sim", "engine"], &["--poisson", "2", "--requests", "10"]),
    (
        &["sim", "cluster"],
        &["--poisson", "2", "--requests", "10", "--replicas", "2"],
    ),
    (&["sim", "sched"], &["--jobs", "100"]),
    (
        &["sim", "cache"],
        &[
            "--policy",
            "lru",
            "--workload",
            "zipf",
            "--capacity",
            "10",
            "--requests",
            "1000",
            "--keys",
            "100",
        ],
    ),
    (&["sim", "radix"], &["--requests", "20"]),
    (&["sim", "alloc"], &["--requests", "50"]),
    (&["sim", "cow"], &[]),
    (
        &["sim", "thrash"],
        &[
            "--phases",
            "2",
            "--phase-len",
            "2000",
            "--universe",
            "4096",
            "--working-set",
            "256",
        ],
    ),
    (&["translate", "page"], &["--table", "4,7", "0x1234"]),
    (&["translate", "kv"], &["--table", "4,7", "3"]),
    (&["translate", "x86"], &["0x7f0012345678"]),
];

/// Odd values: below every range, at zero, not a number, at f64's ends, one past u32.
const VALUES: &[&str] = &["-1", "0", "NaN", "1e308", "1e-300", "4294967296"];

/// Far beyond any run here, even on a loaded machine: only a hang reaches it.
const TIMEOUT: Duration = Duration::from_secs(120);

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pagedkv"))
}

/// The options of `cmd` that take a value, from its `--help`.
fn options(cmd: &[&str]) -> Vec<String> {
    let out = bin().args(cmd).arg("--help").output().unwrap();
    assert!(out.status.success(), "{cmd:?} --help");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            // `-s, --long <VALUE>`: the long name, after the short one.
            let l = match l.strip_prefix('-') {
                Some(short) if !short.starts_with('-') => {
                    short.split_once(", ").map_or(l, |(_, long)| long)
                }
                _ => l,
            };
            let (name, rest) = l.strip_prefix("--")?.split_once(' ')?;
            rest.starts_with('<').then(|| format!("--{name}"))
        })
        .collect()
}

/// `base` with `option` set to `value` (replacing the base's own value of it).
fn argv(cmd: &[&str], base: &[&str], option: &str, value: &str) -> Vec<String> {
    let mut v: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
    let mut replaced = false;
    let mut i = 0;
    while i < base.len() {
        if base[i] == option {
            v.extend([option.to_string(), value.to_string()]);
            replaced = true;
            i += 2;
        } else {
            v.push(base[i].to_string());
            i += 1;
        }
    }
    if !replaced {
        // Before the positional arguments, after which an option would be taken for one.
        let at = v
            .iter()
            .position(|a| a.starts_with("0x"))
            .unwrap_or(v.len());
        v.splice(at..at, [option.to_string(), value.to_string()]);
    }
    v
}

/// What is wrong with one run, if anything.
fn run(args: &[String], dir: &Path) -> Option<String> {
    let mut child = bin()
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > TIMEOUT {
            child.kill().unwrap();
            child.wait().unwrap();
            return Some(format!("no end after {TIMEOUT:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let first = err.lines().next().unwrap_or_default().to_string();
    if err.contains("panicked") {
        return Some(format!("panicked: {first}"));
    }
    match status.code() {
        Some(0) => None,
        Some(2) if err.starts_with("error: ") => {
            let last = err.trim_end().lines().last().unwrap_or_default();
            (last != "For more information, try '--help'.")
                .then(|| format!("clap's text cut: {err}"))
        }
        Some(2) if err.starts_with("pagedkv: ") && err.trim_end().lines().count() == 1 => None,
        Some(c) => Some(format!("exit code {c}: {err}")),
        None => Some(format!("killed by {status:?}: {first}")),
    }
}

#[test]
fn every_option_meets_odd_values_without_a_panic_or_a_hang() {
    let dir = std::env::temp_dir().join(format!("pagedkv-flag-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut runs = Vec::new();
    for (cmd, base) in COMMANDS {
        let opts = options(cmd);
        assert!(!opts.is_empty(), "{cmd:?}: no options found in --help");
        for o in &opts {
            for v in VALUES {
                runs.push(argv(cmd, base, o, v));
            }
        }
    }
    assert!(runs.len() > 500, "{} runs", runs.len());
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(args) = runs.get(i) else { break };
                if let Some(why) = run(args, &dir) {
                    failures
                        .lock()
                        .unwrap()
                        .push(format!("pagedkv {}: {why}", args.join(" ")));
                }
            });
        }
    });
    std::fs::remove_dir_all(&dir).unwrap();
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} runs:\n{}",
        failures.len(),
        runs.len(),
        failures.join("\n")
    );
}
