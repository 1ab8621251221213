//! Decode attention over a paged KV cache, measured side by side with the contiguous baseline and
//! the memory limits of the same run, and checked against an f64 oracle.

mod oracle;
mod problem;
mod run;

pub use crate::launch::{split_plan, AttentionData, AttentionShape, SplitPlan, CHUNK, FULL_WAVE};
pub use oracle::{attention_f64, relative_error, tolerance};
pub use problem::{Problem, ProblemError};
pub use run::{measure, measure_dtype, AttentionReport, MeasureOptions};
