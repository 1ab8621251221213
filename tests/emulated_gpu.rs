//! The CUDA paths end to end on the emulated CUDA driver (emu-driver/): every CLI command with
//! `--device cuda` at small sizes, and the fault cases, each with nothing lost and nothing leaked
//! (the CLI runs with `PAGEDKV_EMU_LEAKS=1`: a leak fails the process). Ignored by a plain
//! `cargo test`; `scripts/emulated-gpu cargo test -- --ignored` (and .ci/run) runs them. They
//! need the emulated device itself (faults are injected through it), so a real GPU skips this
//! file: scripts/gpu-check does not bundle it.

mod cli;

use pagedkv::vmm::cuda::{device_memory, open_context, CudaPool};
use pagedkv::vmm::{measure, PoolState, SleepMode};
use serde_json::Value;
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

const MIB: usize = 1 << 20;

/// The tests that arm faults in this process run one at a time.
static FAULTS: Mutex<()> = Mutex::new(());

fn emulated() {
    let gpus = pagedkv::device::gpus();
    assert!(
        gpus.iter().any(|g| g.emulated),
        "these tests need the emulated CUDA driver (scripts/emulated-gpu cargo test -- --ignored); \
         GPUs found: {gpus:?}"
    );
}

/// `pagedkv ARGS` with the driver's leak report on and `env` set.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    emulated();
    let mut c = Command::new(env!("CARGO_BIN_EXE_pagedkv"));
    c.args(args).env("PAGEDKV_EMU_LEAKS", "1");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run pagedkv")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(args: &[&str]) -> Value {
    cli::json(&run(args, &[]))
}

