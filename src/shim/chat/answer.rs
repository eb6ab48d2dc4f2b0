//! The way in: a chat-completions answer turned back into the Anthropic
//! Messages answer Claude Code reads, streamed ([`Translator`], [`stream`])
//! or whole ([`whole`]). Everything after it (the relay, its runaway,
//! repair and truncation guards, the record) reads Anthropic events only.
//!
//! The stream follows llama.cpp's own Anthropic stream
//! (`to_json_anthropic_stream` in tools/server/server-task.cpp): a
//! `message_start` at the first chunk, whose usage says what the prompt
//! cost (`timings.prompt_n` processed, `timings.cache_n` from the cache,
//! which llama-server sends on every chunk when asked); thinking from
//! `reasoning_content` (vLLM's `reasoning` too) with an empty signature;
//! text; one `tool_use` block per call, its arguments relayed as they
//! stream; then `message_delta` with the stop reason and the usage, and
//! `message_stop`. One block is open at a time, each closed before the
//! next opens. Where a server sends no timings (another OpenAI server),
//! the counts come in `message_delta` from the last chunk's `usage`:
//! `prompt_tokens` less `prompt_tokens_details.cached_tokens`.
//!
//! An answer the server did not finish (no `finish_reason`, no
//! `[DONE]`) gets no `message_stop` from here: the relay then closes it
//! with its error event, as it does a cut Anthropic stream. A mid-stream
//! error (`data: {"error": …}`) leaves as llama.cpp's Anthropic `error`
//! event, which the relay translates as it does on `/v1/messages`.

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::anthropic::{lenient, present};

