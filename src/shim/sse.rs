//! The streaming relay: upstream SSE bytes go to Claude Code as they
//! arrive, with a tap on the side.
//!
//! Bytes are forwarded untouched, cut only at event boundaries, so a chunk
//! that holds whole events leaves as the same `Bytes` (no copy). Only an
//! event split across chunks is copied, to join its halves. The SSE crates
//! on crates.io decode into owned events and drop comment lines, which are
//! llama.cpp's keep-alives; relaying bytes untouched needs only the boundary
//! scan below (memchr's memmem).
//!
//! The tap records time to first token, usage and `stop_reason`. Two things
//! are rewritten: llama.cpp's mid-stream `event: error` body
//! `{code,message,type}` becomes Anthropic's error event (with an overflow
//! translated to "prompt is too long"), and a stream that ends without
//! `message_stop` or goes silent past the idle timeout gets a closing
//! Anthropic `error` event, so Claude Code never hangs.
//!
//! The runaway guard ([`runaway`]) reads the text and thinking deltas as
//! they pass. When an answer runs away, nothing more is forwarded: the
//! stream ends with an `error` event (so Claude Code keeps none of the
//! answer) and the upstream response is dropped, which closes the
//! connection and makes the server stop generating.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use memchr::memmem;
use serde_json::{Map, Value};

use super::errors;
use super::repair::{self, Emit, LazyTools, StreamRepair};
use super::runaway;
use crate::anthropic::{ErrorBody, StreamEvent};
use crate::config::Backend;
use crate::wire::Note;

use crate::wire::Usage;

/// What the tap saw.
#[derive(Debug, Clone, Default)]
pub struct Tap {
    pub ttft: Option<Duration>,
    pub usage: Usage,
    pub stop_reason: Option<String>,
    pub saw_stop: bool,
    pub saw_error: bool,
    pub error: Option<String>,
    pub translated: Vec<String>,
    pub bytes_out: usize,
    pub events: u64,
    /// `tool_use` blocks the backend opened.
    pub tool_uses: u64,
    /// Text deltas the backend sent.
    pub text_deltas: u64,
    /// The runaway guard stopped the answer.
    pub runaway: Option<runaway::Found>,
    /// A `usage` with `input_tokens` came (a count of 0 included).
    pub input_seen: bool,
    /// The truncation guard stopped the answer.
    pub truncated: Option<crate::wire::Truncation>,
}

impl Tap {
    /// The stream ended properly (stop or an error event).
    pub fn terminal(&self) -> bool {
        self.saw_stop || self.saw_error
    }

    /// A complete answer with nothing in it: no text, no tool call.
    pub fn empty(&self) -> bool {
        self.saw_stop && !self.saw_error && self.tool_uses == 0 && self.text_deltas == 0
    }
}

/// Where one event ends (index just past its blank line), if it does.
fn boundary(buf: &[u8]) -> Option<usize> {
    let lf = memmem::find(buf, b"\n\n").map(|i| i + 2);
    let crlf = memmem::find(buf, b"\r\n\r\n").map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The `event:` name and joined `data:` of one raw event.
pub fn parse_event(raw: &[u8]) -> (Option<&str>, String) {
    let text = std::str::from_utf8(raw).unwrap_or("");
    let mut name = None;
    let mut data: Vec<&str> = Vec::new();
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if let Some(v) = line.strip_prefix("event:") {
            name = Some(v.trim_start());
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    (name, data.join("\n"))
}

/// A Messages response put together from its stream (what the relay
/// forwarded), or the `(type, message)` of the error event it ended with.
/// The message's fields, its blocks and its usage are the events' own,
/// in the order they came.
pub fn assemble(bytes: &[u8]) -> Result<Value, (String, String)> {
    let mut msg = Map::new();
    msg.insert("type".into(), "message".into());
    msg.insert("role".into(), "assistant".into());
    msg.insert("content".into(), Value::Array(Vec::new()));
    let mut content: Vec<Value> = Vec::new();
    let mut json_parts: Vec<String> = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let len = boundary(rest).unwrap_or(rest.len());
        let (name, data) = parse_event(&rest[..len]);
        rest = &rest[len..];
        if serde_json::from_str::<serde::de::IgnoredAny>(&data).is_err() {
            continue;
        }
        match StreamEvent::read(name, &data) {
            StreamEvent::MessageStart(s) => {
                for (k, x) in s.message.map(|m| m.raw).unwrap_or_default() {
                    if k != "content" {
                        msg.insert(k, x);
                    }
                }
            }
            StreamEvent::ContentBlockStart(b) => {
                content.push(b.content_block);
                json_parts.push(String::new());
            }
            StreamEvent::ContentBlockDelta(d) => {
                let i = d.index.unwrap_or(0) as usize;
                let d = d.delta.unwrap_or_default();
                if let Some(p) = &d.partial_json
                    && let Some(part) = json_parts.get_mut(i)
                {
                    part.push_str(p);
                }
                if let Some(b) = object_at(&mut content, i) {
                    for (key, t) in [
                        ("text", d.text),
                        ("thinking", d.thinking),
                        ("signature", d.signature),
                    ] {
                        if let Some(t) = t {
                            append(b, key, &t);
                        }
                    }
                }
            }
            StreamEvent::ContentBlockStop(s) => {
                let i = s.index.unwrap_or(0) as usize;
                if let Some(p) = json_parts.get(i).filter(|p| !p.is_empty())
                    && let Ok(input) = serde_json::from_str::<Value>(p)
                    && let Some(b) = object_at(&mut content, i)
                {
                    b.insert("input".into(), input);
                }
            }
            StreamEvent::MessageDelta(d) => {
                msg.extend(d.delta.map(|d| d.raw).unwrap_or_default());
                if let Some(u) = d.usage {
                    let usage = msg
                        .entry("usage")
                        .or_insert_with(|| Value::Object(Map::new()));
                    match usage {
                        Value::Object(into) => into.extend(u.raw),
                        other => *other = Value::Object(u.raw),
                    }
                }
            }
            StreamEvent::Error(e) => {
                // What the relay forwards is in Anthropic's shape.
                let typ = e.kind().unwrap_or("api_error").to_string();
                return Err((typ, e.message().unwrap_or_else(|| data.clone())));
            }
            _ => {}
        }
    }
    msg.insert("content".into(), Value::Array(content));
    Ok(Value::Object(msg))
}

/// The block at `i` to write into: an object (a block sent as `null`
/// becomes one), else none.
fn object_at(content: &mut [Value], i: usize) -> Option<&mut Map<String, Value>> {
    let b = content.get_mut(i)?;
    if b.is_null() {
        *b = Value::Object(Map::new());
    }
    b.as_object_mut()
}

/// Append `t` to a block's `key` (a string, or nothing yet).
fn append(b: &mut Map<String, Value>, key: &str, t: &str) {
    let cur = match b.get(key) {
        Some(Value::String(s)) => s.as_str(),
        _ => "",
    };
    let joined = format!("{cur}{t}");
    b.insert(key.into(), Value::String(joined));
}

/// An Anthropic `error` event.
pub fn error_event(typ: &str, message: &str) -> Bytes {
    let body = errors::anthropic_error(typ, message);
    Bytes::from(format!("event: error\ndata: {body}\n\n"))
}

/// What the route answers a runaway with: the error event's type and
/// message (it counts the runaway, and may make it the job's end).
pub type OnRunaway = Box<dyn FnMut(&mut runaway::Found) -> (&'static str, String) + Send>;

/// The truncation guard at `message_delta` (the server's count is known
/// by then): the record and the sentence when it fires.
pub type OnUsage = Box<dyn FnMut(&Tap) -> Option<(crate::wire::Truncation, String)> + Send>;

/// The truncation guard of one stream.
struct Checked(OnUsage);

impl std::fmt::Debug for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Checked")
    }
}

