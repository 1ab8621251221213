//! The one trace-loading path: a file is an Azure-style CSV ([`super::azure`]) or a Mooncake JSON
//! lines trace ([`super::mooncake`]), told apart by its first non-blank character (`{` is JSON).
//! The sweep takes the lengths and arrivals; the engine and cluster simulators take requests whose
//! prompts carry a Mooncake trace's prefix structure; `sim radix` takes token lists.

use super::azure::{read_azure_csv, Request, TraceError};
use super::mooncake::{parse_mooncake, MooncakeRequest};
use super::serving::{from_trace, Prompt, ServingRequest, TraceFixups};
use std::io::{BufReader, Read};
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    Csv,
    Mooncake,
}

/// A trace's requests; `hash_ids[i]` is request `i`'s prompt blocks (Mooncake), empty for CSV.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub format: TraceFormat,
    pub requests: Vec<Request>,
    pub hash_ids: Vec<Vec<u64>>,
}

fn io_error(path: &Path, source: std::io::Error) -> TraceError {
    TraceError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The format of the file at `path`, from its first non-blank byte after any byte-order mark.
pub fn detect(path: &Path) -> Result<TraceFormat, TraceError> {
    let f = std::fs::File::open(path).map_err(|e| io_error(path, e))?;
    let mut first = None;
    let mut input = BufReader::new(f);
    super::text_input::skip_bom(&mut input).map_err(|e| io_error(path, e))?;
    for b in input.bytes().take(1 << 16) {
        let b = b.map_err(|e| io_error(path, e))?;
        if !b.is_ascii_whitespace() {
            first = Some(b);
            break;
        }
    }
    Ok(if first == Some(b'{') {
        TraceFormat::Mooncake
    } else {
        TraceFormat::Csv
    })
}

/// Reads the trace at `path`, whichever its format.
pub fn read_trace(path: impl AsRef<Path>) -> Result<Trace, TraceError> {
    let path = path.as_ref();
    let name = path.display().to_string();
    let format = detect(path)?;
    Ok(match format {
        TraceFormat::Csv => Trace {
            format,
            requests: read_azure_csv(path)?,
            hash_ids: Vec::new(),
        },
        TraceFormat::Mooncake => {
            let f = std::fs::File::open(path).map_err(|e| io_error(path, e))?;
            from_mooncake(parse_mooncake(BufReader::new(f), &name)?)
        }
    })
}

/// Parses Mooncake JSON lines already in memory.
pub fn parse_mooncake_text(text: &str, name: &str) -> Result<Trace, TraceError> {
    Ok(from_mooncake(parse_mooncake(text.as_bytes(), name)?))
}

fn from_mooncake(m: Vec<MooncakeRequest>) -> Trace {
    let (requests, hash_ids) = m.into_iter().map(|r| (r.request, r.hash_ids)).unzip();
    Trace {
        format: TraceFormat::Mooncake,
        requests,
        hash_ids,
    }
}

impl Trace {
    /// Keeps the first `n` requests.
    pub fn truncate(&mut self, n: usize) {
        self.requests.truncate(n);
        self.hash_ids.truncate(n);
    }

    /// Requests for the engine simulators (ids `r0`, `r1`, ... in trace order): a Mooncake
    /// trace's prompts carry its prefix blocks, a CSV's are unique; empty sizes become 1 token.
    pub fn serving(&self) -> (Vec<ServingRequest>, TraceFixups) {
        let (mut out, fix) = from_trace(&self.requests);
        for (r, ids) in out.iter_mut().zip(&self.hash_ids) {
            if !ids.is_empty() {
                r.prompt = Prompt::Blocks {
                    hash_ids: ids.clone(),
                    len: r.prompt.len() as u32,
                };
            }
        }
        (out, fix)
    }

    /// Every prompt as token ids (`sim radix`); `None` for a CSV, whose prompts share nothing.
    pub fn token_prompts(&self) -> Option<Vec<Vec<u32>>> {
        (self.format == TraceFormat::Mooncake).then(|| {
            self.serving()
                .0
                .iter()
                .map(|r| (0..r.prompt.len()).map(|i| r.prompt.token(i)).collect())
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("pagedkv-trace-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn detects_the_format_and_keeps_the_prefix_structure() {
        let csv = write(
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,2\n1.5,0,3\n",
        );
        let t = read_trace(&csv).unwrap();
        assert_eq!((t.format, t.requests.len()), (TraceFormat::Csv, 2));
        assert!(t.token_prompts().is_none());
        assert_eq!(t.serving().0[1].prompt, Prompt::Unique(1));
        let json = write(
            "b.jsonl",
            "\n{\"timestamp\": 0, \"input_length\": 520, \"output_length\": 2, \"hash_ids\": [1, 2]}\n\
             {\"timestamp\": 10, \"input_length\": 515, \"output_length\": 2, \"hash_ids\": [1, 3]}\n",
        );
        let mut t = read_trace(&json).unwrap();
        assert_eq!(t.format, TraceFormat::Mooncake);
        let p = t.token_prompts().unwrap();
        assert_eq!((p[0].len(), p[1].len()), (520, 515));
        // Equal first blocks, different second blocks.
        assert_eq!(p[0][..512], p[1][..512]);
        assert_ne!(p[0][512..515], p[1][512..515]);
        t.truncate(1);
        assert_eq!((t.requests.len(), t.hash_ids.len()), (1, 1));
        for p in [csv, json] {
            std::fs::remove_file(p).unwrap();
        }
        assert!(read_trace("/nonexistent/x.jsonl").is_err());
    }
}
