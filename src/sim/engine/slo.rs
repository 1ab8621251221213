//! SLOs that fit the workload: published presets (one table, [`PRESETS`], each row beside its
//! source), the flags that override them, and how a run is judged against them.
//!
//! A preset names per-request objectives (TTFT, TPOT, or Mooncake's TBT, [`super::tbt`]) and a
//! rule over the requests ([`Judged`]): a share of them within every objective at once
//! (DistServe's SLO attainment, Mooncake's effective request capacity), or each objective's
//! percentile on its own (MLPerf's loadgen). Explicit `--slo-ttft`, `--slo-tpot`, `--slo-tbt` and
//! `--slo-attainment` override the preset's value (or add an objective it lacks), and the report
//! names every override; `--slo-attainment` also makes the rule the joint one, since that is what
//! the flag counts. `custom` is the flags alone.

use super::metrics::{EngineReport, Slo};
use serde::Serialize;

/// A preset's name on the command line; `--help` lists each with its values from [`PRESETS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SloPreset {
    Mlperf,
    DistserveChatbot,
    /// `mooncake-200`.
    Mooncake,
    Mooncake100,
    Mooncake200,
    Mooncake300,
    /// The --slo-* flags alone.
    Custom,
}

impl clap::ValueEnum for SloPreset {
    fn value_variants<'a>() -> &'a [Self] {
        &[
            SloPreset::Mlperf,
            SloPreset::DistserveChatbot,
            SloPreset::Mooncake,
            SloPreset::Mooncake100,
            SloPreset::Mooncake200,
            SloPreset::Mooncake300,
            SloPreset::Custom,
        ]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()).help(self.help()))
    }
}

impl SloPreset {
    /// The name as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            SloPreset::Mlperf => "mlperf",
            SloPreset::DistserveChatbot => "distserve-chatbot",
            SloPreset::Mooncake => "mooncake",
            SloPreset::Mooncake100 => "mooncake-100",
            SloPreset::Mooncake200 => "mooncake-200",
            SloPreset::Mooncake300 => "mooncake-300",
            SloPreset::Custom => "custom",
        }
    }

    /// Its rows in words, for `--help`.
    pub fn help(self) -> String {
        let rows: Vec<&PresetRow> = PRESETS
            .iter()
            .filter(|r| r.preset == self.rows_of())
            .collect();
        let first = rows[0];
        let body = if rows.len() == 1 {
            SloTargets::of(first).describe()
        } else {
            let each: Vec<String> = rows
                .iter()
                .map(|r| format!("{} {}", r.model, SloTargets::of(r).objectives()))
                .collect();
            format!(
                "by the model's size, the nearest of {}; {}",
                each.join(", "),
                SloTargets::of(first).describe_rule()
            )
        };
        let alias = if self == SloPreset::Mooncake {
            " (= mooncake-200)"
        } else {
            ""
        };
        format!("{}: {body}{alias}", first.title)
    }

    /// The preset whose rows it takes (`mooncake` is `mooncake-200`).
    fn rows_of(self) -> SloPreset {
        match self {
            SloPreset::Mooncake => SloPreset::Mooncake200,
            p => p,
        }
    }
}

/// How a run's requests are judged against the objectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Judged {
    /// At least the attainment's share of the requests within every objective at once.
    Joint,
    /// Each objective on its own: its share within at least the attainment (its percentile at
    /// the attainment within the objective).
    EachObjective,
}

/// One row of [`PRESETS`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PresetRow {
    pub preset: SloPreset,
    /// Who set it, in a few words.
    pub title: &'static str,
    /// The model the row was set for, and its size (billions of parameters) when the preset's
    /// values depend on it.
    pub model: &'static str,
    pub params_billion: Option<f64>,
    pub ttft_s: f64,
    pub tpot_s: Option<f64>,
    pub tbt_s: Option<f64>,
    pub attainment: f64,
    pub judged: Judged,
    pub source: &'static str,
}

