//! Request streams for the prefix cache: generated multi-turn conversations, or token sequences
//! read from a file.
//!
//! A generated request is `system prompt + few-shot prefix of its application + the conversation
//! so far + a new user message`; the next turn of the same conversation appends the model's reply
//! and another user message. Several conversations are open at once and their turns interleave, so
//! a conversation's earlier turns may have been evicted by the time its next turn arrives. Some
//! conversations open with a popular question (Zipf over a fixed pool), so identical prompts occur
//! too, which is all a whole-prompt cache can hit.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum WorkloadError {
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    #[error("turns: min {min} exceeds max {max}")]
    TurnRange { min: usize, max: usize },
    #[error("vocabulary must have at least 2 tokens, got {0}")]
    Vocab(u32),
    #[error("popular-question probability must lie in 0..=1, got {0}")]
    Probability(f64),
    #[error("cannot read {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("{0}: no requests (every line is empty)")]
    Empty(String),
    #[error("the requests would hold more than {max} tokens")]
    TooManyTokens { max: u64 },
    #[error("{path}, line {line}: {reason}")]
    Line {
        path: String,
        line: u64,
        reason: &'static str,
    },
}

/// Requests as token ids, and the words behind the ids when the input was text.
#[derive(Debug, Clone, Default)]
pub struct Workload {
    pub requests: Vec<Vec<u32>>,
    /// `words[id]` is the word read for token `id`; `None` for numeric or generated tokens.
    pub words: Option<Vec<String>>,
}

/// Shape of the generated multi-turn workload; every length is in tokens.
#[derive(Debug, Clone, Serialize)]
pub struct MultiTurnConfig {
    /// Shared by every request.
    pub system_tokens: usize,
    /// Applications, each with its own few-shot prefix; a conversation picks one uniformly.
    pub apps: usize,
    pub fewshot_tokens: usize,
    /// Turns per conversation, uniform in `min_turns..=max_turns`.
    pub min_turns: usize,
    pub max_turns: usize,
    /// Mean length of a user message and of a reply (uniform in half to one and a half times).
    pub user_tokens: usize,
    pub reply_tokens: usize,
    /// Conversations open at once, whose turns interleave.
    pub active: usize,
    pub vocab: u32,
    /// Chance that a conversation opens with a question from the popular pool.
    pub popular_prob: f64,
    /// Questions in the popular pool, drawn by Zipf (exponent 1) rank.
    pub popular_questions: usize,
}

impl Default for MultiTurnConfig {
    fn default() -> Self {
        MultiTurnConfig {
            system_tokens: 256,
            apps: 8,
            fewshot_tokens: 512,
            min_turns: 1,
            max_turns: 3,
            user_tokens: 64,
            reply_tokens: 128,
            active: 64,
            vocab: 32_000,
            popular_prob: 0.3,
            popular_questions: 32,
        }
    }
}

impl MultiTurnConfig {
    pub fn validate(&self) -> Result<(), WorkloadError> {
        for (name, v) in [
            ("apps", self.apps),
            ("min turns", self.min_turns),
            ("user tokens", self.user_tokens),
            ("active conversations", self.active),
            ("popular questions", self.popular_questions),
        ] {
            if v == 0 {
                return Err(WorkloadError::Zero(name));
            }
        }
        if self.min_turns > self.max_turns {
            return Err(WorkloadError::TurnRange {
                min: self.min_turns,
                max: self.max_turns,
            });
        }
        if self.vocab < 2 {
            return Err(WorkloadError::Vocab(self.vocab));
        }
        if !(0.0..=1.0).contains(&self.popular_prob) {
            return Err(WorkloadError::Probability(self.popular_prob));
        }
        Ok(())
    }
}

impl MultiTurnConfig {
    /// The fewest tokens `n` generated requests hold in all (saturating): each holds at least the
    /// system prompt, a few-shot prefix and half a user message; the generator also keeps every
    /// few-shot prefix and popular question.
    pub fn least_tokens(&self, n: usize) -> u64 {
        let each = (self.system_tokens as u64)
            .saturating_add(self.fewshot_tokens as u64)
            .saturating_add(self.user_tokens as u64 / 2);
        let shared = (self.apps as u64)
            .saturating_mul(self.fewshot_tokens as u64)
            .saturating_add(
                (self.popular_questions as u64).saturating_mul(self.user_tokens as u64 / 2),
            );
        each.saturating_mul(n as u64).saturating_add(shared)
    }
}

