//! The reader job of issue 45: a tree of long text files and a scripted
//! model that reads them all, the way a diligent local model does, and
//! then writes what it found.
//!
//! The tree: `parts` files `partNN.txt` of numbered lines
//! (`partNN line LLLL: …`), each about `tokens` tokens by the
//! fakes' count, the last line `END-OF-partNN`.
//!
//! The model, decided from the request alone (its memory is what the
//! window still shows it):
//! - It Reads the first file whose END line it has not noted, whole. When
//!   Claude Code refuses a Read as too large ("File content (N tokens)
//!   exceeds maximum allowed tokens (M)") or gives only a first page, it
//!   reads on in parts, from the line after the last one it saw, `CHUNK`
//!   lines at a time, halving the part while a Read is still refused.
//! - Each turn it notes in its own text what it has seen: the END lines a
//!   Read result has shown (a capped Read that stops short shows none),
//!   and how far it has read the file it is on (`partNN read through line
//!   LLLL`).
//! - Once every END line is noted it Writes SUMMARY.md listing them, then
//!   ends with a short report.
//! - A compaction request (Claude Code's "Your task is to create a detailed
//!   summary") is answered with text: its notes, so the continued session
//!   knows what it had done. A model that answered it with a tool call
//!   would leave Claude Code with an empty summary.
//!
//! What it does on a capped Read follows the Read tool's contract in
//! Claude Code 2.1.328, as its maintainers describe it in
//! anthropics/claude-code#77489 (tested there on 2.1.233): a whole-file
//! Read over the cap returns a first page with a PARTIAL notice, and an
//! explicit offset/limit range over the cap is refused with "File content
//! (N tokens) exceeds maximum allowed tokens (M). Use offset and limit
//! parameters…"; the bug reports of that refusal (#8249, #14876, #43624)
//! show the model going on with offset and limit.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use super::script::{Reply, Script};

/// Lines per part once a whole-file Read was refused.
pub const CHUNK: u64 = 80;

/// The phrase that marks Claude Code's compaction request.
pub const COMPACTION_ASK: &str = "Your task is to create a detailed summary";

/// Words a line is made of (the fakes count a word as one token).
const WORDS: &[&str] = &[
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
    "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
];

/// The name of part `n` (1-based): `part07`.
pub fn part_name(n: usize) -> String {
    format!("part{n:02}")
}

/// The last line of part `n`.
pub fn end_line(n: usize) -> String {
    format!("END-OF-{}", part_name(n))
}

/// The text of part `n`: numbered lines of about 30 tokens each, until
/// `tokens` tokens, then its END line.
pub fn part_text(n: usize, tokens: u64) -> String {
    let name = part_name(n);
    let mut s = String::new();
    let mut line = 1u64;
    while super::tokens::count_str(&s) < tokens {
        let words: Vec<&str> = (0..24)
            .map(|i| WORDS[(line as usize * 7 + i * 3 + n) % WORDS.len()])
            .collect();
        s.push_str(&format!("{name} line {line:04}: {}\n", words.join(" ")));
        line += 1;
    }
    s.push_str(&end_line(n));
    s.push('\n');
    s
}

/// Write the reader's tree into `dir`: `parts` files of `tokens` tokens.
pub fn write_tree(dir: &Path, parts: usize, tokens: u64) {
    std::fs::create_dir_all(dir).expect("the reader's dir");
    for n in 1..=parts {
        std::fs::write(
            dir.join(format!("{}.txt", part_name(n))),
            part_text(n, tokens),
        )
        .expect("a part");
    }
}

/// The brief of the reader job.
pub fn brief(parts: usize) -> String {
    format!(
        "This directory holds {parts} text files, part01.txt to part{parts:02}.txt. Read every one \
         of them to its last line (each ends with a line naming its end). Then write SUMMARY.md \
         with one line for each file: the last line it ends with."
    )
}

