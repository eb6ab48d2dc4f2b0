//! The text forms of a tool call: finding them in an answer's text and
//! parsing them into calls checked against the offered tools ([`find`]).
//! The message repair and the stream repair both build on it.

use std::collections::HashMap;

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
