//! Context editing for small windows: once a job's prompt fills a share
//! of its window, the shim replaces old tool results with a one-line stub
//! that names the tool and its input, keeping the newest ones.
//!
//! Why: on a 16k or 32k window a few file reads fill what Claude Code
//! leaves for the conversation, and its only answer is to compact: a
//! summary request that re-reads everything, and a new prompt the
//! server's cache has never seen. Most of that room is old tool results
//! the model has already acted on (a peer, claude-code-delegate-local,
//! keeps the last six; Anthropic's API clears old tool uses the same way).
//! Claude Code counts its context from the usage the server reports, so a
//! cleared prompt also moves its compaction later.
//!
//! In batches, so the server's prefix cache survives: a result once
//! cleared stays cleared with the same stub, the set only grows, and it
//! grows only when the prompt passes the high mark again, then by enough
//! results to bring it down to the low mark. Between two batches every
//! request extends the one before it; a batch changes the prompt from the
//! first result it clears. The newest [`KEEP`] results are never cleared
//! (the model is acting on them).
//!
//! Off by default (`defaults.clear_tool_results: auto` turns it on): on
//! the long jobs of `cargo bench --bench long_jobs` it halved the
//! compactions at 32k and 64k but re-processed more prompt tokens than
//! they cost; a real model's summary, which neither the fake nor the real
//! tier's relay writes, is what it saves.
//!
//! The prompt's size is estimated from its bytes at the tokens-per-byte
//! rate of the route's last answered request (the server's own count),
//! before the first answer at [`FIRST_RATE`].

use std::collections::HashMap;
use std::sync::Mutex;

use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::anthropic::{Block, blocks, lenient};

/// Tool results never cleared: the newest ones.
pub const KEEP: usize = 2;

/// Tokens per byte before the server has answered once (JSON-wrapped
/// text is about 3.5 bytes a token).
pub const FIRST_RATE: f64 = 0.3;

/// Where a route clears: in tokens of the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marks {
    /// A prompt over this starts a batch.
    pub high: u64,
    /// A batch clears until the prompt is estimated under this share (in
    /// percent) of the room between the fixed prompt (`system` and
    /// `tools`) and the high mark.
    pub low_percent: u64,
    /// The most one tool result holds ([`crate::budget::Budget::tool_result`]).
    /// Clearing waits for a window whose room above the fixed prompt holds
    /// two of them: in less, the newest results fill it alone, every batch
    /// frees too little to put off Claude Code's compaction, and each
    /// costs the server a re-fill (measured: docs/benchmarks.md).
    pub result_cap: u64,
}

impl Marks {
    /// The marks of a job on `window`: it clears before Claude Code would
    /// compact (one answer's room below [`crate::budget::Budget::compact_at`]),
    /// down to half the room above the fixed prompt.
    pub fn of(window: u64) -> Marks {
        let (high, result_cap) = match crate::budget::Budget::of(window) {
            Some(b) => (b.compact_at.saturating_sub(b.output), b.tool_result),
            None => (window.saturating_mul(3) / 5, window / 8),
        };
        Marks {
            high,
            low_percent: 50,
            result_cap,
        }
    }
}

/// A route's clearings.
#[derive(Debug, Default)]
pub struct Clearing {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The last tool result cleared (its `tool_use_id`): in a request that
    /// holds it, it and every result before it are stubs.
    through: Option<String>,
    /// Batches so far, and results they cleared.
    batches: u64,
    results: u64,
    /// Bytes of the last request sent, to learn the rate from its answer.
    sent_bytes: u64,
    /// Tokens per byte of the last answered request.
    rate: Option<f64>,
}

/// What clearing did to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cleared {
    /// The request with its stubs.
    pub body: Vec<u8>,
    /// Where `tools` sits in it.
    pub tools_range: Option<(usize, usize)>,
    /// Tool results sent as stubs.
    pub stubs: usize,
    /// Results this request's new batch cleared (0: no new batch).
    pub batch: usize,
}

/// One tool result in the request: the message it is in, and its call.
struct Found {
    message: usize,
    id: String,
    bytes: usize,
}

impl Clearing {
    /// Clearings so far: (batches, results).
    pub fn totals(&self) -> (u64, u64) {
        self.state
            .lock()
            .map(|s| (s.batches, s.results))
            .unwrap_or_default()
    }

    /// The server answered the last request sent with `tokens` of prompt:
    /// the rate the next estimate uses.
    pub fn answered(&self, tokens: u64) {
        if let Ok(mut s) = self.state.lock()
            && s.sent_bytes > 0
            && tokens > 0
        {
            s.rate = Some(tokens as f64 / s.sent_bytes as f64);
        }
    }