const MLPERF: &str = "MLPerf Inference, mlcommons/inference loadgen/mlperf.conf (commit \
    001712e9daf80386e0dda43f97b8f36981d792c4): llama3_1-8b.Server.ttft_latency = 2000, \
    tpot_latency = 100, *.Server.target_latency_percentile = 99; loadgen/results.cc checks the \
    TTFT and TPOT percentiles apart";
const DISTSERVE: &str = "DistServe (OSDI'24) chatbot on ShareGPT, 90% attainment: as its \
    artifact plots Fig. 8 (LLMServe/DistServe evaluation/ae-scripts/e2e/_plot.py, commit \
    82831f1604cc6b10bebd360f6c437a07790dde9f)";
const MOONCAKE: &str = "Mooncake (FAST'25) §5.1: TTFT 30 s, TBT thresholds 100/200/300 ms, TBT \
    the mean of a request's longest 10% of token intervals (kvcache-ai/Mooncake \
    FAST25-release/Mooncake-FAST25.pdf, commit 3b5a594133958449a1feaf1c9e0fc1b553e34a28); the \
    paper reports the share of requests within both and sets no target: 90% here, DistServe's";

/// Every preset's values, once. `custom`'s row holds the values the sweep takes for flags not
/// given (today's sweep defaults: MLPerf's Llama-3.1-8B targets at DistServe's 90%).
pub const PRESETS: &[PresetRow] = &[
    PresetRow {
        preset: SloPreset::Mlperf,
        title: "MLPerf Inference Llama-3.1-8B server",
        model: "Llama-3.1-8B",
        params_billion: None,
        ttft_s: 2.0,
        tpot_s: Some(0.1),
        tbt_s: None,
        attainment: 0.99,
        judged: Judged::EachObjective,
        source: MLPERF,
    },
    PresetRow {
        preset: SloPreset::DistserveChatbot,
        title: "DistServe (OSDI'24) chatbot",
        model: "OPT-13B",
        params_billion: Some(13.0),
        ttft_s: 0.25,
        tpot_s: Some(0.1),
        tbt_s: None,
        attainment: 0.9,
        judged: Judged::Joint,
        source: DISTSERVE,
    },
    PresetRow {
        preset: SloPreset::DistserveChatbot,
        title: "DistServe (OSDI'24) chatbot",
        model: "OPT-66B",
        params_billion: Some(66.0),
        ttft_s: 0.4,
        tpot_s: Some(0.1),
        tbt_s: None,
        attainment: 0.9,
        judged: Judged::Joint,
        source: DISTSERVE,
    },
    PresetRow {
        preset: SloPreset::DistserveChatbot,
        title: "DistServe (OSDI'24) chatbot",
        model: "OPT-175B",
        params_billion: Some(175.0),
        ttft_s: 4.0,
        tpot_s: Some(0.2),
        tbt_s: None,
        attainment: 0.9,
        judged: Judged::Joint,
        source: DISTSERVE,
    },
    PresetRow {
        preset: SloPreset::Mooncake100,
        title: "Mooncake (FAST'25), TBT threshold I",
        model: "Kimi (LLaMA3-70B-class)",
        params_billion: None,
        ttft_s: 30.0,
        tpot_s: None,
        tbt_s: Some(0.1),
        attainment: 0.9,
        judged: Judged::Joint,
        source: MOONCAKE,
    },
    PresetRow {
        preset: SloPreset::Mooncake200,
        title: "Mooncake (FAST'25), TBT threshold II",
        model: "Kimi (LLaMA3-70B-class)",
        params_billion: None,
        ttft_s: 30.0,
        tpot_s: None,
        tbt_s: Some(0.2),
        attainment: 0.9,
        judged: Judged::Joint,
        source: MOONCAKE,
    },
    PresetRow {
        preset: SloPreset::Mooncake300,
        title: "Mooncake (FAST'25), TBT threshold III",
        model: "Kimi (LLaMA3-70B-class)",
        params_billion: None,
        ttft_s: 30.0,
        tpot_s: None,
        tbt_s: Some(0.3),
        attainment: 0.9,
        judged: Judged::Joint,
        source: MOONCAKE,
    },
    PresetRow {
        preset: SloPreset::Custom,
        title: "the --slo-* flags alone; the sweep's defaults for those not given",
        model: "Llama-3.1-8B",
        params_billion: None,
        ttft_s: 2.0,
        tpot_s: Some(0.1),
        tbt_s: None,
        attainment: 0.9,
        judged: Judged::Joint,
        source: "the flags; the sweep's defaults for those not given: MLPerf's Llama-3.1-8B \
                 targets, DistServe's 90% of requests within both",
    },
];

