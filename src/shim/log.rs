//! `requests.jsonl` (one line per request through the shim) and, when
//! dumping is on, `requests_full.jsonl` (the whole folded body).
//!
//! A conversation is sent whole on every turn and only grows at its end,
//! so the dump keeps a body once: each later body of the same path is
//! written as what it shares with the one before (the bytes at its start
//! and at its end) and the bytes between. A long job's dump grows with
//! what the conversation added, not with its length times its turns;
//! [`dump_bodies`] gives every body back whole.
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
    /// The last body dumped per path, for the next one's delta.
    last_body: Mutex<std::collections::HashMap<String, Vec<u8>>>,
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
            last_body: Mutex::new(Default::default()),
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

    /// Append a folded body to `requests_full.jsonl` (only when dumping):
    /// whole, or as its difference from the path's last body when they
    /// share at least half of it.
    pub fn dump_body(&self, ts: &str, path: &str, body: &[u8]) {
        if !self.dump {
            return;
        }
        // Held until the line is written: two requests dumped at once put
        // their lines in the order their differences were taken, which is
        // the order `dump_bodies` reads them back in.
        let mut last = self.last_body.lock().ok();
        let delta = last.as_mut().and_then(|last| {
            let d = last.get(path).and_then(|prev| Delta::of(prev, body));
            last.insert(path.to_string(), body.to_vec());
            d
        });
        let mut line = match delta {
            Some(d) => serde_json::to_vec(&DumpLine {
                ts: ts.to_string(),
                path: path.to_string(),
                body: None,
                same: Some(Same {
                    prefix: d.prefix,
                    suffix: d.suffix,
                }),
                middle: Some(d.middle),
            })
            .unwrap_or_default(),
            None => {
                let mut l = Vec::with_capacity(body.len() + 64);
                l.extend_from_slice(
                    format!("{{\"ts\":\"{ts}\",\"path\":\"{path}\",\"body\":").as_bytes(),
                );
                l.extend_from_slice(body);
                l.push(b'}');
                l
            }
        };
        line.push(b'\n');
        self.write_line(1, "requests_full.jsonl", &line);
        drop(last);
    }
}

/// A line of `requests_full.jsonl`: a whole `body`, or `same` and
/// `middle` over the path's body before it.
#[derive(serde::Serialize, serde::Deserialize)]
struct DumpLine {
    #[serde(default)]
    ts: String,
    #[serde(default)]
    path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body: Option<Box<serde_json::value::RawValue>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    same: Option<Same>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    middle: Option<String>,
}

/// Bytes a body shares with the one before: at its start and at its end.
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy)]
struct Same {
    prefix: usize,
    suffix: usize,
}

/// A body as the one before it with its middle replaced.
struct Delta {
    prefix: usize,
    suffix: usize,
    middle: String,
}

impl Delta {
    /// The difference of `body` from `prev`, when they share at least half
    /// of `body` and the cut falls between characters.
    fn of(prev: &[u8], body: &[u8]) -> Option<Delta> {
        let mut prefix = prev.iter().zip(body).take_while(|(a, b)| a == b).count();
        let room = prev.len().min(body.len()) - prefix;
        let mut suffix = prev
            .iter()
            .rev()
            .zip(body.iter().rev())
            .take(room)
            .take_while(|(a, b)| a == b)
            .count();
        let text = std::str::from_utf8(body).ok()?;
        while !text.is_char_boundary(prefix) {
            prefix -= 1;
        }
        while !text.is_char_boundary(body.len() - suffix) {
            suffix -= 1;
        }
        if (prefix + suffix) * 2 < body.len() {
            return None;
        }
        Some(Delta {
            prefix,
            suffix,
            middle: text[prefix..body.len() - suffix].to_string(),
        })
    }
}

/// A body of a dump, whole again.
#[derive(Debug, Clone, PartialEq)]
pub struct DumpedBody {
    pub ts: String,
    pub path: String,
    pub body: Vec<u8>,
}

