//! What the labs share: sizes with units, the report with the machine facts beside it, the
//! checks and the exit code.

use crate::cli::{CheckFailed, CmdResult};
use crate::lab::machine::{bytes, MachineFacts};
use crate::lab::{Check, CheckStatus, LabError};
use serde::Serialize;

/// A byte count with an optional binary unit: `4096`, `16K`, `16KiB`, `64M`, `1G`, `1T`.
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: usize = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a size (e.g. 4096, 16K, 64M, 1G)"))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(format!("'{text}': unknown unit (K, M, G or T)")),
    };
    n.checked_mul(1usize << shift)
        .ok_or_else(|| format!("'{text}' is too large"))
}

/// A lab's report with the machine facts beside it, for `--json`.
#[derive(Serialize)]
struct WithFacts<'a, T: Serialize> {
    #[serde(flatten)]
    report: &'a T,
    machine: &'a MachineFacts,
}

/// Prints `report` as JSON (with the facts) or calls `text`, then the verdict of `checks`.
pub fn emit<T: Serialize>(
    json: bool,
    report: &T,
    facts: &MachineFacts,
    checks: &[Check],
    text: impl FnOnce() -> Result<(), crate::cli::stdout::StdoutFailed>,
) -> CmdResult {
    if json {
        let out = WithFacts {
            report,
            machine: facts,
        };
        outln!("{}", serde_json::to_string_pretty(&out)?)?;
    } else {
        outln!("machine: {}", facts.summary())?;
        text()?;
        print_checks(checks)?;
    }
    verdict(checks)
}

fn print_checks(checks: &[Check]) -> Result<(), crate::cli::stdout::StdoutFailed> {
    outln!("checks:")?;
    for c in checks {
        let tag = match c.status {
            CheckStatus::Holds => "holds",
            CheckStatus::Contradicted => "CONTRADICTED",
            CheckStatus::Skipped => "skipped",
        };
        outln!("  [{tag}] {}: {}", c.expectation, c.detail)?;
    }
    Ok(())
}

/// Exit 1 (`CheckFailed`) when a measurement contradicts what the machine claims.
fn verdict(checks: &[Check]) -> CmdResult {
    let bad: Vec<&str> = checks
        .iter()
        .filter(|c| c.contradicted())
        .map(|c| c.expectation.as_str())
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(Box::new(CheckFailed(format!(
            "measurement contradicts the machine: {}",
            bad.join("; ")
        ))))
    }
}

/// A lab that cannot run here is reported as skipped, with the reason, and exits 0; any other
/// error goes on (exit 2).
pub fn skipped_or<T>(
    lab: &str,
    json: bool,
    result: Result<T, LabError>,
) -> Result<Option<T>, Box<dyn std::error::Error>> {
    match result {
        Ok(r) => Ok(Some(r)),
        Err(LabError::Unavailable(reason)) => {
            if json {
                let v = serde_json::json!({ "lab": lab, "skipped": true, "reason": reason });
                outln!("{}", serde_json::to_string_pretty(&v)?)?;
            } else {
                outln!("lab {lab}: skipped: {reason}")?;
            }
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// `1.5 MiB`, or `-` for none.
pub fn show_bytes(n: Option<u64>) -> String {
    n.map_or("-".to_string(), bytes)
}

/// A number with `digits` decimals, or `-` for none or NaN.
pub fn num(x: Option<f64>, digits: usize) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:.digits$}"),
        _ => "-".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn sizes_with_units() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("16K"), Ok(16 << 10));
        assert_eq!(parse_bytes("16KiB"), Ok(16 << 10));
        assert_eq!(parse_bytes("64m"), Ok(64 << 20));
        assert_eq!(parse_bytes("1G"), Ok(1 << 30));
        assert_eq!(parse_bytes("2T"), Ok(2 << 40));
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("12Q").is_err());
        assert!(parse_bytes("-1").is_err());
        assert!(parse_bytes("99999999999999999999T").is_err());
        assert!(parse_bytes("1.5G").is_err());
    }
}
