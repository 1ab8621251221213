//! What can stop an engine run: a configuration refused, a request refused, the step log not
//! written, a run that cannot go on.

use super::config::ConfigError;
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum EngineError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("request {id}: {detail}")]
    Request { id: String, detail: String },
    #[error("no requests")]
    NoRequests,
    #[error("writing the step log: {0}")]
    Output(#[source] IoError),
    #[error(
        "the engine stalled at step {step}: {waiting} requests wait and nothing can be scheduled"
    )]
    Stalled { step: u64, waiting: usize },
    #[error("nothing is left to run at time {time} but {unfinished} requests have not finished")]
    Unfinished { time: f64, unfinished: usize },
    /// The front end watching the run asked it to stop ([`crate::progress::watch`]).
    #[error("interrupted")]
    Interrupted,
}

/// An I/O error kept as an error's source; compared by kind and text, so errors stay `PartialEq`.
#[derive(Debug, Clone)]
pub struct IoError(pub std::sync::Arc<std::io::Error>);

impl From<std::io::Error> for IoError {
    fn from(e: std::io::Error) -> Self {
        IoError(std::sync::Arc::new(e))
    }
}

impl PartialEq for IoError {
    fn eq(&self, o: &Self) -> bool {
        self.0.kind() == o.0.kind() && self.0.to_string() == o.0.to_string()
    }
}

impl std::fmt::Display for IoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for IoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}
