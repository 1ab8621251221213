//! Job streams for one-server scheduling: Poisson arrivals at a chosen load with job sizes drawn from
//! a distribution of mean 1, or explicit job lists read from a CSV file (`arrival,size[,class]`).

use super::csv_lines::{self, line_of, next_record};
use csv::{DeserializeErrorKind, StringRecord};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, LogNormal, Pareto};
use serde::de::{Deserializer, Error as _};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The two job classes the priority policies know. Interactive outranks batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    #[value(alias = "0")]
    Interactive = 0,
    #[value(alias = "1")]
    Batch = 1,
}

crate::value_names::display_as_value_name!(Class);

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Job {
    pub arrival: f64,
    /// Service time the job needs, > 0.
    pub size: f64,
    pub class: Class,
}

/// Job-size distributions, each scaled to mean 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SizeDist {
    /// Every job has size 1 (M/D/1).
    Deterministic,
    Exponential,
    /// Small jobs of size `s` and, with probability `p_large`, large jobs of size `ratio * s`.
    Bimodal {
        p_large: f64,
        ratio: f64,
    },
    /// Pareto with shape `alpha` > 1 (infinite variance when `alpha` <= 2).
    Pareto {
        alpha: f64,
    },
    /// Lognormal with log-standard-deviation `sigma`.
    Lognormal {
        sigma: f64,
    },
}

#[derive(Debug, Error, Clone, PartialEq)]
pub enum JobsError {
    #[error("invalid size distribution: {0}")]
    BadDistribution(String),
    #[error("load must be a positive finite number, got {0}")]
    BadLoad(f64),
    #[error("interactive fraction must lie in [0, 1], got {0}")]
    BadClassMix(f64),
    #[error("jobs file line {line}: {msg}")]
    Csv { line: usize, msg: String },
    #[error("jobs file holds no jobs")]
    Empty,
}

impl SizeDist {
    /// Checks the parameters: the mean must exist for the scaling to mean 1.
    pub fn validate(&self) -> Result<(), JobsError> {
        let bad = |m: String| Err(JobsError::BadDistribution(m));
        match *self {
            SizeDist::Bimodal { p_large, ratio } => {
                if !(0.0..=1.0).contains(&p_large) {
                    return bad(format!("bimodal p_large must lie in [0, 1], got {p_large}"));
                }
                if !(ratio.is_finite() && ratio >= 1.0) {
                    return bad(format!("bimodal ratio must be >= 1, got {ratio}"));
                }
            }
            SizeDist::Pareto { alpha } if !(alpha.is_finite() && alpha > 1.0) => {
                return bad(format!(
                    "pareto alpha must be > 1 (finite mean), got {alpha}"
                ));
            }
            SizeDist::Lognormal { sigma } if !(sigma.is_finite() && sigma >= 0.0) => {
                return bad(format!("lognormal sigma must be >= 0, got {sigma}"));
            }
            _ => {}
        }
        Ok(())
    }

    /// E[S²] (the mean is 1); infinite for Pareto with alpha <= 2.
    pub fn second_moment(&self) -> f64 {
        match *self {
            SizeDist::Deterministic => 1.0,
            SizeDist::Exponential => 2.0,
            SizeDist::Bimodal { p_large, ratio } => {
                let s = bimodal_small(p_large, ratio);
                (1.0 - p_large) * s * s + p_large * (ratio * s).powi(2)
            }
            SizeDist::Pareto { alpha } if alpha <= 2.0 => f64::INFINITY,
            SizeDist::Pareto { alpha } => {
                let xm = (alpha - 1.0) / alpha;
                alpha * xm * xm / (alpha - 2.0)
            }
            SizeDist::Lognormal { sigma } => (sigma * sigma).exp(),
        }
    }

