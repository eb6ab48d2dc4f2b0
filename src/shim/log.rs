//! `requests.jsonl` (one line per request through the shim) and, when
//! dumping is on, `requests_full.jsonl` (the whole folded body).
//!
//! Lines are appended under a mutex; each is written whole with one
//! `write_all`, so concurrent requests never interleave inside a line.
//! API keys never reach these files: the shim adds the key on the way out
//! and logs only the body.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::wire::{REQUESTS, RequestRecord};

/// What the text-form repair did to this request's answer.
pub fn note_repair(rec: &mut RequestRecord, report: &super::repair::Report) {
    rec.repaired_tool_call = report.repaired_note();
    rec.repaired_calls = report.calls() as u64;
    rec.unparsed_tool_text = report.unparsed_note();
}

/// The log files of one route (a job, or a standalone shim).
#[derive(Debug)]
pub struct RequestLog {
    dir: PathBuf,
    dump: bool,
    files: Mutex<(Option<File>, Option<File>)>,
    /// `/v1/messages` requests recorded so far.
    messages: AtomicU64,
    /// Tokens (prompt, cached and output) of those requests so far.
    tokens: AtomicU64,
    /// The `stop_reason` of the last answered `/v1/messages` request.
    last_stop: Mutex<Option<String>>,
    /// The job's telemetry, when it is on: each `/v1/messages` record is
    /// also its span and metrics ([`crate::otel`]).
    trace: Option<crate::otel::JobTrace>,
}

fn open_append(path: &Path) -> std::io::Result<File> {
    crate::paths::append_private(path)
}

impl RequestLog {
    /// Logs under `dir` (created on first write). `dump`: also write bodies.
    pub fn new(dir: impl Into<PathBuf>, dump: bool) -> Self {
        RequestLog {
            dir: dir.into(),
            dump,
            files: Mutex::new((None, None)),
            messages: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
            last_stop: Mutex::new(None),
            trace: None,
        }
    }

    /// The same log, whose `/v1/messages` records also go to `trace`.
    pub fn traced(mut self, trace: Option<crate::otel::JobTrace>) -> Self {
        self.trace = trace;
        self
    }

    /// The ids of a new `/v1/messages` request's span, when spans are
    /// exported: under the delegate's span if it sent a `traceparent`.
    pub fn span_for(&self, incoming: Option<&str>) -> Option<crate::wire::SpanIds> {
        let t = self.trace.as_ref().filter(|t| t.traces())?;
        Some(t.request(incoming))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn write_line(&self, which: usize, name: &str, line: &[u8]) {
        let Ok(mut files) = self.files.lock() else {
            return;
        };
        let slot = if which == 0 {
            &mut files.0
        } else {
            &mut files.1
        };
        if slot.is_none() {
            let _ = crate::paths::private_dir_all(&self.dir);
            match open_append(&self.dir.join(name)) {
                Ok(f) => *slot = Some(f),
                Err(e) => {
                    tracing::warn!("cannot open {}: {e}", self.dir.join(name).display());
                    return;
                }
            }
        }
        if let Some(f) = slot.as_mut()
            && let Err(e) = f.write_all(line)
        {
            tracing::warn!("cannot write {name}: {e}");
        }
    }

    /// `/v1/messages` requests recorded so far (one per turn).
    pub fn messages(&self) -> u64 {
        self.messages.load(Ordering::Relaxed)
    }

    /// Tokens of the `/v1/messages` requests so far (prompt, cached, output).
    pub fn tokens(&self) -> u64 {
        self.tokens.load(Ordering::Relaxed)
    }

    /// The `stop_reason` of the last answered `/v1/messages` request
    /// (`end_turn`, `tool_use`, `max_tokens`).
    pub fn last_stop_reason(&self) -> Option<String> {
        self.last_stop.lock().ok().and_then(|s| s.clone())
    }

    /// Append one record to `requests.jsonl`.
    pub fn record(&self, rec: &RequestRecord) {
        if rec.path == "/v1/messages"
            && rec.status == 200
            && let Ok(mut s) = self.last_stop.lock()
        {
            s.clone_from(&rec.stop_reason);
        }
        if rec.path == "/v1/messages" {
            self.messages.fetch_add(1, Ordering::Relaxed);
            let u = rec.usage;
            self.tokens.fetch_add(
                u.input
                    .saturating_add(u.cache_read)
                    .saturating_add(u.output),
                Ordering::Relaxed,
            );
        }
        if let Ok(mut line) = serde_json::to_vec(rec) {
            line.push(b'\n');
            self.write_line(0, REQUESTS, &line);
        }
        if rec.path == "/v1/messages"
            && let Some(t) = &self.trace
        {
            t.request_done(rec);
        }
    }

    /// Append a folded body to `requests_full.jsonl` (only when dumping).
    pub fn dump_body(&self, ts: &str, path: &str, body: &[u8]) {
        if !self.dump {
            return;
        }
        let mut line = Vec::with_capacity(body.len() + 64);
        line.extend_from_slice(
            format!("{{\"ts\":\"{ts}\",\"path\":\"{path}\",\"body\":").as_bytes(),
        );
        line.extend_from_slice(body);
        line.extend_from_slice(b"}\n");
        self.write_line(1, "requests_full.jsonl", &line);
    }
}

/// Now, as RFC 3339 UTC with milliseconds.
pub fn now_ts() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
