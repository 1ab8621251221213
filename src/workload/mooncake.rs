//! Mooncake's traces (FAST'25 release, `data/mooncake/`): one JSON object per line with
//! `timestamp` (ms), `input_length`, `output_length` and `hash_ids`, one remapped prefix hash per
//! [`MOONCAKE_BLOCK`] prompt tokens (the last block partial as `input_length` says). The traces
//! carry no text, so token ids are synthesised from the hash ids ([`block_token`]): equal ids at
//! equal positions give equal tokens, so the prefix structure survives at any engine block size
//! (a vLLM block of 16 tokens inside a shared 512-token block hashes equal, and one that straddles
//! into a differing block does not).

use super::azure::{Request, TraceError};
use crate::mix::splitmix64 as mix;
use serde::Deserialize;
use std::io::BufRead;

/// Prompt tokens per hash id.
pub const MOONCAKE_BLOCK: u32 = 512;

/// One request of a Mooncake trace.
#[derive(Debug, Clone, PartialEq)]
pub struct MooncakeRequest {
    pub request: Request,
    pub hash_ids: Vec<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    timestamp: f64,
    input_length: u32,
    output_length: u32,
    hash_ids: Vec<u64>,
}

/// Token `offset` (< [`MOONCAKE_BLOCK`]) of the prompt block whose hash id is `hash_id`.
pub fn block_token(hash_id: u64, offset: u32) -> u32 {
    (mix(hash_id.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(offset)) >> 32) as u32
}

/// Reads a Mooncake trace from `input` (named `name` in errors, which give the line).
pub fn parse_mooncake(
    mut input: impl BufRead,
    name: &str,
) -> Result<Vec<MooncakeRequest>, TraceError> {
    super::text_input::skip_bom(&mut input).map_err(|source| TraceError::Io {
        path: name.into(),
        source,
    })?;
    let mut out: Vec<MooncakeRequest> = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let line_no = i as u64 + 1;
        let bad = |detail: String| TraceError::Field {
            path: name.into(),
            line: line_no,
            detail,
        };
        let line = line.map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => bad("not UTF-8 text".into()),
            _ => TraceError::Io {
                path: name.into(),
                source: e,
            },
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let l: Line = serde_json::from_str(&line).map_err(|e| bad(e.to_string()))?;
        if !(l.timestamp.is_finite() && l.timestamp >= 0.0) {
            return Err(bad(format!(
                "timestamp {} is not a time in ms >= 0",
                l.timestamp
            )));
        }
        let blocks = l.input_length.div_ceil(MOONCAKE_BLOCK) as usize;
        if l.hash_ids.len() != blocks {
            return Err(bad(format!(
                "{} hash ids for an input of {} tokens (one per {MOONCAKE_BLOCK} tokens: {blocks})",
                l.hash_ids.len(),
                l.input_length
            )));
        }
        out.push(MooncakeRequest {
            request: Request {
                arrival_s: l.timestamp / 1e3,
                prompt_tokens: l.input_length,
                output_tokens: l.output_length,
            },
            hash_ids: l.hash_ids,
        });
    }
    if out.is_empty() {
        return Err(TraceError::Empty { path: name.into() });
    }
    let first = out
        .iter()
        .map(|r| r.request.arrival_s)
        .fold(f64::INFINITY, f64::min);
    for r in &mut out {
        r.request.arrival_s -= first;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_lines_and_names_the_bad_one() {
        let text = "{\"timestamp\": 1500, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [4, 9]}\n\n\
                    {\"timestamp\": 2000, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [4]}\n";
        let r = parse_mooncake(text.as_bytes(), "t").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].request.arrival_s, 0.0);
        assert_eq!(r[1].request.arrival_s, 0.5);
        assert_eq!(
            (r[0].request.prompt_tokens, r[0].hash_ids.clone()),
            (600, vec![4, 9])
        );
        for (bad, want) in [
            ("{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [4]}", "1 hash ids"),
            ("{\"timestamp\": 0, \"input_length\": 6, \"output_length\": 3}", "hash_ids"),
            ("{\"timestamp\": -1, \"input_length\": 6, \"output_length\": 3, \"hash_ids\": [1]}", "timestamp"),
            ("not json", "expected"),
        ] {
            let text = format!("{{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}}\n{bad}\n");
            let e = parse_mooncake(text.as_bytes(), "t.jsonl").unwrap_err().to_string();
            assert!(e.starts_with("t.jsonl, line 2: ") && e.contains(want), "{e}");
        }
        assert!(parse_mooncake("\n".as_bytes(), "t").is_err());
    }

    #[test]
    fn tokens_depend_on_the_id_and_the_offset() {
        assert_eq!(block_token(7, 3), block_token(7, 3));
        let mut seen = std::collections::HashSet::new();
        for id in 0..64 {
            for o in 0..MOONCAKE_BLOCK {
                seen.insert(block_token(id, o));
            }
        }
        // 32,768 draws from 2^32 values: collisions are possible but rare.
        assert!(seen.len() > 32_700, "{}", seen.len());
    }
}
