//! A setting the engine refuses, in one line.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
#[error("{0}")]
pub struct ConfigError(pub String);