/// The runaway guard of one stream.
struct Guarded {
    watch: runaway::Watch,
    answer: OnRunaway,
}

impl std::fmt::Debug for Guarded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guarded")
            .field("watch", &self.watch)
            .finish()
    }
}

/// The text or thinking of a `content_block_delta` (not tool input).
#[derive(serde::Deserialize)]
struct DeltaEvent<'a> {
    #[serde(borrow)]
    delta: Option<Delta<'a>>,
}

#[derive(serde::Deserialize)]
struct Delta<'a> {
    #[serde(borrow)]
    text: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    thinking: Option<std::borrow::Cow<'a, str>>,
}

/// Splits a byte stream at event boundaries and keeps the tap.
#[derive(Debug)]
pub struct Relay {
    pending: BytesMut,
    pub tap: Tap,
    started: Instant,
    backend: Backend,
    window: Option<u64>,
    /// Text-form tool calls turned back into `tool_use` ([`repair`]); only
    /// when the request offered tools.
    repair: Option<StreamRepair>,
    /// The longest silence before the first event (the prompt's prefill),
    /// when longer than the idle timeout.
    first_wait: Duration,
    /// The runaway guard, when on.
    runaway: Option<Guarded>,
    /// The truncation guard, when on.
    truncation: Option<Checked>,
    /// The guard stopped the stream: nothing more is forwarded.
    stopped: bool,
}

impl Relay {
    pub fn new(started: Instant, backend: Backend, window: Option<u64>) -> Self {
        Relay {
            pending: BytesMut::new(),
            tap: Tap::default(),
            started,
            backend,
            window,
            repair: None,
            first_wait: Duration::ZERO,
            runaway: None,
            truncation: None,
            stopped: false,
        }
    }

    /// Check the server's count at `message_delta`; `check` says when the
    /// server dropped part of the request.
    pub fn with_truncation(mut self, check: OnUsage) -> Self {
        self.truncation = Some(Checked(check));
        self
    }

    /// Watch the answer for a runaway; `answer` decides the closing error.
    pub fn with_runaway(mut self, answer: OnRunaway) -> Self {
        self.runaway = Some(Guarded {
            watch: runaway::Watch::new(),
            answer,
        });
        self
    }

    /// Did the runaway guard stop the stream?
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Wait up to `d` for the first event (comments do not count).
    pub fn with_first_wait(mut self, d: Duration) -> Self {
        self.first_wait = d;
        self
    }

    /// Repair text-form calls against the request's offered tools.
    pub fn with_repair(mut self, tools: LazyTools) -> Self {
        self.repair = Some(StreamRepair::new(tools));
        self
    }

    /// What the repair did (empty without one).
    pub fn report(&self) -> repair::Report {
        self.repair
            .as_ref()
            .map(|r| r.report.clone())
            .unwrap_or_default()
    }

    /// Feed one upstream chunk; returns the bytes to forward now (possibly
    /// empty, when the chunk ends inside an event).
    pub fn push(&mut self, chunk: Bytes) -> Bytes {
        if self.stopped {
            return Bytes::new();
        }
        let complete: Bytes = if self.pending.is_empty() {
            // Fast path: no copy. Find the last boundary in the chunk.
            let mut end = 0;
            while let Some(b) = boundary(&chunk[end..]) {
                end += b;
            }
            if end < chunk.len() {
                self.pending.extend_from_slice(&chunk[end..]);
            }
            chunk.slice(..end)
        } else {
            self.pending.extend_from_slice(&chunk);
            let mut end = 0;
            while let Some(b) = boundary(&self.pending[end..]) {
                end += b;
            }
            self.pending.split_to(end).freeze()
        };
        if complete.is_empty() {
            return complete;
        }
        let out = self.inspect(complete);
        self.tap.bytes_out += out.len();
        out
    }

    /// Look at each event of a run of complete events; rewrite error
    /// events and text-form tool calls. A run in which nothing changes
    /// leaves as the same `Bytes`.
    fn inspect(&mut self, complete: Bytes) -> Bytes {
        let mut pos = 0;
        let mut rebuilt: Option<BytesMut> = None;
        while pos < complete.len() {
            let len = boundary(&complete[pos..]).unwrap_or(complete.len() - pos);
            let raw = complete.slice(pos..pos + len);
            let emit = self.event(&raw);
            match (emit, &mut rebuilt) {
                (Emit::Out(new), None) => {
                    let mut b = BytesMut::with_capacity(complete.len() + 64);
                    b.extend_from_slice(&complete[..pos]);
                    for piece in new {
                        b.extend_from_slice(&piece);
                    }
                    rebuilt = Some(b);
                }
                (Emit::Out(new), Some(b)) => {
                    for piece in new {
                        b.extend_from_slice(&piece);
                    }
                }
                (Emit::Pass, Some(b)) => b.extend_from_slice(&raw),
                (Emit::Pass, None) => {}
            }
            pos += len;
            if self.stopped {
                // The rest of the run is the runaway's: not forwarded.
                return rebuilt.map(BytesMut::freeze).unwrap_or_default();
            }
        }
        match rebuilt {
            Some(b) => b.freeze(),
            None => complete,
        }
    }

