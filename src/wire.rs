//! The request log's records: what the shim writes to `requests.jsonl`
//! and what jobs, the ledger and the API read back from it.
//!
//! One place for the log's shape, low in the layers so that writer and
//! readers share it without importing the shim: [`RequestRecord`] (one
//! line), [`Usage`], the runaway record ([`Found`], [`Cause`]) and the
//! notes of the `translated` field ([`Note`], a typed enum written as the
//! same strings as always). [`read_requests`] is the one reader: bounded
//! (the last [`READ_CAP`] bytes at most, a partial first line skipped), a
//! bad line skipped, each field tolerant.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::anthropic::lenient;

/// Token usage as the log records it; each count reads on its own (a
/// count of the wrong type reads as 0).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize,
)]
#[serde(default)]
pub struct Usage {
    #[serde(deserialize_with = "lenient")]
    pub input: u64,
    #[serde(deserialize_with = "lenient")]
    pub cache_read: u64,
    #[serde(deserialize_with = "lenient")]
    pub output: u64,
}

impl Usage {
    /// Take the counts a Messages `usage` holds (the others stay).
    pub fn update(&mut self, u: &crate::anthropic::Usage) {
        if let Some(n) = u.input_tokens {
            self.input = n;
        }
        if let Some(n) = u.cache_read_input_tokens {
            self.cache_read = n;
        }
        if let Some(n) = u.output_tokens {
            self.output = n;
        }
    }
}

/// What kind of runaway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// Chat-template markers written as text.
    Marker,
    /// One line repeated.
    Line,
    /// A short span of bytes repeated without a line break.
    Span,
}

/// A runaway: what repeated, how often, and how much text the answer held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Found {
    pub cause: Cause,
    /// The repeated unit (the marker, the line or the span), cut to
    /// the runaway guard's `QUOTE_CHARS` characters.
    pub unit: String,
    /// How many times it was seen when the guard fired.
    pub repeats: u32,
    /// The answer's text and thinking bytes when it fired: the delegate
    /// keeps none of it (the answer ends with an error).
    pub bytes_dropped: u64,
    /// The sentence for it, with the fix for the route's backend (set by
    /// the route when it counts the runaway).
    #[serde(default)]
    pub why: String,
}

impl Found {
    /// The job's sentence: the likely cause and the fix.
    pub fn sentence(&self, llama_cpp: bool) -> String {
        match self.cause {
            Cause::Marker => {
                let fix = if llama_cpp {
                    "start llama-server with `--jinja` and the GGUF's own template"
                } else {
                    "serve the model with its own chat template and stop tokens"
                };
                let what = if matches!(
                    self.unit.as_str(),
                    "<|im_start|>" | "<start_of_turn>" | "<|start_header_id|>"
                ) {
                    "turn marker"
                } else {
                    "end-of-turn marker"
                };
                format!(
                    "runaway output: the model writes its {what} `{}` as text: its chat template's stop token is not set; {fix}",
                    self.unit
                )
            }
            Cause::Line => format!(
                "runaway output: the model repeated one line {} times (\"{}\"): try another model or quantisation",
                self.repeats, self.unit
            ),
            Cause::Span => format!(
                "runaway output: the model repeated \"{}\" {} times: try another model or quantisation",
                self.unit, self.repeats
            ),
        }
    }
}

/// Which sign of a silent truncation fired (the shim's truncation guard).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Sign {
    /// The request's lower bound is above the window the server reported.
    Window,
    /// The server read fewer tokens than the request's lower bound.
    Read,
    /// The request grew, the server's count did not grow with it.
    Append,
}

/// A silent truncation: the turn it was caught at, what was sent and
/// what the server said it read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Truncation {
    pub sign: Sign,
    /// The job's `/v1/messages` request it was caught at (1 is the first).
    pub turn: u64,
    /// Bytes of the request sent.
    pub bytes_sent: u64,
    /// The least tokens the request holds (its words).
    pub lower_bound: u64,
    /// What the server said it read (`input_tokens` plus cached).
    pub read: Option<u64>,
    /// The window the registry knew.
    pub window: Option<u64>,
}

/// The request log's file name in a job's (or a one-shot call's) dir.
pub const REQUESTS: &str = "requests.jsonl";

