//! Tool calls that came back as text, turned back into `tool_use` blocks.
//!
//! When a server's tool-call parser misses a call (a template it does not
//! know, a model that drifts near the end of its window), the call arrives
//! inside the assistant's text. Claude Code sees a text answer and ends the
//! session: the job "succeeds" with nothing done. The forms seen in the
//! servers' trackers and tests:
//!
//! - Hermes / Qwen JSON: `<tool_call>{"name": …, "arguments": {…}}</tool_call>`;
//! - Qwen3-Coder XML: `<tool_call><function=Edit><parameter=file_path>…`
//!   `</parameter></function></tool_call>` (the wrapper is sometimes missing);
//! - Mistral / Devstral: `[TOOL_CALLS][{"name": …, "arguments": …}]` and the
//!   newer `[TOOL_CALLS]name[ARGS]{…}`;
//! - a bare JSON object `{"name": …, "arguments"|"parameters": {…}}` as the
//!   whole text.
//!
//! A repair happens only when every call found names a tool offered in that
//! request and its input is an object with the schema's required keys, and
//! when nothing but white space stands between and after the calls. Anything
//! else stays text, as it came: a call is never invented from prose. What
//! looked like an attempt but failed those checks is reported as
//! `unparsed_tool_text`, so the job can say the model is at fault.
//!
//! Streams are handled by [`StreamRepair`], which the SSE relay feeds one
//! event at a time: a text block is held back only from the point where a
//! call could begin (a marker, or a `{` opening the whole block), so prose
//! still streams as it comes and a normal `tool_use` answer is not touched.

use std::collections::HashMap;
use std::sync::OnceLock;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The text forms of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Hermes,
    QwenXml,
    Mistral,
    BareJson,
}

impl Form {
    pub fn as_str(self) -> &'static str {
        match self {
            Form::Hermes => "hermes_json",
            Form::QwenXml => "qwen3_coder_xml",
            Form::Mistral => "mistral_tool_calls",
            Form::BareJson => "bare_json",
        }
    }
}

/// A call recovered from text.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub name: String,
    pub input: Value,
}

/// What a text held.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    /// No call, and nothing that looked like one.
    Nothing,
    /// Calls that pass every check; `prefix` is the text before them.
    Calls {
        prefix: String,
        calls: Vec<Call>,
        form: Form,
    },
    /// Something that looked like a call but failed a check.
    Unparsed { form: Form, why: String },
}

/// One offered tool: its required keys and the declared type of each
/// property (for the XML form, whose values are all text).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolSchema {
    pub required: Vec<String>,
    pub types: HashMap<String, String>,
}

/// The tools a request offered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolSet {
    pub tools: HashMap<String, ToolSchema>,
}

#[derive(Deserialize)]
struct ToolShape {
    name: String,
    #[serde(default)]
    input_schema: Option<SchemaShape>,
}

