//! The loop guard: a model that makes the same call again and again.
//!
//! Small models repeat one call, with the same input and the same result,
//! until `max_turns` runs out. The guard reads the end of each request's
//! conversation: the assistant turns that called tools and the user turns
//! that answered them. When the last `limit` pairs are identical (the same
//! calls, by name and canonical input, answered by the same results), the
//! user message that carries the `limit`-th result gets one note folded in
//! (`<system>…</system>`, as every folded entry). At twice the limit the
//! request is not sent: the job stops as stuck, with the call named.
//!
//! The note must not move the prompt: the KV cache keeps everything before
//! the newest message only while earlier messages stay byte for byte. So
//! the place of a note is a function of the conversation (the pair where
//! the run reached the limit), and [`Marks`] remembers it after the run
//! ends, so every later request of the job carries it at the same place.
//! A user turn with text of its own (a resume with guidance) breaks a run.

use std::sync::Mutex;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// `defaults.loop_limit` when unset.
pub const DEFAULT_LIMIT: u32 = 3;

/// The note's text.
pub fn note_text(limit: u32) -> String {
    format!(
        "you have made this exact call {limit} times with the same result; change approach or stop and report"
    )
}

/// A note's place: the user message at `index` that answers `tool_use_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub index: usize,
    pub tool_use_id: String,
}

/// The notes a job has placed (one per run).
#[derive(Debug, Default)]
pub struct Marks(Mutex<Vec<Mark>>);

/// What the guard found in one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scan {
    /// User messages (indexes into the request's `messages`) that get a note.
    pub notes: Vec<usize>,
    /// A note placed for the first time in this request.
    pub new_note: bool,
    /// The run reached twice the limit: the sentence that stops the job.
    pub stuck: Option<String>,
}

#[derive(Deserialize)]
struct Msg {
    role: Option<String>,
    #[serde(default)]
    content: Option<Content>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(#[allow(dead_code)] String),
    Blocks(Vec<Block>),
}

#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type")]
    typ: Option<String>,
    id: Option<String>,
    name: Option<String>,
    input: Option<Value>,
    tool_use_id: Option<String>,
    content: Option<Value>,
    is_error: Option<bool>,
    text: Option<String>,
}