/// One request through the shim.
///
/// Written by the shim, read back by [`read_requests`]: every field reads
/// by the crate's lenient rule ([`lenient`]: absent, `null` or of the
/// wrong type reads as its default),
/// so an older or damaged line still gives what it holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RequestRecord {
    /// RFC 3339, milliseconds, UTC.
    #[serde(default, deserialize_with = "lenient")]
    pub ts: String,
    #[serde(default, deserialize_with = "lenient")]
    pub path: String,
    /// What the backend answered (null if it could not be reached).
    #[serde(default, deserialize_with = "lenient")]
    pub upstream_status: Option<u16>,
    /// What the shim answered.
    #[serde(default, deserialize_with = "lenient")]
    pub status: u16,
    #[serde(default, deserialize_with = "lenient")]
    pub ms: u64,
    #[serde(default, deserialize_with = "lenient")]
    pub ttft_ms: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    pub bytes_in: usize,
    #[serde(default, deserialize_with = "lenient")]
    pub bytes_out: usize,
    #[serde(default, deserialize_with = "lenient")]
    pub model: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub messages: usize,
    #[serde(default, deserialize_with = "lenient")]
    pub tools: usize,
    #[serde(default, deserialize_with = "lenient")]
    pub stream: bool,
    #[serde(default, deserialize_with = "lenient")]
    pub folded_system: usize,
    #[serde(default, deserialize_with = "lenient")]
    pub usage: Usage,
    #[serde(default, deserialize_with = "lenient")]
    pub stop_reason: Option<String>,
    /// The first 500 chars of the upstream error.
    #[serde(default, deserialize_with = "lenient")]
    pub error: Option<String>,
    /// What the shim rewrote, `; `-separated (e.g. `context_overflow 40123>32768`): the
    /// [`Note`]s, in the joined form [`Note::join`] writes.
    #[serde(default, deserialize_with = "lenient")]
    pub translated: Option<String>,
    /// count_tokens answered with an estimate.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    #[serde(default, deserialize_with = "lenient")]
    pub estimated: bool,
    /// Tool calls that came back as text and were turned into `tool_use`,
    /// with their form (`qwen3_coder_xml x1`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "lenient")]
    pub repaired_tool_call: Option<String>,
    /// How many calls were repaired.
    #[serde(skip_serializing_if = "is_zero")]
    #[serde(default, deserialize_with = "lenient")]
    pub repaired_calls: u64,
    /// Text that looked like a tool call but was left as text, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "lenient")]
    pub unparsed_tool_text: Option<String>,
    /// The loop guard's note, when this request got it first.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "lenient")]
    pub loop_note: Option<String>,
    /// The turn budget's note, placed first in this request ("turn 3 of
    /// 5; 2 more after this one. …").
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "lenient")]
    pub turn_note: Option<String>,
    /// The slot the request was pinned to (`id_slot`, the chat wire).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "lenient")]
    pub slot: Option<u64>,
    /// The path the request reached on the server when it is not `path`
    /// (`/v1/chat/completions`: the chat wire).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "lenient")]
    pub upstream_path: Option<String>,
    /// A complete answer with no text and no tool call.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    #[serde(default, deserialize_with = "lenient")]
    pub empty: bool,
    /// The runaway guard stopped this answer: what repeated.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "lenient")]
    pub runaway: Option<Found>,
    /// The least tokens the request holds (the truncation guard's bound).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "lenient")]
    pub lower_bound: Option<u64>,
    /// The truncation guard stopped the job at this request.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "lenient")]
    pub truncated: Option<Truncation>,
    /// Old tool results this request sent as stubs (the shim's clearing).
    #[serde(skip_serializing_if = "is_zero")]
    #[serde(default, deserialize_with = "lenient")]
    pub cleared: u64,
    /// Results a new batch of clearing stubbed at this request (0: none
    /// began here).
    #[serde(skip_serializing_if = "is_zero")]
    #[serde(default, deserialize_with = "lenient")]
    pub clearing: u64,
    /// This request's span when telemetry exports spans (issue 47): the ids
    /// its `traceparent` to the backend carried.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "lenient")]
    pub span: Option<SpanIds>,
}

/// A request's span ids, lowercase hex as in `traceparent`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpanIds {
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
}

