//! SLO capacity (DistServe's goodput, OSDI'24 §2.2): the highest request rate a simulated engine
//! or cluster sustains within its service-level objectives, found by searching the rate scale of
//! a trace (arrival times divided by the scale), each probe a whole run.
//!
//! A run sustains its load when its requests meet the SLOs by the rule of [`SloTargets`]: a share
//! of them within every objective (DistServe's SLO attainment, Mooncake's effective request
//! capacity, what vLLM's `bench serve --goodput` counts), or each objective's percentile (MLPerf).
//! The presets and the sweep's default are in [`crate::sim::engine::slo`].
//!
//! The search doubles (by [`SearchLimits::step`]) from the trace's own rate ([`own_rate`]) until
//! one probe holds and one fails, then bisects geometrically until the two are within
//! [`SearchLimits::resolution`] of each other or the probes run out; the capacity is the highest
//! scale seen to hold. Attainment need not fall monotonically with the rate (a burst may land
//! differently), so the figure is the bracket's lower end, not a proof that every lower rate holds.
//!
//! [`search_by`] runs the search over anything that carries an engine report: an engine's run
//! ([`search`]), a cluster's layouts ([`crate::sim::cluster::capacity`]).

mod engine;
mod limits;
mod own_rate;
mod search;

pub use crate::sim::engine::SloTargets;
pub use engine::{search, AtCapacity, Capacity};
pub use limits::SearchLimits;
pub use own_rate::own_rate;
pub use search::{search_by, Searched};
