//! CSV read with the `csv` crate, one record per line, each at its true line. The crate skips
//! empty and comment lines but then reports the next record at the line where the skipping
//! began, and counts CRLF endings oddly; so [`lines`] hands it a stream in which every line is a
//! record (blank and comment lines become a single space, CRs before newlines are dropped), and
//! [`next_record`] passes over the blank ones. Fields are trimmed; any number per line. A byte-order
//! mark is skipped and a last line without a newline refused ([`super::text_input`]).

use csv::StringRecord;
use std::io::{self, BufRead, Read};
use thiserror::Error;

/// A csv reader over `input`; lines whose first non-space byte is `comment` count as blank.
pub fn lines<R: BufRead>(
    input: R,
    delimiter: u8,
    comment: Option<u8>,
) -> csv::Reader<EveryLine<R>> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .delimiter(delimiter)
        .from_reader(EveryLine {
            input,
            comment,
            line: Vec::new(),
            served: 0,
            lines: 0,
            unterminated: None,
        })
}

#[derive(Debug, Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(io::Error),
    #[error("not UTF-8 text")]
    NotUtf8 { line: u64 },
    #[error("{}", super::text_input::INCOMPLETE)]
    Incomplete { line: u64 },
}

/// Reads the next record that is not a blank (or comment) line into `record`; false at the end.
pub fn next_record<R: BufRead>(
    rows: &mut csv::Reader<EveryLine<R>>,
    record: &mut StringRecord,
) -> Result<bool, ReadError> {
    loop {
        match rows.read_record(record) {
            Ok(false) => {
                return match rows.get_ref().unterminated {
                    Some(line) => Err(ReadError::Incomplete { line }),
                    None => Ok(false),
                }
            }
            Ok(true) if record.len() == 1 && record[0].is_empty() => {}
            Ok(true) => return Ok(true),
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line());
                return Err(match e.into_kind() {
                    csv::ErrorKind::Io(e) => ReadError::Io(e),
                    // A flexible reader of text records fails in no other way.
                    _ => ReadError::NotUtf8 { line },
                });
            }
        }
    }
}

/// The line a record read by [`next_record`] stands on (1-based).
pub fn line_of(record: &StringRecord) -> u64 {
    record.position().map_or(0, |p| p.line())
}

/// The input, line by line, rewritten as the module docs say.
pub struct EveryLine<R> {
    input: R,
    comment: Option<u8>,
    line: Vec<u8>,
    served: usize,
    /// Lines read so far.
    lines: u64,
    /// The last line, if it ended without a newline.
    unterminated: Option<u64>,
}

impl<R: BufRead> Read for EveryLine<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.served == self.line.len() {
            self.line.clear();
            self.served = 0;
            if self.lines == 0 {
                super::text_input::skip_bom(&mut self.input)?;
            }
            if self.input.read_until(b'\n', &mut self.line)? == 0 {
                return Ok(0);
            }
            self.lines += 1;
            if !self.line.ends_with(b"\n") {
                self.unterminated = Some(self.lines);
            }
            let text = self.line.trim_ascii();
            if text.is_empty() || text.first() == self.comment.as_ref() {
                self.line.clear();
                self.line.extend_from_slice(b" \n");
            } else if self.line.ends_with(b"\r\n") {
                self.line.truncate(self.line.len() - 2);
                self.line.push(b'\n');
            }
        }
        let n = buf.len().min(self.line.len() - self.served);
        buf[..n].copy_from_slice(&self.line[self.served..self.served + n]);
        self.served += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (line, fields) of every record [`next_record`] returns.
    fn records(text: &[u8], comment: Option<u8>) -> Vec<(u64, Vec<String>)> {
        let mut rows = lines(text, b',', comment);
        let mut record = StringRecord::new();
        let mut out = Vec::new();
        while next_record(&mut rows, &mut record).unwrap() {
            out.push((line_of(&record), record.iter().map(String::from).collect()));
        }
        out
    }

    fn row(line: u64, fields: &[&str]) -> (u64, Vec<String>) {
        (line, fields.iter().map(|f| f.to_string()).collect())
    }

    #[test]
    fn records_keep_their_lines_past_blank_crlf_and_comment_lines() {
        let text = b"\xef\xbb\xbfa,b\n\n  \r\nc, d \r\n\r\n # x,\"y\n\"e,f\",g\nh\n";
        assert_eq!(
            records(text, Some(b'#')),
            [
                row(1, &["a", "b"]),
                row(4, &["c", "d"]),
                row(7, &["e,f", "g"]),
                row(8, &["h"])
            ]
        );
        // Without a comment byte, `#` is data.
        assert_eq!(records(b"\n#a\n", None), [row(2, &["#a"])]);
        assert!(records(b"\n \r\n", None).is_empty());
    }

    #[test]
    fn a_last_line_without_its_newline_is_an_error_at_its_line() {
        let mut rows = lines(&b"a,1\n\nb,37"[..], b',', None);
        let mut record = StringRecord::new();
        assert!(next_record(&mut rows, &mut record).unwrap());
        assert!(next_record(&mut rows, &mut record).unwrap());
        assert_eq!(&record[1], "37");
        assert!(matches!(
            next_record(&mut rows, &mut record),
            Err(ReadError::Incomplete { line: 3 })
        ));
    }

    #[test]
    fn text_that_is_not_utf8_is_an_error_at_its_line() {
        let mut rows = lines(&b"a\n\n\xff,1\n"[..], b',', None);
        let mut record = StringRecord::new();
        assert!(next_record(&mut rows, &mut record).unwrap());
        assert!(matches!(
            next_record(&mut rows, &mut record),
            Err(ReadError::NotUtf8 { line: 3 })
        ));
    }
}