#[derive(Deserialize, Default)]
struct SchemaShape {
    #[serde(default)]
    properties: Option<HashMap<String, PropShape>>,
    #[serde(default)]
    required: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct PropShape {
    #[serde(default, rename = "type")]
    typ: Option<Value>,
}

impl ToolSet {
    /// From a request's raw `tools` array (a bad one offers nothing).
    pub fn from_raw(raw: &[u8]) -> ToolSet {
        let shapes: Vec<ToolShape> = serde_json::from_slice(raw).unwrap_or_default();
        let mut tools = HashMap::new();
        for t in shapes {
            let s = t.input_schema.unwrap_or_default();
            let types = s
                .properties
                .unwrap_or_default()
                .into_iter()
                .filter_map(|(k, p)| {
                    let typ = match p.typ {
                        Some(Value::String(s)) => s,
                        // ["string", "null"]: the first that is not null.
                        Some(Value::Array(a)) => a
                            .iter()
                            .filter_map(Value::as_str)
                            .find(|t| *t != "null")?
                            .to_string(),
                        _ => return None,
                    };
                    Some((k, typ))
                })
                .collect();
            tools.insert(
                t.name,
                ToolSchema {
                    required: s.required.unwrap_or_default(),
                    types,
                },
            );
        }
        ToolSet { tools }
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Why `call` may not be made, if it may not.
    fn refuse(&self, call: &Call) -> Option<String> {
        let Some(schema) = self.tools.get(&call.name) else {
            return Some(format!("`{}` is not an offered tool", call.name));
        };
        let Some(obj) = call.input.as_object() else {
            return Some(format!("the input of `{}` is not an object", call.name));
        };
        let missing: Vec<&str> = schema
            .required
            .iter()
            .filter(|k| !obj.contains_key(k.as_str()))
            .map(String::as_str)
            .collect();
        (!missing.is_empty()).then(|| {
            format!(
                "`{}` lacks required {}",
                call.name,
                missing
                    .iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    }
}

/// The markers a text-form call starts with.
pub const MARKERS: [&str; 3] = ["<tool_call>", "<function=", "[TOOL_CALLS]"];

/// The first marker in `text`: its byte offset.
pub fn marker_at(text: &str) -> Option<usize> {
    MARKERS.iter().filter_map(|m| text.find(m)).min()
}

/// The length of the longest end of `text` that could be the start of a
/// marker (so a marker split across two stream deltas is still seen).
pub fn partial_marker_len(text: &str) -> usize {
    let mut best = 0;
    for m in MARKERS {
        for n in (1..m.len()).rev() {
            if n > best && text.ends_with(&m[..n]) {
                best = n;
                break;
            }
        }
    }
    best
}

/// Whether a text block's start is a candidate for a whole-block call:
/// a marker, or a `{` (the bare JSON form).
pub fn opens_call(trimmed: &str) -> bool {
    trimmed.starts_with('{') || MARKERS.iter().any(|m| trimmed.starts_with(m))
}

/// Look for calls in one text block.
pub fn find(text: &str, tools: &ToolSet) -> Found {
    // A whole-text JSON object shaped like a call, first: a marker inside
    // one of its strings ("see <tool_call> tags") is content, not markup.
    let t = text.trim();
    if t.starts_with('{')
        && t.ends_with('}')
        && let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(t)
        && obj.get("name").is_some_and(Value::is_string)
    {
        return match call_of(&obj) {
            Some(c) => check(String::new(), vec![c], Form::BareJson, tools),
            None => Found::Unparsed {
                form: Form::BareJson,
                why: "a JSON object with a name but no arguments object".into(),
            },
        };
    }
    if let Some(p) = marker_at(text) {
        return match parse_calls(&text[p..]) {
            Ok((calls, form)) => check(text[..p].to_string(), calls, form, tools),
            Err((form, why)) if attempt(&text[p..]) => Found::Unparsed { form, why },
            // Prose that names a marker ("wrap calls in <tool_call>").
            Err(_) => Found::Nothing,
        };
    }
    // Any other text, a JSON object not shaped like a call included.
    Found::Nothing
}

/// Does the text after a marker look like the start of a call (an
/// object, a `<function=NAME>`, a Mistral array or `name{`/`name[ARGS]`)?
fn attempt(from_marker: &str) -> bool {
    let rest = MARKERS
        .iter()
        .find_map(|m| from_marker.strip_prefix(m))
        .unwrap_or(from_marker);
    if from_marker.starts_with("<function=") {
        return rest.split_once('>').is_some_and(|(name, _)| {
            !name.trim().is_empty() && !name.contains(char::is_whitespace)
        });
    }
    let mut r = rest.trim_start();
    // A code fence around the call is the same attempt.
    if let Some(f) = r.strip_prefix("```") {
        r = f
            .trim_start_matches(|c: char| c.is_ascii_alphanumeric())
            .trim_start();
    }
    if r.starts_with('{') || r.starts_with("<function=") {
        return true;
    }
    if from_marker.starts_with("[TOOL_CALLS]") {
        let head: String = r.chars().take_while(|c| !c.is_whitespace()).collect();
        return r.starts_with('[') || head.contains('{') || head.contains("[ARGS]");
    }
    false
}

fn check(prefix: String, calls: Vec<Call>, form: Form, tools: &ToolSet) -> Found {
    if calls.is_empty() {
        return Found::Unparsed {
            form,
            why: "no call inside the markers".into(),
        };
    }
    if let Some(why) = calls.iter().find_map(|c| tools.refuse(c)) {
        return Found::Unparsed { form, why };
    }
    // The XML form's values are text: give them the schema's types.
    let calls = calls
        .into_iter()
        .map(|c| {
            if form == Form::QwenXml {
                typed(c, tools)
            } else {
                c
            }
        })
        .collect();
    Found::Calls {
        prefix,
        calls,
        form,
    }
}

/// `{"name", "arguments"|"parameters"|"input"}`; arguments may be a JSON
/// string holding the object (some templates encode them twice).
fn call_of(obj: &Map<String, Value>) -> Option<Call> {
    let name = obj.get("name")?.as_str()?.to_string();
    let args = ["arguments", "parameters", "input"]
        .iter()
        .find_map(|k| obj.get(*k))?;
    let input = match args {
        Value::Object(_) => args.clone(),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => v,
            _ => return None,
        },
        _ => return None,
    };
    Some(Call { name, input })
}

type Parsed = Result<(Vec<Call>, Form), (Form, String)>;

/// Parse calls that start at the beginning of `s` (a marker) and fill it
/// to the end, but for white space.
fn parse_calls(s: &str) -> Parsed {
    if let Some(rest) = s.strip_prefix("[TOOL_CALLS]") {
        return mistral(rest)
            .map(|c| (c, Form::Mistral))
            .map_err(|w| (Form::Mistral, w));
    }
    let mut calls = Vec::new();
    let mut form = None;
    let mut rest = s;
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        if let Some(inner) = rest.strip_prefix("<tool_call>") {
            // The closing tag may be missing at the very end (the model
            // stopped right after the call).
            let (body, after) = match inner.find("</tool_call>") {
                Some(e) => (&inner[..e], &inner[e + "</tool_call>".len()..]),
                None => (inner, ""),
            };
            let body = body.trim();
            if body.starts_with("<function=") {
                form.get_or_insert(Form::QwenXml);
                let (mut cs, tail) = xml_functions(body).map_err(|w| (Form::QwenXml, w))?;
                if !tail.trim().is_empty() {
                    return Err((Form::QwenXml, "text after </function>".into()));
                }
                calls.append(&mut cs);
            } else {
                form.get_or_insert(Form::Hermes);
                let obj = match serde_json::from_str::<Value>(body) {
                    Ok(Value::Object(o)) => o,
                    _ => {
                        return Err((
                            Form::Hermes,
                            "the JSON inside <tool_call> does not parse".into(),
                        ));
                    }
                };
                let c = call_of(&obj)
                    .ok_or((Form::Hermes, "no name and arguments object".to_string()))?;
                calls.push(c);
            }
            rest = after;
        } else if rest.starts_with("<function=") {
            form.get_or_insert(Form::QwenXml);
            let (mut cs, tail) = xml_functions(rest).map_err(|w| (Form::QwenXml, w))?;
            calls.append(&mut cs);
            rest = tail;
        } else {
            let f = form.unwrap_or(Form::Hermes);
            return Err((f, "text after the calls".into()));
        }
    }
    Ok((calls, form.unwrap_or(Form::Hermes)))
}

/// A run of `<function=NAME>…</function>`; returns the calls and what
/// follows the last one. Parameters are read in order, so a value may hold
/// `</function>`; as in vLLM's parser, a `<parameter=` starts the next one
/// only at the start of a line.
fn xml_functions(mut s: &str) -> Result<(Vec<Call>, &str), String> {
    let mut calls = Vec::new();
    loop {
        let t = s.trim_start();
        let Some(after) = t.strip_prefix("<function=") else {
            return Ok((calls, s));
        };
        let gt = after.find('>').ok_or("an unclosed <function=")?;
        let name = after[..gt].trim().to_string();
        if name.is_empty() || name.contains(|c: char| c.is_whitespace() || "{}<>\"'".contains(c)) {
            return Err(format!("`{name}` is not a function name"));
        }
        let mut input = Map::new();
        let mut b = &after[gt + 1..];
        loop {
            let t = b.trim_start();
            if let Some(rest) = t.strip_prefix("</function>") {
                b = rest;
                break;
            }
            if t.is_empty() {
                // The model stopped before </function>.
                b = t;
                break;
            }
            let Some(p) = t.strip_prefix("<parameter=") else {
                return Err(format!(
                    "text inside <function={name}> that is not a parameter"
                ));
            };
            let gt = p.find('>').ok_or("an unclosed <parameter=")?;
            let key = p[..gt].trim().to_string();
            let v = &p[gt + 1..];
            // A value ends at </parameter>; where a model dropped that tag,
            // at </function> or at a next parameter on a line of its own
            // (vLLM's qwen3coder regex). A value never runs to the end of
            // the text: an unclosed value is no call.
            let close = v.find("</parameter>");
            let next = [v.find("\n<parameter="), v.find("</function>")]
                .into_iter()
                .flatten()
                .min();
            let (end, skip) = match (close, next) {
                (Some(c), Some(n)) if n < c => (n, 0),
                (Some(c), _) => (c, "</parameter>".len()),
                (None, Some(n)) => (n, 0),
                (None, None) => return Err(format!("the value of `{key}` never ends")),
            };
            if input.contains_key(&key) {
                return Err(format!("`{key}` is given twice"));
            }
            let mut value = &v[..end];
            // vLLM's qwen3coder parser: one newline after `>` and one
            // before `</parameter>` belong to the markup.
            value = value.strip_prefix('\n').unwrap_or(value);
            value = value.strip_suffix('\n').unwrap_or(value);
            input.insert(key, Value::String(value.to_string()));
            b = &v[end + skip..];
        }
        calls.push(Call {
            name,
            input: Value::Object(input),
        });
        s = b;
    }
}

/// Give the XML form's text values their declared types, as vLLM's
/// qwen3coder parser does: integer, number and boolean are converted, an
/// object or array is read as JSON, anything else (or a value that does
/// not convert) stays text.
fn typed(mut call: Call, tools: &ToolSet) -> Call {
    let Some(schema) = tools.tools.get(&call.name) else {
        return call;
    };
    if let Some(obj) = call.input.as_object_mut() {
        for (k, v) in obj.iter_mut() {
            let (Some(typ), Value::String(s)) = (schema.types.get(k), &*v) else {
                continue;
            };
            let t = s.trim();
            let converted = match typ.as_str() {
                "integer" => t.parse::<i64>().ok().map(Value::from),
                "number" => t.parse::<i64>().ok().map(Value::from).or_else(|| {
                    t.parse::<f64>()
                        .ok()
                        .and_then(|f| serde_json::Number::from_f64(f).map(Value::Number))
                }),
                "boolean" => match t.to_ascii_lowercase().as_str() {
                    "true" => Some(Value::Bool(true)),
                    "false" => Some(Value::Bool(false)),
                    _ => None,
                },
                "object" | "array" => serde_json::from_str::<Value>(t).ok(),
                _ => None,
            };
            if let Some(c) = converted {
                *v = c;
            }
        }
    }
    call
}

/// `[TOOL_CALLS]` then either a JSON array of calls, or one or more
/// `name[ARGS]{…}` (optionally `name[CALL_ID]id[ARGS]{…}`), each after its
/// own `[TOOL_CALLS]` or directly after the previous one.
fn mistral(rest: &str) -> Result<Vec<Call>, String> {
    let r = rest.trim_start();
    if r.starts_with('[') {
        let arr: Vec<Value> = serde_json::from_str(r.trim_end())
            .map_err(|_| "the JSON after [TOOL_CALLS] does not parse")?;
        return arr
            .iter()
            .map(|v| {
                v.as_object()
                    .and_then(call_of)
                    .ok_or_else(|| "a call without name and arguments".to_string())
            })
            .collect();
    }
    let mut calls = Vec::new();
    let mut s = r;
    loop {
        s = s.trim_start();
        if s.is_empty() {
            break;
        }
        s = s.strip_prefix("[TOOL_CALLS]").unwrap_or(s);
        // The name runs to `[CALL_ID]`, `[ARGS]` or the first `{` (vLLM's
        // Mistral tokenizer drops `[ARGS]` from the text).
        let brace = s
            .find('{')
            .ok_or("no arguments object after the tool name")?;
        let head = &s[..brace];
        let name = head
            .split("[CALL_ID]")
            .next()
            .unwrap_or("")
            .replace("[ARGS]", "")
            .trim()
            .to_string();
        if name.is_empty() || name.contains(char::is_whitespace) || name.contains(['[', ']']) {
            return Err("no tool name before the arguments".into());
        }
        let args = &s[brace..];
        let mut de = serde_json::Deserializer::from_str(args).into_iter::<Value>();
        let input = match de.next() {
            Some(Ok(v @ Value::Object(_))) => v,
            _ => return Err("the arguments after [ARGS] do not parse".into()),
        };
        let used = de.byte_offset();
        calls.push(Call { name, input });
        s = &args[used..];
    }
    Ok(calls)
}

/// A fresh `tool_use` id.
pub fn new_id() -> String {
    let mut b = [0u8; 12];
    let _ = getrandom::fill(&mut b);
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("toolu_local_{hex}")
}

/// A `tool_use` content block.
pub fn tool_use_block(call: &Call) -> Value {
    json!({"type": "tool_use", "id": new_id(), "name": call.name, "input": call.input})
}

/// What a repair did to one response.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Calls recovered, with the form of each text.
    pub repaired: Vec<(Form, usize)>,
    /// A call-like text that stayed text.
    pub unparsed: Option<(Form, String)>,
}

impl Report {
    pub fn calls(&self) -> usize {
        self.repaired.iter().map(|(_, n)| n).sum()
    }

