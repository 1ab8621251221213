//! `--request-log` and `--step-log`: JSON lines as `sim cluster` writes them, each with the
//! replica it comes from, shared by every replica of the server; and the server log's lines.

use crate::sim::cluster::request_line::RequestLine;
use crate::sim::engine::request::Req;
use crate::sim::engine::StepRecord;
use serde::Serialize;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A log file that could not be created.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct LogFileError {
    pub path: String,
    pub source: std::io::Error,
}

/// A JSON-lines file every replica writes to.
#[derive(Clone)]
pub struct LogSink(Arc<Mutex<BufWriter<Box<dyn Write + Send>>>>);

impl LogSink {
    pub fn create(path: &Path) -> Result<LogSink, LogFileError> {
        let f = std::fs::File::create(path).map_err(|source| LogFileError {
            path: path.display().to_string(),
            source,
        })?;
        Ok(LogSink::new(Box::new(f)))
    }

    pub fn new(w: Box<dyn Write + Send>) -> LogSink {
        LogSink(Arc::new(Mutex::new(BufWriter::new(w))))
    }

    pub fn write(&self, line: &impl Serialize) -> std::io::Result<()> {
        let text = serde_json::to_string(line).map_err(std::io::Error::other)?;
        let mut w = self.0.lock().unwrap_or_else(|p| p.into_inner());
        // Flushed line by line: a running server's log can be read as it grows.
        writeln!(w, "{text}")?;
        w.flush()
    }

    /// One line of text (the server log).
    pub fn line(&self, text: &str) -> std::io::Result<()> {
        let mut w = self.0.lock().unwrap_or_else(|p| p.into_inner());
        writeln!(w, "{text}")?;
        w.flush()
    }

    pub fn flush(&self) -> std::io::Result<()> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).flush()
    }
}

/// A step log line: the engine's record and its replica.
#[derive(Serialize)]
pub struct StepLine<'a> {
    pub replica: usize,
    #[serde(flatten)]
    pub record: &'a StepRecord,
}

/// The request log line of a finished request of `replica` (the fields of `sim cluster
/// --request-log`; no route: the client or router in front chose the replica).
pub fn request_line(replica: usize, q: &Req) -> RequestLine {
    RequestLine::served(q, replica, q.arrival)
}

/// Why a request ended before its last token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aborted {
    /// Its client went away.
    ClientGone,
    /// The server stopped (SIGTERM, Ctrl-C).
    Stopped,
}

/// The request log line of a request that ended early: the tokens it had produced,
/// `aborted: true`, and `stopped: true` when the server's stop ended it.
#[derive(Serialize)]
pub struct AbortedLine {
    #[serde(flatten)]
    pub line: RequestLine,
    pub aborted: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,
}

pub fn aborted_line(replica: usize, q: &Req, why: Aborted) -> AbortedLine {
    let mut line = RequestLine::served(q, replica, q.arrival);
    line.output_len = q.num_output;
    AbortedLine {
        line,
        aborted: true,
        stopped: why == Aborted::Stopped,
    }
}