/// A value with its object keys sorted, as text: the same input written
/// in another key order is the same call.
pub fn canonical(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(o) => {
                let mut keys: Vec<&String> = o.keys().collect();
                keys.sort();
                let mut m = Map::new();
                for k in keys {
                    m.insert(k.clone(), sorted(&o[k]));
                }
                Value::Object(m)
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(v).to_string()
}

/// One call-and-answer pair of the conversation.
#[derive(Debug, Clone, PartialEq)]
struct Pair {
    /// (name, canonical input) of each call, in order.
    calls: Vec<(String, String)>,
    /// The first call's input, for the sentence.
    first_input: Value,
    /// Canonical results, in the order of the calls.
    results: Vec<String>,
    user_index: usize,
    last_id: String,
}

impl Pair {
    fn same(&self, other: &Pair) -> bool {
        self.calls == other.calls && self.results == other.results
    }
}

/// Is this text block one of ours or Claude Code's reminders (which do not
/// break a run), rather than words of the user?
fn injected(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with("<system>") || t.starts_with("<system-reminder>") || t.is_empty()
}

fn parse(raw: &RawValue) -> Option<Msg> {
    serde_json::from_str(raw.get()).ok()
}

/// The pair whose answer is the user message at `u` (its call is in the
/// assistant message before it), if it is one.
fn pair_at(msgs: &[&RawValue], order: &[usize], k: usize) -> Option<Pair> {
    if k == 0 {
        return None;
    }
    let (a, u) = (order[k - 1], order[k]);
    let user = parse(msgs[u])?;
    let asst = parse(msgs[a])?;
    if user.role.as_deref() != Some("user") || asst.role.as_deref() != Some("assistant") {
        return None;
    }
    let Some(Content::Blocks(ublocks)) = user.content else {
        return None;
    };
    let Some(Content::Blocks(ablocks)) = asst.content else {
        return None;
    };
    let mut calls = Vec::new();
    let mut ids = Vec::new();
    let mut first_input = None;
    for b in &ablocks {
        if b.typ.as_deref() == Some("tool_use") {
            let input = b.input.clone().unwrap_or(Value::Null);
            calls.push((b.name.clone().unwrap_or_default(), canonical(&input)));
            ids.push(b.id.clone().unwrap_or_default());
            first_input.get_or_insert(input);
        }
    }
    if calls.is_empty() {
        return None;
    }
    let mut results = vec![String::new(); ids.len()];
    for b in &ublocks {
        match b.typ.as_deref() {
            Some("tool_result") => {
                let id = b.tool_use_id.as_deref().unwrap_or("");
                if let Some(i) = ids.iter().position(|x| x == id) {
                    results[i] = format!(
                        "{}{}",
                        if b.is_error == Some(true) { "E:" } else { "" },
                        canonical(b.content.as_ref().unwrap_or(&Value::Null))
                    );
                }
            }
            Some("text") if !injected(b.text.as_deref().unwrap_or("")) => return None,
            _ => {}
        }
    }
    Some(Pair {
        calls,
        first_input: first_input.unwrap_or(Value::Null),
        results,
        user_index: u,
        last_id: ids.last().cloned().unwrap_or_default(),
    })
}

/// The stuck sentence: "stuck: the model called Bash(`npm test`) 6 times in
/// a row with the same result".
pub fn stuck_sentence(name: &str, input: &Value, times: usize) -> String {
    let arg = crate::fmt::tool_arg(name, input);
    let call = if arg.is_empty() {
        name.to_string()
    } else {
        format!("{name}(`{}`)", crate::fmt::one_line(&arg, 80))
    };
    format!(
        "stuck: the model called {call} {times} times in a row with the same result; resume the job with guidance, or try another model"
    )
}

impl Marks {
    /// Scan `msgs` (the request's `messages`, roles read by the caller).
    /// Only the last `2 × limit` pairs are parsed.
    pub fn scan(&self, msgs: &[&RawValue], roles: &[Option<&str>], limit: u32) -> Scan {
        let mut out = Scan::default();
        if limit == 0 {
            return out;
        }
        let Ok(mut marks) = self.0.lock() else {
            return out;
        };
        // Notes placed earlier stay where they were, while the message
        // there still answers the same call.
        for m in marks.iter() {
            if roles.get(m.index) == Some(&Some("user"))
                && msgs[m.index].get().contains(m.tool_use_id.as_str())
            {
                out.notes.push(m.index);
            }
        }
        // The conversation's turns, without system entries.
        let order: Vec<usize> = (0..msgs.len())
            .filter(|&i| roles[i] != Some("system"))
            .collect();
        if order.len() < 2 {
            return out;
        }
        let limit = limit as usize;
        let mut run: Vec<Pair> = Vec::new();
        let mut k = order.len() - 1;
        while run.len() < 2 * limit {
            let Some(p) = pair_at(msgs, &order, k) else {
                break;
            };
            if run.first().is_some_and(|f| !f.same(&p)) {
                break;
            }
            run.push(p);
            if k < 2 {
                break;
            }
            k -= 2;
        }
        if run.len() >= limit {
            // The pair where the run reached the limit (oldest first).
            let at = &run[run.len() - limit];
            let mark = Mark {
                index: at.user_index,
                tool_use_id: at.last_id.clone(),
            };
            if !marks.contains(&mark) {
                marks.push(mark);
                out.new_note = true;
            }
            if !out.notes.contains(&at.user_index) {
                out.notes.push(at.user_index);
            }
        }
        if run.len() >= 2 * limit {
            let p = &run[0];
            out.stuck = Some(stuck_sentence(&p.calls[0].0, &p.first_input, run.len()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conv(pairs: &[(&str, &str)], tail_text: Option<&str>) -> Vec<Value> {
        let mut m = vec![json!({"role": "user", "content": "run the tests"})];
        for (i, (cmd, result)) in pairs.iter().enumerate() {
            let id = format!("toolu_{i}");
            m.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Bash", "input": {"command": cmd}}]}));
            let mut blocks =
                vec![json!({"type": "tool_result", "tool_use_id": id, "content": result})];
            if let (Some(t), true) = (tail_text, i == pairs.len() - 1) {
                blocks.push(json!({"type": "text", "text": t}));
            }
            m.push(json!({"role": "user", "content": blocks}));
        }
        m
    }

    fn scan(marks: &Marks, msgs: &[Value]) -> Scan {
        crate::shim::turns::with_raw(msgs, |refs, roles| marks.scan(refs, roles, 3))
    }

    #[test]
    fn the_third_identical_pair_gets_one_note_that_stays() {
        let marks = Marks::default();
        let two = conv(&[("npm test", "1 failed"), ("npm test", "1 failed")], None);
        assert_eq!(scan(&marks, &two), Scan::default());
        let three = conv(&[("npm test", "1 failed"); 3], None);
        let s = scan(&marks, &three);
        assert_eq!(
            (s.notes.clone(), s.new_note, s.stuck.clone()),
            (vec![6], true, None)
        );
        // The model changes approach: the note stays where it was.
        let mut four = three.clone();
        four.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_x", "name": "Read", "input": {"file_path": "a.js"}}]}));
        four.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "x"}]}));
        let s = scan(&marks, &four);
        assert_eq!((s.notes, s.new_note), (vec![6], false));
    }

    #[test]
    fn twice_the_limit_is_stuck_and_named() {
        let six = conv(&[("npm test", "1 failed"); 6], None);
        let s = scan(&Marks::default(), &six);
        assert_eq!(
            s.stuck.as_deref(),
            Some(
                "stuck: the model called Bash(`npm test`) 6 times in a row with the same result; resume the job with guidance, or try another model"
            )
        );
        assert_eq!(s.notes, vec![6], "the note sits at the third pair");
    }

    #[test]
    fn a_different_result_or_input_or_guidance_breaks_the_run() {
        let m = Marks::default();
        let varied = conv(
            &[
                ("npm test", "1 failed"),
                ("npm test", "2 failed"),
                ("npm test", "1 failed"),
            ],
            None,
        );
        assert_eq!(scan(&m, &varied), Scan::default());
        let inputs = conv(
            &[("npm test", "ok"), ("npm t", "ok"), ("npm test", "ok")],
            None,
        );
        assert_eq!(scan(&m, &inputs), Scan::default());
        let guided = conv(
            &[("npm test", "1 failed"); 6],
            Some("Try reading the test file first."),
        );
        let s = scan(&m, &guided);
        assert_eq!(s.stuck, None, "a user's own words end the run");
    }

    #[test]
    fn key_order_does_not_make_another_call() {
        assert_eq!(
            canonical(&json!({"b": 1, "a": {"d": 2, "c": 3}})),
            canonical(&json!({"a": {"c": 3, "d": 2}, "b": 1}))
        );
    }
}
