//! Requests as a serving engine sees them: an id, an arrival, a prompt, how many tokens to generate
//! and a priority. A prompt is either explicit token ids (shared prefixes then share blocks) or a
//! length whose tokens are unique to the request, so nothing is shared by accident and no token
//! vector has to be built for a trace of lengths, or a Mooncake trace's prompt blocks, whose
//! tokens are synthesised from their hash ids when asked ([`super::mooncake::block_token`]).

use super::azure;
use super::mooncake::{block_token, MOONCAKE_BLOCK};
use super::synthetic::SizeDist;
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use serde::Serialize;

/// A prompt: token ids, `len` tokens that no other request holds, or `len` tokens in blocks of
/// [`MOONCAKE_BLOCK`] named by hash ids (equal ids, equal tokens).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    Tokens(Vec<u32>),
    Unique(u32),
    Blocks { hash_ids: Vec<u64>, len: u32 },
}

impl Prompt {
    pub fn len(&self) -> usize {
        match self {
            Prompt::Tokens(t) => t.len(),
            Prompt::Unique(n) => *n as usize,
            Prompt::Blocks { len, .. } => *len as usize,
        }
    }

    /// Whether other prompts can share this one's tokens (not [`Prompt::Unique`]).
    pub fn has_tokens(&self) -> bool {
        !matches!(self, Prompt::Unique(_))
    }

