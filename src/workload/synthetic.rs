//! Synthetic request sizes: `fixed:N`, `uniform:LO,HI` (inclusive) or `lognormal:MEAN,SD`, where
//! MEAN and SD are those of the token counts themselves (not of their logarithm). Draws are rounded
//! to the nearest integer and clamped to `0..=u32::MAX`. Deterministic for a seed.

use super::azure::Request;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal};
use std::str::FromStr;
use thiserror::Error;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SizeDist {
    Fixed(u32),
    Uniform { lo: u32, hi: u32 },
    LogNormal { mean: f64, sd: f64 },
}

#[derive(Debug, Error, Clone, PartialEq)]
#[error(
    "size distribution {spec:?}: {detail} (expected fixed:N, uniform:LO,HI or lognormal:MEAN,SD)"
)]
pub struct DistError {
    pub spec: String,
    pub detail: String,
}

impl FromStr for SizeDist {
    type Err = DistError;

    fn from_str(spec: &str) -> Result<Self, DistError> {
        let err = |detail: &str| DistError {
            spec: spec.into(),
            detail: detail.into(),
        };
        let (kind, args) = spec.split_once(':').ok_or_else(|| err("no ':'"))?;
        let nums: Vec<f64> = args
            .split(',')
            .map(|a| a.trim().parse::<f64>())
            .collect::<Result<_, _>>()
            .map_err(|_| err("arguments must be numbers"))?;
        if nums.iter().any(|x| !x.is_finite() || *x < 0.0) {
            return Err(err("arguments must be finite and non-negative"));
        }
        let count = |x: f64| -> Result<u32, DistError> {
            if x.fract() != 0.0 || x > u32::MAX as f64 {
                Err(err("token counts must be whole numbers that fit u32"))
            } else {
                Ok(x as u32)
            }
        };
        match (kind.trim().to_ascii_lowercase().as_str(), nums.as_slice()) {
            ("fixed", [n]) => Ok(SizeDist::Fixed(count(*n)?)),
            ("uniform", [lo, hi]) => {
                let (lo, hi) = (count(*lo)?, count(*hi)?);
                if lo > hi {
                    return Err(err("LO must not exceed HI"));
                }
                Ok(SizeDist::Uniform { lo, hi })
            }
            ("lognormal", [mean, sd]) => {
                if *mean <= 0.0 {
                    return Err(err("MEAN must be positive"));
                }
                if lognormal(*mean, *sd).is_none() {
                    return Err(err("SD / MEAN too large"));
                }
                Ok(SizeDist::LogNormal {
                    mean: *mean,
                    sd: *sd,
                })
            }
            ("fixed" | "uniform" | "lognormal", _) => Err(err("wrong number of arguments")),
            _ => Err(err("unknown kind")),
        }
    }
}

impl SizeDist {
    /// One draw.
    pub fn sample(&self, rng: &mut impl Rng) -> u32 {
        match *self {
            SizeDist::Fixed(n) => n,
            SizeDist::Uniform { lo, hi } => rng.random_range(lo..=hi),
            SizeDist::LogNormal { mean, sd } => match lognormal(mean, sd) {
                Some(d) => d.sample(rng).round().clamp(0.0, u32::MAX as f64) as u32,
                // Unreachable for parsed distributions, which are checked.
                None => mean.round().clamp(0.0, u32::MAX as f64) as u32,
            },
        }
    }
}

/// The log-normal whose values have mean `mean` and standard deviation `sd`; `None` when the
/// parameters of their logarithm are not finite.
fn lognormal(mean: f64, sd: f64) -> Option<LogNormal<f64>> {
    let sigma2 = (1.0 + (sd / mean).powi(2)).ln();
    let mu = mean.ln() - sigma2 / 2.0;
    if !(mu.is_finite() && sigma2.is_finite()) {
        return None;
    }
    LogNormal::new(mu, sigma2.sqrt()).ok()
}

/// `count` requests with prompt and output sizes drawn from the two distributions, all arriving at
/// 0 (use [`super::azure::with_rate`] to space them).
pub fn synthetic_requests(
    prompt: SizeDist,
    output: SizeDist,
    count: usize,
    seed: u64,
) -> Vec<Request> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..count)
        .map(|_| Request {
            arrival_s: 0.0,
            prompt_tokens: prompt.sample(&mut rng),
            output_tokens: output.sample(&mut rng),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_and_rejects_nonsense() {
        assert_eq!("fixed:7".parse(), Ok(SizeDist::Fixed(7)));
        assert_eq!(
            "uniform:1,9".parse(),
            Ok(SizeDist::Uniform { lo: 1, hi: 9 })
        );
        assert_eq!(
            "lognormal:1000,500".parse(),
            Ok(SizeDist::LogNormal {
                mean: 1000.0,
                sd: 500.0
            })
        );
        for bad in [
            "fixed",
            "fixed:1.5",
            "uniform:9,1",
            "normal:1,2",
            "lognormal:0,1",
            "fixed:-1",
            "uniform:1",
            "fixed:nan",
        ] {
            assert!(bad.parse::<SizeDist>().is_err(), "{bad}");
        }
    }

    #[test]
    fn lognormal_draws_have_the_requested_moments() {
        let d: SizeDist = "lognormal:1000,600".parse().unwrap();
        let r = synthetic_requests(d, SizeDist::Fixed(3), 200_000, 11);
        let n = r.len() as f64;
        let mean = r.iter().map(|q| q.prompt_tokens as f64).sum::<f64>() / n;
        let var = r
            .iter()
            .map(|q| (q.prompt_tokens as f64 - mean).powi(2))
            .sum::<f64>()
            / n;
        assert!((mean - 1000.0).abs() < 10.0, "{mean}");
        assert!((var.sqrt() - 600.0).abs() < 20.0, "{}", var.sqrt());
        assert!(r.iter().all(|q| q.output_tokens == 3));
        assert_eq!(r, synthetic_requests(d, SizeDist::Fixed(3), 200_000, 11));
    }

    #[test]
    fn uniform_stays_in_range_and_covers_it() {
        let r = synthetic_requests(
            SizeDist::Uniform { lo: 2, hi: 5 },
            SizeDist::Fixed(0),
            1000,
            1,
        );
        assert!(r.iter().all(|q| (2..=5).contains(&q.prompt_tokens)));
        for v in 2..=5 {
            assert!(r.iter().any(|q| q.prompt_tokens == v));
        }
    }
}
