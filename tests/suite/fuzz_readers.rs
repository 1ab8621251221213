//! A fuzz target per reader of input files. proptest mutates a small valid file of each format
//! (cuts it, overwrites bytes with odd numbers, marks, quotes, brackets, long runs and random
//! bytes, copies and drops lines), and every reader must answer each mutant with its data or with
//! an error of one line that names the file and, with its quoted input cut by the CLI's one rule
//! (`pagedkv::quote::clip`), stays readable. Beyond that: a file cut inside a line is refused
//! (naming the line, for line-oriented formats), and a byte-order mark changes nothing. Where a
//! reader feeds a simulator that has hung or panicked on odd values (scenarios, jobs, request
//! traces), the mutant also runs a bounded number of steps there.
//!
//! proptest rather than cargo-fuzz: it runs inside `cargo test` on stable Rust, each case in
//! microseconds, so CI runs every target on every commit (about 300 ms each); a failure prints the
//! mutations and is replayed first on the next run (`fuzz_readers.proptest-regressions`, see
//! docs/architecture.md, "Property tests"). Coverage guidance, cargo-fuzz's strength, matters
//! less for readers this small whose inputs' shapes the mutations already aim at.

use pagedkv::quote::clip;
use pagedkv::sim::alloc::{replay, Policy as AllocPolicy, ReplayConfig};
use pagedkv::sim::engine::{Clock, Engine, EngineConfig, Recording, Slo};
use pagedkv::sim::sched::{trace_policy, PolicyKind, SchedParams};
use pagedkv::workload::cache_trace::{read_key_trace, TraceFormat, TraceParams, TraceReadOptions};
use proptest::prelude::*;
use std::path::{Path, PathBuf};

/// How a file's structure decides which cuts must be refused.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// Lines of fields: any cut that is not at a line's end is refused, naming the line.
    Lines,
    /// JSON lines: a cut inside a JSON object is refused.
    JsonLines,
    /// One JSON document: a cut before its closing bracket is refused.
    Json,
    /// Records of 24 bytes.
    Records,
    /// A flag's value: any prefix may be a value of its own.
    Free,
}

struct Target {
    file: &'static str,
    valid: &'static [u8],
    shape: Shape,
    /// The number of requests (or records, steps...) read, or the error's message.
    read: fn(&Path) -> Result<usize, String>,
}

fn text(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Bounded steps of the engine over a scenario's requests (its errors are about settings, so they
/// name no file in the CLI; here they carry the path for the check).
fn scenario(path: &Path) -> Result<usize, String> {
    let s = pagedkv::workload::scenario::read_scenario(path).map_err(|e| e.to_string())?;
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let mut cfg = EngineConfig::default();
    cfg.apply(&s.engine).map_err(|e| at(&e))?;
    let rec = Recording::default();
    let mut e =
        Engine::new(cfg, &s.requests, Clock::Steps, rec, Slo::default()).map_err(|e| at(&e))?;
    let mut steps = 0;
    while steps < 2000 && e.step().map_err(|e| at(&e))? {
        steps += 1;
    }
    Ok(steps)
}

fn azure(path: &Path) -> Result<usize, String> {
    let r = pagedkv::workload::azure::read_azure_csv(path).map_err(|e| e.to_string())?;
    // The allocation replay once spun on distant timestamps: it must end (or refuse) here.
    let cfg = ReplayConfig {
        capacity: 4096,
        step_s: 0.05,
        check: true,
    };
    replay(&r, AllocPolicy::Paged { page_size: 16 }, &cfg)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(r.len())
}

fn mooncake(path: &Path) -> Result<usize, String> {
    let t = pagedkv::workload::trace::read_trace(path).map_err(|e| e.to_string())?;
    Ok(t.serving().0.len())
}

fn cache(path: &Path, format: TraceFormat) -> Result<usize, String> {
    read_key_trace(path, format, &TraceReadOptions::default(), usize::MAX)
        .map(|t| t.len())
        .map_err(|e| e.to_string())
}

fn jobs(path: &Path) -> Result<usize, String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let jobs = pagedkv::workload::jobs::parse_jobs_csv(&text(path)?).map_err(|e| at(&e))?;
    // Switches and sizes near f64's end once made the scheduler spin. Not round robin: a job of
    // 1e308 takes 1e309 quanta, which only the CLI's event count refuses (`sim sched`).
    let p = SchedParams {
        switch_cost: 1e300,
        ..SchedParams::default()
    };
    for kind in [PolicyKind::Srpt, PolicyKind::Fcfs] {
        trace_policy(&jobs, kind, &p).map_err(|e| at(&e))?;
    }
    Ok(jobs.len())
}