    /// One event: the tap, then the error rewrite or the repair.
    fn event(&mut self, raw: &Bytes) -> Emit {
        let (name, data) = parse_event(raw);
        let name = match name {
            Some(n) => n.to_string(),
            None => {
                // A data-only event: its JSON `type` names it. Comments
                // (keep-alives) have neither.
                if data.is_empty() {
                    return Emit::Pass;
                }
                StreamEvent::name_of(&data)
            }
        };
        let replacement = self.observe(&name, &data, raw);
        if replacement.is_none()
            && let Some(found) = self.watch(&name, &data, raw)
        {
            return Emit::Out(vec![self.stop_runaway(found)]);
        }
        if name == "message_delta"
            && let Some(check) = self.truncation.as_mut()
            && let Some((t, why)) = (check.0)(&self.tap)
        {
            return Emit::Out(vec![self.stop_truncated(t, why)]);
        }
        if let Some(new) = replacement {
            let mut out = self.repair.as_mut().map(|r| r.flush()).unwrap_or_default();
            out.push(new);
            return Emit::Out(out);
        }
        match self.repair.as_mut() {
            Some(r) => r.feed(&name, &data, raw),
            None => Emit::Pass,
        }
    }

    /// The runaway guard's look at one event: text and thinking deltas are
    /// fed; a new block or the end of the message ends the current line.
    fn watch(&mut self, name: &str, data: &str, raw: &[u8]) -> Option<runaway::Found> {
        let g = self.runaway.as_mut()?;
        match name {
            "content_block_delta" => {
                if memmem::find(raw, b"_json_delta").is_some()
                    || memmem::find(raw, b"signature_delta").is_some()
                {
                    return None;
                }
                let d = serde_json::from_str::<DeltaEvent>(data).ok()?.delta?;
                let piece = d.text.or(d.thinking)?;
                g.watch.feed(piece.as_bytes())
            }
            "content_block_start" | "content_block_stop" => g.watch.block_break(),
            "message_delta" => g.watch.finish(),
            _ => None,
        }
    }

    /// End the stream on a runaway: the error event the route decides,
    /// the tap told. Text a repair still holds is the runaway's: dropped.
    fn stop_runaway(&mut self, mut found: runaway::Found) -> Bytes {
        let (typ, message) = match self.runaway.as_mut() {
            Some(g) => (g.answer)(&mut found),
            None => ("api_error", found.sentence(true)),
        };
        self.stopped = true;
        self.tap.saw_error = true;
        self.tap.error = Some(message.clone());
        self.tap.translated.push(
            if typ == "invalid_request_error" {
                Note::RunawayStop
            } else {
                Note::RunawayOutput
            }
            .into(),
        );
        self.tap.runaway = Some(found);
        error_event(typ, &message)
    }

    /// End the stream on a silent truncation: the answer is to a prompt
    /// the model never saw whole, so none of it is kept.
    fn stop_truncated(&mut self, t: crate::wire::Truncation, why: String) -> Bytes {
        self.stopped = true;
        self.tap.saw_error = true;
        self.tap.error = Some(why.clone());
        self.tap.translated.push(Note::Truncated.into());
        self.tap.truncated = Some(t);
        error_event("invalid_request_error", &why)
    }

    /// Update the tap; return a replacement for error events.
    fn observe(&mut self, name: &str, data: &str, raw: &[u8]) -> Option<Bytes> {
        self.tap.events += 1;
        match name {
            "content_block_start" | "content_block_delta" if self.tap.ttft.is_none() => {
                self.tap.ttft = Some(self.started.elapsed());
            }
            _ => {}
        }
        match name {
            "content_block_start" if memmem::find(raw, b"\"tool_use\"").is_some() => {
                self.tap.tool_uses += 1;
            }
            "content_block_delta" if memmem::find(raw, b"\"text_delta\"").is_some() => {
                self.tap.text_deltas += 1;
            }
            "message_start" | "message_delta" => {
                match StreamEvent::read(Some(name), data) {
                    StreamEvent::MessageStart(s) => {
                        if let Some(u) = s.message.and_then(|m| m.typed.usage) {
                            self.tap.input_seen |= u.input_tokens.is_some();
                            self.tap.usage.update(&u);
                        }
                    }
                    StreamEvent::MessageDelta(d) => {
                        if let Some(u) = d.usage {
                            self.tap.input_seen |= u.typed.input_tokens.is_some();
                            self.tap.usage.update(&u.typed);
                        }
                        if let Some(s) = d.delta.and_then(|d| d.typed.stop_reason) {
                            self.tap.stop_reason = Some(s);
                        }
                    }
                    _ => {}
                }
            }
            "message_stop" => self.tap.saw_stop = true,
            "error" => return self.error(data),
            _ => {}
        }
        None
    }

    /// An error event: told to the tap; a replacement unless it is in
    /// Anthropic's shape already (an overflow becomes "prompt is too long").
    fn error(&mut self, data: &str) -> Option<Bytes> {
        self.tap.saw_error = true;
        let v: Value = serde_json::from_str(data).unwrap_or(Value::String(data.to_string()));
        let e = ErrorBody::of(&v);
        let msg = e.message();
        self.tap.error = Some(
            msg.clone()
                .unwrap_or_else(|| crate::fmt::cut(data, 500)),
        );
        if let Some(o) = errors::overflow(&v, self.window) {
            let tr = errors::overflow_answer(&o);
            if let Some(n) = tr.note.clone() {
                self.tap.translated.push(n);
            }
            let m = tr.message().unwrap_or_default();
            return Some(error_event("invalid_request_error", &m));
        }
        if !e.is_anthropic() {
            self.tap.translated.push(Note::StreamErrorReshaped.into());
            let m = format!(
                "{}: {}",
                self.backend.as_str(),
                msg.unwrap_or_else(|| data.to_string())
            );
            return Some(error_event("api_error", &m));
        }
        None
    }