struct Conversation {
    history: Vec<u32>,
    turns_left: usize,
    /// Index into the popular pool of the opening question, if it is one.
    opening: Option<usize>,
}

fn tokens(rng: &mut StdRng, n: usize, vocab: u32) -> Vec<u32> {
    (0..n).map(|_| rng.random_range(0..vocab)).collect()
}

/// A length uniform in `[mean/2, 3*mean/2]` (just `mean` when that range is empty).
fn around(rng: &mut StdRng, mean: usize) -> usize {
    let lo = mean / 2;
    rng.random_range(lo..=mean + (mean - lo))
}

/// `n` requests of interleaved multi-turn conversations; the same seed gives the same requests.
pub fn multiturn(
    cfg: &MultiTurnConfig,
    n: usize,
    seed: u64,
) -> Result<Vec<Vec<u32>>, WorkloadError> {
    multiturn_within(cfg, n, seed, u64::MAX)
}

/// [`multiturn`], refused (before the tokens past it are drawn) once the requests would hold
/// more than `max_tokens` tokens in all: how long conversations grow depends on the draws, so
/// no bound computed beforehand is both safe and tight.
pub fn multiturn_within(
    cfg: &MultiTurnConfig,
    n: usize,
    seed: u64,
    max_tokens: u64,
) -> Result<Vec<Vec<u32>>, WorkloadError> {
    cfg.validate()?;
    let too_many = || WorkloadError::TooManyTokens { max: max_tokens };
    if cfg.least_tokens(n) > max_tokens {
        return Err(too_many());
    }
    if n == 0 {
        return Err(WorkloadError::Zero("requests"));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let system = tokens(&mut rng, cfg.system_tokens, cfg.vocab);
    let fewshot: Vec<Vec<u32>> = (0..cfg.apps)
        .map(|_| tokens(&mut rng, cfg.fewshot_tokens, cfg.vocab))
        .collect();
    let popular: Vec<Vec<u32>> = (0..cfg.popular_questions)
        .map(|_| {
            let len = around(&mut rng, cfg.user_tokens);
            tokens(&mut rng, len, cfg.vocab)
        })
        .collect();
    let rank = Zipf::new(cfg.popular_questions as f64, 1.0).expect("pool is not empty");
    let mut open: Vec<Option<Conversation>> = (0..cfg.active).map(|_| None).collect();
    let mut requests = Vec::with_capacity(n);
    // Tokens of the requests so far; a request is checked before its history grows.
    let mut held = cfg.least_tokens(0);
    let fits = |held: u64, len: usize, more: usize| {
        held.saturating_add(len as u64).saturating_add(more as u64) <= max_tokens
    };
    while requests.len() < n {
        let slot = rng.random_range(0..open.len());
        let conv = open[slot].get_or_insert_with(|| {
            let app = rng.random_range(0..cfg.apps);
            let opening = rng
                .random_bool(cfg.popular_prob)
                .then(|| rank.sample(&mut rng) as usize - 1);
            Conversation {
                history: [system.as_slice(), &fewshot[app]].concat(),
                turns_left: rng.random_range(cfg.min_turns..=cfg.max_turns),
                opening,
            }
        });
        let user_len = match conv.opening {
            Some(q) => popular[q].len(),
            None => around(&mut rng, cfg.user_tokens),
        };
        if !fits(held, conv.history.len(), user_len) {
            return Err(too_many());
        }
        match conv.opening.take() {
            Some(q) => conv.history.extend_from_slice(&popular[q]),
            None => conv.history.extend(tokens(&mut rng, user_len, cfg.vocab)),
        }
        held += conv.history.len() as u64;
        requests.push(conv.history.clone());
        conv.turns_left -= 1;
        if conv.turns_left == 0 {
            open[slot] = None;
        } else if requests.len() < n {
            let reply_len = around(&mut rng, cfg.reply_tokens);
            if !fits(held, conv.history.len(), reply_len) {
                return Err(too_many());
            }
            conv.history.extend(tokens(&mut rng, reply_len, cfg.vocab));
        }
    }
    Ok(requests)
}

/// One request per non-empty line. If every field of the text is a number that fits in `u32`,
/// fields are token ids; otherwise every field is a word, numbered in order of first appearance.
pub fn parse_requests(text: &str, origin: &str) -> Result<Workload, WorkloadError> {
    use crate::workload::text_input::{strip_bom, unterminated_last_line, INCOMPLETE};
    let text = strip_bom(text);
    if let Some(line) = unterminated_last_line(text) {
        return Err(WorkloadError::Line {
            path: origin.to_string(),
            line,
            reason: INCOMPLETE,
        });
    }
    let lines: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| !f.is_empty())
        .collect();
    if lines.is_empty() {
        return Err(WorkloadError::Empty(origin.to_string()));
    }
    let numeric: Option<Vec<Vec<u32>>> = lines
        .iter()
        .map(|f| f.iter().map(|w| w.parse::<u32>().ok()).collect())
        .collect();
    if let Some(requests) = numeric {
        return Ok(Workload {
            requests,
            words: None,
        });
    }
    let mut ids: HashMap<&str, u32> = HashMap::new();
    let mut words: Vec<String> = Vec::new();
    let requests = lines
        .iter()
        .map(|f| {
            f.iter()
                .map(|&w| {
                    *ids.entry(w).or_insert_with(|| {
                        words.push(w.to_string());
                        words.len() as u32 - 1
                    })
                })
                .collect()
        })
        .collect();
    Ok(Workload {
        requests,
        words: Some(words),
    })
}