fn radix(path: &Path) -> Result<usize, String> {
    pagedkv::sim::radix::workload::read_requests(path)
        .map(|w| w.requests.len())
        .map_err(|e| e.to_string())
}

fn profile(path: &Path) -> Result<usize, String> {
    pagedkv::sim::engine::load_profile(path)
        .map(|p| p.efficiency.len())
        .map_err(|e| e.to_string())
}

/// The reader under `--offload-bandwidth swap.json` and the other JSON the CLI reads.
fn strict_json(path: &Path) -> Result<usize, String> {
    pagedkv::workload::strict_json::from_str(&text(path)?)
        .map(|v| v.as_object().map_or(0, |o| o.len()))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// `--trace-params`, libCacheSim's parameter string.
fn trace_params(path: &Path) -> Result<usize, String> {
    text(path)?
        .trim_end_matches('\n')
        .parse::<TraceParams>()
        .map(|_| 1)
        .map_err(|e| format!("{}: {e}", path.display()))
}

const AZURE: Target = Target {
    file: "trace.csv",
    valid: b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n\
             2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:15:51.4707180,879,15\n",
    shape: Shape::Lines,
    read: azure,
};

const MOONCAKE: Target = Target {
    file: "trace.jsonl",
    valid: b"{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [4, 9]}\n\
             {\"timestamp\": 1500, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [4]}\n",
    shape: Shape::JsonLines,
    read: mooncake,
};

const SCENARIO: Target = Target {
    file: "s.scenario.json",
    valid: br#"{"engine": {"block_size": 4, "num_gpu_blocks": 12, "max_num_seqs": 4,
  "max_num_batched_tokens": 16, "enable_prefix_caching": true, "scheduling_policy": "priority"},
 "requests": [{"id": "r0", "arrival": 0, "prompt": [1, 2, 3, 4, 5], "output_len": 4, "priority": 1},
  {"id": "r1", "arrival": 2, "prompt_len": 9, "output_len": 2}]}
"#,
    shape: Shape::Json,
    read: scenario,
};

const CACHE_TXT: Target = Target {
    file: "keys.txt",
    valid: b"1\n2\n0x1f\n3\n1\n2\n",
    shape: Shape::Lines,
    read: |p| cache(p, TraceFormat::Txt),
};

const CACHE_CSV: Target = Target {
    file: "keys.csv",
    valid: b"time,obj_id,size\n1,10,4\n2,11,4\n3,10,4\n",
    shape: Shape::Lines,
    read: |p| cache(p, TraceFormat::Csv),
};

/// Three oracleGeneral records: time (u32), id (u64), size (u32), next access (i64).
const ORACLE: Target = Target {
    file: "keys.oracleGeneral",
    valid: &[
        1, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255,
        255, //
        2, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255,
        255, //
        3, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255, 255,
    ],
    shape: Shape::Records,
    read: |p| cache(p, TraceFormat::Oracle),
};

const JOBS: Target = Target {
    file: "jobs.csv",
    valid: b"arrival,size,class\n0,1.5,interactive\n0.5,2,batch\n# a comment\n1,0.25,0\n",
    shape: Shape::Lines,
    read: jobs,
};

const RADIX: Target = Target {
    file: "prompts.txt",
    valid: b"1 2 3 4\n1 2 3 5 6\n7 8\n",
    shape: Shape::Lines,
    read: radix,
};

const PROFILE: Target = Target {
    file: "profile.json",
    valid: br#"{"device": "cpu", "source": "test", "measured": true,
 "efficiency": [{"block_size": 16, "efficiency": 0.5}, {"block_size": 64, "efficiency": 0.7}]}
"#,
    shape: Shape::Json,
    read: profile,
};

const SWAP: Target = Target {
    file: "swap.json",
    valid: br#"{"device": "cpu", "rows": [{"block_size": 16, "swap_in": {"batched_gbps": 10.5},
 "swap_out": {"batched_gbps": 12}}]}
