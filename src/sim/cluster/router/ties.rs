//! The random choices routers make, from one seeded stream per router so that a run repeats:
//! a uniform pick among exact minima (SGLang's `IteratorRandom::choose` over the least-loaded
//! workers; Dynamo's reservoir sampling over equal costs at temperature 0), and Dynamo's softmax
//! sampling over normalised costs at a temperature above 0.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[derive(Debug, Clone)]
pub struct Ties {
    rng: StdRng,
}

/// A pick: its index, its key, and how many keys shared the minimum.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pick<K> {
    pub index: usize,
    pub key: K,
    pub tied: usize,
}

impl Ties {
    /// `salt` keeps the streams of different routers apart under one `--seed`.
    pub fn new(seed: u64, salt: u64) -> Ties {
        Ties {
            rng: StdRng::seed_from_u64(seed ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        }
    }

    /// A uniformly random index among the exact minima of `keys` (none: `None`). Draws from the
    /// stream only when two or more keys tie, so a run without ties is the same under any seed.
    pub fn argmin<K: PartialOrd + Copy>(
        &mut self,
        keys: impl IntoIterator<Item = K>,
    ) -> Option<Pick<K>> {
        let mut best: Option<Pick<K>> = None;
        for (index, key) in keys.into_iter().enumerate() {
            match &mut best {
                None => {
                    best = Some(Pick {
                        index,
                        key,
                        tied: 1,
                    })
                }
                Some(b) if key < b.key => {
                    *b = Pick {
                        index,
                        key,
                        tied: 1,
                    }
                }
                Some(b) if key == b.key => {
                    b.tied += 1;
                    // Reservoir sampling: the k-th equal key replaces the pick with chance 1/k.
                    if self.rng.random_range(0..b.tied) == 0 {
                        b.index = index;
                    }
                }
                Some(_) => {}
            }
        }
        best
    }

    /// Dynamo's sampling at `temperature` > 0: p_i ∝ exp(-(c_i - min) / ((max - min) × T)),
    /// uniform when every cost is equal; the first index whose cumulative p reaches a uniform
    /// draw. Returns (index, p of that index).
    pub fn softmax(&mut self, costs: &[f64], temperature: f64) -> (usize, f64) {
        debug_assert!(temperature > 0.0 && !costs.is_empty());
        let lo = costs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = costs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = if hi > lo {
            costs
                .iter()
                .map(|c| (-(c - lo) / ((hi - lo) * temperature)).exp())
                .collect()
        } else {
            vec![1.0; costs.len()]
        };
        let total: f64 = weights.iter().sum();
        let u: f64 = self.rng.random();
        let mut acc = 0.0;
        for (i, w) in weights.iter().enumerate() {
            acc += w / total;
            if u <= acc {
                return (i, w / total);
            }
        }
        let last = costs.len() - 1;
        (last, weights[last] / total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_are_picked_uniformly_and_single_minima_need_no_draw() {
        let mut t = Ties::new(1, 0);
        let mut counts = [0usize; 4];
        for _ in 0..4000 {
            let p = t.argmin([3, 1, 2, 1].iter().copied()).unwrap();
            assert_eq!((p.key, p.tied), (1, 2));
            counts[p.index] += 1;
        }
        assert_eq!(counts[0] + counts[2], 0);
        // Binomial(4000, 1/2): 6 standard deviations is ±190.
        assert!((1810..=2190).contains(&counts[1]), "{counts:?}");
        let mut a = Ties::new(1, 0);
        let mut b = Ties::new(2, 0);
        for _ in 0..10 {
            assert_eq!(a.argmin([5.0, 4.0, 6.0]).unwrap().index, 1);
            assert_eq!(b.argmin([5.0, 4.0, 6.0]).unwrap().index, 1);
        }
        assert!(a.argmin(Vec::<u32>::new()).is_none());
    }

    #[test]
    fn softmax_follows_the_normalised_costs() {
        let mut t = Ties::new(7, 0);
        // Dynamo's own example: costs 6, 7, 8 at T = 0.5 give p = (0.665, 0.245, 0.090).
        let n = 20_000;
        let mut counts = [0usize; 3];
        for _ in 0..n {
            counts[t.softmax(&[6.0, 7.0, 8.0], 0.5).0] += 1;
        }
        let z = 1.0 + (-1f64).exp() + (-2f64).exp();
        for (i, want) in [1.0 / z, (-1f64).exp() / z, (-2f64).exp() / z]
            .iter()
            .enumerate()
        {
            let got = counts[i] as f64 / n as f64;
            let sd = (want * (1.0 - want) / n as f64).sqrt();
            assert!((got - want).abs() < 6.0 * sd, "{i}: {got} vs {want}");
        }
        assert!((t.softmax(&[2.0, 2.0], 1.0).1 - 0.5).abs() < 1e-12);
    }
}
