//! Attention efficiency per block size: the fraction of the memory's read-only stream limit that
//! paged decode attention reaches. The step-time model divides the KV bytes a step reads by it.
//!
//! Sources, in the order `load_profile` tries them:
//! - a profile file ([`Profile`] as JSON), which `pagedkv sweep --out DIR` writes to
//!   `DIR/attention_profile.json` from the efficiencies it measured (attention's fraction of the
//!   stream limit, else the read-only gather's);
//! - `pagedkv sweep --json` output or `sweep.json` (its rows);
//! - `pagedkv attention --json` output: one report, or several (a JSON array or one per line,
//!   e.g. `for b in 8 16 32; do pagedkv attention --json --block-size $b; done > a.json`).
//!
//! Between measured block sizes the efficiency is interpolated linearly in log2(block size), and
//! held at the nearest end outside them; values are clamped to (0, 1].
//!
//! Without a file, [`Profile::h200_assumed`] gives figures for an H200 that are an assumption,
//! not a measurement: what FlashAttention/FlashInfer-style paged decode kernels typically reach
//! (about 90% of the stream at 16 tokens and above, falling to about a third at one token per
//! block, where every token costs a separate table lookup and a short, scattered read).

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Why a file is no efficiency profile; each names the file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProfileFileError {
    #[error("{name}: {reason}")]
    Unread { name: String, reason: String },
    #[error(
        "{name}: not a profile, sweep or attention report (expected an \"efficiency\" list, \
         sweep \"rows\", or attention reports with block_size and paged_frac_of_stream)"
    )]
    NotAProfile { name: String },
    #[error("{name}: the profile holds no block sizes")]
    Empty { name: String },
    #[error(
        "{name}: block size {block_size} has efficiency {efficiency} (need block size >= 1 and \
         efficiency > 0)"
    )]
    BadPoint {
        name: String,
        block_size: usize,
        efficiency: f64,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfilePoint {
    pub block_size: usize,
    pub efficiency: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Where the figures were measured (`pagedkv`'s device name), or "assumed".
    pub device: String,
    /// How they were obtained.
    pub source: String,
    /// True when measured, false for an assumption.
    pub measured: bool,
    pub efficiency: Vec<ProfilePoint>,
}

impl Profile {
    /// The built-in figures for an H200 (an assumption; see the module docs).
    pub fn h200_assumed() -> Profile {
        let pts = [
            (1, 0.35),
            (2, 0.5),
            (4, 0.65),
            (8, 0.78),
            (16, 0.86),
            (32, 0.89),
            (64, 0.9),
            (128, 0.9),
            (256, 0.9),
        ];
        Profile {
            device: "H200 (assumed)".into(),
            source: "built-in assumption, not measured: typical paged decode attention on H200"
                .into(),
            measured: false,
            efficiency: pts
                .iter()
                .map(|&(block_size, efficiency)| ProfilePoint {
                    block_size,
                    efficiency,
                })
                .collect(),
        }
    }

    /// The efficiency at `block_size` (see the module docs for interpolation).
    pub fn at(&self, block_size: usize) -> f64 {
        let mut pts: Vec<(f64, f64)> = self
            .efficiency
            .iter()
            .filter(|p| p.block_size > 0 && p.efficiency.is_finite() && p.efficiency > 0.0)
            .map(|p| ((p.block_size as f64).log2(), p.efficiency.min(1.0)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let x = (block_size.max(1) as f64).log2();
        let (Some(first), Some(last)) = (pts.first(), pts.last()) else {
            return 1.0;
        };
        if x <= first.0 {
            return first.1;
        }
        if x >= last.0 {
            return last.1;
        }
        let i = pts.iter().position(|p| p.0 >= x).expect("inside the range");
        let (a, b) = (pts[i - 1], pts[i]);
        if b.0 == a.0 {
            return b.1;
        }
        a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0)
    }

    /// Checks that a loaded profile is usable.
    fn validate(self, name: &str) -> Result<Profile, ProfileFileError> {
        let name = name.to_string();
        if self.efficiency.is_empty() {
            return Err(ProfileFileError::Empty { name });
        }
        if let Some(p) = self
            .efficiency
            .iter()
            .find(|p| p.block_size == 0 || !(p.efficiency.is_finite() && p.efficiency > 0.0))
        {
            return Err(ProfileFileError::BadPoint {
                name,
                block_size: p.block_size,
                efficiency: p.efficiency,
            });
        }
        Ok(self)
    }
}

fn num(v: &serde_json::Value, key: &str) -> Option<f64> {
    v.get(key).and_then(serde_json::Value::as_f64)
}

/// A profile from a sweep's rows (attention's fraction of stream where measured, else the
/// read-only gather's).
fn from_sweep(v: &serde_json::Value) -> Option<Profile> {
    let rows = v.get("rows")?.as_array()?;
    let efficiency: Vec<ProfilePoint> = rows
        .iter()
        .filter_map(|r| {
            let e =
                num(r, "attention_frac_of_stream").or_else(|| num(r, "gather_frac_of_stream"))?;
            Some(ProfilePoint {
                block_size: num(r, "block_size")? as usize,
                efficiency: e,
            })
        })
        .collect();
    Some(Profile {
        device: v.get("device")?.as_str()?.into(),
        source: "pagedkv sweep rows".into(),
        measured: true,
        efficiency,
    })
}

/// A profile from `pagedkv attention --json` reports.
fn from_attention(reports: &[serde_json::Value]) -> Option<Profile> {
    let efficiency = reports
        .iter()
        .map(|r| {
            Some(ProfilePoint {
                block_size: num(r, "block_size")? as usize,
                efficiency: num(r, "paged_frac_of_stream")?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Profile {
        device: reports.first()?.get("device")?.as_str()?.into(),
        source: "pagedkv attention reports".into(),
        measured: true,
        efficiency,
    })
}

/// Parses any of the accepted forms (see the module docs); `name` is used in errors.
pub fn parse_profile(text: &str, name: &str) -> Result<Profile, ProfileFileError> {
    let unread = |reason: String| ProfileFileError::Unread {
        name: name.into(),
        reason,
    };
    let values = crate::workload::strict_json::values(text).map_err(|e| unread(e.to_string()))?;
    let found = match values.as_slice() {
        [] => None,
        [v] if v.get("efficiency").is_some() => {
            Some(serde_json::from_value::<Profile>(v.clone()).map_err(|e| unread(e.to_string()))?)
        }
        [v] if v.get("rows").is_some() => from_sweep(v),
        [serde_json::Value::Array(items)] => from_attention(items),
        many => from_attention(many),
    };
    found
        .ok_or_else(|| ProfileFileError::NotAProfile { name: name.into() })?
        .validate(name)
}

pub fn load_profile(path: &Path) -> Result<Profile, ProfileFileError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ProfileFileError::Unread {
        name: name.clone(),
        reason: e.to_string(),
    })?;
    parse_profile(&text, &name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolates_in_log2_and_holds_the_ends() {
        let p = Profile::h200_assumed();
        assert_eq!(p.at(16), 0.86);
        assert_eq!(p.at(1), 0.35);
        assert_eq!(p.at(4096), 0.9);
        // 24 is halfway between 16 and 32 in log2? log2(24) = 4.585: 0.86 + 0.03 * 0.585.
        assert!((p.at(24) - (0.86 + 0.03 * (24f64.log2() - 4.0))).abs() < 1e-12);
        assert!(!p.measured);
    }

    #[test]
    fn reads_profiles_sweeps_and_attention_reports() {
        let p = Profile {
            device: "cpu".into(),
            source: "test".into(),
            measured: true,
            efficiency: vec![ProfilePoint {
                block_size: 8,
                efficiency: 0.5,
            }],
        };
        let back = parse_profile(&serde_json::to_string(&p).unwrap(), "p").unwrap();
        assert_eq!(back, p);
        let sweep = r#"{"device": "gpu0", "rows": [
            {"block_size": 1, "attention_frac_of_stream": 0.2, "gather_frac_of_stream": 0.9},
            {"block_size": 2, "attention_frac_of_stream": null, "gather_frac_of_stream": 0.4}]}"#;
        let s = parse_profile(sweep, "s").unwrap();
        assert_eq!((s.at(1), s.at(2), s.device.as_str()), (0.2, 0.4, "gpu0"));
        let lines = "{\"device\": \"d\", \"block_size\": 4, \"paged_frac_of_stream\": 0.6}\n\
                     {\"device\": \"d\", \"block_size\": 16, \"paged_frac_of_stream\": 0.8}\n";
        let a = parse_profile(lines, "a").unwrap();
        assert!((a.at(8) - 0.7).abs() < 1e-12);
        let arr = "[{\"device\": \"d\", \"block_size\": 4, \"paged_frac_of_stream\": 0.6}]";
        assert_eq!(parse_profile(arr, "a").unwrap().at(99), 0.6);
        for bad in [
            "",
            "{}",
            "{\"efficiency\": []}",
            "[1, 2]",
            "{\"efficiency\": [{\"block_size\": 0, \"efficiency\": 1}]}",
            "nope",
        ] {
            let e = parse_profile(bad, "bad.json").unwrap_err().to_string();
            assert!(
                e.starts_with("bad.json: ") && !e.contains('\n'),
                "{bad}: {e}"
            );
        }
    }
}
