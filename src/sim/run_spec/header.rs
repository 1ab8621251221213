//! What every simulator report's JSON opens with: the workload, the preset, the model and GPUs,
//! where the efficiency and step times come from, the engine's settings. One builder for
//! `sim engine`, `sim cluster` and its capacity search.

use super::resolve::ResolvedRun;
use crate::kv::model::ModelShape;
use crate::kv::BlockSize;
use crate::sim::engine::EngineConfig;
use crate::sim::latency::Choice;
use serde::Serialize;

/// The report's opening fields (flattened into each command's report).
#[derive(Debug, Serialize)]
pub struct ReportHeader<'a> {
    pub workload: &'a str,
    pub preset: &'a str,
    pub model: &'a ModelShape,
    pub gpu: &'a str,
    pub tp: usize,
    pub profile_source: String,
    /// The step-time model (measured tables or the roofline) and why.
    pub step_times: &'a Choice,
    /// Whether the efficiency was measured, and where max_model_len and the host tier's
    /// bandwidth come from; left out of the capacity search's report.
    #[serde(flatten)]
    pub sources: Option<Sources<'a>>,
    pub engine: &'a EngineConfig,
    /// The block size every run shares (a cluster's; `sim engine` may run several).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_size: Option<BlockSize>,
}

#[derive(Debug, Serialize)]
pub struct Sources<'a> {
    pub profile_measured: bool,
    pub max_model_len_source: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offload_bandwidth_source: Option<&'a str>,
}

impl ResolvedRun {
    /// The header of a report on `workload` run with these settings.
    pub fn header<'a>(&'a self, workload: &'a str) -> ReportHeader<'a> {
        let s = &self.settings;
        ReportHeader {
            workload,
            preset: &self.preset_name,
            model: &s.model,
            gpu: s.gpu.name,
            tp: s.tp,
            profile_source: format!("{}: {}", s.profile.device, s.profile.source),
            step_times: &s.step_times,
            sources: Some(Sources {
                profile_measured: s.profile.measured,
                max_model_len_source: &self.max_model_len_source,
                offload_bandwidth_source: self.offload_source.as_deref(),
            }),
            engine: &s.engine,
            block_size: None,
        }
    }
}

impl ReportHeader<'_> {
    /// With the block size every run shares.
    pub fn at_block_size(self, block_size: BlockSize) -> Self {
        ReportHeader {
            block_size: Some(block_size),
            ..self
        }
    }

    /// Without [`Sources`] (the capacity search's report).
    pub fn without_sources(self) -> Self {
        ReportHeader {
            sources: None,
            ..self
        }
    }
}
