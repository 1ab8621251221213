//! The fault sweep: every CLI path with `--device cuda`, run once clean to learn from the emulated
//! driver which of its functions the path calls and how often (`PAGEDKV_EMU_CALLS`), then once per
//! function and call (its first, second and last) with that call failing
//! (`PAGEDKV_EMU_FAULTS=FUNCTION@N=CUDA_ERROR_UNKNOWN`). Every run must end without a panic or a
//! hang, say on stderr in one line which driver function failed, leave nothing leaked
//! (`PAGEDKV_EMU_LEAKS=1`) unless the failed call was a release, and lose no data: a sleep-wake
//! line states the contents intact. The list of functions is the driver's, not this file's, so a
//! call the code starts making is swept without anyone adding it. Each faulted run counts its
//! calls too, and a fault that never fired (a path whose calls vary between runs) is a failure,
//! not a pass.
//!
//! Ignored by a plain `cargo test`; `scripts/emulated-gpu cargo test -- --ignored` (and .ci/run)
//! runs it. It needs the emulated driver (faults are injected through it): a real GPU skips it.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The CLI paths, at sizes that run in a fraction of a second on the emulated GPU, each call
/// happening at least twice where the path repeats it (two cycles, two repetitions).
const PATHS: &[&[&str]] = &[
    &[
        "attention",
        "--device",
        "cuda",
        "--batch",
        "2",
        "--context",
        "40",
        "--heads",
        "8",
        "--kv-heads",
        "2",
        "--iters",
        "1",
    ],
    &[
        "sleep-wake",
        "--device",
        "cuda",
        "--pool-mib",
        "4",
        "--chunk-mib",
        "2",
        "--cycles",
        "2",
    ],
    &[
        "swap",
        "--device",
        "cuda",
        "--block-sizes",
        "16",
        "--kv-heads",
        "1",
        "--swap-mib",
        "1",
        "--iters",
        "1",
    ],
    &[
        "lab",
        "gpu-alloc",
        "--size",
        "4M",
        "--chunks",
        "2M",
        "--reps",
        "2",
    ],
    &["lab", "gpu-managed", "--size", "1M"],
    &["info", "--json"],
    &["info", "--check-occupancy"],
];

/// Functions that give something back: a fault in one may leave what it would have released
/// (the run must still say so).
const RELEASES: &[&str] = &[
    "cuMemFree",
    "cuMemFreeAsync",
    "cuMemFreeHost",
    "cuMemRelease",
    "cuMemUnmap",
    "cuMemAddressFree",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuModuleUnload",
    "cuDevicePrimaryCtxRelease",
];

/// Longest a run may take before it counts as a hang (the slowest clean run takes about a second).
const HANG: Duration = Duration::from_secs(120);

/// The tests that arm faults in this process run alone (the sweep's own driver calls included).
static IN_PROCESS: Mutex<()> = Mutex::new(());

fn alone() -> MutexGuard<'static, ()> {
    IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner())
}

fn emulated() {
    let gpus = pagedkv::device::gpus();
    assert!(
        gpus.iter().any(|g| g.emulated),
        "the fault sweep needs the emulated CUDA driver (scripts/emulated-gpu cargo test -- \
         --ignored); GPUs found: {gpus:?}"
    );
}

struct Run {
    code: Option<i32>,
    stderr: String,
    timed_out: bool,
}

/// `pagedkv ARGS` with `env`, stdout discarded, killed after [`HANG`].
fn run(args: &[&str], env: &[(&str, String)]) -> Run {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pagedkv"));
    c.args(args)
        .env_remove("PAGEDKV_EMU_FAULTS")
        .env_remove("PAGEDKV_EMU_LEAKS")
        .env_remove("PAGEDKV_EMU_CALLS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().expect("start pagedkv");
    let mut pipe = child.stderr.take().expect("stderr piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for pagedkv") {
            break status;
        }
        if start.elapsed() > HANG {
            timed_out = true;
            let _ = child.kill();
            break child.wait().expect("wait for the killed pagedkv");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.code(),
        stderr: reader.join().expect("stderr reader"),
        timed_out,
    }
}

/// Function name -> calls, as the driver counts them (`PAGEDKV_EMU_CALLS`).
type Calls = BTreeMap<String, u64>;

/// `pagedkv ARGS` with `env`, and the driver's count of each function's calls in that run (none
/// when the process died before writing them). `tag` names the run's count file.
fn run_counted(args: &[&str], env: &[(&str, String)], tag: &str) -> (Run, Option<Calls>) {
    let file = std::env::temp_dir().join(format!(
        "pagedkv-fault-sweep-{}-{tag}.calls",
        std::process::id()
    ));
    let mut env = env.to_vec();
    env.push(("PAGEDKV_EMU_CALLS", file.display().to_string()));
    let r = run(args, &env);
    let counts = std::fs::read_to_string(&file).ok().map(|text| {
        text.lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(f, n)| (f.to_string(), n.parse().expect("a count")))
            .collect()
    });
    let _ = std::fs::remove_file(&file);
    (r, counts)
}

