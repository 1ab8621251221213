//! How long a step takes on the GPU: one seam ([`StepLatency`]) over the models that answer it.
//!
//! - [`Roofline`]: bytes over HBM bandwidth and FLOPs over the datasheet peak (optimistic: no
//!   kernel reaches the peaks).
//! - [`Measured`]: per-op kernel times measured on real GPUs ([`StepProfile`] tables: GEMMs,
//!   attention, all-reduces, elementwise ops), summed as vLLM runs a step.
//!
//! A run asks for one with `--step-times auto|measured|roofline` ([`StepTimes`]) and may bring its
//! own tables (`--step-profile FILE`); [`choose`] resolves that into the model every step of the
//! run uses and one line that says which and why. `auto`, the default: measured wherever the
//! tables cover the model, GPU, dtypes and tensor-parallel size, else the roofline, saying what the
//! tables lack. A new source of step times implements [`StepLatency`] and joins [`Latency`].

pub mod attention_rows;
pub mod batch;
pub mod interp;
pub mod measured;
pub mod profile;
pub mod roofline;

pub use batch::BatchShape;
pub use measured::{Lacks, Measured};
pub use profile::{ProfileError, StepProfile};
pub use roofline::{kv_bytes_per_token_per_gpu, Roofline, ALLREDUCE_LATENCY_S};

use crate::hw::Gpu;
use crate::kv::model::ModelShape;
use serde::Serialize;
use std::sync::{Arc, OnceLock};

/// A model of the GPU's time for one step.
pub trait StepLatency {
    /// Seconds of (compute, communication) for a step of `batch`; copies that overlap the step
    /// overlap its compute.
    fn forward(&self, batch: &BatchShape) -> (f64, f64);
    /// Which model made the times, as reports name it.
    fn describe(&self) -> String;
}

/// The models a run can use.
#[derive(Debug, Clone, PartialEq)]
pub enum Latency {
    Roofline(Box<Roofline>),
    Measured(Arc<Measured>),
}

impl StepLatency for Latency {
    fn forward(&self, batch: &BatchShape) -> (f64, f64) {
        match self {
            Latency::Roofline(r) => r.forward(batch),
            Latency::Measured(m) => m.forward(batch),
        }
    }

    fn describe(&self) -> String {
        match self {
            Latency::Roofline(_) => "roofline".into(),
            Latency::Measured(m) => format!("measured, {}", m.label),
        }
    }
}

/// Milliseconds of one step of `batch` by model `l`, compute and communication.
pub fn step_ms(l: &impl StepLatency, batch: &BatchShape) -> f64 {
    let (compute, comm) = l.forward(batch);
    (compute + comm) * 1e3
}

/// A run's two models at `block_size`: the measured one (from `profile`, when given) and the
/// roofline; `efficiency(b)` is attention's efficiency at block size b (the roofline's at
/// `block_size`, the measured decode attention's scale: its table's block size over this one).
pub fn models_at(
    profile: Option<&StepProfile>,
    model: &ModelShape,
    gpu: &Gpu,
    tp: usize,
    block_size: usize,
    efficiency: impl Fn(usize) -> f64,
) -> Result<(Option<Latency>, Latency), Lacks> {
    let measured = match profile {
        Some(p) => Some(Latency::Measured(Arc::new(
            Measured::new(p, model, tp)?.at_block_size(block_size, &efficiency),
        ))),
        None => None,
    };
    let roofline = Latency::Roofline(Box::new(Roofline {
        model: model.clone(),
        gpu: *gpu,
        tp,
        efficiency: efficiency(block_size),
    }));
    Ok((measured, roofline))
}

/// What a run asks for (`--step-times`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum StepTimes {
    /// Measured where the tables cover the run, else the roofline (saying why).
    #[default]
    Auto,
    /// Measured tables, or an error saying what they lack.
    Measured,
    /// The roofline over datasheet peaks.
    Roofline,
}

/// The model resolved for a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// The tables when the times are measured; `None`: the roofline.
    pub profile: Option<Arc<StepProfile>>,
    /// One line for reports: "step times: measured, <label>" or "step times: roofline — why".
    pub line: String,
}

impl Choice {
    /// The roofline, for the reason given.
    pub fn roofline(why: &str) -> Choice {
        Choice {
            profile: None,
            line: format!("step times: roofline — {why}"),
        }
    }

    /// "measured" or "roofline", for JSON.
    pub fn kind(&self) -> &'static str {
        if self.profile.is_some() {
            "measured"
        } else {
            "roofline"
        }
    }
}

/// In JSON reports: which model made the times, the line the text report prints, and the
/// tables' label and source when measured.
impl Serialize for Choice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("StepTimes", 4)?;
        st.serialize_field("model", self.kind())?;
        st.serialize_field("line", &self.line)?;
        st.serialize_field("label", &self.profile.as_ref().map(|p| &p.label))?;
        st.serialize_field("source", &self.profile.as_ref().map(|p| &p.source))?;
        st.end()
    }
}

