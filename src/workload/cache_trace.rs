//! Readers for libCacheSim's trace formats, so public cache traces can be replayed:
//!
//! - `oracleGeneral` binary: little-endian records of 24 bytes,
//!   `{ u32 clock_time; u64 obj_id; u32 obj_size; i64 next_access_vtime; }`, no header.
//! - `txt`: one object id per line; empty lines are skipped.
//! - `csv`: one request per line; the object id is in column `obj-id-col` (1-based). As in
//!   libCacheSim, the delimiter (tab, comma, `|` or `:`) and the presence of a header line are
//!   detected from the first line unless given, with the same `-t`-style parameter string:
//!   `"obj-id-col=2, delimiter=,, has-header=true, obj-id-is-num=false"`. The lines themselves
//!   are read by the `csv` crate ([`super::csv_lines`]): quoted fields may hold the delimiter.
//!
//! Ids are numbers (decimal or `0x` hex) unless `obj-id-is-num=false`, which takes them as text.
//! Objects are unit-sized here: sizes, times, operations and oracle next-access times are read past.
//! Every id is renumbered densely by first appearance ([`DenseKeys`], [`DenseIds`]).
//! [`write_oracle`] writes a key trace back out as oracleGeneral, for libCacheSim to replay.

use super::csv_lines::{self, line_of, next_record, ReadError};
use super::dense_keys::{DenseIds, DenseKeys};
use super::keys::{KeyTrace, KeyTraceError};
use csv::StringRecord;
use std::fs::File;
use std::io::{BufRead, BufReader, Cursor, Read, Write};
use std::path::Path;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TraceFormat {
    Csv,
    Txt,
    #[value(alias = "oracleGeneral")]
    Oracle,
}

impl TraceFormat {
    /// Guesses from the file name: `.csv`, `.txt`, and `oracleGeneral` or `.bin` for the binary.
    pub fn from_path(path: &Path) -> Result<Self, KeyTraceError> {
        let name = path.to_string_lossy();
        let ext = path.extension().map(|e| e.to_string_lossy().to_lowercase());
        match ext.as_deref() {
            Some("csv") => Ok(TraceFormat::Csv),
            Some("txt") => Ok(TraceFormat::Txt),
            Some("bin") | Some("oraclegeneral") => Ok(TraceFormat::Oracle),
            _ if name.contains("oracleGeneral") && !name.ends_with(".zst") => {
                Ok(TraceFormat::Oracle)
            }
            _ => Err(KeyTraceError::FormatNotGiven(name.into())),
        }
    }
}

/// libCacheSim's trace parameters (its `-t` option) that matter for unit-sized requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParams {
    /// 1-based column of the object id in a csv; `None` = from the header, or the only column.
    pub obj_id_col: Option<usize>,
    /// `None` = detect from the first line.
    pub delimiter: Option<u8>,
    /// `None` = detect from the first line.
    pub has_header: Option<bool>,
    pub obj_id_is_num: bool,
}

impl Default for TraceParams {
    fn default() -> Self {
        TraceParams {
            obj_id_col: None,
            delimiter: None,
            has_header: None,
            obj_id_is_num: true,
        }
    }
}

/// Options of every reader.
#[derive(Debug, Clone, Default)]
pub struct TraceReadOptions {
    pub params: TraceParams,
}

fn parse_bool(key: &str, v: &str) -> Result<bool, KeyTraceError> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(KeyTraceError::CsvParams(format!(
            "{key}={v:?} is not true or false"
        ))),
    }
}

impl FromStr for TraceParams {
    type Err = KeyTraceError;