    /// The closing event for an upstream that stopped early, if one is due.
    /// Whatever the repair still holds leaves first.
    pub fn finish(&mut self, why: &str) -> Option<Bytes> {
        if self.stopped {
            return None;
        }
        let held: Vec<Bytes> = self.repair.as_mut().map(|r| r.flush()).unwrap_or_default();
        if self.tap.terminal() {
            if held.is_empty() {
                return None;
            }
            let b: Bytes = held.concat().into();
            self.tap.bytes_out += b.len();
            return Some(b);
        }
        self.tap.saw_error = true;
        let msg = format!("{} stream {why} before message_stop", self.backend.as_str());
        self.tap.error = Some(msg.clone());
        self.tap.translated.push(Note::StreamCut.into());
        let mut out = held.concat();
        out.extend_from_slice(&error_event("api_error", &msg));
        self.tap.bytes_out += out.len();
        Some(out.into())
    }
}

/// Called once with the final tap and what the repair did, when the relay
/// ends for any reason, including the client going away.
pub type OnDone = Box<dyn FnOnce(&Tap, &repair::Report) + Send>;

struct State<S> {
    /// Dropped (the connection closed) when the runaway guard stops.
    upstream: Option<S>,
    relay: Relay,
    idle: Duration,
    finished: bool,
    on_done: Option<OnDone>,
    /// Where the current idle window began, and the bytes since.
    window: (Instant, usize),
}

/// The slowest stream that is not idle: a backend that sends less than this
/// over a whole idle window (a byte a second, say) is treated as silent. A
/// token is a delta event of about 100 bytes, so even a model at 1 token in
/// 6 s stays above it.
pub const FLOOR_BYTES_PER_S: u64 = 16;