/// The driver's count of each function's calls in a clean run of `args`.
fn calls(args: &[&str], tag: usize) -> Calls {
    let (r, counts) = run_counted(args, &[], &format!("clean-{tag}"));
    assert_eq!(
        r.code,
        Some(0),
        "{args:?} fails without a fault: {}",
        r.stderr
    );
    counts.expect("the driver's call counts")
}

/// Why the fault armed at `function`'s `call`th call did not fire in a run that counted `counts`
/// (`None` when it fired): a path whose calls vary from run to run (with the machine's speed,
/// say) could otherwise pass the sweep without its faults.
fn never_fired(function: &str, call: u64, counts: Option<&Calls>) -> Option<String> {
    match counts.map(|c| c.get(function).copied().unwrap_or(0)) {
        None => Some("the driver wrote no call counts".into()),
        Some(n) if n < call => Some(format!(
            "the fault never fired: this run called {function} {n} times, the clean run at \
             least {call}: a path's calls must depend on its arguments only"
        )),
        Some(_) => None,
    }
}

/// The calls to fail: first, second and last.
fn indices(n: u64) -> Vec<u64> {
    let mut v = vec![1, 2, n];
    v.retain(|&k| k >= 1 && k <= n);
    v.dedup();
    v
}

/// What is wrong with a run whose `function`'s `call`th call failed; `None` when nothing is.
fn judge(args: &[&str], function: &str, r: &Run) -> Option<String> {
    if r.timed_out {
        return Some(format!("hung (killed after {HANG:?})"));
    }
    let Some(code) = r.code else {
        return Some(format!("killed by a signal: {}", r.stderr));
    };
    if code == 101 || r.stderr.contains("panicked") {
        return Some(format!("panicked: {}", r.stderr));
    }
    // The driver's own lines (a leak report, a reason) are not the program's.
    let lines: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("pagedkv: "))
        .collect();
    if lines.len() != 1 || !lines[0].contains(function) {
        return Some(format!(
            "expected one line naming {function}, got {} (exit {code}):\n{}",
            lines.len(),
            r.stderr
        ));
    }
    let leaked = r.stderr.contains("leaked at exit");
    if leaked && !RELEASES.contains(&function) {
        return Some(format!("leaked after a failed {function}:\n{}", r.stderr));
    }
    if code == 0 && args[0] != "info" {
        return Some(format!("exit 0 after a failed {function}: {}", lines[0]));
    }
    if args[0] == "sleep-wake" && lines[0].contains("cycle") && !lines[0].contains("intact") {
        return Some(format!("the contents' fate is not stated: {}", lines[0]));
    }
    if lines[0].contains("CHANGED") || lines[0].contains("unreadable") {
        return Some(format!("data lost: {}", lines[0]));
    }
    None
}

