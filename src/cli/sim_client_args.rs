//! `--max-concurrency N` of `sim engine` and `sim cluster`: closed-loop clients
//! ([`crate::sim::engine::clients`], where the rules and their sources are), and what the
//! reports say of them.

use crate::cli::count;
use crate::sim::engine::TimeUnit;
use crate::sim::engine::{ClientReport, Clients};

#[derive(clap::Args, Debug, Clone, Copy)]
pub struct ClientArgs {
    /// Closed-loop clients, as `vllm bench serve --max-concurrency N`: N clients, each sending
    /// its next request when its last one finished; requests still follow their arrivals, at
    /// most N outstanding (with `--rate-scale inf` every request is ready at once: the pure
    /// closed loop). Latencies count from each send, as the client's do. In a cluster, one pool
    /// of N clients over every replica.
    #[arg(long, value_parser = count(1..))]
    pub max_concurrency: Option<usize>,
}

impl ClientArgs {
    pub fn clients(&self) -> Clients {
        match self.max_concurrency {
            Some(n) => Clients::Closed { max_concurrency: n },
            None => Clients::Open,
        }
    }
}

/// The line that says how the requests were sent (`None`: each at its arrival, as before).
pub fn describe(c: Clients) -> Option<String> {
    let Clients::Closed { max_concurrency: n } = c else {
        return None;
    };
    Some(format!(
        "clients: closed loop, {n} client{} (as vllm bench serve --max-concurrency {n}): each request is sent at its arrival or when a client is free, whichever is later; latencies count from the send",
        if n == 1 { "" } else { "s" }
    ))
}

/// A run's clause about its clients: how many were busy, and how long requests waited for one
/// (not when every request was ready at 0: the wait is then the send time itself, and vLLM too
/// leaves the queue out of its end-to-end figures at rate inf).
pub fn clause(c: &ClientReport, unit: TimeUnit) -> String {
    let (scale, lat) = crate::cli::latency_unit::latency_unit(unit);
    let n = c.max_concurrency;
    let mut s = format!(
        ", {n} client{}{}: in flight peak {}, mean {:.1}",
        if n == 1 { "" } else { "s" },
        if c.all_at_once {
            " (every request ready at once)"
        } else {
            ""
        },
        c.peak_in_flight,
        c.mean_in_flight
    );
    match c.client_queue {
        Some(q) if !c.all_at_once => {
            s += &format!(
                "; waited for a client p50/p99 {:.2}/{:.2} {lat}",
                q.p50 * scale,
                q.p99 * scale
            )
        }
        _ => {}
    }
    s
}