/// One line on stderr, the given exit code, no panic.
fn one_line_error(out: &Output, code: i32) -> String {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
#[ignore = "needs the emulated CUDA driver: scripts/emulated-gpu cargo test -- --ignored"]
fn info_marks_the_device_emulated_and_its_occupancy_matches_the_static_report() {
    let v = json(&["info", "--json"]);
    let gpu = &v["gpus"][0];
    assert_eq!(gpu["emulated"], true, "{v}");
    assert_eq!(gpu["multiprocessors"], 132);
    // The driver answers occupancy from the same sm_90 model: this checks the path (module
    // loads, function lookups, the opt-in above 48 KiB), not the model.
    let v = json(&["info", "--check-occupancy"]);
    assert!(!v["kernels"].as_array().unwrap().is_empty(), "{v}");
    assert_eq!(v["differ"], 0, "{v}");
}

#[test]
#[ignore = "needs the emulated CUDA driver: scripts/emulated-gpu cargo test -- --ignored"]
fn attention_runs_every_dtype_and_block_size_whole_and_split() {
    for dtype in ["f16", "bf16", "fp8_e4m3"] {
        for block in ["1", "16", "256"] {
            // 2 x 300 tokens on 132 SMs splits into partitions; a batch that fills the SMs
            // with CTAs runs whole.
            for (batch, context) in [("2", "300"), ("20", "40")] {
                let args = [
                    "attention",
                    "--device",
                    "cuda",
                    "--json",
                    "--iters",
                    "1",
                    "--dtype",
                    dtype,
                    "--block-size",
                    block,
                    "--batch",
                    batch,
                    "--context",
                    context,
                ];
                let v = json(&args);
                let what = format!("{args:?}");
                assert_eq!(v["emulated"], true, "{what}");
                assert!(
                    v["max_rel_error"].as_f64().unwrap().is_finite(),
                    "{what}: {v}"
                );
                let parts = v["partitions"].as_u64().unwrap();
                if batch == "2" {
                    assert!(
                        parts > 1,
                        "{what}: expected a split, got {parts} partition(s)"
                    );
                } else {
                    assert_eq!(parts, 1, "{what}");
                }
            }
        }
    }
}

#[test]
#[ignore = "needs the emulated CUDA driver: scripts/emulated-gpu cargo test -- --ignored"]
fn swap_round_trips_every_block_size() {
    let v = json(&[
        "swap",
        "--device",
        "cuda",
        "--json",
        "--block-sizes",
        "1,16,256",
        "--swap-mib",
        "2",
        "--iters",
        "1",
    ]);
    let text = v.to_string();
    assert!(
        text.contains("true") && !text.contains("\"intact\":false"),
        "{text}"
    );
}

#[test]
#[ignore = "needs the emulated CUDA driver: scripts/emulated-gpu cargo test -- --ignored"]
fn sleep_wake_keeps_addresses_and_contents_over_100_cycles() {
    for mode in ["offload", "discard"] {
        let v = json(&[
            "sleep-wake",
            "--device",
            "cuda",
            "--json",
            "--pool-mib",
            "8",
            "--chunk-mib",
            "2",
            "--cycles",
            "100",
            "--mode",
            mode,
        ]);
        assert_eq!(v["cycles"], 100);
        assert_eq!(v["address_stable"], true, "{mode}");
        assert_eq!(v["data_intact"], true, "{mode}");
        assert_eq!(v["leak_bytes"], 0, "{mode}");
        assert_eq!(v["freed_bytes"], 8 * MIB as u64, "{mode}");
    }
}

#[test]
#[ignore = "needs the emulated CUDA driver: scripts/emulated-gpu cargo test -- --ignored"]
fn gpu_labs_run_with_their_data_checks() {
    let v = json(&[
        "lab",
        "gpu-alloc",
        "--json",
        "--size",
        "16M",
        "--chunks",
        "2M,8M",
        "--reps",
        "2",
    ]);
    assert!(v.to_string().contains("data_intact"), "{v}");
    assert!(!v.to_string().contains("\"data_intact\":false"), "{v}");
    let v = json(&["lab", "gpu-managed", "--json", "--size", "8M"]);
    assert!(!v.to_string().contains("\"data_intact\":false"), "{v}");
}

#[test]
#[ignore = "needs the emulated CUDA driver: scripts/emulated-gpu cargo test -- --ignored"]
fn a_wake_whose_third_cu_mem_create_fails_rolls_back_and_the_next_wake_restores_everything() {
    // 4 chunks: the pool's creation makes calls 1-4, the first wake 5-8: its third is call 7.
    let out = run(
        &[
            "sleep-wake",
            "--device",
            "cuda",
            "--pool-mib",
            "8",
            "--chunk-mib",
            "2",
            "--cycles",
            "3",
        ],
        &[(
            "PAGEDKV_EMU_FAULTS",
            "cuMemCreate@7=CUDA_ERROR_OUT_OF_MEMORY",
        )],
    );
    let err = one_line_error(&out, 1);
    assert!(
        err.contains("wake failed") && err.contains("CUDA_ERROR_OUT_OF_MEMORY"),
        "{err}"
    );
    assert!(
        err.contains("rolled back; a second wake succeeded with the contents intact"),
        "{err}"
    );
}

#[test]
#[ignore = "needs the emulated CUDA driver: scripts/emulated-gpu cargo test -- --ignored"]
fn out_of_memory_while_building_the_kv_pool_is_one_line() {
    let out = run(
        &[
            "attention",
            "--device",
            "cuda",
            "--batch",
            "2",
            "--context",
            "300",
        ],
        &[("PAGEDKV_EMU_MEMORY", "1M")],
    );
    let err = one_line_error(&out, 2);
    assert!(err.contains("CUDA_ERROR_OUT_OF_MEMORY"), "{err}");
    let out = run(
        &["sleep-wake", "--device", "cuda", "--pool-mib", "64"],
        &[("PAGEDKV_EMU_MEMORY", "32M")],
    );
    let err = one_line_error(&out, 2);
    assert!(
        err.contains("64 MiB pool") && err.contains("OUT_OF_MEMORY"),
        "{err}"
    );
}

#[test]
#[ignore = "needs the emulated CUDA driver: scripts/emulated-gpu cargo test -- --ignored"]
fn attention_times_both_engines_on_one_problem() {
    for dtype in ["f16", "fp8_e4m3"] {
        let args = [
            "attention",
            "--device",
            "cuda",
            "--json",
            "--iters",
            "1",
            "--engine",
            "both",
            "--heads",
            "64",
            "--kv-heads",
            "8",
            "--dtype",
            dtype,
            "--batch",
            "2",
            "--context",
            "300",
        ];
        let v = json(&args);
        let what = format!("{args:?}: {v}");
        assert_eq!(v["engine"], "tensor-cores", "{what}");
        let others = v["other_engines"].as_array().unwrap();
        assert_eq!(others.len(), 1, "{what}");
        assert_eq!(others[0]["engine"], "cuda-cores", "{what}");
        for e in [&v["paged_rel_error"], &others[0]["paged_rel_error"]] {
            assert!(e.as_f64().unwrap().is_finite(), "{what}");
        }
    }
    // A shape tensor cores have no kernel for, asked for by name: one line, exit 2.
    let out = run(
        &[
            "attention",
            "--device",
            "cuda",
            "--engine",
            "tensor-cores",
            "--heads",
            "8",
            "--kv-heads",
            "8",
            "--batch",
            "1",
            "--context",
            "16",
            "--iters",
            "1",
        ],
        &[],
    );
    let err = one_line_error(&out, 2);
    assert!(err.contains("no tensor-cores attention kernel"), "{err}");
}

#[test]
#[ignore = "needs the emulated CUDA driver: scripts/emulated-gpu cargo test -- --ignored"]
fn a_failed_launch_names_its_kernel() {
    let out = run(
        &[
            "attention",
            "--device",
            "cuda",
            "--batch",
            "2",
            "--context",
            "64",
            "--iters",
            "1",
        ],
        &[(
            "PAGEDKV_EMU_FAULTS",
            "cuLaunchKernel@1=CUDA_ERROR_LAUNCH_FAILED",
        )],
    );
    let err = one_line_error(&out, 2);
    assert!(
        err.contains("launching ") && err.contains("CUDA_ERROR_LAUNCH_FAILED"),
        "{err}"
    );
}

/// Arms `spec` for the calls made inside `f`, in this process.
fn with_fault<T>(_guard: &MutexGuard<'_, ()>, spec: &str, f: impl FnOnce() -> T) -> T {
    std::env::set_var("PAGEDKV_EMU_FAULTS", spec);
    let out = f();
    std::env::remove_var("PAGEDKV_EMU_FAULTS");
    out
}

fn in_use(ctx: &pagedkv::device::cuda::Gpu) -> usize {
    let (free, total) = device_memory(ctx).unwrap();
    total - free
}

#[test]
#[ignore = "needs the emulated CUDA driver: scripts/emulated-gpu cargo test -- --ignored"]
fn a_failed_wake_leaves_the_pool_asleep_intact_and_nothing_mapped() {
    emulated();
    let guard = FAULTS.lock().unwrap_or_else(|e| e.into_inner());
    let ctx = open_context(0).unwrap();
    let mut pool = CudaPool::create(&ctx, 8 * MIB, Some(2 * MIB)).unwrap();
    let sum = measure::fill(&mut pool, 11).unwrap();
    let base = pool.ptr().unwrap();
    pool.sleep(SleepMode::Offload).unwrap();
    let asleep = in_use(&ctx);
    let failed = with_fault(&guard, "cuMemCreate@3=CUDA_ERROR_OUT_OF_MEMORY", || {
        pool.wake()
    });
    assert!(failed.is_err());
    assert_eq!(pool.state(), PoolState::AsleepOffloaded);
    assert_eq!(
        in_use(&ctx),
        asleep,
        "the rolled-back wake left memory mapped"
    );
    pool.wake().unwrap();
    assert_eq!(pool.ptr().unwrap(), base);
    assert_eq!(measure::checksum(&pool).unwrap(), sum);
}

#[test]
#[ignore = "needs the emulated CUDA driver: scripts/emulated-gpu cargo test -- --ignored"]
fn a_sleep_whose_copy_fails_keeps_the_pool_awake_and_intact() {
    emulated();
    let guard = FAULTS.lock().unwrap_or_else(|e| e.into_inner());
    let ctx = open_context(0).unwrap();
    let mut pool = CudaPool::create(&ctx, 8 * MIB, Some(2 * MIB)).unwrap();
    let sum = measure::fill(&mut pool, 12).unwrap();
    let awake = in_use(&ctx);
    let failed = with_fault(&guard, "cuMemcpyDtoH@1=CUDA_ERROR_LAUNCH_FAILED", || {
        pool.sleep(SleepMode::Offload)
    });
    assert!(failed.is_err());
    assert_eq!(pool.state(), PoolState::Awake);
    assert_eq!(in_use(&ctx), awake);
    assert_eq!(measure::checksum(&pool).unwrap(), sum);
    pool.sleep(SleepMode::Offload).unwrap();
    pool.wake().unwrap();
    assert_eq!(measure::checksum(&pool).unwrap(), sum);
}

#[test]
#[ignore = "needs the emulated CUDA driver: scripts/emulated-gpu cargo test -- --ignored"]
fn the_sweep_on_the_emulated_gpu_measures_and_recommends_nothing() {
    let out = run(
        &[
            "sweep",
            "--device",
            "cuda",
            "--quick",
            "--probe-mib",
            "4",
            "--reps",
            "1",
            "--rounds",
            "1",
            "--attention-batch",
            "2",
            "--attention-context",
            "256",
            "--requests",
            "300",
            "--no-end-to-end",
        ],
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    let first = text.lines().next().unwrap_or("");
    assert!(
        first.starts_with("recommended block size: none") && first.contains("emulated GPU"),
        "{first}"
    );
    assert!(!text.contains("◀ recommended"), "{text}");
}