#[test]
#[ignore = "needs the emulated CUDA driver: scripts/emulated-gpu cargo test -- --ignored"]
fn every_driver_call_of_every_cuda_path_can_fail_cleanly() {
    {
        let _alone = alone();
        emulated();
    }
    let start = Instant::now();
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    // Learn each path's calls (the paths run side by side).
    let counts: Vec<Calls> = std::thread::scope(|s| {
        let handles: Vec<_> = PATHS
            .iter()
            .enumerate()
            .map(|(i, args)| s.spawn(move || calls(args, i)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (args, expect) in PATHS.iter().zip([
        "cuLaunchKernel",
        "cuMemMap",
        "cuMemcpyAsync",
        "cuMemAlloc",
        "cuMemAllocManaged",
        "cuDeviceGetName",
        "cuModuleLoadData",
    ]) {
        let c = &counts[PATHS.iter().position(|p| p == args).unwrap()];
        assert!(
            c.contains_key(expect),
            "{args:?} never called {expect}: {c:?}"
        );
    }
    let cases: Vec<(usize, String, u64)> = counts
        .iter()
        .enumerate()
        .flat_map(|(p, c)| {
            c.iter()
                .flat_map(move |(f, &n)| indices(n).into_iter().map(move |k| (p, f.clone(), k)))
        })
        .collect();
    let functions: usize = counts.iter().map(BTreeMap::len).sum();
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((p, function, call)) = cases.get(i) else {
                    break;
                };
                let args = PATHS[*p];
                let spec = format!("{function}@{call}=CUDA_ERROR_UNKNOWN");
                let env = [
                    ("PAGEDKV_EMU_FAULTS", spec.clone()),
                    ("PAGEDKV_EMU_LEAKS", "1".to_string()),
                ];
                let (r, counts) = run_counted(args, &env, &i.to_string());
                let verdict = match never_fired(function, *call, counts.as_ref()) {
                    Some(why) if !r.timed_out && r.code.is_some() => Some(why),
                    _ => judge(args, function, &r),
                };
                if let Some(why) = verdict {
                    failures
                        .lock()
                        .unwrap()
                        .push(format!("{} with {spec}: {why}", args.join(" ")));
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    for (args, c) in PATHS.iter().zip(&counts) {
        let runs: usize = c.values().map(|&n| indices(n).len()).sum();
        eprintln!("  {}: {} functions, {runs} runs", args.join(" "), c.len());
    }
    eprintln!(
        "fault sweep: {} paths, {functions} (path, function) pairs, {} runs on {workers} workers \
         in {:.1} s",
        PATHS.len(),
        cases.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {} runs went wrong:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}

/// Runs `f` with `spec` armed in this process (while holding [`alone`]).
fn with_fault<T>(_alone: &MutexGuard<'_, ()>, spec: &str, f: impl FnOnce() -> T) -> T {
    std::env::set_var("PAGEDKV_EMU_FAULTS", spec);
    let out = f();
    std::env::remove_var("PAGEDKV_EMU_FAULTS");
    out
}

#[test]
#[ignore = "needs the emulated CUDA driver: scripts/emulated-gpu cargo test -- --ignored"]
fn a_buffer_whose_free_fails_is_reported_as_that_free_and_blames_nothing_else() {
    use pagedkv::device::cuda::{driver::teardown, Gpu, Stream};
    let alone = alone();
    emulated();
    let stream = Stream::new(&Gpu::open(0).unwrap()).unwrap();
    let q = stream.upload("q", &[1.0f32; 64]).unwrap();
    let _ = teardown::take();
    with_fault(&alone, "cuMemFreeAsync@1=CUDA_ERROR_UNKNOWN", || drop(q));
    let recorded: Vec<String> = teardown::take().iter().map(|e| e.to_string()).collect();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert!(
        recorded[0].contains("freeing q (256 B)") && recorded[0].contains("cuMemFreeAsync"),
        "{recorded:?}"
    );
    // The next call is not failed with it (cudarc kept it and returned it there).
    let k = stream.upload("k", &[2.0f32; 64]).unwrap();
    assert_eq!(stream.download(&k).unwrap(), vec![2.0f32; 64]);
}

#[test]
#[ignore = "needs the emulated CUDA driver: scripts/emulated-gpu cargo test -- --ignored"]
fn a_sleep_whose_unmap_fails_keeps_the_contents_on_the_host_and_a_wake_restores_them() {
    use pagedkv::vmm::cuda::CudaPool;
    use pagedkv::vmm::{checksum, measure, PoolState, SleepMode, VmmError};
    let alone = alone();
    emulated();
    let gpu = pagedkv::device::cuda::Gpu::open(0).unwrap();
    let mib = 1 << 20;
    let mut pool = CudaPool::create(&gpu, 8 * mib, Some(2 * mib)).unwrap();
    let sum = measure::fill(&mut pool, 21).unwrap();
    let in_use = || gpu.memory_info().map(|(free, total)| total - free).unwrap();
    let awake = in_use();
    // The second chunk's unmap fails: the sleep goes on, and says so.
    let err = with_fault(&alone, "cuMemUnmap@2=CUDA_ERROR_UNKNOWN", || {
        pool.sleep(SleepMode::Offload)
    })
    .unwrap_err();
    assert!(
        matches!(&err, VmmError::NotReleased { chunks, .. } if chunks == &[1]),
        "{err}"
    );
    assert!(err.to_string().contains("cuMemUnmap"), "{err}");
    assert_eq!(pool.state(), PoolState::AsleepOffloaded);
    assert_eq!(awake - in_use(), 6 * mib, "three of four chunks released");
    assert_eq!(checksum::checksum(pool.host_copy().unwrap()), sum);
    pool.wake().unwrap();
    assert_eq!(in_use(), awake);
    assert_eq!(measure::checksum(&pool).unwrap(), sum);
}

#[test]
#[ignore = "needs the emulated CUDA driver: scripts/emulated-gpu cargo test -- --ignored"]
fn a_chunk_that_could_be_neither_opened_nor_unmapped_is_opened_by_the_next_wake() {
    use pagedkv::vmm::cuda::CudaPool;
    use pagedkv::vmm::{measure, PoolState, SleepMode};
    let alone = alone();
    emulated();
    let gpu = pagedkv::device::cuda::Gpu::open(0).unwrap();
    let mib = 1 << 20;
    let mut pool = CudaPool::create(&gpu, 8 * mib, Some(2 * mib)).unwrap();
    let sum = measure::fill(&mut pool, 22).unwrap();
    pool.sleep(SleepMode::Offload).unwrap();
    // The wake maps chunk 0, maps chunk 1 but cannot open it, and cannot unmap it either: chunk 1
    // stays mapped and closed, the wake fails and the pool stays asleep with its host copy.
    let spec = "cuMemSetAccess@2=CUDA_ERROR_UNKNOWN,cuMemUnmap@1=CUDA_ERROR_UNKNOWN";
    let err = with_fault(&alone, spec, || pool.wake()).unwrap_err();
    assert!(err.to_string().contains("cuMemSetAccess"), "{err}");
    let recorded: Vec<String> = pagedkv::device::cuda::driver::teardown::take()
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert!(
        recorded.iter().any(|e| e.contains("cuMemUnmap")),
        "{recorded:?}"
    );
    assert_eq!(pool.state(), PoolState::AsleepOffloaded);
    // The next wake opens chunk 1 (a copy into it would otherwise fault) and restores everything.
    pool.wake().unwrap();
    assert_eq!(measure::checksum(&pool).unwrap(), sum);
}

#[test]
fn the_calls_failed_are_the_first_second_and_last() {
    assert_eq!(indices(1), vec![1]);
    assert_eq!(indices(2), vec![1, 2]);
    assert_eq!(indices(7), vec![1, 2, 7]);
}

#[test]
fn a_fault_the_run_never_reached_is_a_failure() {
    let counts: Calls = [("cuMemAlloc".to_string(), 3)].into();
    assert_eq!(never_fired("cuMemAlloc", 3, Some(&counts)), None);
    assert!(never_fired("cuMemAlloc", 4, Some(&counts)).is_some());
    assert!(never_fired("cuMemFree", 1, Some(&counts)).is_some());
    assert!(never_fired("cuMemAlloc", 1, None).is_some());
}

#[test]
fn a_run_that_hides_the_failed_call_is_judged_wrong() {
    let ok = |stderr: &str, code| Run {
        code: Some(code),
        stderr: stderr.into(),
        timed_out: false,
    };
    let args = ["swap"];
    let named = "pagedkv: copying 4 KiB to q: CUDA cuMemcpyHtoDAsync failed: CUDA_ERROR_UNKNOWN\n";
    assert_eq!(judge(&args, "cuMemcpyHtoDAsync", &ok(named, 2)), None);
    // The bare error of old, a second line, a success, a leak after a non-release, a panic.
    let bare = "pagedkv: CUDA error: DriverError(CUDA_ERROR_UNKNOWN, \"unknown error\")\n";
    assert!(judge(&args, "cuMemcpyHtoDAsync", &ok(bare, 2)).is_some());
    let twice = format!("{named}{named}");
    assert!(judge(&args, "cuMemcpyHtoDAsync", &ok(&twice, 2)).is_some());
    assert!(judge(&args, "cuMemcpyHtoDAsync", &ok(named, 0)).is_some());
    let leak = format!("{named}pagedkv emulated driver: 1 leaked at exit:\n  stream 0x5\n");
    assert!(judge(&args, "cuMemcpyHtoDAsync", &ok(&leak, 3)).is_some());
    let freed = "pagedkv: freeing q (4 KiB): CUDA cuMemFreeAsync failed: CUDA_ERROR_UNKNOWN\n\
                 pagedkv emulated driver: 1 leaked at exit:\n  device memory of 4096 bytes\n";
    assert_eq!(judge(&args, "cuMemFreeAsync", &ok(freed, 3)), None);
    let panic = format!("thread 'main' panicked at src/x.rs:1:1\n{named}");
    assert!(judge(&args, "cuMemcpyHtoDAsync", &ok(&panic, 101)).is_some());
    let hung = Run {
        code: None,
        stderr: String::new(),
        timed_out: true,
    };
    assert!(judge(&args, "cuMemcpyHtoDAsync", &hung).is_some());
    let lost = "pagedkv: sleep-wake: cycle 0: sleep failed (unmapping chunk 0 of 2 (2.0 MiB): CUDA \
                cuMemUnmap failed: CUDA_ERROR_UNKNOWN); the pool is awake but its contents CHANGED\n";
    assert!(judge(&["sleep-wake"], "cuMemUnmap", &ok(lost, 1)).is_some());
}