    /// `body` (a folded Messages request) with its old tool results
    /// cleared, on a `window`-token route with `marks`; `None` when it is
    /// sent as it is.
    pub fn apply(&self, body: &[u8], window: u64, marks: Marks) -> Option<Cleared> {
        let mut st = self.state.lock().ok()?;
        st.sent_bytes = body.len() as u64;
        let rate = st.rate.unwrap_or(FIRST_RATE);
        let estimate = |bytes: usize| (bytes as f64 * rate) as u64;
        // A prompt under the high mark with nothing cleared yet: as it is,
        // without a parse.
        if st.through.is_none() && estimate(body.len()) <= marks.high {
            return None;
        }
        let parts: Parts = serde_json::from_slice(body).ok()?;
        let msgs: Vec<&RawValue> = serde_json::from_str(parts.messages?.get()).ok()?;
        let (results, calls) = tool_results(&msgs);
        // Results already cleared in this conversation (none if it does
        // not hold the last one: a compacted or another conversation).
        let mut n = st
            .through
            .as_ref()
            .and_then(|t| results.iter().position(|r| &r.id == t))
            .map_or(0, |p| p + 1);
        let cleared_bytes: usize = results[..n].iter().map(|r| r.bytes).sum();
        let now = body.len().saturating_sub(cleared_bytes);
        let mut batch = 0;
        let fixed = estimate(
            [parts.system, parts.tools]
                .iter()
                .flatten()
                .map(|v| v.get().len())
                .sum::<usize>(),
        );
        let roomy = marks.high.saturating_sub(fixed) >= 2 * marks.result_cap;
        if roomy && estimate(now) > marks.high && results.len() > KEEP + n {
            let low = fixed + (marks.high.saturating_sub(fixed)) * marks.low_percent / 100;
            let mut left = now;
            let first = n;
            while n < results.len() - KEEP && estimate(left) > low {
                left = left.saturating_sub(results[n].bytes);
                n += 1;
            }
            batch = n - first;
            st.through = Some(results[n - 1].id.clone());
            st.batches += 1;
            st.results += batch as u64;
        }
        if n == 0 {
            return None;
        }
        let stubbed: HashMap<&str, ()> = results[..n].iter().map(|r| (r.id.as_str(), ())).collect();
        let touched: Vec<usize> = {
            let mut t: Vec<usize> = results[..n].iter().map(|r| r.message).collect();
            t.dedup();
            t
        };
        let out = rewrite(body, &msgs, &touched, |id| {
            stubbed
                .contains_key(id)
                .then(|| stub(calls.get(id), window))
        })?;
        st.sent_bytes = out.0.len() as u64;
        Some(Cleared {
            body: out.0,
            tools_range: out.1,
            stubs: n,
            batch,
        })
    }
}

/// A request's parts clearing reads: the messages, and what the fixed
/// prompt is made of.
#[derive(Deserialize)]
struct Parts<'a> {
    #[serde(borrow)]
    messages: Option<&'a RawValue>,
    #[serde(borrow)]
    system: Option<&'a RawValue>,
    #[serde(borrow)]
    tools: Option<&'a RawValue>,
}

/// A message as clearing reads it.
#[derive(Deserialize)]
struct Message {
    #[serde(default, deserialize_with = "lenient")]
    role: Option<String>,
    #[serde(default, deserialize_with = "blocks")]
    content: Option<Vec<Block>>,
}

/// The tool results of `msgs` in order, and each call's tool and input.
fn tool_results(msgs: &[&RawValue]) -> (Vec<Found>, HashMap<String, (String, Value)>) {
    let mut found = Vec::new();
    let mut calls = HashMap::new();
    for (i, m) in msgs.iter().enumerate() {
        let raw = m.get();
        if !raw.contains("\"tool_result\"") && !raw.contains("\"tool_use\"") {
            continue;
        }
        let Ok(msg) = serde_json::from_str::<Message>(raw) else {
            continue;
        };
        let user = msg.role.as_deref() == Some("user");
        for b in msg.content.unwrap_or_default() {
            match b {
                Block::ToolUse {
                    id: Some(id),
                    name,
                    input,
                } => {
                    calls.insert(id, (name.unwrap_or_else(|| "a tool".into()), input));
                }
                Block::ToolResult {
                    tool_use_id: Some(id),
                    content,
                    ..
                } if user => found.push(Found {
                    message: i,
                    id,
                    bytes: content.to_string().len(),
                }),
                _ => {}
            }
        }
    }
    (found, calls)
}

