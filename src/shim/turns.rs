//! The turn budget (issue 46): with three turns or fewer left, the
//! delegate reads how many remain, inside the tool result it is answering.
//!
//! A turn is what Claude Code's `--max-turns` counts: one request of the
//! conversation that answers the model's previous turn (its tool results,
//! or a new prompt). The job tells the route each session's limit
//! ([`TurnBudget::start`]); the shim counts a turn each time a request's
//! last user message is a new one (a retry or a compaction request sends
//! no new one). The note is appended to the last tool result of that
//! message: the peers found that a separate text block can be dropped in
//! translation, and a tool result is what the model reads next.
//!
//! The note must not move the prompt: the KV cache keeps everything before
//! the newest message only while earlier messages stay byte for byte, and
//! Claude Code sends the original tool result again on every later
//! request. So a note is remembered by its tool call's id and appended, the
//! same text, to that result in every later request of the job.

use std::hash::BuildHasher;
use std::sync::Mutex;

use serde::Deserialize;
use serde_json::value::RawValue;

/// Notes begin this many turns before the limit (the third-last turn).
pub const WARN_LEFT: u32 = 3;

/// What Claude Code's compaction request ends with: not a turn.
const COMPACTION: &str = "CRITICAL: Respond with TEXT ONLY";

/// The note at turn `turn` of `max`.
pub fn note_text(turn: u32, max: u32) -> String {
    let left = max.saturating_sub(turn);
    if left == 0 {
        format!(
            "[localagents: this is your last turn ({max} of {max}). Tools you call now will run, but their results will not reach you. End with a short report: what is done, and what is left.]"
        )
    } else {
        format!(
            "[localagents: turn {turn} of {max}; {left} more after this one. Plan to finish within them, or end with a short report of what is done and what is left.]"
        )
    }
}

/// Where a note goes: the tool result of `tool_use_id` in the user message
/// at `index`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub index: usize,
    pub tool_use_id: String,
    pub text: String,
}

/// What the budget found in one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// Every note of the job this request carries.
    pub notes: Vec<Place>,
    /// A note placed for the first time in this request.
    pub new_note: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    /// This session's `--max-turns` (0: no budget said).
    max: u32,
    /// Turns of this session so far.
    turn: u32,
    /// The last user message that counted (its last tool call's id, or
    /// its bytes' hash).
    last: Option<String>,
    /// Notes placed: tool call id → text. Kept across sessions: a resumed
    /// session sends the same results again.
    notes: Vec<(String, String)>,
}

/// A job's turn count and the notes placed (one per route).
#[derive(Debug, Default)]
pub struct TurnBudget(Mutex<State>);

#[derive(Deserialize)]
struct Msg<'a> {
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type", default)]
    typ: Option<String>,
    #[serde(default)]
    tool_use_id: Option<String>,
}

/// The id of the last tool result of a user message, if it has one.
fn last_result_id(raw: &RawValue) -> Option<String> {
    if !raw.get().contains("\"tool_result\"") {
        return None;
    }
    let m: Msg = serde_json::from_str(raw.get()).ok()?;
    let blocks: Vec<Block> = serde_json::from_str(m.content?.get()).ok()?;
    blocks
        .into_iter()
        .rev()
        .find(|b| b.typ.as_deref() == Some("tool_result"))
        .and_then(|b| b.tool_use_id)
}

impl TurnBudget {
    /// A new session of the job with `max_turns` turns: count from zero.
    /// The notes placed so far stay (a resumed conversation carries them).
    pub fn start(&self, max_turns: u32) {
        if let Ok(mut s) = self.0.lock() {
            s.max = max_turns;
            s.turn = 0;
            s.last = None;
        }
    }