/// What the model knows from one request.
#[derive(Debug, Default)]
struct Seen {
    /// Parts whose END line a Read showed (or a note or summary says so).
    ended: BTreeSet<usize>,
    /// Per part, the last line number seen.
    through: std::collections::BTreeMap<usize, u64>,
    /// The last tool result's text, if the last message holds one.
    last_result: Option<String>,
    /// The input of the last tool call.
    last_call: Option<Value>,
    /// SUMMARY.md was written.
    wrote_summary: bool,
    /// The last user message asks for a compaction summary.
    compaction: bool,
}

/// The text of a block's content (a string, or a list of text blocks).
fn content_text(c: &Value) -> String {
    match c {
        Value::String(s) => s.clone(),
        Value::Array(bs) => bs
            .iter()
            .filter_map(|b| {
                b["text"]
                    .as_str()
                    .map(str::to_string)
                    .or_else(|| b.get("content").map(content_text))
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// `partNN` at the start of `s`: its number.
fn part_at(s: &str) -> Option<usize> {
    let d = s.strip_prefix("part")?.get(..2)?;
    d.parse().ok()
}

/// Read what `text` shows: END lines, and the furthest line of each part
/// (`partNN line LLLL`, or a note's `partNN read through line LLLL`).
fn scan(text: &str, seen: &mut Seen) {
    for (i, _) in text.match_indices("END-OF-part") {
        if let Some(n) = part_at(&text[i + 7..]) {
            seen.ended.insert(n);
        }
    }
    for (i, _) in text.match_indices("part") {
        let Some(n) = part_at(&text[i..]) else {
            continue;
        };
        let rest = &text[i + 6..];
        let rest = rest
            .strip_prefix(" line ")
            .or_else(|| rest.strip_prefix(" read through line "));
        let Some(num) = rest.and_then(|r| r.get(..4)).and_then(|d| d.parse().ok()) else {
            continue;
        };
        let e = seen.through.entry(n).or_insert(0);
        *e = (*e).max(num);
    }
}

fn read_request(req: &Value) -> Seen {
    let mut seen = Seen::default();
    let msgs = req["messages"].as_array().cloned().unwrap_or_default();
    let last = msgs.len().saturating_sub(1);
    for (i, m) in msgs.iter().enumerate() {
        let blocks = match &m["content"] {
            Value::String(s) => vec![json!({"type": "text", "text": s})],
            Value::Array(bs) => bs.clone(),
            _ => vec![],
        };
        for b in &blocks {
            match b["type"].as_str() {
                Some("text") => {
                    let t = b["text"].as_str().unwrap_or("");
                    if i == last && m["role"] == "user" && t.contains(COMPACTION_ASK) {
                        seen.compaction = true;
                    }
                    // The brief names no END line; the user's turns that
                    // do are summaries and re-attached files.
                    scan(t, &mut seen);
                }
                Some("tool_result") => {
                    let t = content_text(&b["content"]);
                    scan(&t, &mut seen);
                    if i == last {
                        seen.last_result = Some(t);
                    }
                }
                Some("tool_use") => {
                    if b["name"] == "Write"
                        && b["input"]["file_path"]
                            .as_str()
                            .is_some_and(|p| p.ends_with("SUMMARY.md"))
                    {
                        seen.wrote_summary = true;
                    }
                    seen.last_call = Some(b["input"].clone());
                }
                _ => {}
            }
        }
    }
    seen
}

/// The reader model over the tree in `dir` of `parts` files.
pub fn script(dir: &Path, parts: usize) -> Script {
    let dir: PathBuf = dir.to_path_buf();
    Arc::new(move |req| answer(&dir, parts, req))
}

fn answer(dir: &Path, parts: usize, req: &Value) -> Reply {
    let seen = read_request(req);
    let notes = |seen: &Seen| {
        let ended: Vec<String> = seen.ended.iter().map(|n| end_line(*n)).collect();
        let mut s = format!("Noted so far: {}.", ended.join(", "));
        if let Some(n) = (1..=parts).find(|n| !seen.ended.contains(n))
            && let Some(l) = seen.through.get(&n)
        {
            s.push_str(&format!(" {} read through line {l:04}.", part_name(n)));
        }
        s
    };
    if seen.compaction {
        return Reply::Text(format!("<summary>\n{}\n</summary>", notes(&seen)));
    }
    if req.get("tools").is_none() {
        return Reply::Text("ok".into());
    }
    if seen.wrote_summary {
        return Reply::Text(format!(
            "Read all {parts} files and wrote SUMMARY.md with their last lines."
        ));
    }
    let Some(n) = (1..=parts).find(|n| !seen.ended.contains(n)) else {
        let lines: Vec<String> = (1..=parts)
            .map(|n| format!("{}.txt: {}", part_name(n), end_line(n)))
            .collect();
        return Reply::Tool {
            name: "Write".into(),
            input: json!({
                "file_path": dir.join("SUMMARY.md").display().to_string(),
                "content": lines.join("\n") + "\n",
            }),
        };
    };
    let path = dir.join(format!("{}.txt", part_name(n)));
    let refused = seen
        .last_result
        .as_deref()
        .is_some_and(|t| t.contains("exceeds maximum allowed tokens"));
    let from = seen.through.get(&n).copied().unwrap_or(0);
    let input = if refused {
        // Read on in parts; a part refused again is halved.
        let last_limit = seen
            .last_call
            .as_ref()
            .and_then(|c| c["limit"].as_u64())
            .unwrap_or(CHUNK * 2);
        json!({"file_path": path.display().to_string(), "offset": from + 1, "limit": (last_limit / 2).max(1)})
    } else if from == 0 {
        json!({"file_path": path.display().to_string()})
    } else {
        json!({"file_path": path.display().to_string(), "offset": from + 1, "limit": CHUNK})
    };
    Reply::TextThen {
        text: notes(&seen),
        then: Box::new(Reply::Tool {
            name: "Read".into(),
            input,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_ends_with_its_end_line_near_its_size() {
        let t = part_text(3, 4500);
        assert!(t.ends_with("END-OF-part03\n"));
        let n = super::super::tokens::count_str(&t);
        assert!((4500..4600).contains(&n), "{n}");
    }

    #[test]
    fn a_capped_read_notes_no_end_and_reads_on() {
        let dir = Path::new("/r");
        let s = script(dir, 2);
        let req = json!({"tools": [], "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "Read", "input": {"file_path": "/r/part01.txt"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "File content (4600 tokens) exceeds maximum allowed tokens (2000). Use offset"}]},
        ]});
        let Reply::TextThen { then, .. } = s(&req) else {
            panic!("a read")
        };
        let Reply::Tool { input, .. } = *then else {
            panic!("a read")
        };
        assert_eq!(input["offset"], 1);
        assert_eq!(input["limit"], CHUNK);
        let req = json!({"tools": [], "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "Read", "input": {"file_path": "/r/part01.txt", "offset": 1, "limit": 80}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "1\tpart01 line 0001: x\n80\tpart01 line 0080: y"}]},
        ]});
        let Reply::TextThen { text, then } = s(&req) else {
            panic!("a read")
        };
        assert!(text.contains("part01 read through line 0080"), "{text}");
        let Reply::Tool { input, .. } = *then else {
            panic!("a read")
        };
        assert_eq!(input["offset"], 81);
    }

    #[test]
    fn a_compaction_request_gets_the_notes_as_text() {
        let s = script(Path::new("/r"), 3);
        let req = json!({"tools": [], "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "text", "text": "Noted so far: END-OF-part01, END-OF-part02."}]},
            {"role": "user", "content": [{"type": "text", "text": "Your task is to create a detailed summary of this conversation."}]},
        ]});
        let Reply::Text(t) = s(&req) else {
            panic!("text")
        };
        assert!(t.contains("END-OF-part01, END-OF-part02"), "{t}");
    }
}