/// The stub a cleared result is sent as: the call, so the model can make
/// it again.
pub fn stub(call: Option<&(String, Value)>, window: u64) -> String {
    let what = match call {
        Some((name, input)) => format!("{name} {}", crate::fmt::cut(&input.to_string(), 300)),
        None => "this call".to_string(),
    };
    format!(
        "[localagents cleared this old result to keep the {}-token window: {what}. Call it again if you need it.]",
        crate::fmt::thousands(window)
    )
}

/// A body rewritten, and where its `tools` sit in it.
type Rewritten = (Vec<u8>, Option<(usize, usize)>);

/// The body again with the results of messages `touched` for which
/// `stub_of` has a stub replaced by it; every other message, and every
/// other block, as it came.
fn rewrite(
    body: &[u8],
    msgs: &[&RawValue],
    touched: &[usize],
    stub_of: impl Fn(&str) -> Option<String>,
) -> Option<Rewritten> {
    let top: IndexMap<String, &RawValue> = serde_json::from_slice(body).ok()?;
    let mut messages: Vec<u8> = Vec::with_capacity(body.len());
    messages.push(b'[');
    for (i, m) in msgs.iter().enumerate() {
        if i > 0 {
            messages.push(b',');
        }
        if touched.binary_search(&i).is_ok() {
            rewrite_message(m, &stub_of, &mut messages)?;
        } else {
            messages.extend_from_slice(m.get().as_bytes());
        }
    }
    messages.push(b']');
    let mut out = Vec::with_capacity(messages.len() + 4096);
    let mut tools = None;
    out.push(b'{');
    for (i, (k, v)) in top.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, k).ok()?;
        out.push(b':');
        let at = out.len();
        if k == "messages" {
            out.extend_from_slice(&messages);
        } else {
            out.extend_from_slice(v.get().as_bytes());
        }
        if k == "tools" {
            tools = Some((at, out.len()));
        }
    }
    out.push(b'}');
    Some((out, tools))
}