/// The shipped profile of `gpu`, parsed once per process.
pub fn shipped(gpu: &str) -> Option<Arc<StepProfile>> {
    static CACHE: OnceLock<Vec<(&'static str, Arc<StepProfile>)>> = OnceLock::new();
    let all = CACHE.get_or_init(|| {
        profile::SHIPPED
            .iter()
            .filter_map(|(g, _)| Some((*g, Arc::new(StepProfile::shipped(g)?))))
            .collect()
    });
    all.iter().find(|(g, _)| *g == gpu).map(|(_, p)| p.clone())
}

/// Resolves what a run asks for into the model its steps use. `own`: a profile the user gave
/// (`--step-profile`), else the shipped one of `gpu`. An error (for `measured`, or a profile for
/// another GPU) is one line.
pub fn choose(
    ask: StepTimes,
    own: Option<Arc<StepProfile>>,
    model: &ModelShape,
    gpu: &Gpu,
    tp: usize,
) -> Result<Choice, StepTimesError> {
    if ask == StepTimes::Roofline {
        if own.is_some() {
            return Err(StepTimesError::ProfileWithRoofline);
        }
        return Ok(Choice::roofline("--step-times roofline"));
    }
    if let Some(p) = &own {
        if p.gpu != gpu.name {
            return Err(StepTimesError::OtherGpu {
                label: p.label.clone(),
                profile_gpu: p.gpu.clone(),
                gpu: gpu.name.into(),
            });
        }
    }
    let Some(profile) = own.or_else(|| shipped(gpu.name)) else {
        let why = NoTables {
            gpu: gpu.name.into(),
            shipped: profile::SHIPPED
                .iter()
                .map(|s| s.0)
                .collect::<Vec<_>>()
                .join(", "),
        };
        return match ask {
            StepTimes::Measured => Err(StepTimesError::NoTables(why)),
            _ => Ok(Choice::roofline(&why.to_string())),
        };
    };
    match Measured::new(&profile, model, tp) {
        Ok(m) => Ok(Choice {
            line: format!("step times: measured, {}", m.label),
            profile: Some(profile),
        }),
        Err(why) if ask == StepTimes::Auto => Ok(Choice::roofline(&why.to_string())),
        Err(why) => Err(StepTimesError::Lacks(why)),
    }
}

/// Why a run gets no step times: the flags disagree, or `--step-times measured` finds no tables
/// that cover it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StepTimesError {
    #[error("--step-profile needs --step-times auto or measured")]
    ProfileWithRoofline,
    #[error("--step-profile {label:?} is for {profile_gpu}, the run's GPU is {gpu}")]
    OtherGpu {
        label: String,
        profile_gpu: String,
        gpu: String,
    },
    #[error("--step-times measured: {0}")]
    NoTables(NoTables),
    #[error("--step-times measured: {0}")]
    Lacks(Lacks),
    /// `--step-profile FILE` unread.
    #[error(transparent)]
    Unread(#[from] ProfileError),
}

/// No step profile for the run's GPU, shipped or given.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("no measured tables for {gpu} (shipped: {shipped}; --step-profile FILE brings your own)")]
pub struct NoTables {
    pub gpu: String,
    /// The GPUs with a shipped profile.
    pub shipped: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::model::{preset, Weights};
    use crate::kv::Dtype;

    #[test]
    fn auto_measures_what_the_tables_cover_and_says_why_not_otherwise() {
        let m = preset("llama-3.1-8b").unwrap();
        let h200 = crate::hw::H200;
        let c = choose(StepTimes::Auto, None, &m, &h200, 2).unwrap();
        assert_eq!(c.kind(), "measured");
        assert!(
            c.line
                .contains("aiconfigurator 0.12.0 vllm 0.24.0 h200_sxm"),
            "{}",
            c.line
        );
        // f32 KV: no table; auto falls back and names what is missing, measured refuses.
        let f32 = ModelShape {
            dtype: Dtype::F32,
            ..m.clone()
        };
        let c = choose(StepTimes::Auto, None, &f32, &h200, 1).unwrap();
        assert!(c.line.starts_with("step times: roofline — ") && c.line.contains("f32"));
        assert!(choose(StepTimes::Measured, None, &f32, &h200, 1).is_err());
        // A shape no preset has.
        let odd = ModelShape {
            hidden_size: 4000,
            ..m.clone()
        };
        let c = choose(StepTimes::Auto, None, &odd, &h200, 1).unwrap();
        assert!(
            c.line.contains("n=") && c.line.contains("k=4000"),
            "{}",
            c.line
        );
        // An A100 has no shipped tables.
        let c = choose(StepTimes::Auto, None, &m, &crate::hw::A100, 1).unwrap();
        assert!(c.line.contains("no measured tables for a100"), "{}", c.line);
        let r = choose(StepTimes::Roofline, None, &m, &h200, 1).unwrap();
        assert_eq!(r.kind(), "roofline");
        // fp8 weights are covered too.
        let fp8 = ModelShape {
            weights: Weights::Fp8,
            dtype: Dtype::Fp8E4m3,
            ..m
        };
        assert_eq!(
            choose(StepTimes::Auto, None, &fp8, &h200, 4)
                .unwrap()
                .kind(),
            "measured"
        );
    }

    #[test]
    fn a_profile_for_another_gpu_is_refused() {
        let m = preset("llama-3.1-8b").unwrap();
        let h100 = shipped("h100").unwrap();
        let e = choose(StepTimes::Auto, Some(h100.clone()), &m, &crate::hw::H200, 1).unwrap_err();
        assert!(e.to_string().contains("is for h100"), "{e}");
        let e = choose(StepTimes::Roofline, Some(h100), &m, &crate::hw::H100, 1).unwrap_err();
        assert_eq!(e, StepTimesError::ProfileWithRoofline);
        assert!(e.to_string().contains("--step-profile needs"), "{e}");
    }
}
