//! A cluster of vLLM V1 engine replicas behind a router: a room above [`crate::sim::engine`]
//! that drives its replicas — the same engine, each with its own pool and prefix cache, fed
//! request by request as the router decides — and, optionally, a KV tier in host memory per
//! replica or shared ([`crate::sim::engine::host_tier`]).
//!
//! - [`router`]: one file per policy (round-robin, least-loaded, SGLang's cache-aware router,
//!   Dynamo's KV router), each citing the code it follows and giving a reason with every choice.
//! - [`core`]: the cluster as a [`crate::sim::engine::System`]: `submit` a request at its
//!   arrival, `advance` between arrivals; [`book`]: what the router knows of what it sent.
//! - [`pd`]: prefill and decode on separate instances, the KV moving between them.
//! - [`spec`]: a cluster's configuration, its [`Topology`] colocated or disaggregated.
//! - [`run`]: runs on a trace; [`outcome`]: what a run of either topology reports;
//!   [`request_line`]: each request's line for `--request-log`; [`output`]: plots.
//! - [`capacity`]: DistServe's goodput per GPU of layouts, colocated and split.
//!
//! With one replica every router sends everything to it, and the cluster steps exactly as
//! `sim engine` does (a test holds it to that, step for step).

pub mod book;
pub mod capacity;
pub mod core;
pub mod outcome;
pub mod output;
pub mod pd;
pub mod request_line;
pub mod router;
pub mod run;
pub mod spec;

pub use core::{ClusterCore, Placement};
pub use outcome::ClusterOutcome;
pub use request_line::RequestLine;
pub use router::{Choice, Reason, RouterConfig, RouterKind, RouterStats};
pub use run::{run, run_all};
pub use spec::{ClusterSpec, Topology};