/// One message written to `out` with its stubbed results replaced: its
/// other fields and blocks as they came.
fn rewrite_message(
    m: &RawValue,
    stub_of: &impl Fn(&str) -> Option<String>,
    out: &mut Vec<u8>,
) -> Option<()> {
    let fields: IndexMap<String, &RawValue> = serde_json::from_str(m.get()).ok()?;
    out.push(b'{');
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut *out, k).ok()?;
        out.push(b':');
        if k != "content" {
            out.extend_from_slice(v.get().as_bytes());
            continue;
        }
        let blocks: Vec<&RawValue> = serde_json::from_str(v.get()).ok()?;
        out.push(b'[');
        for (j, b) in blocks.iter().enumerate() {
            if j > 0 {
                out.push(b',');
            }
            let stub = match serde_json::from_str::<Block>(b.get()) {
                Ok(Block::ToolResult {
                    tool_use_id: Some(id),
                    is_error,
                    ..
                }) => stub_of(&id).map(|s| (id, s, is_error)),
                _ => None,
            };
            match stub {
                Some((id, text, is_error)) => {
                    let mut block = serde_json::json!({
                        "type": "tool_result", "tool_use_id": id, "content": text,
                    });
                    if let (Some(e), Value::Object(o)) = (is_error, &mut block) {
                        o.insert("is_error".into(), Value::Bool(e));
                    }
                    serde_json::to_writer(&mut *out, &block).ok()?;
                }
                None => out.extend_from_slice(b.get().as_bytes()),
            }
        }
        out.push(b']');
    }
    out.push(b'}');
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A conversation of `n` Reads, each result `size` bytes.
    fn conversation(n: usize, size: usize) -> Value {
        let mut msgs = vec![json!({"role": "user", "content": "read them all"})];
        for i in 0..n {
            msgs.push(json!({"role": "assistant", "content": [
                {"type": "text", "text": format!("reading {i}")},
                {"type": "tool_use", "id": format!("t{i}"), "name": "Read", "input": {"file_path": format!("/r/{i}.txt")}}
            ]}));
            msgs.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": format!("t{i}"), "content": "x".repeat(size)}
            ]}));
        }
        json!({"model": "m", "messages": msgs, "system": "s", "tools": [{"name": "Read"}], "max_tokens": 100})
    }

    fn bytes(v: &Value) -> Vec<u8> {
        serde_json::to_vec(v).unwrap()
    }

    fn results(body: &[u8]) -> Vec<String> {
        let v: Value = serde_json::from_slice(body).unwrap();
        v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .filter(|b| b["type"] == "tool_result")
            .map(|b| b["content"].as_str().unwrap().to_string())
            .collect()
    }

    fn raw_messages(body: &[u8]) -> String {
        let top: IndexMap<String, &RawValue> = serde_json::from_slice(body).unwrap();
        top["messages"].get().to_string()
    }

    const MARKS: Marks = Marks {
        high: 3000,
        low_percent: 50,
        result_cap: 600,
    };

    #[test]
    fn a_window_with_room_for_less_than_two_results_is_not_cleared() {
        let c = Clearing::default();
        let tight = Marks {
            result_cap: 1_600,
            ..MARKS
        };
        assert_eq!(c.apply(&bytes(&conversation(6, 2000)), 16_384, tight), None);
        assert_eq!(c.totals(), (0, 0));
    }

    #[test]
    fn under_the_high_mark_nothing_is_parsed_or_changed() {
        let c = Clearing::default();
        assert_eq!(c.apply(&bytes(&conversation(3, 1000)), 16_384, MARKS), None);
        assert_eq!(c.totals(), (0, 0));
    }

    #[test]
    fn a_batch_clears_old_results_keeps_the_newest_and_stays_cleared() {
        let c = Clearing::default();
        let body = bytes(&conversation(6, 2000));
        let out = c.apply(&body, 16_384, MARKS).expect("over the high mark");
        let rs = results(&out.body);
        assert!(out.batch >= 1 && out.batch <= 4, "{}", out.batch);
        assert_eq!(out.stubs, out.batch);
        for r in &rs[..out.stubs] {
            assert!(r.starts_with("[localagents cleared this old result to keep the 16,384-token window: Read {\"file_path\":"), "{r}");
        }
        for r in &rs[rs.len() - KEEP..] {
            assert_eq!(r.len(), 2000, "the newest are kept");
        }
        assert_eq!(c.totals(), (1, out.batch as u64));
        // The tools' range is where the tools are in the new body.
        let (a, b) = out.tools_range.unwrap();
        assert_eq!(&out.body[a..b], br#"[{"name":"Read"}]"#);

        // The next turn: one more result. The same stubs, no new batch
        // (under the high mark again), and its messages extend the ones
        // sent before, byte for byte.
        let next = bytes(&conversation(7, 2000));
        let out2 = c
            .apply(&next, 16_384, Marks { high: 8000, ..MARKS })
            .expect("stubs stay");
        assert_eq!(out2.batch, 0);
        assert_eq!(out2.stubs, out.stubs);
        let before = raw_messages(&out.body);
        assert!(
            raw_messages(&out2.body).starts_with(&before[..before.len() - 1]),
            "the prompt grows from where it was"
        );
        assert_eq!(c.totals(), (1, out.batch as u64));
    }

    #[test]
    fn a_new_batch_keeps_the_prefix_up_to_the_first_result_it_clears() {
        let c = Clearing::default();
        let out = c.apply(&bytes(&conversation(6, 2000)), 16_384, MARKS).unwrap();
        let later = bytes(&conversation(12, 2000));
        let out2 = c.apply(&later, 16_384, MARKS).unwrap();
        assert!(out2.batch > 0, "a second batch");
        // Up to the first result the second batch clears, the bytes are
        // those of the request before it.
        let first_new = format!("\"tool_use_id\":\"t{}\"", out.stubs);
        let at = |b: &[u8]| String::from_utf8_lossy(b).find(&first_new).unwrap();
        let p = at(&out2.body);
        assert_eq!(p, at(&out.body));
        assert_eq!(out.body[..p], out2.body[..p]);
        assert_eq!(c.totals(), (2, (out.batch + out2.batch) as u64));
    }

    #[test]
    fn another_conversation_starts_from_nothing_cleared() {
        let c = Clearing::default();
        c.apply(&bytes(&conversation(6, 2000)), 16_384, MARKS).unwrap();
        // After a compaction: a summary and no old ids.
        let mut v = conversation(1, 100);
        v["messages"][2]["content"][0]["tool_use_id"] = json!("new");
        v["messages"][1]["content"][1]["id"] = json!("new");
        assert_eq!(c.apply(&bytes(&v), 16_384, MARKS), None);
    }

    #[test]
    fn the_rate_is_learned_from_the_answer() {
        let body = bytes(&conversation(6, 2000));
        assert!(Clearing::default().apply(&body, 16_384, MARKS).is_some());
        // A server that counts far fewer tokens than 0.3 a byte: no batch.
        let c = Clearing::default();
        c.apply(&bytes(&conversation(1, 100)), 16_384, MARKS);
        c.answered(10);
        assert_eq!(c.apply(&body, 16_384, MARKS), None);
    }
}
