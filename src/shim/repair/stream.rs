//! The stream repair ([`StreamRepair`]): a state machine the SSE relay
//! feeds one event at a time, holding a text block back only from where a
//! call could begin.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::shim::repair::message::*;
use crate::shim::repair::parse::*;

/// At most this much text is held back while a call may be forming.
const MAX_HELD: usize = 1 << 20;

#[derive(Debug)]
enum St {
    Idle,
    /// A text block began: its start and white-space deltas are held until
    /// its first real text says whether the whole block may be a call.
    Opening {
        index: u64,
        held: Vec<Bytes>,
        text: String,
    },
    /// The text streams; `partial` is an end held back because it could
    /// be the start of a marker.
    Scanning {
        index: u64,
        partial: String,
    },
    /// Held from a marker (or the whole block) on.
    Capturing {
        index: u64,
        /// The whole block, start included: replaced whole on success.
        whole: Option<Vec<Bytes>>,
        text: String,
    },
}

/// The streaming side: fed every SSE event, returns what to send instead.
#[derive(Debug)]
pub struct StreamRepair {
    tools: LazyTools,
    st: St,
    /// Blocks added before this point (later indexes move up).
    shift: u64,
    pub report: Report,
    /// A repaired block waiting for the next event: a `message_delta` that
    /// says `max_tokens` means the call was cut off, and it goes out as the
    /// text it was.
    pending: Option<Pending>,
    /// Events held since the last `ping` went out.
    held_since_ping: u32,
}

/// A repair that is decided but not yet sent.
#[derive(Debug)]
struct Pending {
    calls: Vec<Bytes>,
    as_text: Vec<Bytes>,
    shift: u64,
    form: Form,
    n: usize,
}

/// An Anthropic `ping`: what the shim sends while it holds text back, so
/// Claude Code's stream watchdog sees the stream alive (the SDK ignores it).
fn ping() -> Bytes {
    Bytes::from_static(b"event: ping\ndata: {\"type\":\"ping\"}\n\n")
}

/// A ping goes out after this many held events.
const PING_EVERY: u32 = 32;

/// At most this many events are held for one block.
const MAX_HELD_EVENTS: usize = 65_536;

/// What to do with one event.
#[derive(Debug, PartialEq)]
pub enum Emit {
    /// Forward it as it came.
    Pass,
    /// Send these bytes instead (empty: hold it).
    Out(Vec<Bytes>),
}

fn sse(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

fn text_delta(index: u64, text: &str) -> Bytes {
    sse(
        "content_block_delta",
        &json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}),
    )
}

fn block_stop(index: u64) -> Bytes {
    sse(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": index}),
    )
}

/// The three events of one `tool_use` block.
fn tool_use_events(index: u64, call: &Call) -> [Bytes; 3] {
    [
        sse(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": new_id(), "name": call.name, "input": {}}}),
        ),
        sse(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": call.input.to_string()}}),
        ),
        block_stop(index),
    ]
}

#[derive(Deserialize)]
struct IndexOnly {
    index: Option<u64>,
}

#[derive(Deserialize)]
struct BlockStart {
    index: Option<u64>,
    content_block: Option<BlockType>,
}

#[derive(Deserialize)]
struct BlockType {
    #[serde(rename = "type")]
    typ: String,
}

#[derive(Deserialize)]
struct Delta {
    index: Option<u64>,
    delta: Option<DeltaBody>,
}

#[derive(Deserialize)]
struct DeltaBody {
    text: Option<String>,
}

impl StreamRepair {
    pub fn new(tools: LazyTools) -> StreamRepair {
        StreamRepair {
            tools,
            st: St::Idle,
            shift: 0,
            report: Report::default(),
            pending: None,
            held_since_ping: 0,
        }
    }

    /// An event re-written with its index moved up by `shift`.
    fn shifted(&self, raw: &Bytes, name: &str, data: &str) -> Emit {
        if self.shift == 0 {
            return Emit::Pass;
        }
        match serde_json::from_str::<Value>(data) {
            Ok(mut v) => {
                if let Some(i) = v.get("index").and_then(Value::as_u64) {
                    v["index"] = json!(i + self.shift);
                    return Emit::Out(vec![sse(name, &v)]);
                }
                Emit::Out(vec![raw.clone()])
            }
            Err(_) => Emit::Out(vec![raw.clone()]),
        }
    }

