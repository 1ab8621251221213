//! Key traces for cache simulation: a sequence of requests for keys numbered densely `0..key_space`,
//! and the workload names the CLI accepts (`zipf`, `loop`, `scan`, `drift`, `seq:LIST`,
//! `trace:FILE`). Dense numbering lets every cache policy index its tables by key instead of
//! hashing; generators produce dense keys directly and trace readers renumber what they read.

use std::path::PathBuf;
use std::str::FromStr;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum KeyTraceError {
    #[error("unknown workload {0:?} (expected zipf, loop, scan, drift, seq:LIST or trace:FILE)")]
    UnknownWorkload(String),
    #[error("bad key {0:?} in seq: list (expected non-negative integers separated by commas)")]
    BadSeqKey(String),
    #[error("{what} must be at least {min}, got {got}")]
    TooSmall {
        what: &'static str,
        min: u64,
        got: u64,
    },
    #[error("alpha must be a finite number >= 0, got {0}")]
    BadAlpha(f64),
    #[error("hot set of {hot} keys must be smaller than the {keys} keys")]
    BadHotSet { hot: u64, keys: u64 },
    #[error("key {key} is outside the key space 0..{key_space}")]
    KeyOutOfRange { key: u32, key_space: u32 },
    #[error("more than 2^32 - 1 distinct keys")]
    TooManyKeys,
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}, line {line}: {msg}")]
    Parse {
        path: String,
        line: u64,
        msg: String,
    },
    #[error("{path}: {len} bytes is not a whole number of 24-byte oracleGeneral records")]
    PartialRecord { path: String, len: u64 },
    #[error("{0}: the trace holds no requests")]
    EmptyTrace(String),
    #[error("bad csv parameters: {0}")]
    CsvParams(String),
    #[error("cannot tell the format of {0} from its name: pass --format csv|txt|oracle")]
    FormatNotGiven(String),
}

/// Requests for keys `0..key_space`; every key is below `key_space`, not every key need occur.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTrace {
    keys: Vec<u32>,
    key_space: u32,
}

impl KeyTrace {
    pub fn new(keys: Vec<u32>, key_space: u32) -> Result<Self, KeyTraceError> {
        if let Some(&key) = keys.iter().find(|&&k| k >= key_space) {
            return Err(KeyTraceError::KeyOutOfRange { key, key_space });
        }
        Ok(KeyTrace { keys, key_space })
    }

    /// A trace whose key space is one past its largest key.
    pub fn from_keys(keys: Vec<u32>) -> Self {
        let key_space = keys.iter().max().map_or(0, |&m| m + 1);
        KeyTrace { keys, key_space }
    }

    pub fn keys(&self) -> &[u32] {
        &self.keys
    }

    pub fn key_space(&self) -> usize {
        self.key_space as usize
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Number of keys that occur at least once.
    pub fn distinct(&self) -> usize {
        let mut seen = vec![false; self.key_space()];
        let mut n = 0;
        for &k in &self.keys {
            if !std::mem::replace(&mut seen[k as usize], true) {
                n += 1;
            }
        }
        n
    }

    /// The first `n` requests (all of them if there are fewer).
    pub fn truncate(&mut self, n: usize) {
        self.keys.truncate(n);
    }
}

/// What `--workload` names. Generator parameters (keys, alpha, requests, seed) come separately.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyWorkload {
    /// Keys drawn independently with Zipf(alpha) popularity.
    Zipf,
    /// Keys 0, 1, …, n-1, 0, 1, … in a cycle.
    Loop,
    /// A Zipf hot set with a one-off scan over every other key interleaved in the middle.
    Scan,
    /// A Zipf hot set whose window slides once across the whole key space.
    Drift,
    /// The given keys, in order (renumbered densely by first appearance).
    Seq(Vec<u64>),
    /// A trace file in one of libCacheSim's formats.
    Trace(PathBuf),
}

impl FromStr for KeyWorkload {
    type Err = KeyTraceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(list) = s.strip_prefix("seq:") {
            let keys = list
                .split(',')
                .map(|t| {
                    t.trim()
                        .parse::<u64>()
                        .map_err(|_| KeyTraceError::BadSeqKey(t.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(KeyWorkload::Seq(keys));
        }
        if let Some(path) = s.strip_prefix("trace:") {
            if path.is_empty() {
                return Err(KeyTraceError::UnknownWorkload(s.into()));
            }
            return Ok(KeyWorkload::Trace(path.into()));
        }
        match s {
            "zipf" => Ok(KeyWorkload::Zipf),
            "loop" => Ok(KeyWorkload::Loop),
            "scan" => Ok(KeyWorkload::Scan),
            "drift" => Ok(KeyWorkload::Drift),
            _ => Err(KeyTraceError::UnknownWorkload(s.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_workload_name() {
        assert_eq!("zipf".parse::<KeyWorkload>().unwrap(), KeyWorkload::Zipf);
        assert_eq!(
            "seq:1, 2,3".parse::<KeyWorkload>().unwrap(),
            KeyWorkload::Seq(vec![1, 2, 3])
        );
        assert_eq!(
            "trace:a/b.csv".parse::<KeyWorkload>().unwrap(),
            KeyWorkload::Trace("a/b.csv".into())
        );
        assert!("seq:1,x".parse::<KeyWorkload>().is_err());
        assert!("seq:".parse::<KeyWorkload>().is_err());
        assert!("trace:".parse::<KeyWorkload>().is_err());
        assert!("zipff".parse::<KeyWorkload>().is_err());
    }

    #[test]
    fn rejects_keys_outside_the_space_and_counts_distinct() {
        assert!(KeyTrace::new(vec![0, 3], 3).is_err());
        let t = KeyTrace::new(vec![2, 0, 2, 2], 5).unwrap();
        assert_eq!((t.distinct(), t.key_space(), t.len()), (2, 5, 4));
        assert_eq!(KeyTrace::from_keys(vec![4, 1]).key_space(), 5);
    }
}
