//! Synthetic request streams for the allocation simulator: Poisson arrivals, log-normal prompt
//! lengths and exponential output lengths, the shapes real LLM traces roughly follow.

use crate::workload::azure::Request;
use rand::{rngs::StdRng, SeedableRng};
use rand_distr::{Distribution, Exp, LogNormal};
use serde::Serialize;
use thiserror::Error;

/// Most requests a synthetic stream may hold.
pub const MAX_REQUESTS: usize = 1 << 24;

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
        // E[exp(N(mu, s))] = exp(mu + s^2/2): choose mu so the mean is prompt_mean.
        let mu = prompt_mean.ln() - self.prompt_sigma * self.prompt_sigma / 2.0;
        let prompt =
            LogNormal::new(mu, self.prompt_sigma).map_err(|e| SyntheticError(e.to_string()))?;
        let output = Exp::new(1.0 / output_mean).map_err(|e| SyntheticError(e.to_string()))?;
        let mut rng = StdRng::seed_from_u64(self.seed);
        let mut t = 0.0;
        let tokens = |x: f64| x.round().clamp(1.0, u32::MAX as f64) as u32;
        Ok((0..self.requests)
            .map(|i| {
                if i > 0 {
                    t += gap.sample(&mut rng);
                }
                let p = tokens(prompt.sample(&mut rng));
                let o = tokens(output.sample(&mut rng));
                Request {
                    arrival_s: t,
                    prompt_tokens: p,
                    output_tokens: o,
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn means_match_what_was_asked_and_seeds_repeat() {
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
