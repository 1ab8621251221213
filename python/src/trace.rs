//! Trace readers for Python: the requests of an Azure CSV or a Mooncake JSON-lines trace, read
//! by the library as every command reads them.

use crate::error::raise;
use pagedkv::workload::trace::{read_trace as read, TraceFormat};
use pyo3::prelude::*;

/// The trace at `path` as JSON: its format and one object per request (arrival in seconds after
/// the first, prompt and output tokens; Mooncake's prefix block hashes).
#[pyfunction]
pub fn read_trace(py: Python<'_>, path: std::path::PathBuf) -> PyResult<String> {
    let trace = py
        .detach(|| read(&path))
        .map_err(|e| raise(py, "PagedkvError", e.to_string(), Some(2)))?;
    let format = match trace.format {
        TraceFormat::Csv => "azure-csv",
        TraceFormat::Mooncake => "mooncake",
    };
    let requests: Vec<serde_json::Value> = (trace.requests.iter().enumerate())
        .map(|(i, r)| {
            let mut row = serde_json::json!({
                "arrival_s": r.arrival_s,
                "prompt_tokens": r.prompt_tokens,
                "output_tokens": r.output_tokens,
            });
            if let Some(h) = trace.hash_ids.get(i) {
                row["hash_ids"] = serde_json::json!(h);
            }
            row
        })
        .collect();
    serde_json::to_string(&serde_json::json!({"format": format, "requests": requests}))
        .map_err(|e| raise(py, "PagedkvError", e.to_string(), Some(1)))
}
