"""Long runs: progress reaches the callback, Ctrl-C stops the run, an error in the callback
stops it too, and the next run starts clean."""

import _thread
import signal
import threading
import time

import pytest

import pagedkv

# Long enough to be interrupted mid-way on any machine: ~minutes if left to finish.
LONG = dict(poisson=200, requests=2_000_000)


def test_progress_reaches_the_callback_in_order():
    seen = []
    r = pagedkv.engine(poisson=50, requests=30_000, progress=lambda *a: seen.append(a))
    assert seen, "the callback was called"
    whats = {what for what, _, _ in seen}
    assert whats == {"sim engine: requests finished"}
    done = [d for _, d, _ in seen]
    assert done == sorted(done) and all(total == 30_000 for _, _, total in seen)
    assert r.runs[0].completed == 30_000


@pytest.fixture
def ctrl_c_raises():
    """Python's own SIGINT handler for the test: a shell runs background jobs with SIGINT
    ignored, and then `interrupt_main` does nothing (CI started with `cmd &` did so)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_ctrl_c_stops_a_run_and_the_next_starts_clean(ctrl_c_raises):
    timer = threading.Timer(1.0, _thread.interrupt_main)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            pagedkv.engine(progress=False, **LONG)
    finally:
        timer.cancel()
    took = time.monotonic() - started
    assert took < 30, f"the run went on {took:.0f} s after Ctrl-C"
    r = pagedkv.engine(poisson=5, requests=50, progress=False)
    assert r.runs[0].completed == 50


def test_an_exception_in_the_callback_stops_the_run():
    class Enough(Exception):
        pass

    def stop(what, done, total):
        if done > 0:
            raise Enough(done)

    started = time.monotonic()
    with pytest.raises(Enough):
        pagedkv.engine(progress=stop, **LONG)
    assert time.monotonic() - started < 30
    assert pagedkv.engine(poisson=5, requests=50, progress=False).runs[0].completed == 50


def test_runs_from_threads_take_turns():
    results = []

    def one(seed):
        results.append(pagedkv.engine(poisson=5, requests=200, seed=seed, progress=False))

    threads = [threading.Thread(target=one, args=(s,)) for s in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and all(r.runs[0].completed == 200 for r in results)
