//! The futex: the kernel's wait-on-a-word primitive under every mutex and condition variable.
//! Private futexes serve threads of one process; shared ones (without `FUTEX_PRIVATE_FLAG`) serve
//! processes mapping the same page.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long a wait may go unanswered before the other side is presumed gone.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

fn op(base: libc::c_int, private: bool) -> libc::c_int {
    if private {
        base | libc::FUTEX_PRIVATE_FLAG
    } else {
        base
    }
}

/// Sleeps while `word` holds `current`, at most `timeout`. Async-signal-safe.
fn wait(word: &AtomicU32, current: u32, private: bool, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid aligned u32 for the duration of the call; spurious returns
    // (EAGAIN, EINTR, ETIMEDOUT) are handled by the caller's loop.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op(libc::FUTEX_WAIT, private),
            current,
            &ts as *const libc::timespec,
        )
    };
}

/// Wakes one waiter on `word`. Async-signal-safe.
pub(crate) fn wake(word: &AtomicU32, private: bool) {
    // SAFETY: as in `wait`.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op(libc::FUTEX_WAKE, private),
            1,
        )
    };
}

/// Sleeps while `word` holds `value`; the value it changed to, or `None` when [`PATIENCE`] ran
/// out first. Does not spin: every wait that finds the word unchanged goes to sleep in the kernel.
/// Async-signal-safe.
pub(crate) fn wait_while(word: &AtomicU32, value: u32, private: bool) -> Option<u32> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let now = word.load(Ordering::Acquire);
        if now != value {
            return Some(now);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        wait(word, now, private, left);
    }
}

/// Stores `value` and wakes the waiter. Async-signal-safe.
pub(crate) fn set_and_wake(word: &AtomicU32, value: u32, private: bool) {
    word.store(value, Ordering::Release);
    wake(word, private);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_threads_take_turns() {
        let turn = AtomicU32::new(0);
        let rounds = 200;
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..rounds {
                    assert_eq!(wait_while(&turn, 0, true), Some(1));
                    set_and_wake(&turn, 0, true);
                }
            });
            for _ in 0..rounds {
                set_and_wake(&turn, 1, true);
                assert_eq!(wait_while(&turn, 1, true), Some(0));
            }
        });
        assert_eq!(turn.load(Ordering::Relaxed), 0);
    }
}