    /// For the request log: `qwen3_coder_xml x1`.
    pub fn repaired_note(&self) -> Option<String> {
        (!self.repaired.is_empty()).then(|| {
            self.repaired
                .iter()
                .map(|(f, n)| format!("{} x{n}", f.as_str()))
                .collect::<Vec<_>>()
                .join(", ")
        })
    }

    pub fn unparsed_note(&self) -> Option<String> {
        self.unparsed
            .as_ref()
            .map(|(f, why)| format!("{}: {why}", f.as_str()))
    }
}

/// Repair a whole (non-streamed) Messages response in place.
pub fn repair_message(msg: &mut Value, tools: &ToolSet) -> Report {
    let mut report = Report::default();
    if msg.get("stop_reason").and_then(Value::as_str) == Some("max_tokens") {
        return report;
    }
    let Some(content) = msg.get_mut("content").and_then(Value::as_array_mut) else {
        return report;
    };
    let mut out = Vec::with_capacity(content.len());
    for block in content.drain(..) {
        let text = (block.get("type").and_then(Value::as_str) == Some("text"))
            .then(|| block.get("text").and_then(Value::as_str))
            .flatten();
        match text.map(|t| find(t, tools)) {
            Some(Found::Calls {
                prefix,
                calls,
                form,
            }) => {
                if !prefix.trim().is_empty() {
                    out.push(json!({"type": "text", "text": prefix}));
                }
                report.repaired.push((form, calls.len()));
                out.extend(calls.iter().map(tool_use_block));
            }
            Some(Found::Unparsed { form, why }) => {
                report.unparsed.get_or_insert((form, why));
                out.push(block);
            }
            _ => out.push(block),
        }
    }
    *content = out;
    if !report.repaired.is_empty()
        && let Some(o) = msg.as_object_mut()
    {
        o.insert("stop_reason".into(), json!("tool_use"));
    }
    report
}

/// The offered tools of a request, parsed on first need: most responses
/// never need them, and a request's `tools` is tens of kilobytes.
#[derive(Debug)]
pub struct LazyTools {
    raw: Bytes,
    parsed: OnceLock<ToolSet>,
}

impl LazyTools {
    pub fn new(raw: Bytes) -> LazyTools {
        LazyTools {
            raw,
            parsed: OnceLock::new(),
        }
    }