"#,
    shape: Shape::Json,
    read: strict_json,
};

const TRACE_PARAMS: Target = Target {
    file: "params.txt",
    valid: b"obj-id-col=2, delimiter=,, has-header=true\n",
    shape: Shape::Free,
    read: trace_params,
};

/// One change to a file; positions are fractions of its current length.
#[derive(Debug, Clone)]
enum Op {
    /// Keep this fraction of the bytes.
    Cut(f64),
    /// Overwrite up to `len` bytes at `at` with `with`.
    Put {
        at: f64,
        len: usize,
        with: Vec<u8>,
    },
    /// Insert a copy of the line at `from` before the line at `to`.
    CopyLine {
        from: f64,
        to: f64,
    },
    DropLine(f64),
}

/// Numbers past every type's end and odd ones, marks, JSON and CSV punctuation, line ends.
const ODD: &[&str] = &[
    "4294967296",
    "4294967312",
    "18446744073709551616",
    "2305843009213693952",
    "-1",
    "0",
    "1e308",
    "-1e308",
    "1e-300",
    "NaN",
    "inf",
    "-0",
    "1.5",
    "\u{feff}",
    "\"",
    ",",
    "{",
    "}",
    "[",
    "]",
    ":",
    "\n",
    "\r\n",
    " ",
    "\t",
    "\0",
    "#",
    "0x",
    "é",
];

fn op() -> impl Strategy<Value = Op> {
    let bytes = prop_oneof![
        3 => prop::sample::select(ODD).prop_map(|s| s.as_bytes().to_vec()),
        1 => prop::collection::vec(any::<u8>(), 1..6),
        1 => (100usize..800).prop_map(|n| vec![b'7'; n]),
    ];
    let at = 0.0..=1.0f64;
    prop_oneof![
        1 => at.clone().prop_map(Op::Cut),
        4 => (at.clone(), 0usize..4, bytes).prop_map(|(at, len, with)| Op::Put { at, len, with }),
        1 => (at.clone(), at.clone()).prop_map(|(from, to)| Op::CopyLine { from, to }),
        1 => at.prop_map(Op::DropLine),
    ]
}

fn pos(f: f64, len: usize) -> usize {
    ((f * len as f64) as usize).min(len)
}

/// The byte ranges of the lines of `b` (each with its newline).
fn lines(b: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, &c) in b.iter().enumerate() {
        if c == b'\n' {
            out.push(start..i + 1);
            start = i + 1;
        }
    }
    if start < b.len() {
        out.push(start..b.len());
    }
    out
}

fn apply(b: &mut Vec<u8>, op: &Op) {
    let n = b.len();
    match op {
        Op::Cut(f) => b.truncate(pos(*f, n)),
        Op::Put { at, len, with } => {
            let at = pos(*at, n);
            let end = (at + len).min(n);
            b.splice(at..end, with.iter().copied());
        }
        Op::CopyLine { from, to } => {
            let l = lines(b);
            if !l.is_empty() {
                let src = l[pos(*from, l.len() - 1)].clone();
                let dst = l[pos(*to, l.len() - 1)].start;
                let copy = b[src].to_vec();
                b.splice(dst..dst, copy);
            }
        }
        Op::DropLine(f) => {
            let l = lines(b);
            if !l.is_empty() {
                b.drain(l[pos(*f, l.len() - 1)].clone());
            }
        }
    }
}

/// A folder of scratch files, removed when its thread ends.
struct ScratchDir(PathBuf);

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