/// One chunk of a streamed answer, or a whole answer.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Chunk {
    #[serde(deserialize_with = "lenient")]
    id: Option<String>,
    #[serde(deserialize_with = "lenient")]
    model: Option<String>,
    #[serde(deserialize_with = "lenient")]
    choices: Vec<Choice>,
    #[serde(deserialize_with = "lenient")]
    usage: Option<OaiUsage>,
    #[serde(deserialize_with = "lenient")]
    timings: Option<Timings>,
    #[serde(deserialize_with = "present")]
    error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Choice {
    #[serde(deserialize_with = "lenient")]
    delta: Option<Delta>,
    /// A whole answer's message (the same fields as a delta).
    #[serde(deserialize_with = "lenient")]
    message: Option<Delta>,
    #[serde(deserialize_with = "lenient")]
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Delta {
    #[serde(deserialize_with = "lenient")]
    content: Option<String>,
    #[serde(deserialize_with = "lenient")]
    reasoning_content: Option<String>,
    /// vLLM's name for it since 0.10.
    #[serde(deserialize_with = "lenient")]
    reasoning: Option<String>,
    #[serde(deserialize_with = "lenient")]
    tool_calls: Option<Vec<CallDelta>>,
}

impl Delta {
    fn reasoning(&self) -> Option<&str> {
        self.reasoning_content
            .as_deref()
            .or(self.reasoning.as_deref())
            .filter(|r| !r.is_empty())
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct CallDelta {
    #[serde(deserialize_with = "lenient")]
    index: Option<u64>,
    #[serde(deserialize_with = "lenient")]
    id: Option<String>,
    #[serde(deserialize_with = "lenient")]
    function: Option<FunctionDelta>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct FunctionDelta {
    #[serde(deserialize_with = "lenient")]
    name: Option<String>,
    #[serde(deserialize_with = "lenient")]
    arguments: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct OaiUsage {
    #[serde(deserialize_with = "lenient")]
    prompt_tokens: Option<u64>,
    #[serde(deserialize_with = "lenient")]
    completion_tokens: Option<u64>,
    #[serde(deserialize_with = "lenient")]
    prompt_tokens_details: Option<Details>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Details {
    #[serde(deserialize_with = "lenient")]
    cached_tokens: Option<u64>,
}

/// llama-server's `timings`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Timings {
    #[serde(deserialize_with = "lenient")]
    prompt_n: Option<u64>,
    #[serde(deserialize_with = "lenient")]
    cache_n: Option<u64>,
    #[serde(deserialize_with = "lenient")]
    predicted_n: Option<u64>,
}

/// What an answer says of its tokens, as Anthropic counts them: input
/// is what was processed, apart from what the cache served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    input: Option<u64>,
    cache_read: Option<u64>,
    output: Option<u64>,
}

impl Counts {
    fn take(&mut self, c: &Chunk) {
        if let Some(t) = &c.timings {
            if let Some(p) = t.prompt_n {
                self.input = Some(p);
                self.cache_read = Some(t.cache_n.unwrap_or(0));
            }
            self.output = t.predicted_n.or(self.output);
        }
        if let Some(u) = &c.usage {
            let cached = u.prompt_tokens_details.as_ref().and_then(|d| d.cached_tokens);
            if let Some(p) = u.prompt_tokens {
                self.input = Some(p.saturating_sub(cached.unwrap_or(0)));
                self.cache_read = cached.or(self.cache_read);
            }
            self.output = u.completion_tokens.or(self.output);
        }
    }

    fn json(&self) -> Value {
        let mut u = serde_json::Map::new();
        if let Some(c) = self.cache_read {
            u.insert("cache_read_input_tokens".into(), c.into());
        }
        if let Some(i) = self.input {
            u.insert("input_tokens".into(), i.into());
        }
        u.insert("output_tokens".into(), self.output.unwrap_or(0).into());
        Value::Object(u)
    }
}

/// Does `c` carry counts, a piece of the answer or its end?
fn says_something(c: &Chunk) -> bool {
    c.timings.is_some()
        || c.usage.is_some()
        || c.choices.iter().any(|ch| {
            ch.finish_reason.is_some()
                || ch.delta.as_ref().is_some_and(|d| {
                    d.reasoning().is_some()
                        || d.content.as_deref().is_some_and(|t| !t.is_empty())
                        || d.tool_calls.as_ref().is_some_and(|t| !t.is_empty())
                })
        })
}

/// The stop reason for a `finish_reason`.
fn stop_reason(finish: &str, calls: bool) -> &'static str {
    match finish {
        "length" => "max_tokens",
        "tool_calls" | "function_call" => "tool_use",
        _ if calls => "tool_use",
        _ => "end_turn",
    }
}

/// The kind of the open block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Thinking,
    Text,
    /// A tool call, by its index in the chunk's `tool_calls`.
    Call(u64),
}

/// The stream's translation, one chunk of bytes at a time.
#[derive(Debug, Default)]
pub struct Translator {
    /// Bytes of an event not yet complete.
    buf: BytesMut,
    started: bool,
    open: Option<(u64, Open)>,
    next_index: u64,
    /// The call indexes already opened (and closed but the current one).
    calls: Vec<u64>,
    counts: Counts,
    finish: Option<String>,
    /// `message_stop` sent, or an error: nothing more leaves.
    done: bool,
}

/// A message id for an answer whose server gave none: unique in this
/// process (Claude Code rewrites its history when two answers share one).
fn fresh_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("msg_local_{nanos:x}_{}", N.fetch_add(1, Ordering::Relaxed))
}

/// One Anthropic event, as its SSE bytes.
fn event(name: &str, data: &Value) -> Vec<u8> {
    format!("event: {name}\ndata: {data}\n\n").into_bytes()
}

impl Translator {
    pub fn new() -> Translator {
        Translator::default()
    }

    /// The Anthropic events for `chunk` (whole events only; the rest
    /// waits for the next chunk).
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(end) = event_end(&self.buf) {
            let raw = self.buf.split_to(end.0 + end.1);
            self.one(&raw[..end.0], &mut out);
        }
        out
    }

    /// The upstream ended: the closing events when the answer was
    /// finished, else nothing (the relay says the stream broke off).
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if !self.buf.is_empty() {
            let rest = self.buf.split();
            self.one(&rest, &mut out);
        }
        if self.finish.is_some() && !self.done {
            self.close(&mut out);
        }
        out
    }

    /// One SSE event: comments (keep-alives) pass as they are, `data:`
    /// lines are chunks, `[DONE]` ends the answer.
    fn one(&mut self, raw: &[u8], out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        let text = String::from_utf8_lossy(raw);
        let mut data = String::new();
        for line in text.lines() {
            if let Some(d) = line.strip_prefix("data:") {
                data.push_str(d.strip_prefix(' ').unwrap_or(d));
            } else if line.starts_with(':') {
                out.extend_from_slice(b":\n\n");
            }
        }
        let data = data.trim();
        if data.is_empty() {
            return;
        }
        if data == "[DONE]" {
            if self.finish.is_some() {
                self.close(out);
            }
            return;
        }
        // Every field reads by the lenient rule: only a chunk that is no
        // JSON object is passed over.
        if let Ok(c) = serde_json::from_str::<Chunk>(data) {
            self.chunk(&c, out);
        }
    }

    fn chunk(&mut self, c: &Chunk, out: &mut Vec<u8>) {
        if let Some(e) = &c.error {
            // llama.cpp's error object, as its Anthropic stream sends it.
            self.done = true;
            out.extend(event("error", e));
            return;
        }
        self.counts.take(c);
        // llama-server's first chunk is a bare `role` delta, before its
        // counts: `message_start` waits for a chunk that says something,
        // so that it carries them as llama.cpp's own stream does.
        if !self.started && !says_something(c) {
            return;
        }
        if !self.started {
            self.started = true;
            let start = json!({
                "type": "message_start",
                "message": {
                    "id": c.id.clone().unwrap_or_else(fresh_id),
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": c.model.clone().unwrap_or_default(),
                    "stop_reason": null,
                    "stop_sequence": null,
                    "usage": self.counts.json(),
                },
            });
            out.extend(event("message_start", &start));
        }
        for choice in &c.choices {
            if let Some(d) = &choice.delta {
                self.delta(d, out);
            }
            if let Some(f) = &choice.finish_reason {
                self.end_block(out);
                self.finish = Some(f.clone());
            }
        }
    }

    fn delta(&mut self, d: &Delta, out: &mut Vec<u8>) {
        if let Some(r) = d.reasoning() {
            self.ensure(Open::Thinking, json!({"type": "thinking", "thinking": ""}), out);
            self.block_delta(json!({"type": "thinking_delta", "thinking": r}), out);
        }
        if let Some(t) = d.content.as_deref().filter(|t| !t.is_empty()) {
            self.ensure(Open::Text, json!({"type": "text", "text": ""}), out);
            self.block_delta(json!({"type": "text_delta", "text": t}), out);
        }
        for call in d.tool_calls.iter().flatten() {
            self.call(call, out);
        }
    }

    fn call(&mut self, call: &CallDelta, out: &mut Vec<u8>) {
        let n = call.index.unwrap_or(0);
        let f = call.function.as_ref();
        if self.open.map(|(_, o)| o) != Some(Open::Call(n)) {
            if self.calls.contains(&n) {
                // A call's arguments after the next call opened: one block
                // is open at a time, so the answer cannot be relayed.
                self.done = true;
                let e = json!({"code": 500, "type": "server_error", "message": format!(
                    "the server sent more of tool call {n}'s arguments after the next call began; localagents relays calls one after the other (set wire: messages on this endpoint)"
                )});
                out.extend(event("error", &e));
                return;
            }
            self.calls.push(n);
            let block = json!({
                "type": "tool_use",
                "id": call.id.clone().unwrap_or_else(|| format!("call_{n}")),
                "name": f.and_then(|f| f.name.clone()).unwrap_or_default(),
                "input": {},
            });
            self.ensure(Open::Call(n), block, out);
        }
        if let Some(a) = f.and_then(|f| f.arguments.as_deref()).filter(|a| !a.is_empty()) {
            self.block_delta(json!({"type": "input_json_delta", "partial_json": a}), out);
        }
    }

    /// Open a block of `kind` unless it is the open one (closing that).
    fn ensure(&mut self, kind: Open, block: Value, out: &mut Vec<u8>) {
        if self.open.map(|(_, o)| o) == Some(kind) {
            return;
        }
        self.end_block(out);
        let index = self.next_index;
        self.next_index += 1;
        self.open = Some((index, kind));
        let start = json!({"type": "content_block_start", "index": index, "content_block": block});
        out.extend(event("content_block_start", &start));
    }

    fn block_delta(&mut self, delta: Value, out: &mut Vec<u8>) {
        if let Some((index, _)) = self.open {
            let d = json!({"type": "content_block_delta", "index": index, "delta": delta});
            out.extend(event("content_block_delta", &d));
        }
    }

    /// Close the open block (a thinking block gets its empty signature
    /// first, as llama.cpp's does).
    fn end_block(&mut self, out: &mut Vec<u8>) {
        let Some((index, kind)) = self.open.take() else {
            return;
        };
        if kind == Open::Thinking {
            let sig = json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "signature_delta", "signature": ""}});
            out.extend(event("content_block_delta", &sig));
        }
        let stop = json!({"type": "content_block_stop", "index": index});
        out.extend(event("content_block_stop", &stop));
    }

    /// The answer is over: its stop reason and counts, and `message_stop`.
    fn close(&mut self, out: &mut Vec<u8>) {
        self.end_block(out);
        let finish = self.finish.clone().unwrap_or_default();
        let delta = json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason(&finish, !self.calls.is_empty()), "stop_sequence": null},
            "usage": self.counts.json(),
        });
        out.extend(event("message_delta", &delta));
        out.extend(event("message_stop", &json!({"type": "message_stop"})));
        self.done = true;
    }
}