/// [`parse_requests`] on the contents of a file.
pub fn read_requests(path: &Path) -> Result<Workload, WorkloadError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| WorkloadError::Read {
        path: shown.clone(),
        reason: e.to_string(),
    })?;
    parse_requests(&text, &shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_extend_their_conversation_and_share_the_system_prompt() {
        let cfg = MultiTurnConfig {
            active: 3,
            ..MultiTurnConfig::default()
        };
        let reqs = multiturn(&cfg, 300, 7).unwrap();
        assert_eq!(reqs, multiturn(&cfg, 300, 7).unwrap());
        let system = &reqs[0][..cfg.system_tokens];
        let head = cfg.system_tokens + cfg.fewshot_tokens;
        let mut apps = std::collections::HashSet::new();
        for r in &reqs {
            assert_eq!(&r[..cfg.system_tokens], system);
            apps.insert(r[cfg.system_tokens..head].to_vec());
            let body = r.len() - head;
            assert!(body >= cfg.user_tokens / 2);
            // At most 3 turns: 3 user messages and 2 replies, each at most 1.5 times its mean.
            assert!(body <= (3 * cfg.user_tokens + 2 * cfg.reply_tokens) * 3 / 2);
        }
        assert_eq!(apps.len(), cfg.apps);
        // A later turn starts with an earlier request of its conversation.
        let follow_ups = reqs
            .iter()
            .enumerate()
            .filter(|(i, r)| {
                reqs[..*i]
                    .iter()
                    .any(|p| r.len() > p.len() && r.starts_with(p))
            })
            .count();
        assert!(follow_ups > 0);
    }

    #[test]
    fn generation_stops_where_its_tokens_pass_the_budget() {
        let cfg = MultiTurnConfig::default();
        let reqs = multiturn(&cfg, 300, 7).unwrap();
        let total = cfg.least_tokens(0) + reqs.iter().map(|r| r.len() as u64).sum::<u64>();
        assert_eq!(multiturn_within(&cfg, 300, 7, total).unwrap(), reqs);
        for short in [total - 1, total / 2, cfg.least_tokens(300) - 1] {
            assert!(matches!(
                multiturn_within(&cfg, 300, 7, short),
                Err(WorkloadError::TooManyTokens { max }) if max == short
            ));
        }
    }

    #[test]
    fn files_hold_numbers_or_words() {
        let w = parse_requests("1 2 3\n\n1 2 4\n", "t").unwrap();
        assert_eq!(w.requests, vec![vec![1, 2, 3], vec![1, 2, 4]]);
        assert!(w.words.is_none());
        let w = parse_requests("the cat 7\nthe dog\n", "t").unwrap();
        assert_eq!(w.requests, vec![vec![0, 1, 2], vec![0, 3]]);
        assert_eq!(w.words.unwrap(), ["the", "cat", "7", "dog"]);
        assert!(matches!(
            parse_requests(" \n\n", "t"),
            Err(WorkloadError::Empty(_))
        ));
    }
}
