//! The CLI's outputs held to recorded ones (tests/data/outputs/): every command of
//! `commands.txt`, its stdout byte for byte (`exact`) or the shape of its JSON (`keys`: every key
//! path with its value's type, for reports whose figures are measured). What a refactor must leave
//! unchanged; a change that means to change an output records it again on purpose:
//!
//! ```sh
//! PAGEDKV_RECORD_OUTPUTS=1 cargo test --test suite outputs_recorded::   # then read the diff
//! ```

use serde_json::Value;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/outputs"))
}

/// Every key path of `v` with its value's type, one a line, in document order (array items
/// merged: a path names `[]` for any index).
fn shape(v: &Value, path: &str, out: &mut Vec<String>) {
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let line = format!("{path}: {kind}");
    if !out.contains(&line) {
        out.push(line);
    }
    match v {
        Value::Array(items) => items
            .iter()
            .for_each(|i| shape(i, &format!("{path}[]"), out)),
        Value::Object(m) => m
            .iter()
            .for_each(|(k, i)| shape(i, &format!("{path}.{k}"), out)),
        _ => {}
    }
}

fn output(mode: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pagedkv"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run pagedkv");
    assert!(
        out.status.success(),
        "pagedkv {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8 output");
    match mode {
        "exact" => text,
        "keys" => {
            let v: Value = serde_json::from_str(&text).expect("JSON");
            let mut lines = Vec::new();
            shape(&v, "", &mut lines);
            lines.join("\n") + "\n"
        }
        other => panic!("commands.txt: unknown mode {other:?}"),
    }
}

#[test]
fn every_recorded_output_is_unchanged() {
    let record = std::env::var_os("PAGEDKV_RECORD_OUTPUTS").is_some();
    let list = std::fs::read_to_string(dir().join("commands.txt")).unwrap();
    let mut changed = Vec::new();
    let mut count = 0;
    for line in list
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (name, mode, args) = (words[0], words[1], &words[2..]);
        let got = output(mode, args);
        let file = dir().join(format!("{name}.out"));
        count += 1;
        if record {
            std::fs::write(&file, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (record with PAGEDKV_RECORD_OUTPUTS=1)",
                file.display()
            )
        });
        if got != want {
            let at = got
                .lines()
                .zip(want.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| got.lines().count().min(want.lines().count()));
            changed.push(format!(
                "{name} (pagedkv {}): line {} now {:?}, recorded {:?}",
                args.join(" "),
                at + 1,
                got.lines().nth(at).unwrap_or("<end>"),
                want.lines().nth(at).unwrap_or("<end>")
            ));
        }
    }
    assert!(count >= 20, "{count} commands");
    assert!(
        changed.is_empty(),
        "{} outputs changed:\n{}",
        changed.len(),
        changed.join("\n")
    );
}
