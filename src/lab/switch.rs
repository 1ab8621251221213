//! The cost of handing the CPU to someone else: a round trip (A wakes B, B wakes A) between two
//! threads and between two processes, against a plain function call, pinned to one core (every
//! hand-over is a context switch) and to two cores (every hand-over is a cross-core wake-up).
//! Each figure is ns per round trip over repetitions, with its spread.

use super::fork::{self, pin_to, Pipe};
use super::futex::{self, PATIENCE};
use super::mapping::Mapping;
use super::{cow, Check, LabError, Spread};
use serde::Serialize;
use std::hint::black_box;
use std::sync::atomic::AtomicU32;
use std::sync::{mpsc, Condvar, Mutex};
use std::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct SwitchConfig {
    /// Round trips per repetition at most (fewer when they are slow, so that a repetition lasts
    /// about 20 ms).
    pub iters: usize,
    /// Repetitions per figure (the spread is over these).
    pub reps: usize,
    /// Pages the forked child writes in the copy-on-write demonstration.
    pub cow_pages: usize,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            iters: 2000,
            reps: 11,
            cow_pages: 256,
        }
    }
}

/// Calls per repetition of the function-call baseline (a call is too short to time alone).
const CALLS_PER_REP: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// Two threads, a private futex word (the kernel primitive under std's locks).
    ThreadFutex,
    /// Two threads, `Mutex` + `Condvar`.
    ThreadCondvar,
    /// Two threads, a pair of `std::sync::mpsc` channels.
    ThreadChannel,
    /// Two processes, a pair of pipes (one byte each way).
    ProcessPipe,
    /// Two processes, a futex word in a shared anonymous page.
    ProcessFutex,
}

impl Mechanism {
    pub const ALL: [Mechanism; 5] = [
        Mechanism::ThreadFutex,
        Mechanism::ThreadCondvar,
        Mechanism::ThreadChannel,
        Mechanism::ProcessPipe,
        Mechanism::ProcessFutex,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::ThreadFutex => "threads: futex",
            Mechanism::ThreadCondvar => "threads: mutex + condvar",
            Mechanism::ThreadChannel => "threads: mpsc channels",
            Mechanism::ProcessPipe => "processes: pipe pair",
            Mechanism::ProcessFutex => "processes: shared-memory futex",
        }
    }
}

/// Where the two sides run.
#[derive(Debug, Clone, Serialize)]
pub struct Placement {
    /// `one core` or `two cores`.
    pub label: &'static str,
    /// The CPU of side A (the timer) and of side B.
    pub cpus: [usize; 2],
}

#[derive(Debug, Clone, Serialize)]
pub struct RoundTrip {
    pub mechanism: Mechanism,
    pub placement: Placement,
    /// Round trips per repetition (fewer when they are slow: a repetition lasts ~20 ms).
    pub iters: usize,
    /// Nanoseconds per round trip.
    pub ns: Spread,
}

#[derive(Debug, Clone, Serialize)]
pub struct SwitchReport {
    /// Median ns per call of a function that cannot be inlined.
    pub function_call_ns: f64,
    pub function_call: Spread,
    /// Median ns per round trip between two threads on one core through a futex: two context
    /// switches.
    pub thread_round_trip_ns: f64,
    /// The same between two processes (a futex in shared memory).
    pub process_round_trip_ns: f64,
    /// Round trips per repetition at most; each row says how many it ran.
    pub max_iters: usize,
    pub reps: usize,
    pub rows: Vec<RoundTrip>,
    pub cow: cow::CowReport,
    pub checks: Vec<Check>,
}

