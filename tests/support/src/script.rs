//! A scripted model for the fakes: decides each answer from the request,
//! counting turns by the tool results already in the history (Claude Code
//! rewrites history if two answers share a message id, so ids are unique
//! and turn counting never relies on the number of assistant messages).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

/// One answer of the model.
#[derive(Debug, Clone)]
pub enum Reply {
    Text(String),
    Tool {
        name: String,
        input: Value,
    },
    /// An HTTP error before any streaming starts.
    Error {
        status: u16,
        body: Value,
    },
    /// Raw SSE text sent as is after a 200 (for mid-stream errors).
    RawSse(String),
    /// A 200 whose body is sent as is with this content type, streamed or
    /// not: what a proxy's login page or a misrouted port answers.
    Raw {
        content_type: &'static str,
        body: String,
    },
    /// A server that took the request and never answers it (a hung
    /// backend): no status, no headers.
    Hang,
    /// Text streamed a few characters per delta, as a server streams
    /// tokens (a text-form tool call arrives like this).
    TokenText(String),
    /// A model that runs away: `text` in token-sized deltas, over and over,
    /// until the request's `max_tokens` deltas are sent, then
    /// `stop_reason: max_tokens`, as llama-server ends a generation that hit
    /// its limit. Streamed one event at a time; the fake counts the events
    /// it sent and sees when the client goes away.
    Runaway(String),
    /// A text block, then `then`'s blocks (a model that says what it is
    /// doing before its tool call).
    TextThen {
        text: String,
        then: Box<Reply>,
    },
    /// Several calls in one answer (parallel tool calls), in order.
    Tools(Vec<(String, Value)>),
    /// A thinking block (llama.cpp's shape: empty signature), then `then`.
    ThinkThen {
        thinking: String,
        then: Box<Reply>,
    },
}

pub type Script = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

/// Tool results already in the conversation.
pub fn tool_results(req: &Value) -> usize {
    req.get("messages")
        .and_then(Value::as_array)
        .map(|ms| {
            ms.iter()
                .filter(|m| m["role"] == "user")
                .filter_map(|m| m["content"].as_array())
                .flatten()
                .filter(|b| b["type"] == "tool_result")
                .count()
        })
        .unwrap_or(0)
}

/// Always the same text.
pub fn text(s: &str) -> Script {
    let s = s.to_string();
    Arc::new(move |_| Reply::Text(s.clone()))
}

/// Turn 1: Write `path` with `content`; then a short report.
pub fn write_then_report(path: &str, content: &str) -> Script {
    let (path, content) = (path.to_string(), content.to_string());
    Arc::new(move |req| {
        if tool_results(req) == 0 && req.get("tools").is_some() {
            Reply::Tool {
                name: "Write".into(),
                input: json!({"file_path": path, "content": content}),
            }
        } else {
            Reply::Text(format!(
                "Created {path}. Verified by writing it; nothing left to do."
            ))
        }
    })
}

/// The given tool calls in order, one per turn, then `done`.
pub fn tools_then_text(calls: Vec<(&str, Value)>, done: &str) -> Script {
    let calls: Vec<(String, Value)> = calls.into_iter().map(|(n, v)| (n.to_string(), v)).collect();
    let done = done.to_string();
    Arc::new(move |req| match calls.get(tool_results(req)) {
        Some((name, input)) if req.get("tools").is_some() => Reply::Tool {
            name: name.clone(),
            input: input.clone(),
        },
        _ => Reply::Text(done.clone()),
    })
}

static IDS: AtomicU64 = AtomicU64::new(1);

/// A message id unique across every fake in the process.
pub fn msg_id() -> String {
    format!(
        "msg_fake_{:016x}",
        IDS.fetch_add(1, Ordering::SeqCst) ^ 0x5eed_0000_0000
    )
}

