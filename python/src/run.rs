//! One command run from Python: on its own thread, watched ([`pagedkv::progress::watch`]).

use crate::error::{panic_text, raise};
use pagedkv::cli::{self, Failure};
use pagedkv::progress::watch::{Phase, Watch};
use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::time::Duration;

/// How often the waiting thread looks at progress and Ctrl-C.
const POLL: Duration = Duration::from_millis(100);

/// One watched run at a time: the watch is process-wide.
static RUNNING: AtomicBool = AtomicBool::new(false);

/// This thread's turn to run: waits (without the interpreter, Ctrl-C heard) for another thread's
/// run to end.
struct Turn;

impl Turn {
    fn take(py: Python<'_>) -> PyResult<Turn> {
        while RUNNING
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            py.detach(|| std::thread::sleep(POLL));
            py.check_signals()?;
        }
        Ok(Turn)
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        RUNNING.store(false, Ordering::Release);
    }
}

/// `python -m pagedkv`: the command line `argv` (the program's name first), printing as the
/// binary prints; returns its exit code.
#[pyfunction]
pub fn main(py: Python<'_>, argv: Vec<String>) -> PyResult<u8> {
    let ran = py.detach(|| std::panic::catch_unwind(|| cli::run(argv)));
    ran.map_err(|p| raise(py, "PanicError", panic_text(&*p), None))
}

/// Runs `argv` (the program's name first) with its standard output kept, and returns it: the
/// command's `--json` report when asked for one. `progress(what, done, total)` is called on this
/// thread as phases advance; Ctrl-C (KeyboardInterrupt) stops the run and is raised.
#[pyfunction]
#[pyo3(signature = (argv, progress=None))]
pub fn report(py: Python<'_>, argv: Vec<String>, progress: Option<Py<PyAny>>) -> PyResult<String> {
    let _turn = Turn::take(py)?;
    let watch = Watch::start();
    let (tx, rx) = channel();
    // The receiver waits outside the interpreter: shared, so behind a lock.
    let rx = std::sync::Mutex::new(rx);
    let worker = std::thread::spawn(move || {
        let out = std::panic::catch_unwind(|| cli::capture(argv));
        let _ = tx.send(());
        out
    });
    let mut shown: Option<Phase> = None;
    loop {
        let waited = py.detach(|| {
            let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
            rx.recv_timeout(POLL)
        });
        if let Err(e) = py.check_signals() {
            watch.interrupt();
            let _ = py.detach(|| worker.join());
            return Err(e);
        }
        let phase = watch.phase();
        if let (Some(cb), Some(p)) = (&progress, &phase) {
            if shown.as_ref() != Some(p) {
                if let Err(e) = cb.call1(py, (p.what.clone(), p.pos, p.steps, p.number)) {
                    watch.interrupt();
                    let _ = py.detach(|| worker.join());
                    return Err(e);
                }
                shown = phase.clone();
            }
        }
        match waited {
            Err(RecvTimeoutError::Timeout) => continue,
            _ => break,
        }
    }
    let joined = py.detach(|| worker.join());
    let (out, result) = match joined {
        Ok(Ok(done)) => done,
        Ok(Err(p)) | Err(p) => return Err(raise(py, "PanicError", panic_text(&*p), None)),
    };
    match result {
        Ok(()) => Ok(out),
        // --help and --version: their text is the answer.
        Err(Failure::Usage(e)) if e.exit_code() == 0 => Ok(e.render().to_string()),
        Err(Failure::Usage(e)) => {
            let code = e.exit_code().clamp(0, 255) as u8;
            Err(raise(
                py,
                "UsageError",
                e.render().to_string().trim_end().to_string(),
                Some(code),
            ))
        }
        Err(Failure::Failed { code, message }) => {
            Err(raise(py, "PagedkvError", message, Some(code)))
        }
    }
}

/// Panics with `message` on a run's thread, as a bug would: the test that a panic reaches
/// Python as `PanicError` and the interpreter goes on.
#[pyfunction]
pub fn panic_for_test(py: Python<'_>, message: String) -> PyResult<()> {
    let joined = py.detach(|| std::thread::spawn(move || panic!("{message}")).join());
    joined.map_err(|p| raise(py, "PanicError", panic_text(&*p), None))
}