    pub fn get(&self) -> &ToolSet {
        self.parsed.get_or_init(|| ToolSet::from_raw(&self.raw))
    }
}

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

#[cfg(test)]
#[path = "repair_fixtures.rs"]
mod fixtures;

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> ToolSet {
        ToolSet::from_raw(
            json!([
                {"name": "Edit", "input_schema": {"type": "object", "properties": {
                    "file_path": {"type": "string"}, "old_string": {"type": "string"},
                    "new_string": {"type": "string"}, "replace_all": {"type": "boolean"}},
                    "required": ["file_path", "old_string", "new_string"]}},
                {"name": "Bash", "input_schema": {"type": "object", "properties": {
                    "command": {"type": "string"}, "timeout": {"type": "number"}},
                    "required": ["command"]}},
                {"name": "Read", "input_schema": {"type": "object", "properties": {
                    "file_path": {"type": "string"}, "limit": {"type": "integer"}},
                    "required": ["file_path"]}}
            ])
            .to_string()
            .as_bytes(),
        )
    }

    fn calls(f: Found) -> (String, Vec<Call>, Form) {
        match f {
            Found::Calls {
                prefix,
                calls,
                form,
            } => (prefix, calls, form),
            other => panic!("no calls: {other:?}"),
        }
    }

    #[test]
    fn the_markers_split_anywhere_are_seen() {
        assert_eq!(partial_marker_len("see <tool_"), 6);
        assert_eq!(partial_marker_len("a [TOOL"), 5);
        assert_eq!(partial_marker_len("x <"), 1);
        assert_eq!(partial_marker_len("no marker"), 0);
        assert_eq!(
            partial_marker_len("<tool_call>"),
            0,
            "a whole marker is not partial"
        );
    }