/// Where the first event in `buf` ends: its length and its blank line's.
fn event_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = memchr::memmem::find(buf, b"\n\n").map(|i| (i, 2));
    let crlf = memchr::memmem::find(buf, b"\r\n\r\n").map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// `upstream`'s chat-completions stream as an Anthropic one. An error of
/// the upstream passes as it is; at its end come the closing events.
pub fn stream<S, E>(upstream: S) -> impl Stream<Item = Result<Bytes, E>> + Unpin + Send + 'static
where
    S: Stream<Item = Result<Bytes, E>> + Unpin + Send + 'static,
    E: Send + 'static,
{
    let state = (upstream, Translator::new(), false);
    Box::pin(futures::stream::unfold(state, |(mut up, mut tr, ended)| async move {
        if ended {
            return None;
        }
        loop {
            match up.next().await {
                Some(Ok(chunk)) => {
                    let out = tr.push(&chunk);
                    if !out.is_empty() {
                        return Some((Ok(Bytes::from(out)), (up, tr, false)));
                    }
                }
                Some(Err(e)) => return Some((Err(e), (up, tr, true))),
                None => {
                    let out = tr.finish();
                    if out.is_empty() {
                        return None;
                    }
                    return Some((Ok(Bytes::from(out)), (up, tr, true)));
                }
            }
        }
    }))
}