    /// Feed one event (`name`, its joined `data`, the raw bytes).
    pub fn feed(&mut self, name: &str, data: &str, raw: &Bytes) -> Emit {
        // A ping ends nothing: it passes, and whatever is held stays held.
        if name == "ping" {
            return Emit::Pass;
        }
        let Some(p) = self.pending.take() else {
            return self.feed_now(name, data, raw);
        };
        let cut = name == "message_delta"
            && serde_json::from_str::<Value>(data).is_ok_and(|v| {
                v.pointer("/delta/stop_reason").and_then(Value::as_str) == Some("max_tokens")
            });
        let mut out = if cut {
            self.report
                .unparsed
                .get_or_insert((p.form, "the call was cut off by max_tokens".into()));
            p.as_text
        } else {
            self.shift = p.shift;
            self.report.repaired.push((p.form, p.n));
            p.calls
        };
        match self.feed_now(name, data, raw) {
            Emit::Pass => out.push(raw.clone()),
            Emit::Out(mut v) => out.append(&mut v),
        }
        Emit::Out(out)
    }

    /// Count one held event; a ping to send when it is time.
    fn held(&mut self) -> Vec<Bytes> {
        self.held_since_ping += 1;
        if self.held_since_ping >= PING_EVERY {
            self.held_since_ping = 0;
            vec![ping()]
        } else {
            Vec::new()
        }
    }

    fn feed_now(&mut self, name: &str, data: &str, raw: &Bytes) -> Emit {
        match name {
            "content_block_start" => self.on_start(name, data, raw),
            "content_block_delta" => self.on_delta(name, data, raw),
            "content_block_stop" => self.on_stop(name, data, raw),
            "message_delta" => {
                let mut out = self.flush();
                if !self.report.repaired.is_empty()
                    && let Ok(mut v) = serde_json::from_str::<Value>(data)
                    && let Some(d) = v.get_mut("delta").and_then(Value::as_object_mut)
                    && d.get("stop_reason").and_then(Value::as_str) != Some("max_tokens")
                {
                    d.insert("stop_reason".into(), json!("tool_use"));
                    out.push(sse(name, &v));
                    return Emit::Out(out);
                }
                held_then(out, raw)
            }
            _ => held_then(self.flush(), raw),
        }
    }

    fn on_start(&mut self, name: &str, data: &str, raw: &Bytes) -> Emit {
        let out = self.flush();
        let start: Option<BlockStart> = serde_json::from_str(data).ok();
        let is_text = start
            .as_ref()
            .and_then(|s| s.content_block.as_ref())
            .is_some_and(|b| b.typ == "text");
        if let (true, Some(index)) = (is_text, start.and_then(|s| s.index)) {
            let ev = match self.shifted(raw, name, data) {
                Emit::Pass => raw.clone(),
                Emit::Out(mut v) => v.pop().unwrap_or_else(|| raw.clone()),
            };
            self.st = St::Opening {
                index,
                held: vec![ev],
                text: String::new(),
            };
            return Emit::Out(out);
        }
        self.then_this(out, raw, name, data)
    }

    /// Send `out` (what was held), then this event (its index moved).
    fn then_this(&self, mut out: Vec<Bytes>, raw: &Bytes, name: &str, data: &str) -> Emit {
        match self.shifted(raw, name, data) {
            Emit::Pass if out.is_empty() => Emit::Pass,
            Emit::Pass => {
                out.push(raw.clone());
                Emit::Out(out)
            }
            Emit::Out(mut v) => {
                out.append(&mut v);
                Emit::Out(out)
            }
        }
    }