    /// Pairs `key=value` separated by `,` or `;`. A comma delimiter is written `delimiter=,` (so the
    /// pair is followed by a second comma), tab as `delimiter=\t`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut p = TraceParams::default();
        let mut rest = s.trim_start();
        let bad = |m: String| KeyTraceError::CsvParams(m);
        while !rest.is_empty() {
            let eq = rest
                .find('=')
                .ok_or_else(|| bad(format!("{rest:?} is not key=value")))?;
            let key = rest[..eq].trim().to_ascii_lowercase();
            let after = &rest[eq + 1..];
            let (value, tail) = if key == "delimiter" {
                let len = if after.starts_with("\\t") {
                    2
                } else {
                    after.chars().next().map_or(0, char::len_utf8)
                };
                (&after[..len], &after[len..])
            } else {
                let end = after.find([',', ';']).unwrap_or(after.len());
                (after[..end].trim(), &after[end..])
            };
            match key.as_str() {
                "obj-id-col" => {
                    let col: usize =
                        value.parse().ok().filter(|&c| c >= 1).ok_or_else(|| {
                            bad(format!("obj-id-col={value:?} is not a column >= 1"))
                        })?;
                    p.obj_id_col = Some(col);
                }
                "delimiter" => {
                    p.delimiter = Some(match value {
                        "\\t" => b'\t',
                        v if v.len() == 1 => v.as_bytes()[0],
                        v => return Err(bad(format!("delimiter={v:?} is not one character"))),
                    })
                }
                "has-header" => p.has_header = Some(parse_bool(&key, value)?),
                "obj-id-is-num" => p.obj_id_is_num = parse_bool(&key, value)?,
                // Read past: requests are unit-sized and untimed here.
                "time-col" | "obj-size-col" | "op-col" | "ttl-col" | "cnt-col" | "tenant-col" => {}
                _ => return Err(bad(format!("unknown parameter {key:?}"))),
            }
            let tail = tail.trim_start();
            rest = tail.strip_prefix([',', ';']).unwrap_or(tail).trim_start();
        }
        Ok(p)
    }
}

