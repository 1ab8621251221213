//! `pagedkv._native`: the library's commands for Python (python/pagedkv/ is the package users
//! import). A command runs as the CLI runs it (`pagedkv::cli`), its `--json` report kept in
//! memory; the run goes on a thread of its own while this one, holding the interpreter only
//! between waits, passes progress to a callback and turns Ctrl-C into an interrupt the run obeys.
//! A failed run raises the CLI's one-line error ([`error`]); a Rust panic raises `PanicError`,
//! never unwinds into Python.

mod error;
mod run;
mod trace;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(run::main, m)?)?;
    m.add_function(wrap_pyfunction!(run::report, m)?)?;
    m.add_function(wrap_pyfunction!(run::panic_for_test, m)?)?;
    m.add_function(wrap_pyfunction!(trace::read_trace, m)?)?;
    Ok(())
}