impl SpanIds {
    /// The `traceparent` sent to the backend with this request.
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-01", self.trace_id, self.span_id)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The most bytes of a request log read at once (from its end).
pub const READ_CAP: u64 = 16 << 20;

/// The records of a request log, oldest first, from at most its last `cap`
/// bytes (a partial first line after the cut is skipped). A line that is
/// not a JSON object is skipped; a missing file is no records.
pub fn read_requests(path: &Path, cap: u64) -> std::io::Result<Vec<RequestRecord>> {
    let bytes = match crate::paths::read_tail(path, cap) {
        Ok((bytes, _)) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(parse_requests(&bytes))
}

/// The records in a request log's bytes (a bad line is skipped).
pub fn parse_requests(bytes: &[u8]) -> Vec<RequestRecord> {
    bytes
        .split(|b| *b == b'\n')
        .filter_map(|l| serde_json::from_slice::<RequestRecord>(l).ok())
        .collect()
}

impl RequestRecord {
    /// A `/v1/messages` request (a model turn).
    pub fn is_messages(&self) -> bool {
        self.path == "/v1/messages"
    }

    /// The notes of `translated`.
    pub fn notes(&self) -> Vec<Note> {
        self.translated
            .as_deref()
            .map(Note::split)
            .unwrap_or_default()
    }

    /// Whether `translated` holds a note of this kind.
    pub fn has_note(&self, f: impl Fn(&Note) -> bool) -> bool {
        self.notes().iter().any(f)
    }
}

/// One thing the shim rewrote or did for a request: an entry of the
/// record's `translated` field. [`fmt::Display`] writes the log's string;
/// [`Note::parse`] reads one back (an unknown string is [`Note::Other`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// `model <asked>-><served>`: the request named another model.
    Model { asked: String, served: String },
    /// `max_tokens <asked>-><window>`: lowered to the slot's window.
    MaxTokens { asked: u64, window: u64 },
    /// `max_tokens_retry <asked>-><lowered>`: sent again with less output
    /// (vLLM counts prompt and output against the window).
    MaxTokensRetry { asked: u64, lowered: u64 },
    /// `thinking_dropped <n>`: thinking blocks dropped from the history.
    ThinkingDropped(u64),
    /// `thinking_refused; dropped <n>`: the backend refused thinking
    /// blocks; dropped and sent again.
    ThinkingRefused(u64),
    /// `billing_header_dropped`.
    BillingHeaderDropped,
    /// `streamed_upstream`.
    StreamedUpstream,
    /// `waited <s> s for the model to load` (one decimal).
    WaitedForLoad(f64),
    /// `retry_fresh_connection (<why>)`.
    RetryFreshConnection(String),
    /// `count_tokens_unparsable`.
    CountTokensUnparsable,
    /// `bad_json`.
    BadJson,
    /// `context_overflow <total>><max>`.
    ContextOverflow { total: u64, max: u64 },
    /// `fatal_repeat`.
    FatalRepeat,
    /// `runaway_stop`: a runaway that ends the job.
    RunawayStop,
    /// `runaway_output`.
    RunawayOutput,
    /// `loop_stuck`.
    LoopStuck,
    /// `grammar_error`.
    GrammarError,
    /// `template_error`.
    TemplateError,
    /// `reshaped <status>`: an error put in Anthropic's shape.
    Reshaped(u16),
    /// `backend_unreachable`.
    BackendUnreachable,
    /// `no_response_headers`.
    NoResponseHeaders,
    /// `stream_error_reshaped`.
    StreamErrorReshaped,
    /// `stream_cut`: the stream ended without `message_stop`.
    StreamCut,
    /// `truncated`: the server dropped part of the request without saying
    /// so (the truncation guard); ends the job.
    Truncated,
    /// `window_too_small`: LM Studio's `n_keep >= n_ctx`, the kept part
    /// alone over the window; ends the job.
    WindowTooSmall,
    /// `tools_unsupported`: the model has no tools capability (Ollama);
    /// ends the job.
    ToolsUnsupported,
    /// `error_in_200`: a 200 that carried an error (LM Studio); ends the
    /// job.
    ErrorIn200,
    /// `chat_refused <status>`: the server refused `/v1/chat/completions`
    /// (the chat wire); the route's requests go to `/v1/messages` from
    /// then on.
    ChatRefused(u16),
    /// Any other string (an older shim's note).
    Other(String),
}

const FIXED: &[(&str, Note)] = &[
    ("billing_header_dropped", Note::BillingHeaderDropped),
    ("streamed_upstream", Note::StreamedUpstream),
    ("count_tokens_unparsable", Note::CountTokensUnparsable),
    ("bad_json", Note::BadJson),
    ("fatal_repeat", Note::FatalRepeat),
    ("runaway_stop", Note::RunawayStop),
    ("runaway_output", Note::RunawayOutput),
    ("loop_stuck", Note::LoopStuck),
    ("grammar_error", Note::GrammarError),
    ("template_error", Note::TemplateError),
    ("backend_unreachable", Note::BackendUnreachable),
    ("no_response_headers", Note::NoResponseHeaders),
    ("stream_error_reshaped", Note::StreamErrorReshaped),
    ("stream_cut", Note::StreamCut),
    ("truncated", Note::Truncated),
    ("window_too_small", Note::WindowTooSmall),
    ("tools_unsupported", Note::ToolsUnsupported),
    ("error_in_200", Note::ErrorIn200),
];

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::Model { asked, served } => write!(f, "model {asked}->{served}"),
            Note::MaxTokens { asked, window } => write!(f, "max_tokens {asked}->{window}"),
            Note::MaxTokensRetry { asked, lowered } => {
                write!(f, "max_tokens_retry {asked}->{lowered}")
            }
            Note::ThinkingDropped(n) => write!(f, "thinking_dropped {n}"),
            Note::ThinkingRefused(n) => write!(f, "thinking_refused; dropped {n}"),
            Note::WaitedForLoad(s) => write!(f, "waited {s:.1} s for the model to load"),
            Note::RetryFreshConnection(why) => write!(f, "retry_fresh_connection ({why})"),
            Note::ContextOverflow { total, max } => write!(f, "context_overflow {total}>{max}"),
            Note::Reshaped(status) => write!(f, "reshaped {status}"),
            Note::ChatRefused(status) => write!(f, "chat_refused {status}"),
            Note::Other(s) => f.write_str(s),
            fixed => f.write_str(
                FIXED
                    .iter()
                    .find(|(_, n)| n == fixed)
                    .map_or("", |(s, _)| s),
            ),
        }
    }
}

