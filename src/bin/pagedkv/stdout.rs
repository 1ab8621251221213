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

/// Writes `args` to standard output.
pub fn write(args: std::fmt::Arguments) -> Result<(), StdoutFailed> {
    std::io::stdout()
        .lock()
        .write_fmt(args)
        .map_err(StdoutFailed)
}

/// Writes what standard output still buffers (a last line without its newline).
pub fn flush() -> Result<(), StdoutFailed> {
    std::io::stdout().lock().flush().map_err(StdoutFailed)
}

/// `println!` that returns `Result<(), StdoutFailed>` instead of panicking.
macro_rules! outln {
    () => {
        $crate::stdout::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::stdout::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` that returns `Result<(), StdoutFailed>` instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::stdout::write(format_args!($($arg)*))
    };
}