/// Every body of a `requests_full.jsonl`, whole, in order. A line that
/// does not read, or a delta whose body before it is missing, is skipped.
pub fn dump_bodies(bytes: &[u8]) -> Vec<DumpedBody> {
    let mut last: std::collections::HashMap<String, Vec<u8>> = Default::default();
    let mut out = Vec::new();
    for l in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let Ok(d) = serde_json::from_slice::<DumpLine>(l) else {
            continue;
        };
        let body = match (d.body, d.same, d.middle) {
            (Some(b), _, _) => b.get().as_bytes().to_vec(),
            (None, Some(s), Some(m)) => {
                let Some(prev) = last.get(&d.path) else { continue };
                let Some(end) = prev.len().checked_sub(s.suffix).filter(|e| *e >= s.prefix) else {
                    continue;
                };
                let mut b = Vec::with_capacity(s.prefix + m.len() + s.suffix);
                b.extend_from_slice(&prev[..s.prefix]);
                b.extend_from_slice(m.as_bytes());
                b.extend_from_slice(&prev[end..]);
                b
            }
            _ => continue,
        };
        last.insert(d.path.clone(), body.clone());
        out.push(DumpedBody {
            ts: d.ts,
            path: d.path,
            body,
        });
    }
    out
}

/// Now, as RFC 3339 UTC with milliseconds.
pub fn now_ts() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dump_keeps_a_growing_body_once_and_gives_every_body_back() {
        let dir = tempfile::tempdir().unwrap();
        let log = RequestLog::new(dir.path(), true);
        let mut sent = Vec::new();
        let mut msgs = Vec::new();
        for i in 0..200 {
            msgs.push(format!("{{\"role\":\"user\",\"content\":\"turn {i} é {}\"}}", "x".repeat(300)));
            let tools = ",\"tool\"".repeat(2000);
            let body = format!(
                "{{\"model\":\"m\",\"messages\":[{}],\"tools\":[\"t\"{tools}]}}",
                msgs.join(",")
            );
            log.dump_body("2026-12-06T00:00:00.000Z", "/v1/messages", body.as_bytes());
            sent.push(body.into_bytes());
        }
        let bytes = std::fs::read(dir.path().join("requests_full.jsonl")).unwrap();
        let whole: usize = sent.iter().map(Vec::len).sum();
        let largest = sent.last().unwrap().len();
        assert!(
            bytes.len() < largest + 200 * 1024,
            "{} bytes for bodies of {whole} in all",
            bytes.len()
        );
        let back = dump_bodies(&bytes);
        assert_eq!(back.len(), 200);
        for (b, s) in back.iter().zip(&sent) {
            assert_eq!(&b.body, s);
        }
    }

    /// Two requests dumped at once (a job's main turn and a side request
    /// of Claude Code's) each give their body back whole: a line is in
    /// the file in the order its difference was taken.
    #[test]
    fn bodies_dumped_at_once_from_two_threads_each_read_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let log = std::sync::Arc::new(RequestLog::new(dir.path(), true));
        let body = |who: &str, i: usize| {
            let tools = ",\"tool\"".repeat(500);
            let turns: Vec<String> = (0..=i).map(|t| format!("\"{who} {t}\"")).collect();
            format!("{{\"messages\":[{}],\"tools\":[\"t\"{tools}]}}", turns.join(","))
        };
        let threads: Vec<_> = ["alpha", "beta"]
            .into_iter()
            .map(|who| {
                let log = log.clone();
                std::thread::spawn(move || {
                    for i in 0..400 {
                        log.dump_body("2026-12-06T00:00:00.000Z", "/v1/messages", body(who, i).as_bytes());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let sent: std::collections::HashSet<Vec<u8>> = ["alpha", "beta"]
            .into_iter()
            .flat_map(|who| (0..400).map(move |i| body(who, i).into_bytes()))
            .collect();
        let back = dump_bodies(&std::fs::read(dir.path().join("requests_full.jsonl")).unwrap());
        assert_eq!(back.len(), 800);
        let wrong = back.iter().filter(|b| !sent.contains(&b.body)).count();
        assert_eq!(wrong, 0, "bodies read back that were never sent");
    }

    #[test]
    fn a_body_unlike_the_one_before_is_kept_whole() {
        assert!(Delta::of(b"{\"a\":1}", b"{\"zzzzzzzzzzz\":2}").is_none());
        let d = Delta::of("{\"a\":\"é\"}".as_bytes(), "{\"a\":\"éé\"}".as_bytes()).unwrap();
        assert!(d.middle.chars().all(|c| c == 'é'), "{}", d.middle);
    }
}