    fn on_delta(&mut self, name: &str, data: &str, raw: &Bytes) -> Emit {
        let cur = match &self.st {
            St::Opening { index, .. }
            | St::Scanning { index, .. }
            | St::Capturing { index, .. } => Some(*index),
            St::Idle => None,
        };
        // Fast path: a delta that cannot hold a marker or its start, while
        // nothing is held back.
        if let St::Scanning { partial, .. } = &self.st
            && partial.is_empty()
            && memchr::memchr2(b'<', b'[', raw).is_none()
            && memchr::memmem::find(raw, b"\\u00").is_none()
        {
            return self.shifted(raw, name, data);
        }
        let Some(cur) = cur else {
            return self.shifted(raw, name, data);
        };
        let Ok(d) = serde_json::from_str::<Delta>(data) else {
            return self.shifted(raw, name, data);
        };
        if d.index != Some(cur) {
            return self.shifted(raw, name, data);
        }
        let Some(piece) = d.delta.and_then(|b| b.text) else {
            return self.shifted(raw, name, data);
        };
        let out_index = cur + self.shift;
        match &mut self.st {
            St::Opening { held, text, .. } => {
                text.push_str(&piece);
                let ev = match self.shift {
                    0 => raw.clone(),
                    _ => text_delta(out_index, &piece),
                };
                held.push(ev);
                if text.len() > MAX_HELD || held.len() > MAX_HELD_EVENTS {
                    return Emit::Out(self.give_up());
                }
                let trimmed = text.trim_start();
                if trimmed.is_empty() {
                    return Emit::Out(self.held());
                }
                if opens_call(trimmed) || (trimmed.len() < 12 && could_open(trimmed)) {
                    if opens_call(trimmed) {
                        let held = std::mem::take(held);
                        let text = std::mem::take(text);
                        self.st = St::Capturing {
                            index: cur,
                            whole: Some(held),
                            text,
                        };
                    }
                    return Emit::Out(self.held());
                }
                // Prose: let it go, and watch the rest for a marker.
                let held = std::mem::take(held);
                let text = std::mem::take(text);
                self.st = St::Scanning {
                    index: cur,
                    partial: String::new(),
                };
                // The held start and deltas leave as they came, except a
                // marker already inside them.
                if marker_at(&text).is_some() || partial_marker_len(&text) > 0 {
                    let start = held.into_iter().next();
                    let mut out: Vec<Bytes> = start.into_iter().collect();
                    out.extend(self.scan(cur, &text));
                    return Emit::Out(out);
                }
                Emit::Out(held)
            }
            St::Scanning { .. } => Emit::Out(self.scan(cur, &piece)),
            St::Capturing { whole, text, .. } => {
                text.push_str(&piece);
                if let Some(h) = whole.as_mut() {
                    h.push(match self.shift {
                        0 => raw.clone(),
                        _ => text_delta(out_index, &piece),
                    });
                }
                if text.len() > MAX_HELD
                    || whole.as_ref().is_some_and(|h| h.len() > MAX_HELD_EVENTS)
                {
                    return Emit::Out(self.give_up());
                }
                Emit::Out(self.held())
            }
            St::Idle => Emit::Pass,
        }
    }

    /// Scanning: forward `piece` (after any held partial) up to a marker;
    /// hold from the marker on, or a trailing partial marker.
    fn scan(&mut self, index: u64, piece: &str) -> Vec<Bytes> {
        let St::Scanning { partial, .. } = &mut self.st else {
            return Vec::new();
        };
        let mut text = std::mem::take(partial);
        text.push_str(piece);
        let out_index = index + self.shift;
        if let Some(p) = marker_at(&text) {
            let mut out = Vec::new();
            if p > 0 {
                out.push(text_delta(out_index, &text[..p]));
            }
            self.st = St::Capturing {
                index,
                whole: None,
                text: text[p..].to_string(),
            };
            return out;
        }
        let keep = partial_marker_len(&text);
        let send = &text[..text.len() - keep];
        let mut out = Vec::new();
        if !send.is_empty() {
            out.push(text_delta(out_index, send));
        }
        if let St::Scanning { partial, .. } = &mut self.st {
            *partial = text[text.len() - keep..].to_string();
        }
        out
    }

