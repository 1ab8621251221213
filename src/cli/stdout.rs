//! Every command's output goes through [`outln!`] and [`out!`], which return an error where
//! `println!` would panic: a write that fails (a full disk, `> /dev/full`) ends the command with
//! one line and exit code 1, as a failed check does, for the output is lost. A closed pipe never
//! gets here: SIGPIPE ends the process quietly first (see `main`).

use std::io::Write;

/// Standard output could not be written.
#[derive(Debug)]
pub struct StdoutFailed(pub std::io::Error);

impl std::fmt::Display for StdoutFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot write to standard output: {}", self.0)
    }
}

impl std::error::Error for StdoutFailed {}

/// Writes `args` to standard output, or to this thread's [`Capture`] while one is kept.
pub fn write(args: std::fmt::Arguments) -> Result<(), StdoutFailed> {
    let kept = CAPTURED.with_borrow_mut(|kept| match kept {
        Some(text) => {
            // A String takes every write; only a value's own Display can fail, as in format!.
            let _ = std::fmt::Write::write_fmt(text, args);
            true
        }
        None => false,
    });
    if kept {
        return Ok(());
    }
    std::io::stdout()
        .lock()
        .write_fmt(args)
        .map_err(StdoutFailed)
}

/// Writes what standard output still buffers (a last line without its newline).
pub fn flush() -> Result<(), StdoutFailed> {
    std::io::stdout().lock().flush().map_err(StdoutFailed)
}

thread_local! {
    /// What this thread's commands wrote while a [`Capture`] is kept.
    static CAPTURED: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// While kept, this thread's [`write`]s go to memory; dropped, they go to standard output again.
pub struct Capture(());

impl Capture {
    pub fn start() -> Capture {
        CAPTURED.set(Some(String::new()));
        Capture(())
    }

    /// What was written since [`Capture::start`], emptied.
    pub fn take() -> String {
        CAPTURED.with_borrow_mut(|kept| kept.as_mut().map(std::mem::take).unwrap_or_default())
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        CAPTURED.set(None);
    }
}

/// `println!` that returns `Result<(), StdoutFailed>` instead of panicking.
macro_rules! outln {
    () => {
        $crate::cli::stdout::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::stdout::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` that returns `Result<(), StdoutFailed>` instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::stdout::write(format_args!($($arg)*))
    };
}