pub fn run(cfg: SwitchConfig) -> Result<SwitchReport, LabError> {
    super::error::positive(cfg.iters, "the round trips per repetition")?;
    super::error::positive(cfg.reps, "the repetitions")?;
    let cow = cow::run(cfg.cow_pages)?;
    let cpus = super::machine::allowed_cpus();
    let mut placements = vec![Placement {
        label: "one core",
        cpus: [cpus[0], cpus[0]],
    }];
    let mut checks = Vec::new();
    match cpus.get(1) {
        Some(&second) => placements.push(Placement {
            label: "two cores",
            cpus: [cpus[0], second],
        }),
        None => checks.push(Check::skipped(
            "round trips between two cores",
            "this process may run on one CPU only",
        )),
    }
    let function_call = Spread::of(&on_cpu(cpus[0], || Ok(function_calls(cfg.reps)))?);
    let mut rows = Vec::new();
    for p in &placements {
        for m in Mechanism::ALL {
            let (samples, iters) = on_cpu(p.cpus[0], || measure(m, p.cpus[1], cfg))?;
            rows.push(RoundTrip {
                mechanism: m,
                placement: p.clone(),
                iters,
                ns: Spread::of(&samples),
            });
        }
    }
    let one_core = |m| {
        rows.iter()
            .find(|r| r.mechanism == m && r.placement.label == "one core")
            .map_or(f64::NAN, |r| r.ns.median)
    };
    let fastest = rows
        .iter()
        .min_by(|a, b| a.ns.median.total_cmp(&b.ns.median))
        .expect("at least one placement");
    checks.push(Check::verdict(
        "a round trip through the kernel costs more than a function call",
        fastest.ns.median > function_call.median,
        format!(
            "fastest round trip {:.0} ns ({}, {}) vs call {:.2} ns",
            fastest.ns.median,
            fastest.mechanism.name(),
            fastest.placement.label,
            function_call.median
        ),
    ));
    checks.extend(cow.checks.iter().cloned());
    Ok(SwitchReport {
        function_call_ns: function_call.median,
        function_call,
        thread_round_trip_ns: one_core(Mechanism::ThreadFutex),
        process_round_trip_ns: one_core(Mechanism::ProcessFutex),
        max_iters: cfg.iters,
        reps: cfg.reps,
        rows,
        cow,
        checks,
    })
}

/// Runs `work` on a fresh thread pinned to `cpu`, so the caller's own affinity is left alone.
fn on_cpu<T: Send>(
    cpu: usize,
    work: impl FnOnce() -> Result<T, LabError> + Send,
) -> Result<T, LabError> {
    std::thread::scope(|s| {
        s.spawn(|| {
            pin_to(&[cpu])?;
            work()
        })
        .join()
        .map_err(|_| LabError::Child("a measuring thread panicked".into()))?
    })
}

#[inline(never)]
fn callee(x: u64) -> u64 {
    x.wrapping_mul(3).wrapping_add(1)
}

/// ns per call of `callee` through an opaque function pointer, one sample per repetition.
fn function_calls(reps: usize) -> Vec<f64> {
    let f: fn(u64) -> u64 = black_box(callee);
    (0..reps)
        .map(|_| {
            let mut x = 0u64;
            let t = Instant::now();
            for _ in 0..CALLS_PER_REP {
                x = f(black_box(x));
            }
            black_box(x);
            t.elapsed().as_nanos() as f64 / CALLS_PER_REP as f64
        })
        .collect()
}

/// Untimed round trips first; their time also sizes the repetitions.
const WARMUP: usize = 100;
/// A repetition lasts about this long (fewer round trips when they are slow), at least
/// `MIN_ITERS` round trips.
const REP_BUDGET_NS: f64 = 20e6;
const MIN_ITERS: usize = 20;

/// The turn word of the futex and condvar mechanisms: A sets `GO`, B answers `BACK`; `STOP`
/// ends B.
const BACK: u32 = 0;
const GO: u32 = 1;
const STOP: u32 = 2;

/// Side A's samples: ns per round trip for each repetition, and round trips per repetition.
type Samples = (Vec<f64>, usize);

/// Side A: `WARMUP` round trips, then `reps` timed repetitions of as many round trips as fit in
/// [`REP_BUDGET_NS`] (between `MIN_ITERS` and `cfg.iters`).
fn time_reps(
    cfg: SwitchConfig,
    mut round_trip: impl FnMut() -> Result<(), LabError>,
) -> Result<Samples, LabError> {
    let t = Instant::now();
    for _ in 0..WARMUP {
        round_trip()?;
    }
    let per_trip = t.elapsed().as_nanos() as f64 / WARMUP as f64;
    let iters =
        ((REP_BUDGET_NS / per_trip.max(1.0)) as usize).clamp(MIN_ITERS.min(cfg.iters), cfg.iters);
    let samples = (0..cfg.reps)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                round_trip()?;
            }
            Ok(t.elapsed().as_nanos() as f64 / iters as f64)
        })
        .collect::<Result<Vec<f64>, LabError>>()?;
    Ok((samples, iters))
}

