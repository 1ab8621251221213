//! How requests reach a system: each at its arrival (open loop, the default), or through `N`
//! clients that each keep one request outstanding (closed loop, `--max-concurrency N`).
//!
//! The closed loop is the one benchmark clients run; read in their code:
//! - vLLM 0.33.0's `vllm bench serve` (the PyPI wheel, commit 4ba787ec9,
//!   `vllm/benchmarks/serve.py`): `get_request` (l. 431–545) yields every request at its
//!   arrival — all at time 0 under `--request-rate inf` (the default: "all the requests are sent
//!   at time 0", l. 1749), else on a Poisson (gamma) schedule or the trace's timestamps
//!   (`--self-timed`); each becomes a task at once (`request_arrival_time`, l. 1110) that waits on
//!   `asyncio.Semaphore(max_concurrency)` (l. 1001–1012, FIFO) and sends only once it holds it.
//!   So with a rate, requests follow their arrival times with at most N outstanding ("the actual
//!   request rate may be lower than specified", `--max-concurrency`'s help, l. 1682); at rate inf
//!   it is the pure closed loop. The semaphore is released when the response's last chunk has
//!   come (`request_func` returns). A request's clock starts when it is sent: `st =
//!   time.perf_counter()` inside `request_func` (`lib/endpoint_request_func.py` l. 248), TTFT and
//!   latency measured from it; the wait for the semaphore is `client_queue_time = start_time −
//!   request_arrival_time` (l. 1016), reported apart as "Client Queue Time" and, with a finite
//!   rate, "E2EL incl. Client Queue" (l. 1358–1368). Throughput is completions over the whole
//!   run (`benchmark_duration`, l. 1048–1123). `--max-concurrency` must be > 0 (l. 2057).
//! - guidellm 0.8.1 (the PyPI wheel, sha256 3236095f7ad59f46…; `scheduler/strategies.py`):
//!   `ConcurrentStrategy` (l. 324) runs `streams` workers, each sending its next request at its
//!   last one's `completed_at` (l. 399), under a semaphore of that size (`scheduler/worker.py`
//!   l. 326–337); `SynchronousStrategy` (l. 267) is the same with one stream. Latencies count from
//!   `request_start` (`schemas/base/request_stats.py`: `time_to_first_token_ms`, l. 264), and the
//!   wait past a scheduled start is `request_dispatch_delay` (l. 126).
//! - AIConfigurator 0.12.0 reads a configuration's "concurrency" as requests in flight (decode
//!   batch × workers, `sdk/picking.py` l. 141) and benchmarks it with `aiperf profile
//!   --concurrency N` (`generator/sflow.py`).
//!
//! Here, the same: requests are taken in arrival order (ties in input order, as the semaphore's
//! queue); request k is sent at max(its arrival, the earliest time a client is free), and its
//! [`Req::arrival`](super::request::Req::arrival) is that send: the system sees it arrive then,
//! and its TTFT, TPOT and end-to-end latency count from it, as the client's do. A client is free
//! again when its request finished: its last token reached it (the end of the step that sampled
//! it), or the Conductor refused it. With every arrival at 0 (`--rate-scale inf`) it is the pure
//! closed loop; with N at least the number of requests, the open loop. Requests vLLM's server
//! refuses under `max_model_len` never reach the system: their 400 answers at once and frees the
//! client at the same instant, which is the same as never sending them.
//!
//! The report adds what these clients print: the clients, the most requests in flight (exact;
//! vLLM's "Peak concurrent requests" counts requests active in each whole second, so it can
//! exceed N), their time average (first send to last finish), the client queue time and the
//! end-to-end latency with it.

use super::metrics::Distribution;
use crate::stats::Time;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Why a search over the arrival rate (the sweep's SLO capacity, `sim cluster
/// --search-capacity`) refuses closed-loop clients.
pub const NO_RATE_SEARCH: &str = "--max-concurrency: the capacity search raises the arrival rate until the SLOs fail, but N clients send no faster than their requests finish and latencies count from each send, so the rate served stops rising and the search cannot bracket it; run sim engine (--block-sizes 1,2,4,...) or sim cluster with --max-concurrency N instead";

/// How requests reach a system.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Clients {
    /// Each request at its arrival, however many are outstanding.
    #[default]
    Open,
    /// `max_concurrency` clients, each sending its next request when its last one finished
    /// (`vllm bench serve --max-concurrency`); at least 1.
    Closed { max_concurrency: usize },
}