    fn on_stop(&mut self, name: &str, data: &str, raw: &Bytes) -> Emit {
        let idx = serde_json::from_str::<IndexOnly>(data)
            .ok()
            .and_then(|i| i.index);
        let cur = match &self.st {
            St::Opening { index, .. }
            | St::Scanning { index, .. }
            | St::Capturing { index, .. } => Some(*index),
            St::Idle => None,
        };
        if cur.is_none() || idx != cur {
            let out = self.flush();
            return self.then_this(out, raw, name, data);
        }
        let index = cur.unwrap_or(0);
        let out_index = index + self.shift;
        match std::mem::replace(&mut self.st, St::Idle) {
            St::Opening { mut held, .. } => {
                held.push(block_stop(out_index));
                Emit::Out(held)
            }
            St::Scanning { partial, .. } => {
                let mut out = Vec::new();
                if !partial.is_empty() {
                    out.push(text_delta(out_index, &partial));
                }
                out.push(block_stop(out_index));
                Emit::Out(out)
            }
            St::Capturing { whole, text, .. } => {
                let found = find(&text, self.tools.get());
                match found {
                    Found::Calls {
                        prefix,
                        calls,
                        form,
                    } => {
                        let mut out = Vec::new();
                        let mut next = out_index;
                        let whole_block = whole.is_some();
                        if whole_block && !prefix.trim().is_empty() {
                            // The block opened with prose before a marker
                            // (only white space can stand there): keep it.
                            out.push(
                                whole
                                    .as_ref()
                                    .and_then(|h| h.first().cloned())
                                    .unwrap_or_else(|| raw.clone()),
                            );
                            out.push(text_delta(next, &prefix));
                            out.push(block_stop(next));
                            next += 1;
                        } else if !whole_block {
                            if !prefix.is_empty() {
                                out.push(text_delta(next, &prefix));
                            }
                            out.push(block_stop(next));
                            next += 1;
                        }
                        for c in &calls {
                            out.extend(tool_use_events(next, c));
                            next += 1;
                        }
                        // Sent with the next event, unless that says the
                        // answer was cut off: then it is the text it was.
                        let mut as_text = match whole {
                            Some(h) => h,
                            None => vec![text_delta(out_index, &text)],
                        };
                        as_text.push(block_stop(out_index));
                        self.pending = Some(Pending {
                            calls: out,
                            as_text,
                            // Later upstream blocks move past the new ones.
                            shift: next - 1 - index,
                            form,
                            n: calls.len(),
                        });
                        Emit::Out(Vec::new())
                    }
                    other => {
                        if let Found::Unparsed { form, why } = other {
                            self.report.unparsed.get_or_insert((form, why));
                        }
                        let mut out = match whole {
                            Some(h) => h,
                            None => vec![text_delta(out_index, &text)],
                        };
                        out.push(block_stop(out_index));
                        Emit::Out(out)
                    }
                }
            }
            St::Idle => Emit::Pass,
        }
    }

    /// Release whatever is held, as text (the block did not close
    /// normally, or grew past the cap).
    fn give_up(&mut self) -> Vec<Bytes> {
        let shift = self.shift;
        match std::mem::replace(&mut self.st, St::Idle) {
            St::Opening { held, .. } => held,
            St::Scanning { index, partial } => {
                if partial.is_empty() {
                    self.st = St::Scanning { index, partial };
                    Vec::new()
                } else {
                    let out = vec![text_delta(index + shift, &partial)];
                    self.st = St::Scanning {
                        index,
                        partial: String::new(),
                    };
                    out
                }
            }
            St::Capturing { index, whole, text } => {
                let out = match whole {
                    Some(h) => h,
                    None => vec![text_delta(index + shift, &text)],
                };
                self.st = St::Scanning {
                    index,
                    partial: String::new(),
                };
                out
            }
            St::Idle => Vec::new(),
        }
    }

    /// Before any event that is not part of the current text block (and at
    /// the end of the stream): release what is held.
    pub fn flush(&mut self) -> Vec<Bytes> {
        let mut out = match self.pending.take() {
            // The stream ends before its stop reason: no call is made of
            // an answer that may be cut.
            Some(p) => p.as_text,
            None => Vec::new(),
        };
        out.extend(self.give_up());
        self.st = St::Idle;
        out
    }
}

/// What was held, then `raw` as it came (an event without an index).
fn held_then(mut out: Vec<Bytes>, raw: &Bytes) -> Emit {
    if out.is_empty() {
        return Emit::Pass;
    }
    out.push(raw.clone());
    Emit::Out(out)
}

/// A short start that may still grow into a marker (`<tool_c`, `[TOOL`).
fn could_open(trimmed: &str) -> bool {
    MARKERS.iter().any(|m| m.starts_with(trimmed))
}
