//! Wall-clock timing on the host: untimed warm-up runs (first-touch page faults, cold caches,
//! lazily built state), then timed runs. The median describes a typical run; the best run is the
//! statistic for a limit (a memory limit is what the machine can do, and on a shared machine
//! other work only ever slows a pass down). GPU work is timed with CUDA events instead
//! (`src/device/cuda/timing.rs`).

use crate::stats::median;
use std::convert::Infallible;
use std::time::{Duration, Instant};

/// Runs `f` and returns its result with the time it took.
pub fn timed<R>(f: impl FnOnce() -> R) -> (R, Duration) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed())
}

/// Seconds of each of `iters` (at least 1) runs of `f`, after `warmup` untimed runs; the first
/// error ends it.
pub fn try_samples_secs<E>(
    warmup: usize,
    iters: usize,
    mut f: impl FnMut() -> Result<(), E>,
) -> Result<Vec<f64>, E> {
    for _ in 0..warmup {
        f()?;
    }
    (0..iters.max(1))
        .map(|_| {
            let (r, d) = timed(&mut f);
            r.map(|()| d.as_secs_f64())
        })
        .collect()
}

/// Seconds of each of `iters` (at least 1) runs of `f`, after `warmup` untimed runs.
pub fn samples_secs(warmup: usize, iters: usize, mut f: impl FnMut()) -> Vec<f64> {
    match try_samples_secs::<Infallible>(warmup, iters, || {
        f();
        Ok(())
    }) {
        Ok(v) => v,
        Err(never) => match never {},
    }
}

/// The median seconds ([`median`]) of `iters` runs of `f` after `warmup` untimed runs.
pub fn median_secs(warmup: usize, iters: usize, f: impl FnMut()) -> f64 {
    median(&samples_secs(warmup, iters, f))
}

/// The shortest seconds of `iters` runs of `f` after `warmup` untimed runs.
pub fn best_secs(warmup: usize, iters: usize, f: impl FnMut()) -> f64 {
    samples_secs(warmup, iters, f)
        .into_iter()
        .fold(f64::INFINITY, f64::min)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run that sleeps the next of `ms` milliseconds and counts itself.
    fn sleeper<'a>(ms: &'a [u64], calls: &'a mut usize) -> impl FnMut() + 'a {
        move || {
            std::thread::sleep(Duration::from_millis(ms[*calls]));
            *calls += 1;
        }
    }

    #[test]
    fn warm_up_runs_are_not_timed_and_the_statistics_pick_the_right_run() {
        // The warm-up sleeps 1 ms, the timed runs 200, 5 and 60 ms. A sleep lasts at least as
        // long as asked, so the lower bounds hold on any machine; the upper bounds leave tens of
        // milliseconds for a busy one. Timing the warm-up would show as a run under 5 ms.
        let ms = [1, 200, 5, 60];
        let mut calls = 0;
        let t = samples_secs(1, 3, sleeper(&ms, &mut calls));
        assert_eq!((t.len(), calls), (3, 4));
        assert!(t[0] >= 0.200 && t[1] >= 0.005 && t[2] >= 0.060, "{t:?}");
        let mut calls = 0;
        let med = median_secs(1, 3, sleeper(&ms, &mut calls));
        assert!((0.060..0.200).contains(&med), "{med}");
        let mut calls = 0;
        let best = best_secs(1, 3, sleeper(&ms, &mut calls));
        assert!((0.005..0.060).contains(&best), "{best}");
    }

    #[test]
    fn at_least_one_timed_run_and_errors_stop_it() {
        let mut calls = 0;
        assert_eq!(samples_secs(0, 0, || calls += 1).len(), 1);
        assert_eq!(calls, 1);
        let mut calls = 0;
        let r = try_samples_secs(1, 5, || {
            calls += 1;
            if calls == 3 {
                Err("third")
            } else {
                Ok(())
            }
        });
        assert_eq!((r, calls), (Err("third"), 3));
    }
}
