//! What a job's `events.jsonl` keeps of the delegate's stream-json: every
//! event, but bounded. A tool result keeps what the model got and not
//! Claude Code's own copy of it for its UI (`tool_use_result`: the file
//! read again, an Edit's whole original file); an event over
//! [`EVENT_LINE_MAX`] is kept as a stub with its type, size and first
//! kilobyte; past [`EVENTS_CAP`] in one job, a kilobyte is the most an
//! event keeps. The model saw every event whole: only the copy on disk is
//! cut, so a long job's events do not grow without bound.

use serde_json::Value;

/// The most bytes of one event `events.jsonl` keeps whole: a larger one
/// (a long tool result, a Write of a big file) is kept as a stub with its
/// type, its size and its first kilobyte. The delegate and the model saw
/// it whole; the stub keeps a long job's events from growing without
/// bound.
pub const EVENT_LINE_MAX: usize = 16 * 1024;

/// Past this many bytes of a job's `events.jsonl`, every event over a
/// kilobyte is kept as a stub without its head.
pub const EVENTS_CAP: u64 = 8 << 20;

/// What a stub keeps of an event: its type.
#[derive(serde::Deserialize, Default)]
struct EventKind {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    subtype: Option<String>,
}

/// An event kept as a stub.
#[derive(serde::Serialize)]
struct EventStub<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    subtype: Option<&'a str>,
    localagents_cut: CutNote,
}

#[derive(serde::Serialize)]
struct CutNote {
    /// The event's size.
    bytes: usize,
    /// Its first kilobyte, as text.
    head: String,
}

/// The line `events.jsonl` keeps for an event, when `kept` bytes are
/// already there: the event itself (a tool result without Claude Code's
/// second copy of it, `tool_use_result`, over a kilobyte), or its stub
/// when it is over [`EVENT_LINE_MAX`] (a kilobyte past [`EVENTS_CAP`]).
/// The session's own `system` events and its `result` are always kept
/// whole: the job's end reads them.
pub fn event_to_keep(line: &str, kept: u64) -> std::borrow::Cow<'_, str> {
    match slim_tool_result(line) {
        Some(slim) => std::borrow::Cow::Owned(cut_event(&slim, kept).into_owned()),
        None => cut_event(line, kept),
    }
}

/// A `user` event as Claude Code writes it: its `tool_use_result` is its
/// own copy of the result for its UI (the file read again, an Edit's whole
/// original file), which the model never sees.
#[derive(serde::Deserialize, serde::Serialize)]
struct UserEvent {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool_use_result: Option<Value>,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

/// A `user` event whose `tool_use_result` is over a kilobyte, with that
/// copy replaced by its size: the result the model got stays in
/// `message`. `None` for every other line.
fn slim_tool_result(line: &str) -> Option<String> {
    if line.len() <= 2048 || !line.starts_with("{\"type\":\"user\"") {
        return None;
    }
    let mut e: UserEvent = serde_json::from_str(line).ok()?;
    let bytes = e.tool_use_result.as_ref().map(|v| v.to_string().len())?;
    if e.kind != "user" || bytes <= 1024 {
        return None;
    }
    e.tool_use_result = Some(serde_json::json!({ "localagents_cut": { "bytes": bytes } }));
    serde_json::to_string(&e).ok()
}

fn cut_event(line: &str, kept: u64) -> std::borrow::Cow<'_, str> {
    let full = kept >= EVENTS_CAP;
    let limit = if full { 1024 } else { EVENT_LINE_MAX };
    if line.len() <= limit {
        return std::borrow::Cow::Borrowed(line);
    }
    let k: EventKind = serde_json::from_str(line).unwrap_or_default();
    if k.kind == "result" || k.kind == "system" {
        return std::borrow::Cow::Borrowed(line);
    }
    let stub = EventStub {
        kind: if k.kind.is_empty() { "unknown" } else { &k.kind },
        subtype: k.subtype.as_deref(),
        localagents_cut: CutNote {
            bytes: line.len(),
            head: if full {
                String::new()
            } else {
                crate::fmt::first_chars(line, 1024)
            },
        },
    };
    match serde_json::to_string(&stub) {
        Ok(s) => std::borrow::Cow::Owned(s),
        Err(_) => std::borrow::Cow::Borrowed(line),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_event_is_kept_as_a_stub_and_the_result_whole() {
        let big = format!(
            "{{\"type\":\"user\",\"message\":{{\"content\":[{{\"type\":\"tool_result\",\"content\":\"{}\"}}]}}}}",
            "a".repeat(40_000)
        );
        let kept = event_to_keep(&big, 0);
        assert!(kept.len() < 2_000, "{}", kept.len());
        let v: serde_json::Value = serde_json::from_str(&kept).unwrap();
        assert_eq!(v["type"], "user");
        assert_eq!(v["localagents_cut"]["bytes"], big.len());
        let result = format!("{{\"type\":\"result\",\"result\":\"{}\"}}", "r".repeat(40_000));
        assert_eq!(event_to_keep(&result, 0), result);
        let small = "{\"type\":\"assistant\",\"message\":{}}";
        assert_eq!(event_to_keep(small, 0), small);
        // A tool result keeps what the model got, not Claude Code's copy.
        let read = format!(
            "{{\"type\":\"user\",\"message\":{{\"role\":\"user\",\"content\":[{{\"type\":\"tool_result\",\"content\":\"{0}\"}}]}},\"tool_use_result\":{{\"file\":{{\"content\":\"{0}\"}}}}}}",
            "f".repeat(7_000)
        );
        let kept = event_to_keep(&read, 0);
        let v: serde_json::Value = serde_json::from_str(&kept).unwrap();
        assert_eq!(v["message"]["content"][0]["content"].as_str().unwrap().len(), 7_000);
        assert!(v["tool_use_result"]["localagents_cut"]["bytes"].as_u64().unwrap() > 7_000);
        assert!(kept.len() < 7_300, "{}", kept.len());
        // Past the cap, a kilobyte is the most an event keeps.
        let mid = format!("{{\"type\":\"assistant\",\"x\":\"{}\"}}", "m".repeat(3_000));
        assert_eq!(event_to_keep(&mid, 0), mid);
        assert!(event_to_keep(&mid, EVENTS_CAP).len() < 200);
    }
}
