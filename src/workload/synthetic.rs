//! Synthetic requests, the one generator shared by the sweep and the allocation simulator.
//!
//! Sizes come from a [`SizeDist`]: parsed from `fixed:N`, `uniform:LO,HI` (inclusive) or
//! `lognormal:MEAN,SD`, where MEAN and SD are those of the token counts themselves (not of their
//! logarithm); or built in code as a log-normal given the deviation of its logarithm, or an
//! exponential. Draws are rounded to the nearest integer and clamped to `0..=u32::MAX`
//! ([`synthetic_requests`], all arriving at 0) or `1..=u32::MAX` ([`SyntheticRequests`], Poisson
//! arrivals). Deterministic for a seed.

use super::azure::Request;
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::{Distribution, Exp, LogNormal};
use serde::Serialize;
use std::str::FromStr;
use thiserror::Error;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SizeDist {
    Fixed(u32),
    Uniform {
        lo: u32,
        hi: u32,
    },
    LogNormal {
        mean: f64,
        sd: f64,
    },
    /// Log-normal with mean `mean` whose logarithm has standard deviation `sigma`.
    LogNormalSigma {
        mean: f64,
        sigma: f64,
    },
    /// Exponential with mean `mean`.
    Exponential {
        mean: f64,
    },
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
        tokens(self.draw(rng), 0)
    }

    /// One draw, not yet rounded. Parameters no distribution takes (unreachable for parsed or
    /// [`SyntheticRequests`]-checked ones) give the mean without drawing.
    fn draw(&self, rng: &mut impl Rng) -> f64 {
        match *self {
            SizeDist::Fixed(n) => n.into(),
            SizeDist::Uniform { lo, hi } => rng.random_range(lo..=hi).into(),
            SizeDist::LogNormal { mean, sd } => lognormal(mean, sd).map_or(mean, |d| d.sample(rng)),
            SizeDist::LogNormalSigma { mean, sigma } => {
                // E[exp(N(mu, s))] = exp(mu + s^2/2): choose mu so the mean is `mean`.
                LogNormal::new(mean.ln() - sigma * sigma / 2.0, sigma)
                    .map_or(mean, |d| d.sample(rng))
            }
            SizeDist::Exponential { mean } => Exp::new(1.0 / mean).map_or(mean, |d| d.sample(rng)),
        }
    }
}

/// A draw as a token count: rounded, at least `min`.
fn tokens(x: f64, min: u32) -> u32 {
    x.round().clamp(min.into(), u32::MAX as f64) as u32
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
    generate(prompt, output, count, None, 0, seed)
}

/// The one generator: per request, in this order, the gap since the previous arrival (when `gap`
/// is given; never before the first, which arrives at 0), the prompt size, the output size, all
/// from one seeded stream. Sizes are at least `min_tokens`.
fn generate(
    prompt: SizeDist,
    output: SizeDist,
    count: usize,
    gap: Option<Exp<f64>>,
    min_tokens: u32,
    seed: u64,
) -> Vec<Request> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut t = 0.0;
    (0..count)
        .map(|i| {
            if let (Some(gap), true) = (&gap, i > 0) {
                t += gap.sample(&mut rng);
            }
            let prompt_tokens = tokens(prompt.draw(&mut rng), min_tokens);
            let output_tokens = tokens(output.draw(&mut rng), min_tokens);
            Request {
                arrival_s: t,
                prompt_tokens,
                output_tokens,
            }
        })
        .collect()
}

/// Most requests a [`SyntheticRequests`] stream may hold.
pub const MAX_REQUESTS: usize = 1 << 24;

/// A request stream shaped the way real LLM traces roughly are (the allocation simulator's
/// synthetic workload): Poisson arrivals, log-normal prompt lengths and exponential output
/// lengths, each at least one token.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SyntheticRequests {
    pub requests: usize,
    /// Mean arrivals per second.
    pub rate_per_s: f64,
    pub prompt_mean: f64,
    /// Log-normal shape: the standard deviation of ln(prompt length).
    pub prompt_sigma: f64,
    pub output_mean: f64,
    pub seed: u64,
}

#[derive(Debug, Error, Clone, PartialEq)]
#[error("synthetic workload: {0}")]
pub struct SyntheticError(String);

impl SyntheticRequests {
    pub fn generate(&self) -> Result<Vec<Request>, SyntheticError> {
        let positive = |v: f64, what: &str| {
            if v.is_finite() && v > 0.0 {
                Ok(v)
            } else {
                Err(SyntheticError(format!("{what} must be positive, got {v}")))
            }
        };
        if self.requests > MAX_REQUESTS {
            return Err(SyntheticError(format!(
                "{} requests is more than the {MAX_REQUESTS} allowed",
                self.requests
            )));
        }
        let rate = positive(self.rate_per_s, "arrival rate")?;
        let prompt_mean = positive(self.prompt_mean, "mean prompt length")?;
        let output_mean = positive(self.output_mean, "mean output length")?;
        if !(self.prompt_sigma.is_finite() && self.prompt_sigma >= 0.0) {
            return Err(SyntheticError(format!(
                "prompt sigma must be non-negative, got {}",
                self.prompt_sigma
            )));
        }
        let gap = Exp::new(rate).map_err(|e| SyntheticError(e.to_string()))?;
        let prompt = SizeDist::LogNormalSigma {
            mean: prompt_mean,
            sigma: self.prompt_sigma,
        };
        let output = SizeDist::Exponential { mean: output_mean };
        Ok(generate(
            prompt,
            output,
            self.requests,
            Some(gap),
            1,
            self.seed,
        ))
    }
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

    #[test]
    fn poisson_stream_means_match_what_was_asked_and_seeds_repeat() {
        let w = SyntheticRequests {
            requests: 20_000,
            rate_per_s: 4.0,
            prompt_mean: 500.0,
            prompt_sigma: 0.8,
            output_mean: 100.0,
            seed: 7,
        };
        let r = w.generate().unwrap();
        assert_eq!(r, w.generate().unwrap());
        let n = r.len() as f64;
        let p = r.iter().map(|x| x.prompt_tokens as f64).sum::<f64>() / n;
        let o = r.iter().map(|x| x.output_tokens as f64).sum::<f64>() / n;
        let span = r.last().unwrap().arrival_s / (n - 1.0);
        assert!((p / 500.0 - 1.0).abs() < 0.03, "prompt mean {p}");
        assert!((o / 100.0 - 1.0).abs() < 0.03, "output mean {o}");
        assert!((span * 4.0 - 1.0).abs() < 0.03, "mean gap {span}");
        assert!(r.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
    }
}