/// A whole chat-completions answer as an Anthropic message: thinking,
/// text, then the calls (an input that is not a JSON object reads as
/// `{}`, as llama.cpp reads it). `None`: not an answer (an error body).
pub fn whole(body: &[u8]) -> Option<Vec<u8>> {
    let c: Chunk = serde_json::from_slice(body).ok()?;
    let choice = c.choices.first()?;
    let msg = choice.message.as_ref()?;
    let mut content = Vec::new();
    if let Some(r) = msg.reasoning() {
        content.push(json!({"type": "thinking", "thinking": r, "signature": ""}));
    }
    if let Some(t) = msg.content.as_deref().filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": t}));
    }
    let calls = msg.tool_calls.as_deref().unwrap_or(&[]);
    for (n, call) in calls.iter().enumerate() {
        let f = call.function.as_ref();
        let input = f
            .and_then(|f| f.arguments.as_deref())
            .and_then(|a| serde_json::from_str::<serde_json::Map<String, Value>>(a).ok())
            .unwrap_or_default();
        content.push(json!({
            "type": "tool_use",
            "id": call.id.clone().unwrap_or_else(|| format!("call_{n}")),
            "name": f.and_then(|f| f.name.clone()).unwrap_or_default(),
            "input": input,
        }));
    }
    let mut counts = Counts::default();
    counts.take(&c);
    let finish = choice.finish_reason.as_deref().unwrap_or("stop");
    let out = json!({
        "id": c.id.clone().unwrap_or_else(fresh_id),
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": c.model.clone().unwrap_or_default(),
        "stop_reason": stop_reason(finish, !calls.is_empty()),
        "stop_sequence": null,
        "usage": counts.json(),
    });
    serde_json::to_vec(&out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chunk as llama-server 11434 writes it
    /// (`server_task_result_cmpl_partial::to_json_oaicompat_chat`,
    /// tools/server/server-task.cpp): one delta, `timings` when asked.
    fn chunk(delta: Value, timings: Option<(u64, u64)>) -> String {
        let mut c = json!({"choices": [{"finish_reason": null, "index": 0, "delta": delta}],
            "created": 1, "id": "chatcmpl-x", "model": "m", "object": "chat.completion.chunk"});
        if let Some((p, n)) = timings {
            c["timings"] = json!({"cache_n": n, "prompt_n": p, "predicted_n": 1});
        }
        format!("data: {c}\n\n")
    }

    fn events(out: &[u8]) -> Vec<(String, Value)> {
        String::from_utf8_lossy(out)
            .split("\n\n")
            .filter(|e| e.starts_with("event: "))
            .map(|e| {
                let (head, data) = e.split_once('\n').unwrap();
                let name = head.trim_start_matches("event: ").to_string();
                (name, serde_json::from_str(data.trim_start_matches("data: ")).unwrap())
            })
            .collect()
    }

    fn ends(calls: bool) -> String {
        let fin = json!({"choices": [{"finish_reason": if calls {"tool_calls"} else {"stop"}, "index": 0, "delta": {}}],
            "id": "chatcmpl-x", "model": "m", "object": "chat.completion.chunk"});
        let usage = json!({"choices": [], "id": "chatcmpl-x", "model": "m",
            "usage": {"completion_tokens": 9, "prompt_tokens": 120, "total_tokens": 129,
                      "prompt_tokens_details": {"cached_tokens": 100}},
            "timings": {"cache_n": 100, "prompt_n": 20, "predicted_n": 9}});
        format!("data: {fin}\n\ndata: {usage}\n\ndata: [DONE]\n\n")
    }

    #[test]
    fn thinking_text_and_two_calls_stream_as_anthropic_blocks_at_any_split() {
        let mut src = String::new();
        src.push_str(&chunk(json!({"role": "assistant", "content": null}), Some((20, 100))));
        src.push_str(": ping\n\n");
        src.push_str(&chunk(json!({"reasoning_content": "Need ls."}), Some((20, 100))));
        src.push_str(&chunk(json!({"content": "Listing."}), None));
        src.push_str(&chunk(json!({"tool_calls": [{"index": 0, "id": "c0", "type": "function", "function": {"name": "Bash"}}]}), None));
        src.push_str(&chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"comm"}}]}), None));
        src.push_str(&chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "and\":\"ls\"}"}}]}), None));
        src.push_str(&chunk(json!({"tool_calls": [{"index": 1, "id": "c1", "type": "function", "function": {"name": "Read", "arguments": "{\"file_path\":\"a\"}"}}]}), None));
        src.push_str(&ends(true));
        let whole = {
            let mut t = Translator::new();
            let mut o = t.push(src.as_bytes());
            o.extend(t.finish());
            o
        };
        // The same bytes at every split point give the same events.
        for cut in (1..src.len()).step_by(7) {
            let mut t = Translator::new();
            let mut o = t.push(&src.as_bytes()[..cut]);
            o.extend(t.push(&src.as_bytes()[cut..]));
            o.extend(t.finish());
            assert_eq!(events(&o), events(&whole), "cut at {cut}");
        }
        let ev = events(&whole);
        let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, [
            "message_start", "content_block_start", "content_block_delta", "content_block_delta",
            "content_block_stop", "content_block_start", "content_block_delta", "content_block_stop",
            "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
            "content_block_start", "content_block_delta", "content_block_stop",
            "message_delta", "message_stop",
        ]);
        assert_eq!(ev[0].1["message"]["usage"], json!({"cache_read_input_tokens": 100, "input_tokens": 20, "output_tokens": 1}));
        assert_eq!(ev[3].1["delta"], json!({"type": "signature_delta", "signature": ""}));
        assert_eq!(ev[8].1["content_block"], json!({"type": "tool_use", "id": "c0", "name": "Bash", "input": {}}));
        let args: String = [&ev[9].1, &ev[10].1].iter().map(|e| e["delta"]["partial_json"].as_str().unwrap()).collect();
        assert_eq!(args, "{\"command\":\"ls\"}");
        assert_eq!(ev[12].1["index"], 3);
        assert_eq!(ev[12].1["content_block"]["name"], "Read");
        assert_eq!(ev[15].1["delta"]["stop_reason"], "tool_use");
        assert_eq!(ev[15].1["usage"], json!({"cache_read_input_tokens": 100, "input_tokens": 20, "output_tokens": 9}));
        // The keep-alive passes as a comment.
        assert!(String::from_utf8_lossy(&whole).contains("\n:\n\n"));
    }

    /// The real llama-server's own streamed call (tests/fixtures/chat/
    /// SOURCES.md): its argument pieces come back as one `tool_use` whose
    /// input is what the server's whole answer gave, the counts from its
    /// timings and usage, at every split of the bytes.
    #[test]
    fn the_real_servers_streamed_call_is_reassembled_exactly() {
        let src = include_str!("../../../tests/fixtures/chat/llama-server-11434-tool-call.sse");
        for cut in [0, 1, 100, 350, src.len() / 2, src.len() - 3] {
            let mut t = Translator::new();
            let mut out = t.push(&src.as_bytes()[..cut]);
            out.extend(t.push(&src.as_bytes()[cut..]));
            out.extend(t.finish());
            let ev = events(&out);
            let args: String = ev
                .iter()
                .filter(|(n, d)| n == "content_block_delta" && d["delta"]["type"] == "input_json_delta")
                .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap().to_string())
                .collect();
            assert_eq!(args, "{\"command\": \"ls\"}", "cut at {cut}");
            let start = ev.iter().find(|(n, _)| n == "content_block_start").unwrap();
            assert_eq!(start.1["content_block"]["name"], "Bash");
            assert_eq!(start.1["content_block"]["id"], "JAZesSNgJKBqHMwLfd2gatkS8eaqBd38");
            assert_eq!(ev[0].1["message"]["usage"], json!({"cache_read_input_tokens": 191, "input_tokens": 5, "output_tokens": 1}));
            let (name, delta) = &ev[ev.len() - 2];
            assert_eq!(name, "message_delta");
            assert_eq!(delta["delta"]["stop_reason"], "tool_use");
            assert_eq!(delta["usage"], json!({"cache_read_input_tokens": 191, "input_tokens": 5, "output_tokens": 16}));
            assert_eq!(ev.last().unwrap().0, "message_stop");
        }
    }

    #[test]
    fn a_stream_cut_in_a_calls_arguments_gets_no_message_stop() {
        let mut t = Translator::new();
        let mut o = t.push(chunk(json!({"tool_calls": [{"index": 0, "id": "c0", "function": {"name": "Bash", "arguments": "{\"comm"}}]}), Some((5, 0))).as_bytes());
        o.extend(t.finish());
        let names: Vec<String> = events(&o).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["message_start", "content_block_start", "content_block_delta"]);
    }

    #[test]
    fn usage_without_timings_comes_in_message_delta_and_length_is_max_tokens() {
        let mut t = Translator::new();
        let fin = json!({"choices": [{"finish_reason": "length", "delta": {}}]});
        let usage = json!({"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 3}});
        let src = format!("{}data: {fin}\n\ndata: {usage}\n\n", chunk(json!({"content": "abc"}), None));
        let mut o = t.push(src.as_bytes());
        // No [DONE]: the upstream's end closes a finished answer.
        o.extend(t.finish());
        let ev = events(&o);
        assert_eq!(ev[0].1["message"]["usage"], json!({"output_tokens": 0}));
        let delta = &ev[ev.len() - 2].1;
        assert_eq!(delta["delta"]["stop_reason"], "max_tokens");
        assert_eq!(delta["usage"], json!({"input_tokens": 50, "output_tokens": 3}));
    }

    #[test]
    fn a_mid_stream_error_leaves_as_llama_cpps_anthropic_error_event() {
        let mut t = Translator::new();
        let err = json!({"error": {"code": 500, "message": "boom", "type": "server_error"}});
        let o = t.push(format!("{}data: {err}\n\n", chunk(json!({"content": "a"}), None)).as_bytes());
        let ev = events(&o);
        assert_eq!(ev.last().unwrap(), &("error".to_string(), json!({"code": 500, "message": "boom", "type": "server_error"})));
        assert!(t.finish().is_empty());
    }

    #[test]
    fn interleaved_call_arguments_end_the_stream_with_an_error() {
        let mut t = Translator::new();
        let mut src = chunk(json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "A", "arguments": "{"}}]}), None);
        src.push_str(&chunk(json!({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "B", "arguments": "{"}}]}), None));
        src.push_str(&chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}), None));
        let ev = events(&t.push(src.as_bytes()));
        let (name, data) = ev.last().unwrap();
        assert_eq!(name, "error");
        assert!(data["message"].as_str().unwrap().contains("wire: messages"));
    }

    #[test]
    fn a_whole_answer_converts_with_its_calls_and_counts() {
        let body = json!({"choices": [{"finish_reason": "tool_calls", "index": 0, "message": {
            "role": "assistant", "content": "ok", "reasoning_content": "hm",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "Bash", "arguments": "{\"command\":\"ls\"}"}},
                           {"type": "function", "function": {"name": "X", "arguments": "not json"}}]}}],
            "id": "chatcmpl-1", "model": "m",
            "usage": {"prompt_tokens": 30, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 10}},
            "timings": {"prompt_n": 20, "cache_n": 10, "predicted_n": 4}});
        let out: Value = serde_json::from_slice(&whole(body.to_string().as_bytes()).unwrap()).unwrap();
        assert_eq!(out["content"], json!([
            {"type": "thinking", "thinking": "hm", "signature": ""},
            {"type": "text", "text": "ok"},
            {"type": "tool_use", "id": "c", "name": "Bash", "input": {"command": "ls"}},
            {"type": "tool_use", "id": "call_1", "name": "X", "input": {}}
        ]));
        assert_eq!(out["stop_reason"], "tool_use");
        assert_eq!(out["usage"], json!({"cache_read_input_tokens": 10, "input_tokens": 20, "output_tokens": 4}));
        assert!(whole(br#"{"error":{"code":500,"message":"x"}}"#).is_none());
    }
}