thread_local! {
    /// One folder a thread: proptest runs a test's cases on one thread, and tests on threads of
    /// their own read the same targets.
    static SCRATCH: ScratchDir = {
        let thread = format!("{:?}", std::thread::current().id())
            .replace(|c: char| !c.is_ascii_alphanumeric(), "");
        let dir = std::env::temp_dir()
            .join(format!("pagedkv-fuzz-{}-{thread}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        ScratchDir(dir)
    };
}

/// The scratch file of one target on this thread.
fn scratch(t: &Target) -> PathBuf {
    SCRATCH.with(|d| d.0.join(t.file))
}

fn read(t: &Target, bytes: &[u8]) -> (PathBuf, Result<usize, String>) {
    let path = scratch(t);
    std::fs::write(&path, bytes).unwrap();
    let r = (t.read)(&path);
    (path, r)
}

/// What every answer must be: data, or one readable line naming the file.
fn check_answer(path: &Path, bytes: &[u8], r: &Result<usize, String>) -> Result<(), TestCaseError> {
    if let Err(msg) = r {
        let shown = clip(msg);
        let file = String::from_utf8_lossy(bytes);
        prop_assert!(
            !msg.contains('\n'),
            "more than one line: {shown:?}\nfile: {file:?}"
        );
        // Quoted input cut to 80 characters, beside a path and serde's list of expected fields.
        prop_assert!(shown.chars().count() <= 600, "unreadable: {shown:?}");
        prop_assert!(
            msg.contains(&path.display().to_string()),
            "names no file: {shown:?}"
        );
    }
    Ok(())
}

/// Whether a file that is `valid` cut to `keep` bytes holds a part of a record.
fn cut_inside(t: &Target, keep: usize) -> bool {
    let prefix = &t.valid[..keep];
    match t.shape {
        Shape::Lines => !prefix.is_empty() && !prefix.ends_with(b"\n"),
        Shape::JsonLines => {
            !(prefix.is_empty() || prefix.ends_with(b"\n") || prefix.ends_with(b"}"))
        }
        Shape::Json => !prefix.trim_ascii_end().ends_with(b"}"),
        Shape::Records => !keep.is_multiple_of(24) || keep == 0,
        Shape::Free => false,
    }
}

fn fuzz(t: &Target, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut bytes = t.valid.to_vec();
    for op in ops {
        apply(&mut bytes, op);
    }
    let (path, r) = read(t, &bytes);
    check_answer(&path, &bytes, &r)?;
    if let [Op::Cut(f)] = ops {
        let keep = pos(*f, t.valid.len());
        if cut_inside(t, keep) {
            prop_assert!(r.is_err(), "a file cut at byte {keep} was read: {r:?}");
            if t.shape == Shape::Lines && keep > 0 {
                let line = t.valid[..keep].iter().filter(|&&c| c == b'\n').count() + 1;
                let msg = r.unwrap_err();
                prop_assert!(msg.contains(&format!("line {line}")), "{msg}");
            }
        }
    }
    Ok(())
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..4)
}

/// Every target reads its valid file, and the same after a byte-order mark.
#[test]
fn every_valid_file_reads_with_or_without_a_byte_order_mark() {
    for t in [
        &AZURE,
        &MOONCAKE,
        &SCENARIO,
        &CACHE_TXT,
        &CACHE_CSV,
        &ORACLE,
        &JOBS,
        &RADIX,
        &PROFILE,
        &SWAP,
        &TRACE_PARAMS,
    ] {
        let (path, plain) = read(t, t.valid);
        let n = plain.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(n > 0, "{}", t.file);
        if !matches!(t.shape, Shape::Records | Shape::Free) {
            let marked = [b"\xef\xbb\xbf", t.valid].concat();
            assert_eq!(read(t, &marked).1, Ok(n), "{}", t.file);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn azure_csv(ops in ops()) { fuzz(&AZURE, &ops)?; }

    #[test]
    fn mooncake_jsonl(ops in ops()) { fuzz(&MOONCAKE, &ops)?; }

    #[test]
    fn engine_scenario(ops in ops()) { fuzz(&SCENARIO, &ops)?; }

    #[test]
    fn cache_txt(ops in ops()) { fuzz(&CACHE_TXT, &ops)?; }

    #[test]
    fn cache_csv(ops in ops()) { fuzz(&CACHE_CSV, &ops)?; }

    #[test]
    fn cache_oracle(ops in ops()) { fuzz(&ORACLE, &ops)?; }

    #[test]
    fn sched_jobs_csv(ops in ops()) { fuzz(&JOBS, &ops)?; }

    #[test]
    fn radix_prompts(ops in ops()) { fuzz(&RADIX, &ops)?; }

    #[test]
    fn engine_profile(ops in ops()) { fuzz(&PROFILE, &ops)?; }

    #[test]
    fn swap_json(ops in ops()) { fuzz(&SWAP, &ops)?; }

    #[test]
    fn cache_trace_params(ops in ops()) { fuzz(&TRACE_PARAMS, &ops)?; }
}
