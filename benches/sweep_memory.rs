//! The main job's cost on this machine: `pagedkv sweep --quick` and `pagedkv sweep` run as a user
//! runs them (the release binary, defaults, nothing set in the environment), each in a child
//! process: its peak resident memory and CPU time (the child's own `rusage` from `wait4`), its
//! wall time and the load average beside it, and from its JSON the recommendation and the
//! last-level cache its probes were sized by. Not criterion: one run of a minute is what a user
//! waits for and holds. `cargo bench --bench sweep_memory` (`-- --quick`: the quick sweep alone).

use serde_json::Value;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Instant;

/// What issue 46 asks of each on an idle 2-core machine: peak memory (MB) and wall time (s).
const AIMS: [(&str, f64, f64); 2] = [("--quick", 250.0, 15.0), ("", 1000.0, 90.0)];

struct Cost {
    peak_mb: f64,
    cpu_s: f64,
    wall_s: f64,
    json: Value,
}

/// Runs `pagedkv ARGS` to its end; `None` (with the reason printed) when it fails.
// The child is reaped by `wait4`, not `Child::wait`: only `wait4` gives its own rusage.
#[allow(clippy::zombie_processes)]
fn run(args: &[&str]) -> Option<Cost> {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagedkv"))
        .args(args)
        .env_remove("PAGEDKV_LLC")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start pagedkv");
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut out)
        .expect("read its JSON");
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it and the status.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the child is ours and not yet reaped; both pointers are valid.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    let wall_s = start.elapsed().as_secs_f64();
    if pid < 0 || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        println!("pagedkv {}: failed (status {status})", args.join(" "));
        return None;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Some(Cost {
        // ru_maxrss is in KiB on Linux.
        peak_mb: usage.ru_maxrss as f64 * 1024.0 / 1e6,
        cpu_s: secs(usage.ru_utime) + secs(usage.ru_stime),
        wall_s,
        json: serde_json::from_str(&out).expect("the sweep's JSON"),
    })
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn main() {
    let quick_only = std::env::args().any(|a| a == "--quick");
    for (flag, aim_mb, aim_s) in AIMS {
        if quick_only && flag.is_empty() {
            continue;
        }
        let args: Vec<&str> = ["sweep", flag, "--json"]
            .into_iter()
            .filter(|a| !a.is_empty())
            .collect();
        let before = load_average();
        let Some(cost) = run(&args) else { continue };
        let llc = &cost.json["cpu_last_level_cache"];
        println!(
            "pagedkv {}: peak memory {:.0} MB (aim {aim_mb:.0}), CPU {:.1} s, wall {:.1} s (aim \
             {aim_s:.0} s idle; load average {before} before, {} after); recommended {}; last-level \
             cache {} MiB ({})",
            args[..args.len() - 1].join(" "),
            cost.peak_mb,
            cost.cpu_s,
            cost.wall_s,
            load_average(),
            cost.json["recommended_block_size"],
            llc["bytes"].as_u64().map_or(0, |b| b >> 20),
            llc["source"].as_str().unwrap_or("not reported"),
        );
    }
}