/// The row `preset` takes for a model of `params_billion`: the row of nearest size on a log
/// scale when its values depend on the model (ties to the smaller), else its only row.
pub fn row(preset: SloPreset, params_billion: f64) -> &'static PresetRow {
    let rows = PRESETS.iter().filter(|r| r.preset == preset.rows_of());
    let distance = |r: &PresetRow| {
        r.params_billion
            .map_or(0.0, |p| (p.ln() - params_billion.max(1e-3).ln()).abs())
    };
    rows.min_by(|a, b| distance(a).total_cmp(&distance(b)))
        .expect("every preset has a row")
}

/// Objectives and the rule a run is judged by.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SloTargets {
    /// Time to first token, seconds.
    pub ttft_s: Option<f64>,
    /// Time per output token after the first, seconds.
    pub tpot_s: Option<f64>,
    /// Mooncake's TBT ([`super::tbt`]), seconds.
    pub tbt_s: Option<f64>,
    /// Share of the requests that must be within (0 to 1].
    pub attainment: f64,
    pub judged: Judged,
}

/// The sweep's default: `custom`'s row (MLPerf's Llama-3.1-8B targets at DistServe's 90%).
impl Default for SloTargets {
    fn default() -> Self {
        SloTargets::of(row(SloPreset::Custom, 0.0))
    }
}

impl SloTargets {
    /// The targets of `row`.
    pub fn of(row: &PresetRow) -> Self {
        SloTargets {
            ttft_s: Some(row.ttft_s),
            tpot_s: row.tpot_s,
            tbt_s: row.tbt_s,
            attainment: row.attainment,
            judged: row.judged,
        }
    }

    /// The engine's per-request objectives.
    pub fn slo(&self) -> Slo {
        Slo {
            ttft: self.ttft_s,
            tpot: self.tpot_s,
            tbt: self.tbt_s,
        }
    }

    /// The share of all of `r`'s requests (completed or not) counted within the objectives: within
    /// all of them ([`Judged::Joint`]), or the least share within one ([`Judged::EachObjective`]).
    pub fn met(&self, r: &EngineReport) -> f64 {
        let of_all = |share: f64| share * r.completed as f64 / r.requests.max(1) as f64;
        match self.judged {
            Judged::Joint => of_all(r.objectives.slo_attainment.unwrap_or(0.0)),
            Judged::EachObjective => r.objectives.slo_attainment_each.map_or(0.0, |e| {
                [e.ttft, e.tpot, e.tbt]
                    .into_iter()
                    .flatten()
                    .map(of_all)
                    .fold(1.0, f64::min)
            }),
        }
    }

    /// Whether the run meets the attainment.
    pub fn sustained(&self, r: &EngineReport) -> bool {
        self.met(r) >= self.attainment
    }

    /// The objectives in words: `TTFT ≤ 2 s and TPOT ≤ 100 ms`.
    pub fn objectives(&self) -> String {
        let ms = |x: f64| format!("{}", (x * 1e6).round() / 1e3);
        let mut parts = Vec::new();
        if let Some(t) = self.ttft_s {
            parts.push(format!("TTFT ≤ {t} s"));
        }
        if let Some(t) = self.tpot_s {
            parts.push(format!("TPOT ≤ {} ms", ms(t)));
        }
        if let Some(t) = self.tbt_s {
            parts.push(format!("TBT ≤ {} ms", ms(t)));
        }
        parts.join(" and ")
    }