fn silent(what: &str) -> LabError {
    LabError::Child(format!("{what}: no answer within {PATIENCE:?}"))
}

/// Samples of one mechanism; side A runs on the calling (pinned) thread, side B on `cpu_b`
/// until A tells it to stop.
fn measure(m: Mechanism, cpu_b: usize, cfg: SwitchConfig) -> Result<Samples, LabError> {
    match m {
        Mechanism::ThreadFutex => {
            let turn = AtomicU32::new(BACK);
            with_thread(
                cpu_b,
                || loop {
                    match futex::wait_while(&turn, BACK, true) {
                        Some(STOP) => return Ok(()),
                        Some(_) => futex::set_and_wake(&turn, BACK, true),
                        None => return Err(silent("futex side A")),
                    }
                },
                || {
                    let samples = time_reps(cfg, || {
                        futex::set_and_wake(&turn, GO, true);
                        futex::wait_while(&turn, GO, true)
                            .map(drop)
                            .ok_or_else(|| silent("futex side B"))
                    });
                    futex::set_and_wake(&turn, STOP, true);
                    samples
                },
            )
        }
        Mechanism::ThreadCondvar => {
            let turn = CondvarTurn::default();
            with_thread(
                cpu_b,
                || loop {
                    if turn.wait_while(BACK)? == STOP {
                        return Ok(());
                    }
                    turn.set(BACK)?;
                },
                || {
                    let samples = time_reps(cfg, || {
                        turn.set(GO)?;
                        turn.wait_while(GO).map(drop)
                    });
                    turn.set(STOP)?;
                    samples
                },
            )
        }
        Mechanism::ThreadChannel => {
            let (to_b, from_a) = mpsc::channel::<u8>();
            let (to_a, from_b) = mpsc::channel::<u8>();
            with_thread(
                cpu_b,
                move || {
                    // A hangs up its sender when it is done.
                    while let Ok(v) = from_a.recv_timeout(PATIENCE) {
                        to_a.send(v).map_err(|_| silent("channel side A"))?;
                    }
                    Ok(())
                },
                move || {
                    time_reps(cfg, || {
                        to_b.send(1).map_err(|_| silent("channel side B"))?;
                        from_b
                            .recv_timeout(PATIENCE)
                            .map(drop)
                            .map_err(|_| silent("channel side B"))
                    })
                },
            )
        }
        Mechanism::ProcessPipe => process_pipe(cpu_b, cfg),
        Mechanism::ProcessFutex => process_futex(cpu_b, cfg),
    }
}

/// A turn word under a mutex, with a condition variable announcing its changes.
#[derive(Default)]
struct CondvarTurn {
    word: Mutex<u32>,
    changed: Condvar,
}

impl CondvarTurn {
    fn set(&self, value: u32) -> Result<(), LabError> {
        *self.word.lock().map_err(|_| silent("poisoned lock"))? = value;
        self.changed.notify_one();
        Ok(())
    }

    /// Waits while the word holds `value`; the value it changed to.
    fn wait_while(&self, value: u32) -> Result<u32, LabError> {
        let g = self.word.lock().map_err(|_| silent("poisoned lock"))?;
        let (g, timeout) = self
            .changed
            .wait_timeout_while(g, PATIENCE, |w| *w == value)
            .map_err(|_| silent("poisoned lock"))?;
        if timeout.timed_out() {
            Err(silent("condvar"))
        } else {
            Ok(*g)
        }
    }
}

/// Runs `side_b` on a thread pinned to `cpu_b` while `side_a` runs here.
fn with_thread(
    cpu_b: usize,
    side_b: impl FnOnce() -> Result<(), LabError> + Send,
    side_a: impl FnOnce() -> Result<Samples, LabError>,
) -> Result<Samples, LabError> {
    std::thread::scope(|s| {
        let b = s.spawn(|| {
            pin_to(&[cpu_b])?;
            side_b()
        });
        let samples = side_a();
        let b = b
            .join()
            .map_err(|_| LabError::Child("side B panicked".into()))?;
        let samples = samples?;
        b.map(|()| samples)
    })
}

/// Exit codes of the forked side B.
const PIN_FAILED: i32 = 3;
const PARTNER_GONE: i32 = 4;