    /// Token `i` (`i < len`); 0 for a unique prompt, whose tokens are never compared.
    #[inline]
    pub fn token(&self, i: usize) -> u32 {
        match self {
            Prompt::Tokens(t) => t[i],
            Prompt::Unique(_) => 0,
            Prompt::Blocks { hash_ids, .. } => {
                let b = MOONCAKE_BLOCK as usize;
                block_token(hash_ids[i / b], (i % b) as u32)
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many tokens from `self[i..]` and `other[j..]` agree in a row, at most `max`, where
    /// each side's index plus `max` stays within its length. Mooncake prompts agree a whole
    /// block at a time where their hash ids do (equal ids, equal tokens), so a long shared prefix
    /// costs a comparison per block, not per token. A unique prompt agrees with no other prompt.
    pub fn common_prefix(&self, i: usize, other: &Prompt, j: usize, max: usize) -> usize {
        debug_assert!(i + max <= self.len() && j + max <= other.len());
        match (self, other) {
            (Prompt::Unique(_), _) | (_, Prompt::Unique(_)) => 0,
            (Prompt::Tokens(a), Prompt::Tokens(b)) => a[i..i + max]
                .iter()
                .zip(&b[j..j + max])
                .take_while(|(x, y)| x == y)
                .count(),
            (Prompt::Blocks { hash_ids: a, .. }, Prompt::Blocks { hash_ids: b, .. }) => {
                let bs = MOONCAKE_BLOCK as usize;
                let mut n = 0;
                while n < max {
                    let (x, y) = (i + n, j + n);
                    if x % bs == y % bs && a[x / bs] == b[y / bs] {
                        // The rest of this block agrees.
                        n = (n + bs - x % bs).min(max);
                    } else if self.token(x) == other.token(y) {
                        n += 1;
                    } else {
                        break;
                    }
                }
                n
            }
            _ => (0..max)
                .take_while(|&n| self.token(i + n) == other.token(j + n))
                .count(),
        }
    }
}

/// One request for the engine simulator. `arrival` is in seconds, or in steps under a step clock.
#[derive(Debug, Clone, PartialEq)]
pub struct ServingRequest {
    pub id: String,
    pub arrival: f64,
    pub prompt: Prompt,
    /// Tokens to generate (vLLM's `max_tokens`; the simulated model never stops earlier).
    pub output_len: u32,
    /// Lower runs first under the priority policy (vLLM's convention).
    pub priority: i64,
}

/// What [`from_trace`] had to change so that every request is one vLLM accepts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TraceFixups {
    /// Requests with an empty prompt, given one token.
    pub empty_prompts: usize,
    /// Requests asking for no output, given one token (vLLM's `max_tokens` is at least 1).
    pub empty_outputs: usize,
}

/// A trace's requests (ids `r0`, `r1`, ... in trace order) with unique prompts. Empty prompts and
/// outputs become one token, counted in the fix-ups.
pub fn from_trace(requests: &[azure::Request]) -> (Vec<ServingRequest>, TraceFixups) {
    let mut fix = TraceFixups::default();
    let out = requests
        .iter()
        .enumerate()
        .map(|(i, r)| {
            fix.empty_prompts += usize::from(r.prompt_tokens == 0);
            fix.empty_outputs += usize::from(r.output_tokens == 0);
            ServingRequest {
                id: format!("r{i}"),
                arrival: r.arrival_s,
                prompt: Prompt::Unique(r.prompt_tokens.max(1)),
                output_len: r.output_tokens.max(1),
                priority: 0,
            }
        })
        .collect();
    (out, fix)
}

/// Divides every arrival by `scale` (2 replays the trace twice as fast). `scale` must be positive.
pub fn scale_rate(requests: &mut [ServingRequest], scale: f64) {
    debug_assert!(scale > 0.0 && scale.is_finite());
    for r in requests {
        r.arrival /= scale;
    }
}

/// Every request at time 0, kept in arrival order (ties in their order): the rate scale at
/// infinity, vLLM's `--request-rate inf` ("all the requests are sent at time 0").
pub fn all_at_once(requests: &mut [ServingRequest]) {
    requests.sort_by(|a, b| a.arrival.total_cmp(&b.arrival));
    for r in requests {
        r.arrival = 0.0;
    }
}

/// Requests with the given prompts (ids `r0`, `r1`, ... in order), Poisson arrivals at `rate` per
/// second (the first at 0) and output lengths from `output` (at least 1), from one seeded stream.
/// `rate` must be positive.
pub fn from_prompts(
    prompts: Vec<Vec<u32>>,
    rate: f64,
    output: SizeDist,
    seed: u64,
) -> Vec<ServingRequest> {
    let mut rng = StdRng::seed_from_u64(seed);
    let gap = Exp::new(rate).expect("a positive rate");
    let mut t = 0.0;
    prompts
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            if i > 0 {
                t += gap.sample(&mut rng);
            }
            ServingRequest {
                id: format!("r{i}"),
                arrival: t,
                prompt: Prompt::Tokens(p),
                output_len: output.sample(&mut rng).max(1),
                priority: 0,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_become_unique_prompts_and_empty_sizes_one_token() {
        let trace = [
            azure::Request {
                arrival_s: 0.5,
                prompt_tokens: 10,
                output_tokens: 0,
            },
            azure::Request {
                arrival_s: 1.5,
                prompt_tokens: 0,
                output_tokens: 7,
            },
        ];
        let (mut r, fix) = from_trace(&trace);
        assert_eq!(
            fix,
            TraceFixups {
                empty_prompts: 1,
                empty_outputs: 1
            }
        );
        assert_eq!(r[0].id, "r0");
        assert_eq!((r[0].prompt.len(), r[0].output_len), (10, 1));
        assert_eq!(
            (r[1].prompt.clone(), r[1].output_len),
            (Prompt::Unique(1), 7)
        );
        scale_rate(&mut r, 2.0);
        assert_eq!((r[0].arrival, r[1].arrival), (0.25, 0.75));
        assert!(!Prompt::Tokens(vec![3]).is_empty() && Prompt::Unique(0).is_empty());
    }

    #[test]
    fn prompts_get_poisson_arrivals_and_outputs() {
        let prompts: Vec<Vec<u32>> = (0..4000).map(|i| vec![i; 3]).collect();
        let r = from_prompts(prompts, 5.0, SizeDist::Uniform { lo: 0, hi: 4 }, 3);
        assert_eq!(r.len(), 4000);
        assert_eq!(r[0].arrival, 0.0);
        let mean_gap = r[3999].arrival / 3999.0;
        assert!((mean_gap * 5.0 - 1.0).abs() < 0.05, "{mean_gap}");
        assert!(r.iter().all(|x| (1..=4).contains(&x.output_len)));
        assert!(r.iter().any(|x| x.output_len == 4));
        assert_eq!(r[7].prompt, Prompt::Tokens(vec![7; 3]));
    }
}
