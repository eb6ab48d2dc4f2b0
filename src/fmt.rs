//! Number and text formatting for the sentences people read (job
//! summaries, status lines, errors): one place, so every figure and every
//! named tool call looks the same.

use serde_json::Value;

/// `12345` as `12,345`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `s` on one line (white space folded), cut at `n` characters with `…`.
pub fn one_line(s: &str, n: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > n {
        format!("{}…", flat.chars().take(n).collect::<String>())
    } else {
        flat
    }
}

/// The salient argument of a tool call, for the transcript.
pub fn tool_arg(name: &str, input: &Value) -> String {
    let key = match name {
        "Bash" => "command",
        "Glob" | "Grep" => "pattern",
        "WebFetch" => "url",
        _ => "file_path",
    };
    input
        .get(key)
        .or_else(|| input.get("notebook_path"))
        .or_else(|| input.get("path"))
        .and_then(Value::as_str)
        .map(|s| one_line(s, 160))
        .unwrap_or_default()
}
