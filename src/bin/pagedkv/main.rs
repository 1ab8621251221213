//! The `pagedkv` binary: the command line of [`pagedkv::cli`], with the allocation backstop
//! (`alloc_guard`) and SIGPIPE's default action that only a whole process may set.

mod alloc_guard;

use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: alloc_guard::Guard = alloc_guard::Guard;

fn main() -> ExitCode {
    alloc_guard::arm();
    // A closed pipe ends the process quietly, as it ends `cat`, instead of a panic in println!.
    // SAFETY: restores the default action of one signal before any other thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    ExitCode::from(pagedkv::cli::run(std::env::args_os()))
}