    #[test]
    fn xml_values_take_the_schema_types() {
        let (_, c, form) = calls(find(
            "<tool_call>\n<function=Read>\n<parameter=file_path>\n/a.txt\n</parameter>\n<parameter=limit>\n20\n</parameter>\n</function>\n</tool_call>",
            &tools(),
        ));
        assert_eq!(form, Form::QwenXml);
        assert_eq!(c[0].input, json!({"file_path": "/a.txt", "limit": 20}));
    }

    #[test]
    fn a_string_value_keeps_its_inner_newlines() {
        let (_, c, _) = calls(find(
            "<function=Edit>\n<parameter=file_path>\nx.py\n</parameter>\n<parameter=old_string>\na\nb\n</parameter>\n<parameter=new_string>\n\nc\n\n</parameter>\n</function>",
            &tools(),
        ));
        assert_eq!(c[0].input["old_string"], "a\nb");
        assert_eq!(c[0].input["new_string"], "\nc\n");
    }

    #[test]
    fn refusals_leave_text() {
        let t = tools();
        assert!(matches!(
            find(
                "<tool_call>\n{\"name\": \"Deploy\", \"arguments\": {}}\n</tool_call>",
                &t
            ),
            Found::Unparsed { .. }
        ));
        assert!(matches!(
            find(
                "<tool_call>\n{\"name\": \"Edit\", \"arguments\": {\"file_path\": \"a\"}}\n</tool_call>",
                &t
            ),
            Found::Unparsed { .. }
        ));
        assert_eq!(
            find("Use the `<tool_call>` tag to call tools.", &t),
            Found::Nothing
        );
        assert_eq!(
            find(
                "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"ls\"}",
                &t
            ),
            Found::Unparsed {
                form: Form::Hermes,
                why: "the JSON inside <tool_call> does not parse".into()
            }
        );
        assert_eq!(find("{\"answer\": 42}", &t), Found::Nothing);
        assert_eq!(find("plain prose", &t), Found::Nothing);
        // Text after the call: not a clean call.
        assert!(matches!(
            find(
                "<tool_call>{\"name\":\"Bash\",\"arguments\":{\"command\":\"ls\"}}</tool_call> and then I will",
                &t
            ),
            Found::Unparsed { .. }
        ));
    }

