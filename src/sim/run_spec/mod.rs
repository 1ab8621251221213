//! A simulator run spelled as plain values, and the one way it becomes a run: the application
//! layer of `sim engine`, `sim cluster` and `serve`, below their command lines.
//!
//! - [`RunSpec`] ([`spec`]): what a run asks for, named as the flags, `Default` the CLI's
//!   defaults, readable from JSON; [`TierSpec`] its host tier.
//! - [`resolve`] ([`mod@resolve`]): preset, then a scenario's engine settings, then the spec, into
//!   a [`ResolvedRun`] (the [`crate::sim::engine::RunSettings`] and where each came from), or a
//!   [`SpecError`] ([`error`]) whose message is the CLI's.
//! - [`ReportHeader`] ([`header`]): what every simulator report's JSON opens with.
//!
//! (Not [`crate::sim::engine::setup`], which prepares a workload for one engine's run.)

pub mod choices;
pub mod error;
pub mod header;
pub mod resolve;
pub mod spec;
pub mod tier;

pub use choices::{Backend, Clock, Quantization};
pub use error::SpecError;
pub use header::{ReportHeader, Sources};
pub use resolve::{model_shape, resolve, run_slo, ResolvedRun};
pub use spec::{RunSpec, TierSpec};