    fn sampler(&self) -> Result<Sampler, JobsError> {
        self.validate()?;
        let err = |e: &dyn std::fmt::Display| JobsError::BadDistribution(e.to_string());
        Ok(match *self {
            SizeDist::Deterministic => Sampler::Fixed,
            SizeDist::Exponential => Sampler::Exp(Exp::new(1.0).map_err(|e| err(&e))?),
            SizeDist::Bimodal { p_large, ratio } => {
                let small = bimodal_small(p_large, ratio);
                Sampler::Bimodal {
                    p_large,
                    small,
                    large: small * ratio,
                }
            }
            SizeDist::Pareto { alpha } => {
                Sampler::Pareto(Pareto::new((alpha - 1.0) / alpha, alpha).map_err(|e| err(&e))?)
            }
            SizeDist::Lognormal { sigma } => Sampler::Lognormal(
                LogNormal::new(-sigma * sigma / 2.0, sigma).map_err(|e| err(&e))?,
            ),
        })
    }
}

fn bimodal_small(p_large: f64, ratio: f64) -> f64 {
    1.0 / ((1.0 - p_large) + p_large * ratio)
}

enum Sampler {
    Fixed,
    Exp(Exp<f64>),
    Bimodal {
        p_large: f64,
        small: f64,
        large: f64,
    },
    Pareto(Pareto<f64>),
    Lognormal(LogNormal<f64>),
}

impl Sampler {
    fn sample(&self, rng: &mut StdRng) -> f64 {
        match self {
            Sampler::Fixed => 1.0,
            Sampler::Exp(d) => d.sample(rng),
            Sampler::Bimodal {
                p_large,
                small,
                large,
            } => {
                if rng.random::<f64>() < *p_large {
                    *large
                } else {
                    *small
                }
            }
            Sampler::Pareto(d) => d.sample(rng),
            Sampler::Lognormal(d) => d.sample(rng),
        }
    }
}

/// What [`poisson_jobs`] draws.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoissonWorkload {
    pub jobs: usize,
    /// Offered load ρ = arrival rate × mean size (the mean size is 1).
    pub load: f64,
    pub sizes: SizeDist,
    /// Probability that a job is interactive (else batch), independent of its size.
    pub interactive_fraction: f64,
    pub seed: u64,
}

/// Jobs arriving as a Poisson process of rate `load`, sorted by arrival. Sizes below
/// `f64::MIN_POSITIVE` (possible for a lognormal draw) are raised to it so every size is > 0.
pub fn poisson_jobs(w: &PoissonWorkload) -> Result<Vec<Job>, JobsError> {
    if !(w.load.is_finite() && w.load > 0.0) {
        return Err(JobsError::BadLoad(w.load));
    }
    if !(0.0..=1.0).contains(&w.interactive_fraction) {
        return Err(JobsError::BadClassMix(w.interactive_fraction));
    }
    let sizes = w.sizes.sampler()?;
    let gaps = Exp::new(w.load).map_err(|e| JobsError::BadDistribution(e.to_string()))?;
    let mut rng = StdRng::seed_from_u64(w.seed);
    let mut t = 0.0;
    let mut jobs = Vec::with_capacity(w.jobs);
    for _ in 0..w.jobs {
        t += gaps.sample(&mut rng);
        let size = sizes.sample(&mut rng).max(f64::MIN_POSITIVE);
        let class = if rng.random::<f64>() < w.interactive_fraction {
            Class::Interactive
        } else {
            Class::Batch
        };
        jobs.push(Job {
            arrival: t,
            size,
            class,
        });
    }
    Ok(jobs)
}

/// One line of a jobs file.
#[derive(Deserialize)]
struct JobLine {
    arrival: f64,
    size: f64,
    #[serde(default, deserialize_with = "class_by_name")]
    class: Option<Class>,
}

/// The columns of [`JobLine`], for messages.
const JOB_COLUMNS: [&str; 3] = ["arrival", "size", "class"];

fn class_by_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Class>, D::Error> {
    let name = String::deserialize(d)?;
    <Class as clap::ValueEnum>::from_str(&name, true)
        .map(Some)
        .map_err(|_| {
            D::Error::custom(format!(
                "class {:?} is not interactive/batch (or 0/1)",
                name.to_ascii_lowercase()
            ))
        })
}