fn process_pipe(cpu_b: usize, cfg: SwitchConfig) -> Result<Samples, LabError> {
    let there = Pipe::new()?;
    let back = Pipe::new()?;
    // SAFETY: the body pins itself and reads and writes pipes: system calls only.
    let child = unsafe {
        fork::spawn(|| {
            if pin_to(&[cpu_b]).is_err() {
                return PIN_FAILED;
            }
            let mut byte = [0u8];
            loop {
                if !fork::read_exact(&there.read, &mut byte) {
                    return PARTNER_GONE;
                }
                if byte[0] == STOP as u8 {
                    return 0;
                }
                if !fork::write_all(&back.write, &byte) {
                    return PARTNER_GONE;
                }
            }
        })
    }?;
    // Only the child's ends stay open on its side, so its death ends our reads.
    drop(there.read);
    drop(back.write);
    let samples = time_reps(cfg, || {
        let mut byte = [GO as u8];
        if fork::write_all(&there.write, &byte) && fork::read_exact(&back.read, &mut byte) {
            Ok(())
        } else {
            Err(LabError::Child("the pipe partner is gone".into()))
        }
    });
    fork::write_all(&there.write, &[STOP as u8]);
    finish(child, samples)
}

fn process_futex(cpu_b: usize, cfg: SwitchConfig) -> Result<Samples, LabError> {
    let page = super::machine::page_bytes();
    let shared =
        Mapping::anonymous(page, page, libc::MAP_SHARED).map_err(LabError::io("mmap shared"))?;
    // SAFETY: the page is zeroed (BACK), aligned and lives as long as `shared`; both processes
    // access the word only atomically.
    let turn: &AtomicU32 = unsafe { &*shared.as_ptr().cast::<AtomicU32>() };
    // SAFETY: the body pins itself, waits and wakes on a futex: system calls and atomics only.
    let child = unsafe {
        fork::spawn(|| {
            if pin_to(&[cpu_b]).is_err() {
                return PIN_FAILED;
            }
            loop {
                match futex::wait_while(turn, BACK, false) {
                    Some(STOP) => return 0,
                    Some(_) => futex::set_and_wake(turn, BACK, false),
                    None => return PARTNER_GONE,
                }
            }
        })
    }?;
    let samples = time_reps(cfg, || {
        futex::set_and_wake(turn, GO, false);
        futex::wait_while(turn, GO, false)
            .map(drop)
            .ok_or_else(|| silent("futex process B"))
    });
    futex::set_and_wake(turn, STOP, false);
    finish(child, samples)
}

fn finish(child: fork::Child, samples: Result<Samples, LabError>) -> Result<Samples, LabError> {
    // On an error the child is dropped, which kills it: no process is left waiting.
    let samples = samples?;
    match child.wait()? {
        0 => Ok(samples),
        PIN_FAILED => Err(LabError::Child("side B could not pin itself".into())),
        code => Err(LabError::Child(format!("side B exited with {code}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> SwitchConfig {
        SwitchConfig {
            iters: 30,
            reps: 3,
            cow_pages: 8,
        }
    }

    #[test]
    fn every_mechanism_completes_its_round_trips() {
        for m in Mechanism::ALL {
            let (samples, iters) = measure(m, 0, tiny()).unwrap();
            assert_eq!(samples.len(), 3, "{m:?}");
            assert!((20..=30).contains(&iters), "{m:?}: {iters}");
            assert!(samples.iter().all(|&s| s > 0.0 && s.is_finite()), "{m:?}");
        }
    }

    #[test]
    fn a_report_has_a_row_per_mechanism_and_placement() {
        let r = run(tiny()).unwrap();
        let placements = super::super::machine::allowed_cpus().len().min(2);
        assert_eq!(r.rows.len(), Mechanism::ALL.len() * placements);
        assert!(r.function_call_ns > 0.0);
        for row in &r.rows {
            assert!(row.ns.p10 <= row.ns.median && row.ns.median <= row.ns.p90);
        }
        assert!(r.thread_round_trip_ns.is_finite() && r.process_round_trip_ns.is_finite());
    }

    #[test]
    fn zero_iterations_is_bad_input() {
        let cfg = SwitchConfig { iters: 0, ..tiny() };
        assert!(matches!(run(cfg), Err(LabError::Invalid(_))));
    }
}
