//! The repair of a whole (non-streamed) answer ([`repair_message`]), what
//! a repair did ([`Report`]), and the offered tools parsed on first need
//! ([`LazyTools`]).

use std::sync::OnceLock;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::shim::repair::parse::*;

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
