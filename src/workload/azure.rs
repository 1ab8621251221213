//! The Azure LLM inference trace 2023 (AzurePublicDataset, CC-BY-4.0; Patel et al., "Splitwise",
//! ISCA 2024): CSV rows `TIMESTAMP,ContextTokens,GeneratedTokens`, the timestamp written as
//! `YYYY-MM-DD HH:MM:SS.fffffff`. Arrival times come back in seconds after the first row.

use std::path::Path;
use thiserror::Error;

/// One request of a trace: when it arrives and how many tokens it reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Request {
    /// Seconds after the first request of the trace.
    pub arrival_s: f64,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
}

#[derive(Debug, Error)]
pub enum TraceError {
    #[error("cannot read trace {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("trace {path}, line {line}: {what}")]
    Parse {
        path: String,
        line: usize,
        what: String,
    },
    #[error("trace {0} holds no requests")]
    Empty(String),
}

/// Reads an Azure LLM trace CSV. The header line is required; rows must be in arrival order.
pub fn read_azure_csv(path: impl AsRef<Path>) -> Result<Vec<Request>, TraceError> {
    let path = path.as_ref();
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io {
        path: name.clone(),
        source,
    })?;
    parse_azure_csv(&text, &name)
}

/// Parses the text of an Azure LLM trace CSV; `name` only labels errors.
pub fn parse_azure_csv(text: &str, name: &str) -> Result<Vec<Request>, TraceError> {
    let err = |line: usize, what: String| TraceError::Parse {
        path: name.to_string(),
        line,
        what,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    match lines.next() {
        Some((_, h))
            if h.trim()
                .eq_ignore_ascii_case("TIMESTAMP,ContextTokens,GeneratedTokens") => {}
        Some((i, h)) => {
            return Err(err(
                i + 1,
                format!("expected header TIMESTAMP,ContextTokens,GeneratedTokens, found {h:?}"),
            ))
        }
        None => return Err(TraceError::Empty(name.to_string())),
    }
    let mut out = Vec::new();
    let mut first = None;
    let mut last = f64::NEG_INFINITY;
    for (i, line) in lines {
        let cols: Vec<&str> = line.trim().split(',').collect();
        let [ts, prompt, output] = cols[..] else {
            return Err(err(
                i + 1,
                format!("expected 3 columns, found {}", cols.len()),
            ));
        };
        let t = parse_timestamp(ts.trim())
            .ok_or_else(|| err(i + 1, format!("bad timestamp {ts:?}")))?;
        let count = |s: &str, what: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| err(i + 1, format!("bad {what} {s:?}")))
        };
        let prompt_tokens = count(prompt, "ContextTokens")?;
        let output_tokens = count(output, "GeneratedTokens")?;
        if t < last {
            return Err(err(i + 1, "timestamps go backwards".into()));
        }
        last = t;
        let t0 = *first.get_or_insert(t);
        out.push(Request {
            arrival_s: t - t0,
            prompt_tokens,
            output_tokens,
        });
    }
    if out.is_empty() {
        return Err(TraceError::Empty(name.to_string()));
    }
    Ok(out)
}

/// Seconds since 1970-01-01 of `YYYY-MM-DD HH:MM:SS[.fraction]` (UTC, proleptic Gregorian).
fn parse_timestamp(s: &str) -> Option<f64> {
    let (date, time) = s.split_once(' ')?;
    let mut d = date.split('-');
    let (y, m, day): (i64, i64, i64) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    if d.next().is_some() || !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return None;
    }
    let mut t = time.split(':');
    let (hh, mm): (i64, i64) = (t.next()?.parse().ok()?, t.next()?.parse().ok()?);
    let ss: f64 = t.next()?.parse().ok()?;
    if t.next().is_some()
        || !(0..24).contains(&hh)
        || !(0..60).contains(&mm)
        || !(0.0..61.0).contains(&ss)
    {
        return None;
    }
    Some((days_from_civil(y, m, day) * 86_400 + hh * 3600 + mm * 60) as f64 + ss)
}

/// Days since 1970-01-01 (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rows_relative_to_the_first_and_across_midnight() {
        let text = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                    2023-11-16 23:59:59.5000000,374,44\n\
                    2023-11-17 00:00:01.2500000,396,109\n";
        let r = parse_azure_csv(text, "t").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].arrival_s, r[0].prompt_tokens, r[0].output_tokens),
            (0.0, 374, 44)
        );
        assert!((r[1].arrival_s - 1.75).abs() < 1e-9);
    }

    #[test]
    fn the_epoch_and_a_leap_day_are_where_they_should_be() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(
            days_from_civil(2000, 3, 1) - days_from_civil(2000, 2, 28),
            2
        );
        assert_eq!(days_from_civil(2023, 11, 16), 19_677);
    }

    #[test]
    fn bad_input_is_an_error_with_its_line() {
        let bad = [
            "",
            "a,b,c\n",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,1\n",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-13-16 18:00:00,1,2\n",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,-1,2\n",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:01,1,2\n\
             2023-11-16 18:00:00,1,2\n",
        ];
        for b in bad {
            assert!(parse_azure_csv(b, "t").is_err(), "{b:?}");
        }
        let e = parse_azure_csv(bad[4], "t").unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
    }
}