fn blocks(reply: &Reply) -> (Vec<Value>, &'static str) {
    match reply {
        Reply::Text(t) | Reply::TokenText(t) | Reply::Runaway(t) => {
            (vec![json!({"type": "text", "text": t})], "end_turn")
        }
        Reply::ThinkThen { thinking, then } => {
            let (mut rest, stop) = blocks(then);
            rest.insert(
                0,
                json!({"type": "thinking", "thinking": thinking, "signature": ""}),
            );
            (rest, stop)
        }
        Reply::TextThen { text, then } => {
            let (mut rest, stop) = blocks(then);
            rest.insert(0, json!({"type": "text", "text": text}));
            (rest, stop)
        }
        Reply::Tool { name, input } => (
            vec![
                json!({"type": "tool_use", "id": format!("toolu_{}", msg_id()), "name": name, "input": input}),
            ],
            "tool_use",
        ),
        Reply::Tools(calls) => (
            calls
                .iter()
                .map(|(name, input)| json!({"type": "tool_use", "id": format!("toolu_{}", msg_id()), "name": name, "input": input}))
                .collect(),
            "tool_use",
        ),
        _ => (vec![], "end_turn"),
    }
}

/// A whole non-streaming Messages response.
pub fn message_json(model: &str, reply: &Reply, input: u64, cached: u64) -> Value {
    let (content, stop) = blocks(reply);
    json!({
        "id": msg_id(), "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": input, "cache_read_input_tokens": cached, "output_tokens": 9}
    })
}

/// The SSE events of a Messages response, as llama.cpp sends them.
pub fn message_sse(model: &str, reply: &Reply, input: u64, cached: u64) -> String {
    sse_with(
        model,
        reply,
        json!({"input_tokens": input, "cache_read_input_tokens": cached, "output_tokens": 0}),
        json!({"output_tokens": 9}),
        true,
    )
}

/// A stream as Ollama's `/v1/messages` sends it
/// (`anthropic/anthropic.go` at v0.33.0-rc2; ../shared/reference/
/// ollama-lmstudio.md A4): `message_start` carries an estimate
/// (`len(chars)/4` of the request), `message_delta` the real count,
/// `input_tokens` and `output_tokens` only; a thinking block has no
/// signature (anthropic.go:749-980).
pub fn message_sse_estimated(model: &str, reply: &Reply, estimate: u64, input: u64) -> String {
    sse_with(
        model,
        reply,
        json!({"input_tokens": estimate, "output_tokens": 0}),
        json!({"input_tokens": input, "output_tokens": 9}),
        false,
    )
}

/// The events of `reply`, `start` and `end` the usage of `message_start`
/// and `message_delta`; `signature`: a thinking block ends with an empty
/// `signature_delta` (llama.cpp), or with none (Ollama).
fn sse_with(model: &str, reply: &Reply, start: Value, end: Value, signature: bool) -> String {
    if let Reply::RawSse(s) = reply {
        return s.clone();
    }
    let (content, stop) = blocks(reply);
    // Token-sized deltas for a text reply that asks for them.
    let step = match reply {
        Reply::TokenText(_) => 3,
        _ => usize::MAX,
    };
    let mut ev: Vec<(String, Value)> = vec![(
        "message_start".into(),
        json!({"type": "message_start", "message": {
            "id": msg_id(), "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": start
        }}),
    )];
    for (i, b) in content.iter().enumerate() {
        if b["type"] == "text" {
            ev.push(("content_block_start".into(), json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})));
            let chars: Vec<char> = b["text"].as_str().unwrap_or("").chars().collect();
            for piece in chars.chunks(step.min(chars.len().max(1))) {
                let t: String = piece.iter().collect();
                ev.push(("content_block_delta".into(), json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": t}})));
            }
        } else if b["type"] == "thinking" {
            ev.push(("content_block_start".into(), json!({"type": "content_block_start", "index": i, "content_block": {"type": "thinking", "thinking": ""}})));
            ev.push(("content_block_delta".into(), json!({"type": "content_block_delta", "index": i, "delta": {"type": "thinking_delta", "thinking": b["thinking"]}})));
            if signature {
                ev.push(("content_block_delta".into(), json!({"type": "content_block_delta", "index": i, "delta": {"type": "signature_delta", "signature": ""}})));
            }
        } else {
            ev.push(("content_block_start".into(), json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}})));
            ev.push(("content_block_delta".into(), json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": b["input"].to_string()}})));
        }
        ev.push((
            "content_block_stop".into(),
            json!({"type": "content_block_stop", "index": i}),
        ));
    }
    ev.push(("message_delta".into(), json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": end})));
    ev.push(("message_stop".into(), json!({"type": "message_stop"})));
    ev.iter()
        .map(|(e, d)| format!("event: {e}\ndata: {d}\n\n"))
        .collect()
}
