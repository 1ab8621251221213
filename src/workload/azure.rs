//! Request traces from CSV: the Azure LLM inference trace 2023 (`TIMESTAMP,ContextTokens,
//! GeneratedTokens`), or any CSV with a prompt-token and an output-token column.
//!
//! Columns are found by header name, case-insensitively, ignoring `_`, `-` and spaces:
//! - prompt: `ContextTokens`, `prompt_tokens`, `input_tokens`, or any name starting with `prompt`,
//!   `input` or `context`;
//! - output: `GeneratedTokens`, `output_tokens`, or any name starting with `output`, `generated`,
//!   `completion`, `response` or `decode`;
//! - arrival (optional): `TIMESTAMP`, `time`, `arrival...`; either `YYYY-MM-DD HH:MM:SS[.fffffff]`
//!   or plain seconds. Without it every arrival is 0 (see [`with_rate`] to space them out).
//!
//! Arrivals are seconds after the earliest request. Errors name the file and the line.

use super::csv_lines::{self, line_of, next_record, ReadError};
use csv::StringRecord;
use std::io::BufRead;
use std::path::Path;
use thiserror::Error;

/// One request of a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Request {
    /// Seconds after the first request.
    pub arrival_s: f64,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
}

impl Request {
    /// Tokens held at the request's peak: its prompt and every output token.
    pub fn peak_tokens(&self) -> u64 {
        self.prompt_tokens as u64 + self.output_tokens as u64
    }
}

#[derive(Debug, Error)]
pub enum TraceError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: no requests (the file holds no data rows)")]
    Empty { path: String },
    #[error("{path}, line {line}: {detail}")]
    Header {
        path: String,
        line: u64,
        detail: String,
    },
    #[error("{path}, line {line}: {detail}")]
    Field {
        path: String,
        line: u64,
        detail: String,
    },
}

/// Reads a trace CSV (see the module docs for the columns it accepts).
pub fn read_azure_csv(path: impl AsRef<Path>) -> Result<Vec<Request>, TraceError> {
    let path = path.as_ref();
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| TraceError::Io {
        path: name.clone(),
        source,
    })?;
    parse_trace(std::io::BufReader::new(file), &name)
}

/// Parses trace CSV text; `name` is used in error messages.
pub fn parse_trace_csv(text: &str, name: &str) -> Result<Vec<Request>, TraceError> {
    parse_trace(text.as_bytes(), name)
}

fn parse_trace(input: impl BufRead, name: &str) -> Result<Vec<Request>, TraceError> {
    let read_error = |e| match e {
        ReadError::Io(source) => TraceError::Io {
            path: name.into(),
            source,
        },
        e @ (ReadError::NotUtf8 { line } | ReadError::Incomplete { line }) => TraceError::Field {
            path: name.into(),
            line,
            detail: e.to_string(),
        },
    };
    let mut rows = csv_lines::lines(input, b',', None);
    let mut record = StringRecord::new();
    if !next_record(&mut rows, &mut record).map_err(read_error)? {
        return Err(TraceError::Empty { path: name.into() });
    }
    let columns = Columns::find(&record).map_err(|detail| TraceError::Header {
        path: name.into(),
        line: line_of(&record),
        detail,
    })?;
    let mut raw = Vec::new();
    while next_record(&mut rows, &mut record).map_err(read_error)? {
        raw.push(columns.read(&record).map_err(|detail| TraceError::Field {
            path: name.into(),
            line: line_of(&record),
            detail,
        })?);
    }
    if raw.is_empty() {
        return Err(TraceError::Empty { path: name.into() });
    }
    let first = raw.iter().filter_map(|r| r.0).fold(f64::INFINITY, f64::min);
    Ok(raw
        .into_iter()
        .map(|(t, p, o)| Request {
            arrival_s: t.map_or(0.0, |t| t - first),
            prompt_tokens: p,
            output_tokens: o,
        })
        .collect())
}

/// Spaces arrivals evenly at `rate` requests per second (request `i` at `i / rate`), for traces
/// without timestamps and synthetic workloads. `rate` must be positive and finite.
pub fn with_rate(requests: &mut [Request], rate: f64) {
    debug_assert!(rate > 0.0 && rate.is_finite());
    for (i, r) in requests.iter_mut().enumerate() {
        r.arrival_s = i as f64 / rate;
    }
}

struct Columns {
    prompt: usize,
    output: usize,
    time: Option<usize>,
}

impl Columns {
    fn find(header: &StringRecord) -> Result<Self, String> {
        let names: Vec<String> = header
            .iter()
            .map(|h| {
                h.chars()
                    .filter(|c| !matches!(c, '_' | '-' | ' '))
                    .collect::<String>()
                    .to_ascii_lowercase()
            })
            .collect();
        let find = |prefixes: &[&str]| {
            names
                .iter()
                .position(|n| prefixes.iter().any(|p| n.starts_with(p)))
        };
        let prompt = find(&["prompt", "input", "context"]);
        let output = find(&["output", "generated", "completion", "response", "decode"]);
        let time = find(&["timestamp", "time", "arrival"]);
        match (prompt, output) {
            (Some(prompt), Some(output)) => Ok(Columns {
                prompt,
                output,
                time,
            }),
            _ => Err(format!(
                "header {:?} lacks a prompt-token column (ContextTokens, prompt_tokens, input...) \
                 or an output-token column (GeneratedTokens, output_tokens, ...)",
                header.iter().collect::<Vec<_>>().join(",")
            )),
        }
    }

