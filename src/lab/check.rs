//! What every lab reports beside its figures: the expectations it checked, and the spread of
//! repeated timings.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// The measurement agrees with what the machine claims.
    Holds,
    /// The measurement contradicts it: the command exits 1.
    Contradicted,
    /// It could not be checked here; `detail` says why.
    Skipped,
}

/// One expectation a lab checked against its own measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub expectation: String,
    pub status: CheckStatus,
    /// The figures compared, or why the check was skipped.
    pub detail: String,
}

impl Check {
    /// `Holds` when `ok`, else `Contradicted`.
    pub fn verdict(expectation: impl Into<String>, ok: bool, detail: impl Into<String>) -> Check {
        Check {
            expectation: expectation.into(),
            status: if ok {
                CheckStatus::Holds
            } else {
                CheckStatus::Contradicted
            },
            detail: detail.into(),
        }
    }

    pub fn skipped(expectation: impl Into<String>, reason: impl Into<String>) -> Check {
        Check {
            expectation: expectation.into(),
            status: CheckStatus::Skipped,
            detail: reason.into(),
        }
    }

    pub fn contradicted(&self) -> bool {
        self.status == CheckStatus::Contradicted
    }
}

/// Median and the 10th/90th percentiles of repeated measurements (nearest rank).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    pub samples: usize,
}

impl Spread {
    /// The spread of `xs`; NaN figures when it is empty.
    pub fn of(xs: &[f64]) -> Spread {
        let mut v = xs.to_vec();
        v.sort_by(f64::total_cmp);
        let rank = |q: f64| {
            if v.is_empty() {
                f64::NAN
            } else {
                v[((q * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)]
            }
        };
        Spread {
            median: crate::stats::median(&v),
            p10: rank(0.1),
            p90: rank(0.9),
            samples: v.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_eleven_values() {
        let xs: Vec<f64> = (0..11).rev().map(f64::from).collect();
        let s = Spread::of(&xs);
        assert_eq!((s.median, s.p10, s.p90, s.samples), (5.0, 1.0, 9.0, 11));
    }

    #[test]
    fn spread_of_one_and_none() {
        let s = Spread::of(&[7.0]);
        assert_eq!((s.median, s.p10, s.p90), (7.0, 7.0, 7.0));
        assert!(Spread::of(&[]).median.is_nan());
    }

    #[test]
    fn verdicts() {
        assert!(Check::verdict("x", false, "").contradicted());
        assert!(!Check::verdict("x", true, "").contradicted());
        assert_eq!(Check::skipped("x", "why").status, CheckStatus::Skipped);
    }
}
