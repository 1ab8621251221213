//! A cluster of vLLM V1 engine replicas behind a router: a room above [`crate::sim::engine`]
//! that drives its replicas — the same engine, each with its own pool and prefix cache, fed
//! request by request as the router decides — and, optionally, a KV tier in host memory per
//! replica or shared ([`crate::sim::engine::host_tier`]).
//!
//! - [`router`]: round-robin, least-loaded, prefix-aware (SGLang's cache-aware policy), kv-aware
//!   (Dynamo's KV router); [`approx_tree`]: the prefix-aware router's own tree.
//! - [`cluster`]: the event loop; [`run`]: runs and reports; [`output`]: plots.
//!
//! With one replica every router sends everything to it, and the cluster steps exactly as
//! `sim engine` does (a test holds it to that, step for step).

pub mod approx_tree;
#[allow(clippy::module_inception)]
pub mod cluster;
pub mod output;
pub mod router;
pub mod run;

pub use cluster::{Cluster, ReplicaStep};
pub use router::{RouterConfig, RouterKind, RouterStats};
pub use run::{run, run_all, ClusterOutcome, ClusterSpec, RequestLine};
