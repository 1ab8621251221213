//! Progress on stderr for work that takes more than a moment: a bar on a terminal (indicatif),
//! plain lines otherwise, so that a log or CI shows the run is alive. Work that ends within
//! [`FIRST_LINE_AFTER`] prints no line at all.
//!
//! Long library functions take a `&dyn Progress` and say what they do in phases of counted steps;
//! the CLI hands them a [`StderrProgress`], tests and benches `&()` (silent). A command that drives
//! its own loop uses a [`Bar`] directly.

pub mod watch;

use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Plain lines start once a phase has run this long.
pub const FIRST_LINE_AFTER: Duration = Duration::from_secs(2);
/// ... and follow at this interval while it runs.
pub const LINE_EVERY: Duration = Duration::from_secs(5);

/// What long work reports: phases of counted steps, one at a time.
pub trait Progress: Sync {
    /// A phase of `steps` steps begins (`what`: "attention: timing the paged kernel").
    fn begin(&self, what: &str, steps: u64);
    /// `steps` more steps of the current phase are done.
    fn advance(&self, steps: u64);
    /// The current phase ended.
    fn end(&self);
}

/// Silent progress, for tests, benches and callers with nothing to show.
impl Progress for () {
    fn begin(&self, _: &str, _: u64) {}
    fn advance(&self, _: u64) {}
    fn end(&self) {}
}

/// Runs `f` as one phase of `steps` steps of `progress`, ended whatever `f` returns.
pub fn phase<R>(progress: &dyn Progress, what: &str, steps: u64, f: impl FnOnce() -> R) -> R {
    progress.begin(what, steps);
    let r = f();
    progress.end();
    r
}

/// [`Progress`] on stderr: one [`Bar`] per phase.
#[derive(Default)]
pub struct StderrProgress(Mutex<Option<Bar>>);

impl StderrProgress {
    pub fn new() -> Self {
        Self::default()
    }