    /// (arrival, prompt tokens, output tokens) of one data row.
    fn read(&self, row: &StringRecord) -> Result<(Option<f64>, u32, u32), String> {
        let cell = |i: usize, what: &str| {
            row.get(i)
                .ok_or_else(|| format!("missing {what} column (#{})", i + 1))
        };
        let tokens = |i: usize, what: &str| -> Result<u32, String> {
            let c = cell(i, what)?;
            c.parse::<u32>()
                .map_err(|_| format!("{what} {c:?} is not a token count"))
        };
        let prompt_tokens = tokens(self.prompt, "prompt tokens")?;
        let output_tokens = tokens(self.output, "output tokens")?;
        let time = match self.time {
            Some(i) => {
                let c = cell(i, "timestamp")?;
                Some(parse_time(c).ok_or_else(|| {
                    format!("timestamp {c:?} is neither YYYY-MM-DD HH:MM:SS.fff nor seconds")
                })?)
            }
            None => None,
        };
        Ok((time, prompt_tokens, output_tokens))
    }
}

/// Seconds since 1970-01-01 of `YYYY-MM-DD HH:MM:SS[.f...]`, or plain seconds.
fn parse_time(s: &str) -> Option<f64> {
    if let Ok(secs) = s.parse::<f64>() {
        return secs.is_finite().then_some(secs);
    }
    let (date, clock) = s.split_once([' ', 'T'])?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (d.next()??, d.next()??, d.next()??);
    let mut c = clock.splitn(3, ':');
    let hour: i64 = c.next()?.parse().ok()?;
    let minute: i64 = c.next()?.parse().ok()?;
    let second: f64 = c.next()?.parse().ok()?;
    // Four-digit years, as the format writes them (a longer one overflows the day count).
    let valid = (0..=9999).contains(&year)
        && (1..=12).contains(&month)
        && (1..=31).contains(&day)
        && (0..24).contains(&hour)
        && (0..60).contains(&minute)
        && (0.0..61.0).contains(&second);
    valid.then(|| {
        (days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60) as f64 + second
    })
}

/// Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_azure_rows_relative_to_the_first_arrival() {
        let text = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                    2023-11-16 23:59:59.5000000,374,44\n\
                    2023-11-17 00:00:01.2500000,396,109\n";
        let r = parse_trace_csv(text, "t.csv").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].arrival_s, 0.0);
        assert!((r[1].arrival_s - 1.75).abs() < 1e-9, "{}", r[1].arrival_s);
        assert_eq!((r[1].prompt_tokens, r[1].output_tokens), (396, 109));
        assert_eq!(r[1].peak_tokens(), 505);
    }

    #[test]
    fn day_numbers_match_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2023, 11, 16), 19_677);
    }

    #[test]
    fn other_headers_in_any_order_without_timestamps() {
        let text = "id,Output_Tokens,prompt_tokens\n1,7,30\n2,0,5\n";
        let r = parse_trace_csv(text, "x").unwrap();
        assert_eq!(r[0].prompt_tokens, 30);
        assert_eq!(r[0].output_tokens, 7);
        assert!(r.iter().all(|q| q.arrival_s == 0.0));
        let mut r = r;
        with_rate(&mut r, 4.0);
        assert_eq!(r[1].arrival_s, 0.25);
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let bad = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6,1,2\n2023-11-16 18:15:47,x,2\n";
        let e = parse_trace_csv(bad, "f.csv").unwrap_err().to_string();
        assert!(e.starts_with("f.csv, line 3:"), "{e}");
        let e = parse_trace_csv("a,b\n1,2\n", "g.csv")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("g.csv, line 1:"), "{e}");
        assert!(matches!(
            parse_trace_csv("prompt,output\n", "h"),
            Err(TraceError::Empty { .. })
        ));
        assert!(matches!(
            parse_trace_csv("", "h"),
            Err(TraceError::Empty { .. })
        ));
        let e = parse_trace_csv("time,prompt,output\n2023-13-01 00:00:00,1,1\n", "k")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("timestamp"), "{e}");
        let e = parse_trace_csv("prompt,output\n5\n", "m")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("missing"), "{e}");
        assert!(matches!(
            read_azure_csv("/nonexistent/trace.csv"),
            Err(TraceError::Io { .. })
        ));
    }

    #[test]
    fn lines_count_blank_lines_crlf_endings_and_quoted_cells() {
        let text = "\r\nprompt_tokens,\"output, tokens\"\r\n\r\n1,\"2\"\r\n  \r\n3,x\r\n";
        let e = parse_trace_csv(text, "c.csv").unwrap_err().to_string();
        assert!(e.starts_with("c.csv, line 6: output tokens \"x\""), "{e}");
        let r = parse_trace_csv(&text.replace('x', "4"), "c.csv").unwrap();
        assert_eq!(
            r.iter().map(|q| q.peak_tokens()).collect::<Vec<_>>(),
            [3, 7]
        );
        let e = parse_trace_csv("\n\nfoo,bar\n1,2\n", "d.csv")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("d.csv, line 3: header \"foo,bar\""), "{e}");
    }

    #[test]
    fn a_file_that_is_not_text_is_an_error_at_its_line() {
        let path = std::env::temp_dir().join(format!("pagedkv-azure-{}.csv", std::process::id()));
        std::fs::write(&path, b"prompt,output\n1,2\n\xff\xfe,3\n").unwrap();
        let e = read_azure_csv(&path).unwrap_err().to_string();
        std::fs::remove_file(&path).unwrap();
        assert!(e.ends_with(".csv, line 3: not UTF-8 text"), "{e}");
    }
}