/// Parses `arrival,size[,class]` lines. Blank lines and lines starting with `#` are skipped, and so
/// is a first line that does not start with a number (a header). Class is `interactive`/`batch`
/// (or `0`/`1`), default interactive. Jobs come back sorted by arrival (stable for ties).
pub fn parse_jobs_csv(text: &str) -> Result<Vec<Job>, JobsError> {
    let mut rows = csv_lines::lines(text.as_bytes(), b',', Some(b'#'));
    let mut record = StringRecord::new();
    let mut jobs = Vec::new();
    // Text in memory is UTF-8 and cannot fail to read; only its last line can be cut short.
    let read_error = |e: csv_lines::ReadError| JobsError::Csv {
        line: match e {
            csv_lines::ReadError::Incomplete { line } => line as usize,
            _ => 0,
        },
        msg: e.to_string(),
    };
    while next_record(&mut rows, &mut record).map_err(read_error)? {
        let line = line_of(&record) as usize;
        if line == 1 && record[0].parse::<f64>().is_err() {
            continue; // header
        }
        let err = |msg: String| JobsError::Csv { line, msg };
        if !(2..=3).contains(&record.len()) {
            return Err(err(format!(
                "expected `arrival,size[,class]`, got {} fields",
                record.len()
            )));
        }
        let JobLine {
            arrival,
            size,
            class,
        } = record
            .deserialize(None)
            .map_err(|e| err(why(&e, &record)))?;
        if !(arrival.is_finite() && arrival >= 0.0) {
            return Err(err(format!(
                "arrival must be finite and >= 0, got {arrival}"
            )));
        }
        if !(size.is_finite() && size > 0.0) {
            return Err(err(format!("size must be finite and > 0, got {size}")));
        }
        jobs.push(Job {
            arrival,
            size,
            class: class.unwrap_or(Class::Interactive),
        });
    }
    if jobs.is_empty() {
        return Err(JobsError::Empty);
    }
    jobs.sort_by(|a, b| a.arrival.total_cmp(&b.arrival));
    Ok(jobs)
}

/// Why a line did not deserialize: the class's own message, or the column that is not a number.
fn why(e: &csv::Error, record: &StringRecord) -> String {
    let csv::ErrorKind::Deserialize { err, .. } = e.kind() else {
        return e.to_string();
    };
    match (err.kind(), err.field()) {
        (DeserializeErrorKind::Message(msg), _) => msg.clone(),
        (_, Some(i)) => format!(
            "{} {:?} is not a number",
            JOB_COLUMNS[i as usize], &record[i as usize]
        ),
        _ => err.to_string(),
    }
}

