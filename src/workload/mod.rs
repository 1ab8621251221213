//! Workloads: real request traces and synthetic generators shared by the sweep and the simulators.

pub mod azure;
pub mod jobs;
pub mod synthetic;