    /// What the current phase's step is (shown after its count), e.g. "block 16".
    pub fn set_message(&self, msg: &str) {
        if let Some(bar) = &*self.current() {
            bar.set_message(msg);
        }
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Option<Bar>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Progress for StderrProgress {
    fn begin(&self, what: &str, steps: u64) {
        let previous = self.current().replace(Bar::new(what, steps));
        drop(previous);
    }

    fn advance(&self, steps: u64) {
        if let Some(bar) = &*self.current() {
            bar.inc(steps);
        }
    }

    fn end(&self) {
        let bar = self.current().take();
        drop(bar);
    }
}

/// One phase's progress on stderr: an indicatif bar on a terminal, else plain lines from a ticker
/// thread (so a phase whose steps are long still shows it is alive). Cleared, or closed with a
/// "done" line, when dropped.
pub struct Bar {
    state: Arc<Mutex<Lines>>,
    bar: Option<ProgressBar>,
    ticker: Option<(Sender<()>, JoinHandle<()>)>,
}

impl Bar {
    /// A phase of `steps` steps (0: unknown) described by `what`, starting now.
    pub fn new(what: &str, steps: u64) -> Bar {
        let state = Arc::new(Mutex::new(Lines::new(what, steps, Instant::now())));
        if watch::watched() {
            watch::begin(what, steps);
            return Bar {
                state,
                bar: None,
                ticker: None,
            };
        }
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(steps);
            let template = if steps > 0 {
                "{prefix} {bar:30} {pos}/{len} {msg} [{elapsed}]"
            } else {
                "{prefix} {spinner} {msg} [{elapsed}]"
            };
            bar.set_style(
                ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.set_prefix(what.to_string());
            bar.enable_steady_tick(Duration::from_millis(200));
            return Bar {
                state,
                bar: Some(bar),
                ticker: None,
            };
        }
        let (stop, stopped) = channel::<()>();
        let ticking = state.clone();
        let ticker = std::thread::spawn(move || loop {
            match stopped.recv_timeout(Duration::from_millis(250)) {
                Err(RecvTimeoutError::Timeout) => {
                    let line = lock(&ticking).due(Instant::now());
                    if let Some(line) = line {
                        write_line(&line);
                    }
                }
                _ => return,
            }
        });
        Bar {
            state,
            bar: None,
            ticker: Some((stop, ticker)),
        }
    }

    /// `n` more steps done.
    pub fn inc(&self, n: u64) {
        let pos = {
            let mut s = lock(&self.state);
            s.pos += n;
            s.pos
        };
        if watch::watched() {
            watch::at(pos);
        }
        if let Some(b) = &self.bar {
            b.inc(n);
        }
    }

    /// `pos` steps done in all.
    pub fn set_position(&self, pos: u64) {
        lock(&self.state).pos = pos;
        if watch::watched() {
            watch::at(pos);
        }
        if let Some(b) = &self.bar {
            b.set_position(pos);
        }
    }

    /// What the current step is (shown after the count).
    pub fn set_message(&self, msg: &str) {
        lock(&self.state).msg = msg.to_string();
        if let Some(b) = &self.bar {
            b.set_message(msg.to_string());
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        if let Some((stop, ticker)) = self.ticker.take() {
            let _ = stop.send(());
            let _ = ticker.join();
        }
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        let done = lock(&self.state).done(Instant::now());
        if let Some(line) = done {
            write_line(&line);
        }
    }
}

fn lock(state: &Mutex<Lines>) -> std::sync::MutexGuard<'_, Lines> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// A progress line on stderr; a closed or full stderr loses it rather than stopping the work.
fn write_line(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// When the plain lines of one phase are due, and what they say.
#[derive(Debug)]
struct Lines {
    what: String,
    msg: String,
    pos: u64,
    steps: u64,
    start: Instant,
    last: Option<Instant>,
}

impl Lines {
    fn new(what: &str, steps: u64, start: Instant) -> Lines {
        Lines {
            what: what.to_string(),
            msg: String::new(),
            pos: 0,
            steps,
            start,
            last: None,
        }
    }

    /// The line to print at `now`, if one is due: none before [`FIRST_LINE_AFTER`], then one
    /// every [`LINE_EVERY`].
    fn due(&mut self, now: Instant) -> Option<String> {
        let due = match self.last {
            None => now.duration_since(self.start) >= FIRST_LINE_AFTER,
            Some(last) => now.duration_since(last) >= LINE_EVERY,
        };
        if !due {
            return None;
        }
        self.last = Some(now);
        let count = match (self.steps, self.pos) {
            (0, 0) => None,
            (0, pos) => Some(pos.to_string()),
            (n, pos) => Some(format!(
                "{}/{n} ({:.0}%)",
                pos.min(n),
                100.0 * pos.min(n) as f64 / n as f64
            )),
        };
        let msg = (!self.msg.is_empty()).then(|| self.msg.clone());
        let parts: Vec<String> = count.into_iter().chain(msg).collect();
        let head = match parts.is_empty() {
            true => self.what.clone(),
            false => format!("{}: {}", self.what, parts.join(" ")),
        };
        Some(format!(
            "{head} [{}]",
            elapsed(now.duration_since(self.start))
        ))
    }

    /// The closing line: only when a progress line was printed.
    fn done(&self, now: Instant) -> Option<String> {
        self.last?;
        Some(format!(
            "{}: done in {}",
            self.what,
            elapsed(now.duration_since(self.start))
        ))
    }
}

/// `7 s`, `2 min 05 s`.
fn elapsed(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s} s")
    } else {
        format!("{} min {:02} s", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_start_after_two_seconds_then_every_five() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut l = Lines::new("attention: timing", 4, t0);
        assert_eq!(l.due(at(1_999)), None);
        assert_eq!(l.done(at(1_999)), None, "no line printed: nothing to close");
        l.pos = 1;
        assert_eq!(
            l.due(at(2_000)).as_deref(),
            Some("attention: timing: 1/4 (25%) [2 s]")
        );
        assert_eq!(l.due(at(6_999)), None);
        l.pos = 3;
        l.msg = "block 16".into();
        assert_eq!(
            l.due(at(7_000)).as_deref(),
            Some("attention: timing: 3/4 (75%) block 16 [7 s]")
        );
        assert_eq!(
            l.done(at(125_000)).as_deref(),
            Some("attention: timing: done in 2 min 05 s")
        );
    }

    #[test]
    fn unknown_totals_and_overshoot_print_a_plain_count() {
        let t0 = Instant::now();
        let mut l = Lines::new("attention: drawing K and V", 0, t0);
        assert_eq!(
            l.due(t0 + FIRST_LINE_AFTER).as_deref(),
            Some("attention: drawing K and V [2 s]")
        );
        let mut l = Lines::new("sleep-wake", 0, t0);
        l.pos = 7;
        assert_eq!(
            l.due(t0 + FIRST_LINE_AFTER).as_deref(),
            Some("sleep-wake: 7 [2 s]")
        );
        let mut l = Lines::new("x", 2, t0);
        l.pos = 5;
        assert_eq!(
            l.due(t0 + FIRST_LINE_AFTER).as_deref(),
            Some("x: 2/2 (100%) [2 s]")
        );
    }

    #[test]
    fn stderr_progress_runs_phases_in_turn() {
        // Not a terminal under the test harness: plain lines, none for phases this short.
        let p = StderrProgress::new();
        phase(&p, "one", 2, || {
            p.advance(1);
            p.advance(1);
        });
        assert!(p.current().is_none(), "the phase ended");
        p.begin("two", 1);
        p.begin("three", 1);
        assert_eq!(
            p.current().as_ref().map(|b| lock(&b.state).what.clone()),
            Some("three".to_string())
        );
        p.set_message("block 16");
        assert_eq!(
            p.current().as_ref().map(|b| lock(&b.state).msg.clone()),
            Some("block 16".to_string())
        );
        p.end();
        p.advance(1); // after the end: ignored
        p.set_message("ignored");
    }
}