/// Total work over the time from the first to the last arrival: above 1, the queue grows.
pub fn offered_load(jobs: &[Job]) -> f64 {
    let (Some(first), Some(last)) = (jobs.first(), jobs.last()) else {
        return 0.0;
    };
    let span = last.arrival - first.arrival;
    let work: f64 = jobs.iter().map(|j| j.size).sum();
    if span > 0.0 {
        work / span
    } else {
        f64::INFINITY
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_mean(sizes: SizeDist) -> (f64, f64) {
        let jobs = poisson_jobs(&PoissonWorkload {
            jobs: 200_000,
            load: 0.5,
            sizes,
            interactive_fraction: 0.3,
            seed: 7,
        })
        .unwrap();
        let n = jobs.len() as f64;
        let mean = jobs.iter().map(|j| j.size).sum::<f64>() / n;
        let rate = n / jobs.last().unwrap().arrival;
        (mean, rate)
    }

    #[test]
    fn every_distribution_has_mean_one_and_rate_equal_to_load() {
        for d in [
            SizeDist::Deterministic,
            SizeDist::Exponential,
            SizeDist::Bimodal {
                p_large: 0.1,
                ratio: 10.0,
            },
            SizeDist::Pareto { alpha: 3.0 },
            SizeDist::Lognormal { sigma: 1.0 },
        ] {
            let (mean, rate) = sample_mean(d);
            assert!((mean - 1.0).abs() < 0.02, "{d:?}: mean {mean}");
            assert!((rate - 0.5).abs() < 0.01, "{d:?}: rate {rate}");
        }
    }

    #[test]
    fn second_moments_match_samples() {
        for d in [
            SizeDist::Exponential,
            SizeDist::Bimodal {
                p_large: 0.2,
                ratio: 4.0,
            },
            SizeDist::Lognormal { sigma: 0.5 },
        ] {
            let jobs = poisson_jobs(&PoissonWorkload {
                jobs: 200_000,
                load: 1.0,
                sizes: d,
                interactive_fraction: 0.5,
                seed: 3,
            })
            .unwrap();
            let m2 = jobs.iter().map(|j| j.size * j.size).sum::<f64>() / jobs.len() as f64;
            let want = d.second_moment();
            assert!((m2 / want - 1.0).abs() < 0.03, "{d:?}: {m2} vs {want}");
        }
    }

    #[test]
    fn same_seed_same_jobs_and_classes_follow_the_fraction() {
        let w = PoissonWorkload {
            jobs: 10_000,
            load: 0.8,
            sizes: SizeDist::Exponential,
            interactive_fraction: 0.25,
            seed: 11,
        };
        let a = poisson_jobs(&w).unwrap();
        assert_eq!(a, poisson_jobs(&w).unwrap());
        let inter = a.iter().filter(|j| j.class == Class::Interactive).count();
        assert!((inter as f64 / 10_000.0 - 0.25).abs() < 0.02);
    }

    #[test]
    fn bad_parameters_are_errors() {
        let w = |sizes, load| PoissonWorkload {
            jobs: 10,
            load,
            sizes,
            interactive_fraction: 0.5,
            seed: 0,
        };
        assert!(poisson_jobs(&w(SizeDist::Pareto { alpha: 1.0 }, 0.5)).is_err());
        assert!(poisson_jobs(&w(SizeDist::Exponential, 0.0)).is_err());
        assert!(poisson_jobs(&w(SizeDist::Exponential, f64::NAN)).is_err());
        let bimodal = SizeDist::Bimodal {
            p_large: 1.5,
            ratio: 2.0,
        };
        assert!(poisson_jobs(&w(bimodal, 0.5)).is_err());
    }

    #[test]
    fn csv_parses_header_comments_classes_and_sorts() {
        let text = "arrival,size,class\n# note\n2.0, 1.5, batch\n0,3\n\n1,0.5,1\n";
        let jobs = parse_jobs_csv(text).unwrap();
        let got: Vec<(f64, f64, Class)> =
            jobs.iter().map(|j| (j.arrival, j.size, j.class)).collect();
        assert_eq!(
            got,
            vec![
                (0.0, 3.0, Class::Interactive),
                (1.0, 0.5, Class::Batch),
                (2.0, 1.5, Class::Batch)
            ]
        );
    }

    #[test]
    fn csv_errors_name_the_line() {
        let cases = [
            ("0,1\n1,x\n", 2, "size \"x\""),
            ("0,1\n\n1,-2\n", 3, "size must be"),
            ("0,1,2,3\n", 1, "fields"),
            ("0,1,gold\n", 1, "class"),
            ("0,1\nNaN,1\n", 2, "arrival must be"),
        ];
        for (text, line, part) in cases {
            match parse_jobs_csv(text) {
                Err(e @ JobsError::Csv { line: l, .. }) => {
                    assert_eq!(l, line, "{text:?}");
                    assert!(e.to_string().contains(part), "{e}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
        assert_eq!(parse_jobs_csv("# only a comment\n"), Err(JobsError::Empty));
        assert_eq!(parse_jobs_csv(""), Err(JobsError::Empty));
    }
}