    /// Count the turn `msgs` is (roles read by the caller) and place the
    /// notes. `tools`: the request offers tools (a side request without
    /// them is no turn).
    pub fn scan(&self, msgs: &[&RawValue], roles: &[Option<&str>], tools: bool) -> Scan {
        let mut out = Scan::default();
        let Ok(mut s) = self.0.lock() else {
            return out;
        };
        if s.max == 0 && s.notes.is_empty() {
            return out;
        }
        // Earlier notes, where their results still are.
        for (id, text) in &s.notes {
            if let Some(index) = (0..msgs.len()).find(|&i| {
                roles[i] == Some("user") && msgs[i].get().contains(id.as_str())
            }) {
                out.notes.push(Place {
                    index,
                    tool_use_id: id.clone(),
                    text: text.clone(),
                });
            }
        }
        // The last message of the conversation (Claude Code's system
        // entries after it are folded into it).
        let Some(last) = (0..msgs.len()).rev().find(|&i| roles[i] != Some("system")) else {
            return out;
        };
        if s.max == 0 || !tools || roles[last] != Some("user") {
            return out;
        }
        let raw = msgs[last].get();
        if raw.contains(COMPACTION) {
            return out;
        }
        let result_id = last_result_id(msgs[last]);
        let key = result_id.clone().unwrap_or_else(|| {
            let h = foldhash::fast::FixedState::with_seed(0x5455_524e_5331).hash_one(raw);
            format!("h{h:x}")
        });
        if s.last.as_deref() == Some(key.as_str()) {
            return out;
        }
        s.last = Some(key);
        s.turn += 1;
        let (turn, max) = (s.turn, s.max);
        if turn + WARN_LEFT <= max || turn > max {
            return out;
        }
        let Some(id) = result_id else {
            return out;
        };
        if s.notes.iter().any(|(n, _)| *n == id) {
            return out;
        }
        let text = note_text(turn, max);
        s.notes.push((id.clone(), text.clone()));
        out.notes.push(Place {
            index: last,
            tool_use_id: id,
            text: text.clone(),
        });
        out.new_note = Some(text);
        out
    }
}

/// A conversation as the guards read it: each message's raw JSON and its
/// role (for the tests of the guards that scan `messages`).
#[cfg(test)]
pub(crate) fn with_raw<T>(
    msgs: &[serde_json::Value],
    f: impl FnOnce(&[&RawValue], &[Option<&str>]) -> T,
) -> T {
    let raws: Vec<Box<RawValue>> = msgs
        .iter()
        .map(|m| serde_json::value::to_raw_value(m).expect("a message"))
        .collect();
    let refs: Vec<&RawValue> = raws.iter().map(|b| b.as_ref()).collect();
    #[derive(Deserialize)]
    struct Role {
        role: Option<String>,
    }
    let roles: Vec<Option<String>> = refs
        .iter()
        .map(|r| serde_json::from_str::<Role>(r.get()).ok().and_then(|r| r.role))
        .collect();
    let roles: Vec<Option<&str>> = roles.iter().map(|r| r.as_deref()).collect();
    f(&refs, &roles)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn conv(turns: usize) -> Vec<Value> {
        let mut m = vec![json!({"role": "user", "content": "write the files"})];
        for i in 0..turns {
            let id = format!("toolu_{i}");
            m.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Write", "input": {"file_path": format!("{i}.txt"), "content": "x"}}]}));
            m.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]}));
        }
        m
    }

    fn scan(b: &TurnBudget, msgs: &[Value]) -> Scan {
        with_raw(msgs, |refs, roles| b.scan(refs, roles, true))
    }

    #[test]
    fn the_third_last_turn_gets_the_note_and_every_later_request_keeps_it() {
        let b = TurnBudget::default();
        b.start(5);
        for t in 0..2 {
            assert_eq!(scan(&b, &conv(t)), Scan::default(), "turn {}", t + 1);
        }
        // A retry of turn 2 is no new turn.
        assert_eq!(scan(&b, &conv(1)), Scan::default());
        let third = scan(&b, &conv(2));
        assert_eq!(third.new_note.as_deref(), Some(note_text(3, 5).as_str()));
        assert_eq!(third.notes.len(), 1);
        assert_eq!(third.notes[0].index, 4);
        let fourth = scan(&b, &conv(3));
        assert_eq!(fourth.new_note, Some(note_text(4, 5)));
        assert_eq!(
            fourth.notes.iter().map(|p| p.index).collect::<Vec<_>>(),
            vec![4, 6],
            "the third-last turn's note stays where it was"
        );
        let last = scan(&b, &conv(4));
        assert!(last.new_note.unwrap().contains("last turn (5 of 5)"));
    }

    #[test]
    fn a_compaction_request_is_no_turn_and_off_means_nothing() {
        let b = TurnBudget::default();
        assert_eq!(scan(&b, &conv(3)), Scan::default(), "no budget said");
        b.start(4);
        scan(&b, &conv(0));
        let mut c = conv(1);
        c.push(json!({"role": "assistant", "content": "ok"}));
        c.push(json!({"role": "user", "content": "CRITICAL: Respond with TEXT ONLY. Summarize."}));
        assert_eq!(scan(&b, &c), Scan::default());
        // The compaction did not count: this is turn 2 of 4.
        assert_eq!(scan(&b, &conv(1)).new_note, Some(note_text(2, 4)));
    }
}
