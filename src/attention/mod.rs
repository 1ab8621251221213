//! Decode attention over a paged KV cache, measured side by side with the contiguous baseline and
//! the memory limits of the same run, and checked against an f64 oracle.

mod oracle;
mod problem;
mod roofline;
mod run;
mod values;

pub use crate::launch::{split_plan, AttentionData, AttentionShape, SplitPlan, CHUNK, FULL_WAVE};
pub use oracle::{attention_f64, attention_f64_exact, relative_error, tolerance};
pub use problem::{Problem, ProblemError, ProblemOptions};
pub use roofline::{
    attention_lane_fmas, in_cache_secs_per_token, Bound, InCacheError, ReadTimes, Roofline,
};
pub use run::{
    measure, measure_dtype, Accuracy, AttentionReport, DtypeProblem, EngineChoice, EngineFigures,
    KvStorage, MeasureOptions, ProblemShape, Speed,
};
pub use values::{Scales, Values};