    /// The rule: `for ≥ 90% of requests`, `each at the p99`.
    pub fn describe_rule(&self) -> String {
        let pct = 100.0 * self.attainment;
        match self.judged {
            Judged::Joint => format!("for ≥ {pct:.0}% of requests"),
            Judged::EachObjective => format!("each at the p{pct:.0}"),
        }
    }

    /// The objectives and the rule: `TTFT ≤ 2 s and TPOT ≤ 100 ms for ≥ 90% of requests`.
    pub fn describe(&self) -> String {
        let sep = match self.judged {
            Judged::Joint => " ",
            Judged::EachObjective => ", ",
        };
        format!("{}{sep}{}", self.objectives(), self.describe_rule())
    }
}

/// The flags: a preset, values that override it, and the share.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SloFlags {
    #[serde(deserialize_with = "crate::value_names::from_maybe_name")]
    pub preset: Option<SloPreset>,
    pub ttft_s: Option<f64>,
    pub tpot_s: Option<f64>,
    pub tbt_s: Option<f64>,
    pub attainment: Option<f64>,
}

/// The SLOs a run is judged by, and where they come from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResolvedSlo {
    pub preset: SloPreset,
    pub targets: SloTargets,
    /// The model the row was set for (and why that row, when the preset has several).
    pub set_for: String,
    pub source: &'static str,
    /// Why this preset (given, or chosen for the workload).
    pub why: String,
    /// The flags that replaced or added a value of the preset.
    pub overrides: Vec<&'static str>,
}

impl ResolvedSlo {
    /// One line: preset, why, the objectives and rule, overrides, the row's model.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "SLOs: {} ({}): {}",
            self.preset.name(),
            self.why,
            self.targets.describe()
        );
        if self.targets.tbt_s.is_some() {
            s += " (TBT: a request's mean of its longest 10% of token intervals)";
        }
        if !self.overrides.is_empty() {
            let whose = if self.preset == SloPreset::Custom {
                "the defaults"
            } else {
                "the preset"
            };
            s += &format!("; {} override {whose}", self.overrides.join(", "));
        }
        if self.preset != SloPreset::Custom {
            s += &format!("; set for {}", self.set_for);
        }
        s
    }
}

/// Why the SLO flags are no objectives.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SloError {
    #[error("--{flag} must be a positive number, got {value}")]
    NotPositive { flag: &'static str, value: f64 },
    #[error("--slo-attainment must be in (0, 1], got {0}")]
    Attainment(f64),
    #[error("--slo custom needs --slo-ttft, --slo-tpot or --slo-tbt")]
    CustomWithoutObjective,
}

fn positive(flag: &'static str, x: Option<f64>) -> Result<Option<f64>, SloError> {
    match x {
        Some(value) if !(value.is_finite() && value > 0.0) => {
            Err(SloError::NotPositive { flag, value })
        }
        _ => Ok(x),
    }
}

impl SloFlags {
    /// Whether no SLO flag was given.
    pub fn is_empty(&self) -> bool {
        *self == SloFlags::default()
    }

