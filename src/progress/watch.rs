//! Progress and interruption for a front end that is not a terminal (python/: a callback, tqdm,
//! KeyboardInterrupt). While [`Watch`] is held, every [`super::Bar`] draws nothing on stderr and
//! records its phase here for the front end to read; an interrupt it asks for stops the
//! simulators' event loops at their next progress point ([`interrupted`]). Process-wide: one
//! watched run at a time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// One phase as a watcher sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Phase {
    pub what: String,
    /// Steps done, of `steps` (0: unknown).
    pub pos: u64,
    pub steps: u64,
    /// Phases begun since the watch started: a new phase has a new number.
    pub number: u64,
}

static WATCHED: AtomicBool = AtomicBool::new(false);
static INTERRUPT: AtomicBool = AtomicBool::new(false);
static CURRENT: Mutex<Option<Phase>> = Mutex::new(None);

fn current() -> std::sync::MutexGuard<'static, Option<Phase>> {
    CURRENT.lock().unwrap_or_else(|e| e.into_inner())
}

/// Held while a front end watches: bars record their phase instead of drawing; dropped, the
/// interrupt flag is cleared and bars draw again.
pub struct Watch(());

impl Watch {
    pub fn start() -> Watch {
        *current() = None;
        INTERRUPT.store(false, Ordering::SeqCst);
        WATCHED.store(true, Ordering::SeqCst);
        Watch(())
    }

    /// The phase running now, or the last one.
    pub fn phase(&self) -> Option<Phase> {
        current().clone()
    }

    /// Asks the run to stop at its next progress point.
    pub fn interrupt(&self) {
        INTERRUPT.store(true, Ordering::SeqCst);
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        WATCHED.store(false, Ordering::SeqCst);
        INTERRUPT.store(false, Ordering::SeqCst);
    }
}

/// Whether a front end watches (bars then draw nothing).
pub fn watched() -> bool {
    WATCHED.load(Ordering::Relaxed)
}

/// Whether the watching front end asked the run to stop.
pub fn interrupted() -> bool {
    INTERRUPT.load(Ordering::Relaxed)
}

/// A bar's phase begins.
pub(super) fn begin(what: &str, steps: u64) {
    let mut c = current();
    let number = c.as_ref().map_or(1, |p| p.number + 1);
    *c = Some(Phase {
        what: what.to_string(),
        pos: 0,
        steps,
        number,
    });
}

/// The current phase is at `pos` steps.
pub(super) fn at(pos: u64) {
    if let Some(p) = current().as_mut() {
        p.pos = pos;
    }
}