    #[test]
    fn xml_closers_end_values_and_a_key_given_twice_is_no_call() {
        let (_, c, _) = calls(find(
            "<tool_call><function=Bash><parameter=command>ls -la</function></tool_call>",
            &tools(),
        ));
        assert_eq!(c[0].input, json!({"command": "ls -la"}));
        assert!(matches!(
            find(
                "<tool_call>\n<function=Bash>\n<parameter=command>\nls\n</parameter>\n<parameter=command>\nrm -rf /tmp/x\n</parameter>\n</function>\n</tool_call>",
                &tools()
            ),
            Found::Unparsed { .. }
        ));
        // A Write whose content holds a parameter of its own: refused, not
        // sent to another path.
        assert!(matches!(
            find(
                "<function=Edit>\n<parameter=file_path>\na\n</parameter>\n<parameter=old_string>\nx\n</parameter>\n<parameter=new_string>\nline1\n<parameter=file_path>\n/etc/evil\n</parameter>\n</function>",
                &tools()
            ),
            Found::Unparsed { .. }
        ));
        // An unclosed value is no call.
        assert!(!matches!(
            find(
                "<tool_call>\n<function=Bash>\n<parameter=command>\nls",
                &tools()
            ),
            Found::Calls { .. }
        ));
    }

    #[test]
    fn arguments_encoded_twice_are_read() {
        let (_, c, f) = calls(find(
            r#"{"name": "Bash", "arguments": "{\"command\": \"ls\"}"}"#,
            &tools(),
        ));
        assert_eq!(
            (f, c[0].input.clone()),
            (Form::BareJson, json!({"command": "ls"}))
        );
    }