/// What a closed-loop run's clients saw (times in the run's unit).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClientReport {
    /// The clients (`--max-concurrency`).
    pub max_concurrency: usize,
    /// Every request was ready at the same instant: the pure closed loop (vLLM's
    /// `--request-rate inf`); otherwise requests followed their arrivals, N at most outstanding.
    pub all_at_once: bool,
    /// The most requests sent and not yet finished at once.
    pub peak_in_flight: usize,
    /// Requests in flight, time average from the first send to the last finish.
    pub mean_in_flight: f64,
    /// Send − arrival: how long each request waited for a client (vLLM's "Client Queue Time").
    pub client_queue: Option<Distribution>,
    /// Finish − arrival: end to end with the client's queue (vLLM's "E2EL incl. Client Queue").
    pub e2e_with_client_queue: Option<Distribution>,
}

/// The clients of a closed loop: when each is free, and when each request was sent and finished.
#[derive(Debug)]
pub struct ClientPool {
    n: usize,
    /// When each free client became free (−∞: never busy).
    free: BinaryHeap<Reverse<Time>>,
    /// Per request (by uid): its arrival, its send and its finish (NaN: not yet).
    arrival: Vec<f64>,
    sent: Vec<f64>,
    finish: Vec<f64>,
}

impl ClientPool {
    /// `n` clients (at least 1) for requests whose arrivals, by uid, are `arrival`.
    pub fn new(n: usize, arrival: Vec<f64>) -> ClientPool {
        let n = n.max(1);
        // Clients beyond the requests are never busy (and a count of 2^40 must not be built).
        let used = n.min(arrival.len().max(1));
        ClientPool {
            n,
            free: (0..used)
                .map(|_| Reverse(Time(f64::NEG_INFINITY)))
                .collect(),
            sent: vec![f64::NAN; arrival.len()],
            finish: vec![f64::NAN; arrival.len()],
            arrival,
        }
    }

    /// When a request arriving at `arrival` is sent: `None` while every client is busy.
    pub fn send_time(&self, arrival: f64) -> Option<f64> {
        self.free.peek().map(|Reverse(Time(f))| arrival.max(*f))
    }

    /// Request `uid` is sent at `at` ([`ClientPool::send_time`] of its arrival): it takes the
    /// client free the longest.
    pub fn sent(&mut self, uid: u64, at: f64) {
        self.free.pop();
        self.sent[uid as usize] = at;
    }

    /// Request `uid` finished at `at`: its client is free from then. (A cluster reports finishes
    /// in the order its steps are taken, not always in time order; a finish is never earlier
    /// than a send the driver has not made yet, so the earliest free client is always known.)
    pub fn finished(&mut self, uid: u64, at: f64) {
        self.free.push(Reverse(Time(at)));
        self.finish[uid as usize] = at;
    }

    /// The report, over the requests sent.
    pub fn report(&self) -> ClientReport {
        let all_at_once = self.arrival.windows(2).all(|w| w[0] == w[1]);
        let mut queue = Vec::new();
        let mut e2e = Vec::new();
        // (time, +1 send / −1 finish): at equal times the finish first, as a freed client's
        // next request is sent the instant the last one ends.
        let mut events = Vec::new();
        for ((&a, &s), &f) in self.arrival.iter().zip(&self.sent).zip(&self.finish) {
            if s.is_nan() {
                continue;
            }
            queue.push(s - a);
            events.push((s, 1i64));
            if !f.is_nan() {
                e2e.push(f - a);
                events.push((f, -1));
            }
        }
        events.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
        let (mut now, mut peak, mut area) = (0i64, 0i64, 0.0);
        for w in events.windows(2) {
            now += w[0].1;
            peak = peak.max(now);
            area += now as f64 * (w[1].0 - w[0].0);
        }
        if let Some(last) = events.last() {
            peak = peak.max(now + last.1);
        }
        let span = match (events.first(), events.last()) {
            (Some(a), Some(b)) => b.0 - a.0,
            _ => 0.0,
        };
        ClientReport {
            max_concurrency: self.n,
            all_at_once,
            peak_in_flight: peak as usize,
            mean_in_flight: if span > 0.0 { area / span } else { 0.0 },
            client_queue: Distribution::of(queue),
            e2e_with_client_queue: Distribution::of(e2e),
        }
    }
}