/// The bytes a window of `span` must bring not to count as idle.
fn floor_bytes(span: Duration) -> usize {
    let bytes = span
        .as_millis()
        .saturating_mul(u128::from(FLOOR_BYTES_PER_S))
        / 1000;
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

impl<S> Drop for State<S> {
    fn drop(&mut self) {
        if let Some(f) = self.on_done.take() {
            f(&self.relay.tap, &self.relay.report());
        }
    }
}

/// Relay `upstream` with the tap; `idle` is the longest silence tolerated.
pub fn relay<S, E>(
    upstream: S,
    relay: Relay,
    idle: Duration,
    on_done: OnDone,
) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>> + Send
where
    S: Stream<Item = Result<Bytes, E>> + Unpin + Send + 'static,
    E: std::fmt::Display,
{
    let state = State {
        upstream: Some(upstream),
        relay,
        idle,
        finished: false,
        on_done: Some(on_done),
        window: (Instant::now(), 0),
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if st.finished {
                return None;
            }
            let wait = if st.relay.tap.events == 0 {
                st.idle.max(st.relay.first_wait)
            } else {
                st.idle
            };
            let up = st.upstream.as_mut()?;
            match tokio::time::timeout(wait, up.next()).await {
                Err(_) => {
                    st.finished = true;
                    let why = if st.relay.tap.events == 0 && wait > st.idle {
                        format!(
                            "sent no event for {}s after its headers (defaults.first_byte_timeout_s)",
                            wait.as_secs()
                        )
                    } else {
                        format!("was silent for {}s (idle timeout)", wait.as_secs())
                    };
                    return st.relay.finish(&why).map(|b| (Ok(b), st));
                }
                Ok(None) => {
                    st.finished = true;
                    return st.relay.finish("ended").map(|b| (Ok(b), st));
                }
                Ok(Some(Err(e))) => {
                    st.finished = true;
                    let why = format!("broke ({e})");
                    return st.relay.finish(&why).map(|b| (Ok(b), st));
                }
                Ok(Some(Ok(chunk))) => {
                    // A trickle under the floor for a whole window is idle.
                    st.window.1 = st.window.1.saturating_add(chunk.len());
                    let span = st.window.0.elapsed();
                    if span >= wait {
                        if st.window.1 < floor_bytes(span) {
                            st.finished = true;
                            let why = format!(
                                "sent {} bytes in {:.0}s, under {FLOOR_BYTES_PER_S} bytes/s (idle timeout)",
                                st.window.1,
                                span.as_secs_f64()
                            );
                            return st.relay.finish(&why).map(|b| (Ok(b), st));
                        }
                        st.window = (Instant::now(), 0);
                    }
                    let out = st.relay.push(chunk);
                    if st.relay.stopped() {
                        // Close the backend's response now: the server
                        // stops generating when its client goes away.
                        st.upstream = None;
                        st.finished = true;
                        return Some((Ok(out), st));
                    }
                    if !out.is_empty() {
                        return Some((Ok(out), st));
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    const STREAM: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":12,\"cache_read_input_tokens\":30000,\"output_tokens\":0}}}\n\n: keep-alive\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":7}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

    fn relay_new() -> Relay {
        Relay::new(Instant::now(), Backend::LlamaCpp, Some(32768))
    }

    async fn run(chunks: Vec<Result<Bytes, String>>, idle: Duration, hang: bool) -> (Vec<u8>, Tap) {
        let seen = Arc::new(Mutex::new(None));
        let seen2 = seen.clone();
        let up = futures::stream::iter(chunks);
        let up: std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, String>> + Send>> = if hang {
            Box::pin(up.chain(futures::stream::pending()))
        } else {
            Box::pin(up)
        };
        let s = relay(
            up,
            relay_new(),
            idle,
            Box::new(move |t: &Tap, _: &repair::Report| {
                *seen2.lock().unwrap() = Some(t.clone());
            }),
        );
        let out: Vec<Bytes> = s.map(|r| r.unwrap()).collect().await;
        let bytes = out.concat();
        let tap = seen.lock().unwrap().clone().expect("on_done called");
        (bytes, tap)
    }

    #[tokio::test]
    async fn every_split_point_relays_identical_bytes_and_same_tap() {
        let whole = Bytes::from_static(STREAM.as_bytes());
        let (ref_out, ref_tap) = run(vec![Ok(whole.clone())], Duration::from_secs(5), false).await;
        assert_eq!(ref_out, STREAM.as_bytes());
        assert_eq!(
            ref_tap.usage,
            Usage {
                input: 12,
                cache_read: 30000,
                output: 7
            }
        );
        assert_eq!(ref_tap.stop_reason.as_deref(), Some("end_turn"));
        assert!(ref_tap.saw_stop && !ref_tap.saw_error && ref_tap.ttft.is_some());
        // Split the stream at every byte into two and three chunks.
        for i in 1..whole.len() {
            let j = (i + 37).min(whole.len());
            let chunks = vec![
                Ok(whole.slice(..i)),
                Ok(whole.slice(i..j)),
                Ok(whole.slice(j..)),
            ];
            let (out, tap) = run(chunks, Duration::from_secs(5), false).await;
            assert_eq!(out, STREAM.as_bytes(), "split at {i}");
            assert_eq!(tap.usage, ref_tap.usage, "split at {i}");
            assert!(tap.saw_stop);
        }
    }

    #[test]
    fn whole_events_pass_without_copy() {
        let mut r = relay_new();
        let chunk = Bytes::from_static(STREAM.as_bytes());
        let out = r.push(chunk.clone());
        assert_eq!(out.as_ptr(), chunk.as_ptr(), "same buffer, no copy");
        assert_eq!(out.len(), chunk.len());
    }

    #[test]
    fn crlf_events_are_split_too() {
        let mut r = relay_new();
        let out = r.push(Bytes::from_static(
            b"event: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\nevent: pi",
        ));
        assert!(out.ends_with(b"\r\n\r\n"));
        assert!(r.tap.saw_stop);
    }

    #[tokio::test]
    async fn llama_mid_stream_error_is_rewritten() {
        let s = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5}}}\n\nevent: error\ndata: {\"code\":500,\"message\":\"Context size has been exceeded.\",\"type\":\"server_error\"}\n\n";
        let (out, tap) = run(vec![Ok(Bytes::from(s))], Duration::from_secs(5), false).await;
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt is too long: 32769 tokens > 32768 maximum\"}}"), "{text}");
        assert!(!text.contains("\"code\":500"));
        assert!(tap.saw_error);
        assert_eq!(tap.translated, ["context_overflow 32769>32768"]);

        let s = "event: error\ndata: {\"code\":500,\"message\":\"CUDA error\",\"type\":\"server_error\"}\n\n";
        let (out, tap) = run(vec![Ok(Bytes::from(s))], Duration::from_secs(5), false).await;
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("\"type\":\"api_error\",\"message\":\"llama.cpp: CUDA error\""),
            "{text}"
        );
        assert_eq!(
            text.matches("event: error").count(),
            1,
            "no second closing error"
        );
        assert_eq!(tap.error.as_deref(), Some("CUDA error"));
    }

    #[tokio::test]
    async fn abrupt_end_gets_a_closing_error_event() {
        let cut = &STREAM[..STREAM.find("event: message_delta").unwrap() + 10];
        let (out, tap) = run(
            vec![Ok(Bytes::from(cut.to_string()))],
            Duration::from_secs(5),
            false,
        )
        .await;
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.ends_with("\"message\":\"llama.cpp stream ended before message_stop\"}}\n\n"),
            "{text}"
        );
        assert!(
            !text.contains("event: message_del"),
            "the partial event is not forwarded"
        );
        assert!(tap.saw_error && !tap.saw_stop);

        let (out, _) = run(
            vec![
                Ok(Bytes::from_static(b"event: ping\ndata: {}\n\n")),
                Err("connection reset".into()),
            ],
            Duration::from_secs(5),
            false,
        )
        .await;
        assert!(
            String::from_utf8(out)
                .unwrap()
                .contains("stream broke (connection reset) before message_stop")
        );
    }

    #[tokio::test]
    async fn idle_upstream_times_out_with_an_error_event() {
        let first = &STREAM[..STREAM.find(": keep-alive").unwrap()];
        let started = Instant::now();
        let (out, tap) = run(
            vec![Ok(Bytes::from(first.to_string()))],
            Duration::from_millis(200),
            true,
        )
        .await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "it must not hang"
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("idle timeout"), "{text}");
        assert_eq!(tap.usage.input, 12);
    }

    /// A backend that trickles a byte every 100 ms (under the floor) is
    /// idle: the stream ends with an error event after about the idle
    /// timeout, not when the trickle stops.
    #[tokio::test]
    async fn a_trickle_under_the_floor_counts_as_idle() {
        let first = STREAM[..STREAM.find(": keep-alive").unwrap()].to_string();
        let trickle = futures::stream::unfold(0u64, |n| async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Some((Ok::<_, String>(Bytes::from_static(b":")), n + 1))
        });
        let up = futures::stream::iter(vec![Ok(Bytes::from(first))]).chain(trickle);
        let seen = Arc::new(Mutex::new(None));
        let seen2 = seen.clone();
        let s = relay(
            Box::pin(up),
            relay_new(),
            Duration::from_millis(500),
            Box::new(move |t: &Tap, _: &repair::Report| {
                *seen2.lock().unwrap() = Some(t.clone());
            }),
        );
        let out = tokio::time::timeout(
            Duration::from_secs(5),
            s.map(|r| r.unwrap()).collect::<Vec<Bytes>>(),
        )
        .await
        .expect("a stream trickling 10 bytes/s must end at the idle timeout");
        let text = String::from_utf8(out.concat()).unwrap();
        assert!(text.contains("idle timeout"), "{text}");
        let tap = seen.lock().unwrap().clone().unwrap();
        assert!(tap.translated.iter().any(|t| t == "stream_cut"), "{tap:?}");
    }

    /// A llama.cpp-shaped stream: one text block of `text` in deltas of
    /// `step` characters (then, optionally, a real tool_use block).
    fn text_stream(text: &str, step: usize, then_tool: bool) -> String {
        let mut s = String::from(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":5,\"output_tokens\":0}}}\n\n",
        );
        s.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(step) {
            let t: String = piece.iter().collect();
            let d = serde_json::json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":t}});
            s.push_str(&format!("event: content_block_delta\ndata: {d}\n\n"));
        }
        s.push_str(
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        );
        if then_tool {
            s.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"Read\",\"input\":{}}}\n\n");
            s.push_str("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"file_path\\\":\\\"a\\\"}\"}}\n\n");
            s.push_str("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n");
        }
        let stop = if then_tool { "tool_use" } else { "end_turn" };
        s.push_str(&format!("event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"{stop}\"}},\"usage\":{{\"output_tokens\":40}}}}\n\n"));
        s.push_str("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
        s
    }

    /// What a client makes of a stream: its blocks (text joined, tool input
    /// parsed) and the stop reason; panics on a broken event order.
    fn assemble(bytes: &[u8]) -> (Vec<Value>, Option<String>) {
        let text = std::str::from_utf8(bytes).unwrap();
        let mut blocks: Vec<Value> = Vec::new();
        let mut json_parts: Vec<String> = Vec::new();
        let mut stop = None;
        let mut open: Option<u64> = None;
        for raw in text.split("\n\n").filter(|e| !e.trim().is_empty()) {
            let (name, data) = parse_event(raw.as_bytes());
            let v: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
            match name.unwrap_or("") {
                "content_block_start" => {
                    assert_eq!(open, None, "a block opened inside another: {text}");
                    let i = v["index"].as_u64().unwrap();
                    assert_eq!(i as usize, blocks.len(), "indexes count up from 0: {text}");
                    open = Some(i);
                    blocks.push(v["content_block"].clone());
                    json_parts.push(String::new());
                }
                "content_block_delta" => {
                    let i = v["index"].as_u64().unwrap();
                    assert_eq!(open, Some(i), "a delta outside its block: {text}");
                    let b = &mut blocks[i as usize];
                    if let Some(t) = v["delta"]["text"].as_str() {
                        let cur = b["text"].as_str().unwrap_or("").to_string();
                        b["text"] = Value::String(cur + t);
                    }
                    if let Some(p) = v["delta"]["partial_json"].as_str() {
                        json_parts[i as usize].push_str(p);
                    }
                }
                "content_block_stop" => {
                    let i = v["index"].as_u64().unwrap();
                    assert_eq!(open, Some(i), "a stop for a block not open: {text}");
                    open = None;
                    if !json_parts[i as usize].is_empty() {
                        blocks[i as usize]["input"] =
                            serde_json::from_str(&json_parts[i as usize]).unwrap();
                    }
                }
                "message_delta" => stop = v["delta"]["stop_reason"].as_str().map(String::from),
                _ => {}
            }
        }
        assert_eq!(open, None, "a block left open: {text}");
        (blocks, stop)
    }

    fn tools() -> LazyTools {
        LazyTools::new(Bytes::from(
            serde_json::json!([
                {"name": "Edit", "input_schema": {"type": "object", "properties": {
                    "file_path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"}},
                    "required": ["file_path", "old_string", "new_string"]}},
                {"name": "Read", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}}
            ])
            .to_string(),
        ))
    }

    /// Relay `input` through a repairing relay, cut into chunks of `chunk` bytes.
    fn repaired(input: &str, chunk: usize) -> (Vec<u8>, repair::Report) {
        let mut r = relay_new().with_repair(tools());
        let mut out = Vec::new();
        let bytes = input.as_bytes();
        for c in bytes.chunks(chunk) {
            out.extend_from_slice(&r.push(Bytes::copy_from_slice(c)));
        }
        if let Some(b) = r.finish("ended") {
            out.extend_from_slice(&b);
        }
        (out, r.report())
    }

    const XML_EDIT: &str = "<tool_call>\n<function=Edit>\n<parameter=file_path>\nsrc/a.py\n</parameter>\n<parameter=old_string>\nreturn n - 1\n</parameter>\n<parameter=new_string>\nreturn n\n</parameter>\n</function>\n</tool_call>";

    #[test]
    fn a_streamed_xml_call_becomes_tool_use_at_any_split() {
        for step in [1, 3, 7, 500] {
            let input = text_stream(XML_EDIT, step, false);
            for chunk in [1, 13, 64, input.len()] {
                let (out, report) = repaired(&input, chunk);
                let (blocks, stop) = assemble(&out);
                assert_eq!(blocks.len(), 1, "step {step} chunk {chunk}: {blocks:?}");
                assert_eq!(blocks[0]["type"], "tool_use");
                assert_eq!(blocks[0]["name"], "Edit");
                assert_eq!(
                    blocks[0]["input"],
                    serde_json::json!({"file_path": "src/a.py", "old_string": "return n - 1", "new_string": "return n"})
                );
                assert_eq!(stop.as_deref(), Some("tool_use"));
                assert_eq!(
                    report.repaired_note().as_deref(),
                    Some("qwen3_coder_xml x1")
                );
            }
        }
    }

    #[test]
    fn a_call_cut_off_by_max_tokens_stays_text_and_a_ping_does_not_break_a_repair() {
        let cut = text_stream(XML_EDIT, 4, false).replace(
            "\"stop_reason\":\"end_turn\"",
            "\"stop_reason\":\"max_tokens\"",
        );
        let (out, report) = repaired(&cut, 29);
        let (blocks, stop) = assemble(&out);
        assert_eq!(blocks.len(), 1, "{blocks:?}");
        assert_eq!(blocks[0]["type"], "text");
        assert_eq!(blocks[0]["text"], XML_EDIT, "the text as it came");
        assert_eq!(stop.as_deref(), Some("max_tokens"));
        assert_eq!(report.calls(), 0);
        assert!(
            report
                .unparsed_note()
                .unwrap()
                .contains("cut off by max_tokens")
        );

        let input = text_stream(XML_EDIT, 4, false);
        let third = input
            .match_indices("event: content_block_delta")
            .nth(3)
            .unwrap()
            .0;
        let with_ping = format!(
            "{}event: ping\ndata: {{\"type\":\"ping\"}}\n\n{}",
            &input[..third],
            &input[third..]
        );
        let (out, report) = repaired(&with_ping, 31);
        let (blocks, _) = assemble(&out);
        assert_eq!(report.calls(), 1, "{blocks:?}");
        assert_eq!(blocks[0]["type"], "tool_use");
    }

    #[test]
    fn held_text_sends_pings_and_white_space_is_bounded() {
        let mut r = relay_new().with_repair(tools());
        let mut out = Vec::new();
        out.extend_from_slice(
            &r.push(Bytes::from(
                text_stream("", 1, false)
                    .split("event: content_block_stop")
                    .next()
                    .unwrap()
                    .to_string(),
            )),
        );
        for _ in 0..200 {
            let d = serde_json::json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\n"}});
            out.extend_from_slice(&r.push(Bytes::from(format!(
                "event: content_block_delta\ndata: {d}\n\n"
            ))));
        }
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.matches("event: ping").count() >= 5,
            "pings while held: {text}"
        );
    }

    #[test]
    fn prose_then_a_hermes_call_keeps_the_prose_and_moves_later_blocks() {
        let text = "I will read it first.\n<tool_call>\n{\"name\": \"Read\", \"arguments\": {\"file_path\": \"b.py\"}}\n</tool_call>";
        for step in [1, 2, 5, 200] {
            let input = text_stream(text, step, true);
            let (out, report) = repaired(&input, 17);
            let (blocks, stop) = assemble(&out);
            assert_eq!(blocks.len(), 3, "step {step}: {blocks:?}");
            assert_eq!(blocks[0]["text"], "I will read it first.\n");
            assert_eq!(blocks[1]["name"], "Read");
            assert_eq!(blocks[1]["input"]["file_path"], "b.py");
            assert_eq!(
                blocks[2]["name"], "Read",
                "the real tool_use moved to index 2"
            );
            assert_eq!(blocks[2]["input"]["file_path"], "a");
            assert_eq!(stop.as_deref(), Some("tool_use"));
            assert_eq!(report.calls(), 1);
        }
    }

    #[test]
    fn prose_that_mentions_a_marker_or_an_unknown_tool_stays_text() {
        for text in [
            "Wrap each call in `<tool_call>` tags, like <tool_call>this</tool_call>.",
            "<tool_call>\n{\"name\": \"Deploy\", \"arguments\": {\"to\": \"prod\"}}\n</tool_call>",
            "{\"answer\": 42}",
            "Use arrays like [1, 2] and a < b.",
        ] {
            for step in [1, 4, 300] {
                let input = text_stream(text, step, false);
                let (out, report) = repaired(&input, 9);
                let (blocks, stop) = assemble(&out);
                assert_eq!(blocks.len(), 1, "{text:?} step {step}");
                assert_eq!(blocks[0]["type"], "text");
                assert_eq!(
                    blocks[0]["text"], text,
                    "the text arrives whole and unchanged"
                );
                assert_eq!(stop.as_deref(), Some("end_turn"));
                assert_eq!(report.calls(), 0);
            }
        }
        let (_, report) = repaired(
            &text_stream(
                "<tool_call>\n{\"name\": \"Deploy\", \"arguments\": {}}\n</tool_call>",
                3,
                false,
            ),
            50,
        );
        assert!(
            report
                .unparsed_note()
                .unwrap()
                .contains("`Deploy` is not an offered tool")
        );
    }

    #[test]
    fn plain_prose_and_tool_use_answers_pass_without_a_copy() {
        let mut r = relay_new().with_repair(tools());
        let plain = Bytes::from(text_stream("Done: the tests pass.", 4, true));
        let out = r.push(plain.clone());
        assert_eq!(out, plain, "nothing to repair: the bytes are the same");
        assert_eq!(r.report(), repair::Report::default());
        let mut r = relay_new().with_repair(tools());
        let only_tool = Bytes::from(STREAM.replace(
            "{\"type\":\"text\",\"text\":\"\"}",
            "{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"Read\",\"input\":{}}",
        ));
        let out = r.push(only_tool.clone());
        assert_eq!(
            out.as_ptr(),
            only_tool.as_ptr(),
            "a tool_use answer is not copied"
        );
    }

    #[test]
    fn a_stream_cut_inside_a_held_call_releases_it_before_the_error() {
        let input = text_stream(XML_EDIT, 5, false);
        let cut = &input[..input
            .find("</parameter>\\n<parameter=new")
            .unwrap_or(input.len() / 2)];
        let (out, _) = repaired(cut, 11);
        let text = String::from_utf8(out).unwrap();
        let said: String = text
            .split("\n\n")
            .filter_map(|e| serde_json::from_str::<Value>(&parse_event(e.as_bytes()).1).ok())
            .filter_map(|v| v["delta"]["text"].as_str().map(String::from))
            .collect();
        assert!(
            said.starts_with("<tool_call>\n<function=Edit>\n<parameter=file_path>"),
            "the held text is released: {said:?}"
        );
        assert!(
            text.ends_with("stream ended before message_stop\"}}\n\n"),
            "{text}"
        );
    }

    /// An upstream of one chunk per event that records how many it gave
    /// and whether it was dropped before its end (the connection closed).
    struct Counted {
        chunks: std::vec::IntoIter<Bytes>,
        given: Arc<Mutex<(usize, bool)>>,
        total: usize,
    }

    impl Stream for Counted {
        type Item = Result<Bytes, String>;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Self::Item>> {
            let next = self.chunks.next();
            if next.is_some() {
                self.given.lock().unwrap().0 += 1;
            }
            std::task::Poll::Ready(next.map(Ok))
        }
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            let mut g = self.given.lock().unwrap();
            g.1 = g.0 < self.total;
        }
    }

    fn guarded() -> Relay {
        relay_new().with_runaway(Box::new(|f: &mut runaway::Found| {
            f.why = f.sentence(true);
            ("api_error", f.why.clone())
        }))
    }

    /// The real loop streamed a token at a time: the relay forwards its
    /// start, then an error event instead of the rest, and drops the
    /// upstream (closing the backend's connection) before its end.
    #[tokio::test]
    async fn a_runaway_is_cut_off_with_an_error_and_the_upstream_dropped() {
        let input = text_stream(
            &super::super::runaway_fixtures::GEMMA_LOOP.repeat(8),
            4,
            false,
        );
        let chunks: Vec<Bytes> = input
            .split_inclusive("\n\n")
            .map(|e| Bytes::from(e.to_string()))
            .collect();
        let total = chunks.len();
        let given = Arc::new(Mutex::new((0, false)));
        let up = Counted {
            chunks: chunks.into_iter(),
            given: given.clone(),
            total,
        };
        let seen = Arc::new(Mutex::new(None));
        let seen2 = seen.clone();
        let s = relay(
            up,
            guarded(),
            Duration::from_secs(5),
            Box::new(move |t: &Tap, _: &repair::Report| {
                *seen2.lock().unwrap() = Some(t.clone());
            }),
        );
        let out: Vec<Bytes> = s.map(|r| r.unwrap()).collect().await;
        let text = String::from_utf8(out.concat()).unwrap();
        let (sent, dropped_early) = *given.lock().unwrap();
        assert!(dropped_early && sent < total / 4, "{sent} of {total}");
        assert!(
            text.ends_with("\"}}\n\n") && text.contains("event: error"),
            "{text}"
        );
        assert!(
            text.contains("runaway output: the model repeated one line 20 times"),
            "{text}"
        );
        assert!(!text.contains("message_stop"), "{text}");
        let tap = seen.lock().unwrap().clone().unwrap();
        let f = tap.runaway.expect("the tap has it");
        assert_eq!(f.cause, runaway::Cause::Line);
        assert!(tap.translated.iter().any(|t| t == "runaway_output"));
        assert!(!tap.translated.iter().any(|t| t == "stream_cut"));
    }

    /// LM Studio's empty stream with usage 0 (BT#2339): the truncation
    /// guard stops it at `message_delta`, before `message_stop`, and the
    /// tap has the record.
    #[tokio::test]
    async fn a_truncation_is_stopped_at_message_delta() {
        let input = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":0}}}\n\n\
            event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}\n\n\
            event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let sent = crate::shim::truncation::Sent {
            lower_bound: 5000,
            bytes: 40_000,
            ..Default::default()
        };
        let r = relay_new().with_truncation(Box::new(move |tap: &Tap| {
            let read = crate::shim::truncation::Read {
                tokens: tap.input_seen.then_some(tap.usage.input),
                empty: tap.text_deltas == 0 && tap.tool_uses == 0,
            };
            let sign = crate::shim::truncation::read_less(&sent, read)?;
            Some((
                crate::wire::Truncation {
                    sign,
                    turn: 3,
                    bytes_sent: sent.bytes,
                    lower_bound: sent.lower_bound,
                    read: read.tokens,
                    window: None,
                },
                "silent truncation: it read 0".to_string(),
            ))
        }));
        let up = futures::stream::iter(vec![Ok::<Bytes, String>(Bytes::from(input))]);
        let seen = Arc::new(Mutex::new(None));
        let seen2 = seen.clone();
        let s = relay(
            up,
            r,
            Duration::from_secs(5),
            Box::new(move |t: &Tap, _: &repair::Report| {
                *seen2.lock().unwrap() = Some(t.clone());
            }),
        );
        let out: Vec<Bytes> = s.map(|r| r.unwrap()).collect().await;
        let text = String::from_utf8(out.concat()).unwrap();
        assert!(text.contains("event: error") && text.contains("silent truncation"), "{text}");
        assert!(!text.contains("message_stop") && !text.contains("message_delta"), "{text}");
        let tap = seen.lock().unwrap().clone().unwrap();
        assert_eq!(tap.truncated.map(|t| t.turn), Some(3));
        assert!(tap.translated.iter().any(|t| t == "truncated"));
    }

    /// The repeated unit cut across deltas at every offset, and the stream
    /// across chunks: the guard fires at the same byte of the answer.
    #[test]
    fn a_runaway_is_found_at_every_split_point() {
        let text = super::super::runaway_fixtures::GEMMA_LOOP;
        let want = runaway::scan_blocks([text]).expect("the loop fires");
        let unit = want.unit.len() + 1;
        for offset in 0..unit {
            for step in [1, 3, unit] {
                let mut r = guarded();
                let head: String = text.chars().take(offset).collect();
                let rest: String = text.chars().skip(offset).collect();
                let mut input = text_stream(&head, offset.max(1), false);
                input.truncate(input.find("event: content_block_stop").unwrap());
                let body = text_stream(&rest, step, false);
                input.push_str(&body[body.find("event: content_block_delta").unwrap()..]);
                let bytes = input.as_bytes();
                let mut out = Vec::new();
                for c in bytes.chunks(97) {
                    out.extend_from_slice(&r.push(Bytes::copy_from_slice(c)));
                }
                let got = r.tap.runaway.clone();
                assert_eq!(
                    got.map(|f| (f.cause, f.unit, f.repeats, f.bytes_dropped)),
                    Some((
                        want.cause.clone(),
                        want.unit.clone(),
                        want.repeats,
                        want.bytes_dropped
                    )),
                    "offset {offset} step {step}"
                );
                assert!(r.stopped());
                assert!(String::from_utf8(out).unwrap().contains("event: error"));
            }
        }
    }

    /// A normal answer passes untouched with the guard on: the same bytes,
    /// and a tool_use answer without a copy.
    #[test]
    fn a_normal_answer_passes_the_guard_without_a_copy() {
        let mut r = guarded().with_repair(tools());
        let plain = Bytes::from(text_stream("Done: the tests pass.", 4, true));
        assert_eq!(r.push(plain.clone()), plain);
        assert!(r.tap.runaway.is_none() && !r.stopped());
        let mut r = guarded().with_repair(tools());
        let only_tool = Bytes::from(STREAM.replace(
            "{\"type\":\"text\",\"text\":\"\"}",
            "{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"Read\",\"input\":{}}",
        ));
        let out = r.push(only_tool.clone());
        assert_eq!(out.as_ptr(), only_tool.as_ptr(), "not copied");
        assert!(r.tap.runaway.is_none() && !r.stopped());
    }

    #[test]
    fn data_only_and_garbage_events_do_not_panic() {
        let mut r = relay_new();
        r.push(Bytes::from_static(b"data: {\"type\":\"message_stop\"}\n\n"));
        assert!(r.tap.saw_stop);
        r.push(Bytes::from_static(
            b"event: message_start\ndata: {not json\n\n\xff\xfe\n\n",
        ));
    }
}