/// Reads at most `limit` requests of a trace file.
pub fn read_key_trace(
    path: &Path,
    format: TraceFormat,
    opts: &TraceReadOptions,
    limit: usize,
) -> Result<KeyTrace, KeyTraceError> {
    let name = path.display().to_string();
    let io = |source| KeyTraceError::Io {
        path: name.clone(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let trace = match format {
        TraceFormat::Oracle => {
            let len = file.metadata().map_err(io)?.len();
            if len % 24 != 0 {
                return Err(KeyTraceError::PartialRecord { path: name, len });
            }
            read_oracle(file, &name, limit)?
        }
        TraceFormat::Txt => read_txt(BufReader::new(file), &name, &opts.params, limit)?,
        TraceFormat::Csv => read_csv(BufReader::new(file), &name, &opts.params, limit)?,
    };
    if trace.is_empty() {
        return Err(KeyTraceError::EmptyTrace(name));
    }
    Ok(trace)
}

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Bytes of one oracleGeneral record.
const RECORD: usize = 24;

/// oracleGeneral records: `obj_id` is the u64 at byte offset 4 of each 24-byte record. Read in
/// blocks of whole records, not record by record.
pub fn read_oracle(mut r: impl Read, name: &str, limit: usize) -> Result<KeyTrace, KeyTraceError> {
    let mut ids = DenseIds::new();
    let mut keys = Vec::new();
    let mut buf = vec![0u8; RECORD << 14];
    let (mut filled, mut total) = (0, 0u64);
    while keys.len() < limit {
        let got = read_full(&mut r, &mut buf[filled..]).map_err(|source| KeyTraceError::Io {
            path: name.into(),
            source,
        })?;
        let at_end = filled + got < buf.len();
        filled += got;
        total += got as u64;
        let whole = filled / RECORD * RECORD;
        if keys.is_empty() && filled >= 4 && buf[..4] == ZSTD_MAGIC {
            return Err(KeyTraceError::Parse {
                path: name.into(),
                line: 1,
                msg: "zstd-compressed; decompress it first (zstd -d)".into(),
            });
        }
        for rec in buf[..whole].chunks_exact(RECORD).take(limit - keys.len()) {
            let id = u64::from_le_bytes(rec[4..12].try_into().expect("8 bytes"));
            keys.push(ids.key(id)?);
        }
        if at_end {
            if filled != whole && keys.len() < limit {
                return Err(KeyTraceError::PartialRecord {
                    path: name.into(),
                    len: total,
                });
            }
            break;
        }
        buf.copy_within(whole..filled, 0);
        filled -= whole;
    }
    KeyTrace::new(keys, ids.len())
}

/// Fills `buf` unless the stream ends first; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Writes requests for `keys` as oracleGeneral records: the request's index as its time, the key
/// as the object id, size 1, and `next_use[t]` (the index of the key's next request, `u64::MAX`
/// for none, as [`crate::sim::cache::next_uses`] gives it) as the next access, -1 for none as
/// libCacheSim writes it.
pub fn write_oracle(mut w: impl Write, keys: &[u32], next_use: &[u64]) -> std::io::Result<()> {
    assert_eq!(keys.len(), next_use.len(), "one next use per request");
    let mut rec = [0u8; RECORD];
    for (t, (&key, &next)) in keys.iter().zip(next_use).enumerate() {
        let next = if next == u64::MAX { -1 } else { next as i64 };
        rec[..4].copy_from_slice(&(t as u32).to_le_bytes());
        rec[4..12].copy_from_slice(&u64::from(key).to_le_bytes());
        rec[12..16].copy_from_slice(&1u32.to_le_bytes());
        rec[16..].copy_from_slice(&next.to_le_bytes());
        w.write_all(&rec)?;
    }
    w.flush()
}

/// Numbers ids as numbers or as text.
enum Ids {
    Num(DenseIds),
    Text(DenseKeys<String>),
}

impl Ids {
    fn new(is_num: bool) -> Self {
        if is_num {
            Ids::Num(DenseIds::new())
        } else {
            Ids::Text(DenseKeys::new())
        }
    }

    fn key(&mut self, field: &str) -> Result<u32, String> {
        match self {
            Ids::Num(d) => {
                let id = parse_num_id(field).ok_or_else(|| {
                    format!(
                        "object id {field:?} is not a number (obj-id-is-num=false takes ids as text)"
                    )
                })?;
                d.key(id).map_err(|e| e.to_string())
            }
            Ids::Text(d) => d.key(field.to_string()).map_err(|e| e.to_string()),
        }
    }

    fn len(&self) -> u32 {
        match self {
            Ids::Num(d) => d.len(),
            Ids::Text(d) => d.len(),
        }
    }
}

/// Decimal or `0x` hexadecimal.
fn parse_num_id(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Calls `f(line_number, line)` for each non-blank line (without its line ending).
fn for_each_line(
    mut r: impl BufRead,
    name: &str,
    mut f: impl FnMut(u64, &str) -> Result<bool, KeyTraceError>,
) -> Result<(), KeyTraceError> {
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    loop {
        buf.clear();
        let n = r
            .read_until(b'\n', &mut buf)
            .map_err(|source| KeyTraceError::Io {
                path: name.into(),
                source,
            })?;
        if n == 0 {
            return Ok(());
        }
        line_no += 1;
        let line = std::str::from_utf8(&buf).map_err(|_| KeyTraceError::Parse {
            path: name.into(),
            line: line_no,
            msg: "not UTF-8 text (a binary trace needs --format oracle)".into(),
        })?;
        let line = line.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            continue;
        }
        if !f(line_no, line)? {
            return Ok(());
        }
    }
}

pub fn read_txt(
    r: impl BufRead,
    name: &str,
    params: &TraceParams,
    limit: usize,
) -> Result<KeyTrace, KeyTraceError> {
    let mut ids = Ids::new(params.obj_id_is_num);
    let mut keys = Vec::new();
    for_each_line(r, name, |line_no, line| {
        let key = ids.key(line.trim()).map_err(|msg| KeyTraceError::Parse {
            path: name.into(),
            line: line_no,
            msg,
        })?;
        keys.push(key);
        Ok(keys.len() < limit)
    })?;
    KeyTrace::new(keys, ids.len())
}

/// libCacheSim's guess: the most frequent of tab, comma, `|`, `:` (weighted toward the earlier).
fn detect_delimiter(first: &str) -> Option<u8> {
    let candidates = [b'\t', b',', b'|', b':'];
    let mut best = (0usize, None);
    for (i, &c) in candidates.iter().enumerate() {
        let score = first.bytes().filter(|&b| b == c).count() * (candidates.len() - i);
        if score > best.0 {
            best = (score, Some(c));
        }
    }
    best.1
}

/// libCacheSim's guess: a header unless the line has more digits than letters.
fn detect_header(first: &str) -> bool {
    let digits = first.bytes().filter(u8::is_ascii_digit).count();
    let letters = first.bytes().filter(u8::is_ascii_alphabetic).count();
    digits <= letters
}

/// The delimiter when the first line has none of libCacheSim's: the whole line is the id (a NUL
/// does not occur in a text trace).
const NO_DELIMITER: u8 = 0;

const ID_COLUMN_NAMES: [&str; 7] = ["obj_id", "obj-id", "objid", "object_id", "key", "id", "obj"];

pub fn read_csv(
    mut r: impl BufRead,
    name: &str,
    params: &TraceParams,
    limit: usize,
) -> Result<KeyTrace, KeyTraceError> {
    let io = |source| KeyTraceError::Io {
        path: name.into(),
        source,
    };
    let perr = |line, msg: String| KeyTraceError::Parse {
        path: name.into(),
        line,
        msg,
    };
    // The first non-blank line decides the delimiter and the header; it is read again as csv.
    let mut head = Vec::new();
    let first = loop {
        let start = head.len();
        if r.read_until(b'\n', &mut head).map_err(io)? == 0 {
            return Ok(KeyTrace::from_keys(Vec::new()));
        }
        let line = String::from_utf8_lossy(&head[start..]);
        if !line.trim().is_empty() {
            break line.trim_end_matches(['\n', '\r']).to_string();
        }
    };
    let delim = params.delimiter.or_else(|| detect_delimiter(&first));
    let has_header = params.has_header.unwrap_or_else(|| detect_header(&first));
    let mut rows = csv_lines::lines(
        Cursor::new(head).chain(r),
        delim.unwrap_or(NO_DELIMITER),
        None,
    );
    let mut record = StringRecord::new();
    let mut next = |record: &mut StringRecord| {
        next_record(&mut rows, record).map_err(|e| match e {
            ReadError::Io(source) => io(source),
            e @ ReadError::NotUtf8 { line } => {
                perr(line, format!("{e} (a binary trace needs --format oracle)"))
            }
        })
    };
    if !next(&mut record)? {
        return Ok(KeyTrace::from_keys(Vec::new()));
    }
    let col = match params.obj_id_col {
        Some(c) => c,
        None if has_header => {
            let lower: Vec<String> = record.iter().map(str::to_lowercase).collect();
            ID_COLUMN_NAMES
                .iter()
                .find_map(|n| lower.iter().position(|f| f == n))
                .map(|i| i + 1)
                .ok_or_else(|| {
                    perr(
                        line_of(&record),
                        format!(
                            "no object-id column among {:?}; pass obj-id-col=N in --trace-params",
                            record.iter().collect::<Vec<_>>()
                        ),
                    )
                })?
        }
        None if record.len() == 1 => 1,
        None => {
            return Err(perr(
                line_of(&record),
                format!(
                    "{} columns and no header: pass obj-id-col=N in --trace-params",
                    record.len()
                ),
            ))
        }
    };
    let mut ids = Ids::new(params.obj_id_is_num);
    let mut keys = Vec::new();
    let mut more = if has_header { next(&mut record)? } else { true };
    while more {
        let line = line_of(&record);
        let field = record.get(col - 1).ok_or_else(|| {
            perr(
                line,
                format!(
                    "{} columns, object id expected in column {col}",
                    record.len()
                ),
            )
        })?;
        keys.push(ids.key(field).map_err(|m| perr(line, m))?);
        more = keys.len() < limit && next(&mut record)?;
    }
    KeyTrace::new(keys, ids.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csv(text: &str, params: &str) -> Result<KeyTrace, KeyTraceError> {
        read_csv(
            text.as_bytes(),
            "t.csv",
            &params.parse().unwrap(),
            usize::MAX,
        )
    }

    #[test]
    fn parses_libcachesim_parameter_strings() {
        let p: TraceParams = "time-col=2, obj-id-col=5, obj-size-col=4, obj-id-is-num=true, delimiter=,, has-header=true"
            .parse()
            .unwrap();
        assert_eq!(
            p,
            TraceParams {
                obj_id_col: Some(5),
                delimiter: Some(b','),
                has_header: Some(true),
                obj_id_is_num: true
            }
        );
        let p: TraceParams = "obj-id-col=2;delimiter=\\t;has-header=false"
            .parse()
            .unwrap();
        assert_eq!((p.delimiter, p.has_header), (Some(b'\t'), Some(false)));
        assert!("obj-id-col=0".parse::<TraceParams>().is_err());
        assert!("colour=red".parse::<TraceParams>().is_err());
        assert!("obj-id-col".parse::<TraceParams>().is_err());
        assert!("has-header=maybe".parse::<TraceParams>().is_err());
        assert_eq!("".parse::<TraceParams>().unwrap(), TraceParams::default());
    }

    #[test]
    fn csv_detects_delimiter_and_header_and_finds_the_id_column() {
        let t = csv("timestamp,obj_id,size\n1,100,5\n2,200,5\n3,100,5\n", "").unwrap();
        assert_eq!((t.keys(), t.key_space()), (&[0u32, 1, 0][..], 2));
        let t = csv("1\t100\n2\t200\n\n3\t100\n", "obj-id-col=2").unwrap();
        assert_eq!(t.keys(), &[0, 1, 0]);
        let t = csv("7\n8\n7\n", "").unwrap();
        assert_eq!(t.keys(), &[0, 1, 0]);
        let t = csv(
            "a|\"x|y\"\nb|z\nc|\"x|y\"\n",
            "obj-id-col=2, obj-id-is-num=false, has-header=false",
        )
        .unwrap();
        assert_eq!(t.keys(), &[0, 1, 0]);
    }

    #[test]
    fn csv_errors_name_the_line() {
        let e = csv("1,2\n3,4\n", "").unwrap_err().to_string();
        assert!(e.contains("obj-id-col"), "{e}");
        let e = csv("1,2\n3\n", "obj-id-col=2").unwrap_err().to_string();
        assert!(e.contains("t.csv:2"), "{e}");
        let e = csv("1,2\n3,abc\n", "obj-id-col=2, has-header=false")
            .unwrap_err()
            .to_string();
        assert!(e.contains("t.csv:2") && e.contains("not a number"), "{e}");
    }

    #[test]
    fn txt_reads_numbers_hex_and_text() {
        let p = TraceParams::default();
        let t = read_txt("5\n0x5\n\n6\r\n".as_bytes(), "t", &p, usize::MAX).unwrap();
        assert_eq!(t.keys(), &[0, 0, 1]);
        assert!(read_txt("5\nfive\n".as_bytes(), "t", &p, usize::MAX).is_err());
        let text = TraceParams {
            obj_id_is_num: false,
            ..p
        };
        let t = read_txt("five\nsix\nfive\n".as_bytes(), "t", &text, 2).unwrap();
        assert_eq!(t.keys(), &[0, 1]);
    }

    #[test]
    fn guesses_formats_from_names() {
        let f = |s: &str| TraceFormat::from_path(Path::new(s)).ok();
        assert_eq!(f("a.csv"), Some(TraceFormat::Csv));
        assert_eq!(f("a.txt"), Some(TraceFormat::Txt));
        assert_eq!(f("w.oracleGeneral.bin"), Some(TraceFormat::Oracle));
        assert_eq!(f("cluster52.oracleGeneral"), Some(TraceFormat::Oracle));
        assert_eq!(f("x.oracleGeneral.zst"), None);
        assert_eq!(f("trace"), None);
    }
}