    #[test]
    fn mistral_forms() {
        let (_, c, f) = calls(find(
            r#"[TOOL_CALLS]Bash[ARGS]{"command": "ls"}[TOOL_CALLS]Read[ARGS]{"file_path": "a"}"#,
            &tools(),
        ));
        assert_eq!(f, Form::Mistral);
        assert_eq!(c.len(), 2);
        assert_eq!(c[1].name, "Read");
        let (_, c, _) = calls(find(
            r#"[TOOL_CALLS]Bash[CALL_ID]abc123def[ARGS]{"command": "ls"}"#,
            &tools(),
        ));
        assert_eq!(c[0].input["command"], "ls");
    }

    #[test]
    fn a_non_streamed_answer_is_rewritten() {
        let mut msg = json!({"content": [{"type": "text", "text": "I will list it.\n<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>"}], "stop_reason": "end_turn"});
        let r = repair_message(&mut msg, &tools());
        assert_eq!(r.calls(), 1);
        assert_eq!(msg["stop_reason"], "tool_use");
        assert_eq!(msg["content"][0]["text"], "I will list it.\n");
        assert_eq!(msg["content"][1]["type"], "tool_use");
        assert_eq!(msg["content"][1]["input"], json!({"command": "ls"}));
        // Cut by max_tokens: left alone.
        let mut cut = json!({"content": [{"type": "text", "text": "<tool_call>{\"name\":\"Bash\",\"arguments\":{\"command\":\"ls\"}}</tool_call>"}], "stop_reason": "max_tokens"});
        assert_eq!(repair_message(&mut cut, &tools()).calls(), 0);
    }
}
