//! Child processes, pipes and CPU pinning for the labs that need a second address space or a
//! fixed core.
//!
//! `fork` in a multithreaded process (a test harness) copies only the calling thread; locks held
//! by the others stay locked forever in the child. A child body therefore makes system calls only:
//! no allocation, no printing, no locks, and it ends in `_exit`, never by returning into the
//! parent's code.

use super::LabError;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A forked child, killed and reaped on drop unless it was waited for.
pub(crate) struct Child {
    pid: libc::pid_t,
    reaped: bool,
}

/// Forks a child that runs `body` and exits with its return value (101 if it panics). The child
/// is killed when the forking thread dies.
///
/// # Safety
/// `body` runs in the child of a possibly multithreaded process: it may only make
/// async-signal-safe calls (system calls through libc; no allocation, no locks, no I/O through
/// std's buffered handles).
pub(crate) unsafe fn spawn(body: impl FnOnce() -> i32) -> Result<Child, LabError> {
    // SAFETY: see the function's contract.
    match unsafe { libc::fork() } {
        -1 => Err(LabError::last_os("fork")),
        0 => {
            // SAFETY: prctl is a system call.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(101);
            // SAFETY: ends the child without running the parent's destructors or atexit hooks.
            unsafe { libc::_exit(code) }
        }
        pid => Ok(Child { pid, reaped: false }),
    }
}

impl Child {
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Waits for the child; its exit code, or an error when it was killed by a signal.
    pub fn wait(mut self) -> Result<i32, LabError> {
        let status = self
            .waitpid(0)?
            .expect("a blocking waitpid returns a status");
        self.reaped = true;
        if libc::WIFEXITED(status) {
            Ok(libc::WEXITSTATUS(status))
        } else {
            Err(LabError::Child(format!(
                "killed by signal {}",
                libc::WTERMSIG(status)
            )))
        }
    }

    fn waitpid(&self, flags: libc::c_int) -> Result<Option<libc::c_int>, LabError> {
        let mut status = 0;
        loop {
            // SAFETY: `status` is valid for writing; the pid is our child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, flags) };
            match r {
                0 => return Ok(None),
                -1 if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {}
                -1 => return Err(LabError::last_os("waitpid")),
                _ => return Ok(Some(status)),
            }
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.reaped {
            // SAFETY: the pid is our unreaped child, so it cannot have been reused.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            let _ = self.waitpid(0);
        }
    }
}

/// Both ends of a pipe (close-on-exec).
pub(crate) struct Pipe {
    pub read: OwnedFd,
    pub write: OwnedFd,
}

impl Pipe {
    pub fn new() -> Result<Pipe, LabError> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(LabError::last_os("pipe2"));
        }
        // SAFETY: both descriptors were just created and are owned here only.
        Ok(unsafe {
            Pipe {
                read: OwnedFd::from_raw_fd(fds[0]),
                write: OwnedFd::from_raw_fd(fds[1]),
            }
        })
    }
}

/// Writes all of `buf` to `fd`; false on error. Async-signal-safe.
pub(crate) fn write_all(fd: &impl AsRawFd, buf: &[u8]) -> bool {
    // SAFETY: the slice range is valid for reading.
    transfer_all(buf.len(), |done| unsafe {
        libc::write(
            fd.as_raw_fd(),
            buf[done..].as_ptr().cast(),
            buf.len() - done,
        )
    })
}

/// Fills all of `buf` from `fd`; false on error or end of file. Async-signal-safe.
pub(crate) fn read_exact(fd: &impl AsRawFd, buf: &mut [u8]) -> bool {
    let len = buf.len();
    // SAFETY: the slice range is valid for writing.
    transfer_all(len, |done| unsafe {
        libc::read(fd.as_raw_fd(), buf[done..].as_mut_ptr().cast(), len - done)
    })
}

/// Calls `step(done)` (one read or write of the bytes from `done` on) until `len` bytes have
/// moved, again after EINTR; false on an error or a call that moved nothing. Async-signal-safe.
fn transfer_all(len: usize, mut step: impl FnMut(usize) -> isize) -> bool {
    let mut done = 0;
    while done < len {
        let n = step(done);
        if n > 0 {
            done += n as usize;
        } else if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        } else {
            return false;
        }
    }
    true
}

/// Sends `words` as native-endian bytes (a child's report to its parent). Async-signal-safe.
pub(crate) fn send_words<const N: usize>(fd: &impl AsRawFd, words: [u64; N]) -> bool {
    let mut buf = [0u8; 64];
    assert!(N * 8 <= buf.len(), "at most 8 words");
    for (i, w) in words.iter().enumerate() {
        buf[i * 8..i * 8 + 8].copy_from_slice(&w.to_ne_bytes());
    }
    write_all(fd, &buf[..N * 8])
}

/// Receives `N` words sent with [`send_words`].
pub(crate) fn receive_words<const N: usize>(fd: &impl AsRawFd) -> Result<[u64; N], LabError> {
    let mut buf = [0u8; 64];
    if !read_exact(fd, &mut buf[..N * 8]) {
        return Err(LabError::Child(
            "ended before sending its report".to_string(),
        ));
    }
    let mut words = [0u64; N];
    for (i, w) in words.iter_mut().enumerate() {
        *w = u64::from_ne_bytes(buf[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    }
    Ok(words)
}

/// Pins the calling thread to `cpus` (`sched_setaffinity`); a forked child inherits it.
/// Async-signal-safe.
pub(crate) fn pin_to(cpus: &[usize]) -> Result<(), LabError> {
    // SAFETY: a zeroed cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: CPU_SET checks nothing, so keep `c` in range.
        if c < libc::CPU_SETSIZE as usize {
            unsafe { libc::CPU_SET(c, &mut set) };
        }
    }
    // SAFETY: `set` is valid and its size passed; 0 means the calling thread.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(LabError::last_os("sched_setaffinity"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_reports_through_a_pipe_and_exits_with_its_code() {
        let Pipe { read, write } = Pipe::new().unwrap();
        // SAFETY: the body only writes to a pipe.
        let child = unsafe { spawn(|| if send_words(&write, [7, 11]) { 3 } else { 4 }) }.unwrap();
        drop(write);
        let words: [u64; 2] = receive_words(&read).unwrap();
        assert_eq!(words, [7, 11]);
        assert_eq!(child.wait().unwrap(), 3);
    }

    #[test]
    fn a_silent_child_is_an_error_not_a_hang() {
        let pipe = Pipe::new().unwrap();
        // SAFETY: the body does nothing.
        let child = unsafe { spawn(|| 0) }.unwrap();
        drop(pipe.write);
        assert_eq!(child.wait().unwrap(), 0);
        assert!(receive_words::<1>(&pipe.read).is_err());
    }
}