    /// The SLOs: the preset given, else `fallback` (with why it applies); the explicit values
    /// over it. `params_billion` picks DistServe's row. `custom` starts from no objective when
    /// `custom_defaults` is false (`sim engine`), from its row's values when true (the sweep).
    pub fn resolve(
        &self,
        fallback: (SloPreset, &str),
        params_billion: f64,
        custom_defaults: bool,
    ) -> Result<ResolvedSlo, SloError> {
        let ttft = positive("slo-ttft", self.ttft_s)?;
        let tpot = positive("slo-tpot", self.tpot_s)?;
        let tbt = positive("slo-tbt", self.tbt_s)?;
        if let Some(a) = self.attainment {
            if !(a > 0.0 && a <= 1.0) {
                return Err(SloError::Attainment(a));
            }
        }
        let (preset, why) = match self.preset {
            Some(p) => (p, "--slo".to_string()),
            None => (fallback.0, fallback.1.to_string()),
        };
        let row = row(preset, params_billion);
        let mut t = SloTargets::of(row);
        if preset == SloPreset::Custom && !custom_defaults {
            (t.ttft_s, t.tpot_s, t.tbt_s) = (None, None, None);
        }
        // A flag that changes a value the run would otherwise take is named (custom without its
        // defaults has no value of its own to change).
        let mut overrides = Vec::new();
        let named = preset != SloPreset::Custom || custom_defaults;
        for (flag, given, slot) in [
            ("--slo-ttft", ttft, &mut t.ttft_s),
            ("--slo-tpot", tpot, &mut t.tpot_s),
            ("--slo-tbt", tbt, &mut t.tbt_s),
        ] {
            if let Some(v) = given {
                if named && *slot != Some(v) {
                    overrides.push(flag);
                }
                *slot = Some(v);
            }
        }
        if let Some(a) = self.attainment {
            if named && (a != t.attainment || t.judged != Judged::Joint) {
                overrides.push("--slo-attainment");
            }
            t.attainment = a;
            t.judged = Judged::Joint;
        }
        if t.ttft_s.is_none() && t.tpot_s.is_none() && t.tbt_s.is_none() {
            return Err(SloError::CustomWithoutObjective);
        }
        let set_for = match row.params_billion {
            Some(_) => format!(
                "{}, the row nearest the model's {params_billion} B parameters",
                row.model
            ),
            None => row.model.to_string(),
        };
        Ok(ResolvedSlo {
            preset,
            targets: t,
            set_for,
            source: row.source,
            why,
            overrides,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(preset: Option<SloPreset>) -> SloFlags {
        SloFlags {
            preset,
            ..SloFlags::default()
        }
    }

    #[test]
    fn each_preset_resolves_to_its_published_values() {
        let r = |p: SloPreset, params: f64| {
            flags(Some(p))
                .resolve((SloPreset::Custom, "-"), params, true)
                .unwrap()
                .targets
        };
        let m = r(SloPreset::Mlperf, 8.0);
        assert_eq!((m.ttft_s, m.tpot_s, m.tbt_s), (Some(2.0), Some(0.1), None));
        assert_eq!((m.attainment, m.judged), (0.99, Judged::EachObjective));
        // DistServe: the OPT row nearest the model's size on a log scale.
        for (params, want) in [
            (8.0, (0.25, 0.1)),
            (13.0, (0.25, 0.1)),
            (29.0, (0.25, 0.1)),
            (30.0, (0.4, 0.1)),
            (70.0, (0.4, 0.1)),
            (108.0, (4.0, 0.2)),
            (405.0, (4.0, 0.2)),
        ] {
            let d = r(SloPreset::DistserveChatbot, params);
            assert_eq!(
                (d.ttft_s, d.tpot_s),
                (Some(want.0), Some(want.1)),
                "{params}"
            );
            assert_eq!((d.attainment, d.judged), (0.9, Judged::Joint));
        }
        for (p, tbt) in [
            (SloPreset::Mooncake, 0.2),
            (SloPreset::Mooncake100, 0.1),
            (SloPreset::Mooncake200, 0.2),
            (SloPreset::Mooncake300, 0.3),
        ] {
            let k = r(p, 8.0);
            assert_eq!((k.ttft_s, k.tpot_s, k.tbt_s), (Some(30.0), None, Some(tbt)));
            assert_eq!((k.attainment, k.judged), (0.9, Judged::Joint));
        }
        let c = r(SloPreset::Custom, 8.0);
        assert_eq!(
            (c.ttft_s, c.tpot_s, c.attainment),
            (Some(2.0), Some(0.1), 0.9)
        );
    }

    #[test]
    fn flags_override_the_preset_and_say_so() {
        let f = SloFlags {
            preset: Some(SloPreset::Mooncake),
            ttft_s: Some(10.0),
            tbt_s: Some(0.2),
            ..SloFlags::default()
        };
        let r = f.resolve((SloPreset::Custom, "-"), 8.0, false).unwrap();
        assert_eq!((r.targets.ttft_s, r.targets.tbt_s), (Some(10.0), Some(0.2)));
        // --slo-tbt equal to the preset's changes nothing, so it is no override.
        assert_eq!(r.overrides, vec!["--slo-ttft"]);
        assert!(
            r.describe().contains("--slo-ttft override the preset"),
            "{}",
            r.describe()
        );
        // --slo-attainment makes MLPerf's rule the joint one.
        let f = SloFlags {
            preset: Some(SloPreset::Mlperf),
            attainment: Some(0.9),
            ..SloFlags::default()
        };
        let r = f.resolve((SloPreset::Custom, "-"), 8.0, false).unwrap();
        assert_eq!(
            (r.targets.attainment, r.targets.judged),
            (0.9, Judged::Joint)
        );
        assert_eq!(r.overrides, vec!["--slo-attainment"]);
        assert_eq!(
            r.targets.describe(),
            "TTFT ≤ 2 s and TPOT ≤ 100 ms for ≥ 90% of requests"
        );
    }

    #[test]
    fn custom_is_the_flags_alone_or_over_the_sweep_defaults() {
        let only_tpot = SloFlags {
            tpot_s: Some(0.05),
            ..SloFlags::default()
        };
        let r = only_tpot
            .resolve((SloPreset::Custom, "flags"), 8.0, false)
            .unwrap();
        assert_eq!((r.targets.ttft_s, r.targets.tpot_s), (None, Some(0.05)));
        assert!(r.overrides.is_empty());
        let r = only_tpot
            .resolve((SloPreset::Custom, "flags"), 8.0, true)
            .unwrap();
        assert_eq!(
            (r.targets.ttft_s, r.targets.tpot_s),
            (Some(2.0), Some(0.05))
        );
        assert!(
            r.describe().ends_with("; --slo-tpot override the defaults"),
            "{}",
            r.describe()
        );
        let e = flags(Some(SloPreset::Custom))
            .resolve((SloPreset::Custom, "-"), 8.0, false)
            .unwrap_err();
        assert_eq!(e, SloError::CustomWithoutObjective);
        assert!(e.to_string().contains("--slo custom needs"), "{e}");
        for (f, msg) in [
            (
                SloFlags {
                    tbt_s: Some(0.0),
                    ..SloFlags::default()
                },
                "--slo-tbt must be a positive number, got 0",
            ),
            (
                SloFlags {
                    attainment: Some(1.5),
                    ..SloFlags::default()
                },
                "--slo-attainment must be in (0, 1], got 1.5",
            ),
        ] {
            assert_eq!(
                f.resolve((SloPreset::Mlperf, "-"), 8.0, true)
                    .map_err(|e| e.to_string()),
                Err(msg.into())
            );
        }
    }

    #[test]
    fn met_is_joint_or_the_least_objective() {
        use super::super::metrics::{ObjectiveShares, TimeUnit};
        let mut r = EngineReport::empty(TimeUnit::Seconds);
        r.requests = 100;
        r.completed = 80;
        r.objectives.slo_attainment = Some(0.75); // 60 of 100 within both
        r.objectives.slo_attainment_each = Some(ObjectiveShares {
            ttft: Some(1.0),
            tpot: Some(0.9),
            tbt: None,
        });
        let mut t = SloTargets::of(row(SloPreset::Mlperf, 8.0));
        assert!(
            (t.met(&r) - 0.72).abs() < 1e-12,
            "the TPOT share binds: 72 of 100"
        );
        t.judged = Judged::Joint;
        assert!((t.met(&r) - 0.6).abs() < 1e-12);
        t.attainment = 0.6;
        assert!(t.sustained(&r));
    }
}