impl From<Note> for String {
    fn from(n: Note) -> String {
        n.to_string()
    }
}

impl Note {
    /// The notes joined as the log writes them (`; `), none when empty.
    pub fn join<S: AsRef<str>>(notes: &[S]) -> Option<String> {
        (!notes.is_empty()).then(|| {
            notes
                .iter()
                .map(AsRef::as_ref)
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    /// The notes of a joined `translated` string.
    pub fn split(joined: &str) -> Vec<Note> {
        let mut out = Vec::new();
        let mut parts = joined.split("; ").peekable();
        while let Some(p) = parts.next() {
            // The one note with `; ` inside it.
            if p == "thinking_refused"
                && let Some(n) = parts
                    .peek()
                    .and_then(|d| d.strip_prefix("dropped "))
                    .and_then(|n| n.parse().ok())
            {
                parts.next();
                out.push(Note::ThinkingRefused(n));
                continue;
            }
            out.push(Note::parse(p));
        }
        out
    }

    /// One note from its string.
    pub fn parse(s: &str) -> Note {
        if let Some((_, n)) = FIXED.iter().find(|(k, _)| *k == s) {
            return n.clone();
        }
        let arrow = |rest: &str| -> Option<(u64, u64)> {
            let (a, b) = rest.split_once("->")?;
            Some((a.parse().ok()?, b.parse().ok()?))
        };
        let parsed = if let Some(r) = s.strip_prefix("max_tokens_retry ") {
            arrow(r).map(|(asked, lowered)| Note::MaxTokensRetry { asked, lowered })
        } else if let Some(r) = s.strip_prefix("max_tokens ") {
            arrow(r).map(|(asked, window)| Note::MaxTokens { asked, window })
        } else if let Some(r) = s.strip_prefix("model ") {
            r.split_once("->").map(|(a, b)| Note::Model {
                asked: a.to_string(),
                served: b.to_string(),
            })
        } else if let Some(r) = s.strip_prefix("thinking_dropped ") {
            r.parse().ok().map(Note::ThinkingDropped)
        } else if let Some(r) = s.strip_prefix("thinking_refused; dropped ") {
            r.parse().ok().map(Note::ThinkingRefused)
        } else if let Some(r) = s
            .strip_prefix("waited ")
            .and_then(|r| r.strip_suffix(" s for the model to load"))
        {
            r.parse().ok().map(Note::WaitedForLoad)
        } else if let Some(r) = s
            .strip_prefix("retry_fresh_connection (")
            .and_then(|r| r.strip_suffix(')'))
        {
            Some(Note::RetryFreshConnection(r.to_string()))
        } else if let Some(r) = s.strip_prefix("context_overflow ") {
            r.split_once('>').and_then(|(t, m)| {
                Some(Note::ContextOverflow {
                    total: t.parse().ok()?,
                    max: m.parse().ok()?,
                })
            })
        } else if let Some(r) = s.strip_prefix("reshaped ") {
            r.parse().ok().map(Note::Reshaped)
        } else if let Some(r) = s.strip_prefix("chat_refused ") {
            r.parse().ok().map(Note::ChatRefused)
        } else {
            None
        };
        parsed.unwrap_or_else(|| Note::Other(s.to_string()))
    }

    /// The notes of answers that no retry can mend: the job ends with
    /// their sentence at once.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            Note::TemplateError
                | Note::GrammarError
                | Note::LoopStuck
                | Note::FatalRepeat
                | Note::RunawayStop
                | Note::Truncated
                | Note::WindowTooSmall
                | Note::ToolsUnsupported
                | Note::ErrorIn200
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_print_and_parse_back() {
        let all = [
            "model a->b",
            "max_tokens 64000->32768",
            "chat_refused 404",
            "max_tokens_retry 8192->4000",
            "thinking_dropped 3",
            "thinking_refused; dropped 2",
            "billing_header_dropped",
            "streamed_upstream",
            "waited 12.5 s for the model to load",
            "retry_fresh_connection (connection reset)",
            "count_tokens_unparsable",
            "bad_json",
            "context_overflow 40123>32768",
            "fatal_repeat",
            "runaway_stop",
            "runaway_output",
            "loop_stuck",
            "grammar_error",
            "template_error",
            "reshaped 503",
            "backend_unreachable",
            "no_response_headers",
            "stream_error_reshaped",
            "stream_cut",
            "truncated",
            "window_too_small",
            "tools_unsupported",
            "error_in_200",
            "something new",
        ];
        for s in all {
            assert_eq!(Note::parse(s).to_string(), s);
        }
        let joined = Note::join(&all).unwrap();
        let back = Note::split(&joined);
        assert_eq!(back.len(), all.len());
        assert_eq!(
            Note::join(&back.iter().map(|n| n.to_string()).collect::<Vec<_>>()),
            Some(joined)
        );
        assert_eq!(Note::join::<String>(&[]), None);
    }

    #[test]
    fn the_reader_is_tolerant_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(REQUESTS);
        let lines = concat!(
            "{\"path\":\"/v1/messages\",\"status\":200,\"usage\":{\"input\":5,\"cache_read\":\"x\",\"output\":2}}\n",
            "not json\n",
            "{\"path\":\"/v1/messages\",\"status\":\"bad\",\"ttft_ms\":7,\"translated\":\"max_tokens_retry 8192->4000\"}\n",
        );
        std::fs::write(&p, lines).unwrap();
        let r = read_requests(&p, READ_CAP).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[0].usage,
            Usage {
                input: 5,
                cache_read: 0,
                output: 2
            }
        );
        assert_eq!((r[1].status, r[1].ttft_ms), (0, Some(7)));
        assert!(r[1].has_note(|n| matches!(n, Note::MaxTokensRetry { .. })));
        // Cut inside the first line: it is skipped.
        let r = read_requests(&p, lines.len() as u64 - 3).unwrap();
        assert_eq!(r.len(), 1);
        assert!(
            read_requests(&dir.path().join("none"), READ_CAP)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_record_writes_as_it_reads() {
        let rec = RequestRecord {
            path: "/v1/messages".into(),
            status: 200,
            usage: Usage {
                input: 1,
                cache_read: 2,
                output: 3,
            },
            translated: Note::join(&[Note::StreamCut.to_string()]),
            ..Default::default()
        };
        let line = serde_json::to_string(&rec).unwrap();
        let back: RequestRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), line);
    }
}
