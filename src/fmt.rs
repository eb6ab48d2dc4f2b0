//! Number and text formatting for the sentences people read (job
//! summaries, status lines, errors): one place, so every figure and every
//! named tool call looks the same.

use serde_json::Value;

use crate::anthropic::lenient;

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

/// "812 B", "47.1 KB", "1.6 MB", "2.3 GB" (powers of 1,000).
pub fn bytes(n: u64) -> String {
    let f = n as f64;
    if n < 1_000 {
        format!("{n} B")
    } else if n < 1_000_000 {
        format!("{:.1} KB", f / 1e3)
    } else if n < 1_000_000_000 {
        format!("{:.1} MB", f / 1e6)
    } else {
        format!("{:.1} GB", f / 1e9)
    }
}

/// The first `n` characters of `s` (a character is never split), without
/// a mark: for a field whose whole text is elsewhere (a record's task).
pub fn first_chars(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// The last `n` characters of `s` (the end of a log or an output).
pub fn last_chars(s: &str, n: usize) -> String {
    let count = s.chars().count();
    s.chars().skip(count.saturating_sub(n)).collect()
}

/// `s` cut at `n` characters, with `…` when something was cut: the one way
/// a sentence shows a long text in part.
pub fn cut(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

/// `s` on one line (white space folded), cut at `n` characters with `…`.
pub fn one_line(s: &str, n: usize) -> String {
    cut(&s.split_whitespace().collect::<Vec<_>>().join(" "), n)
}

/// The input keys [`tool_arg`] looks at, read by the crate's lenient
/// rule.
#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct ToolInput {
    #[serde(deserialize_with = "lenient")]
    command: Option<String>,
    #[serde(deserialize_with = "lenient")]
    pattern: Option<String>,
    #[serde(deserialize_with = "lenient")]
    url: Option<String>,
    #[serde(deserialize_with = "lenient")]
    file_path: Option<String>,
    #[serde(deserialize_with = "lenient")]
    notebook_path: Option<String>,
    #[serde(deserialize_with = "lenient")]
    path: Option<String>,
}

/// The salient argument of a tool call, for the transcript: the tool's
/// own key, else `notebook_path`, else `path`.
pub fn tool_arg(name: &str, input: &Value) -> String {
    use serde::Deserialize;
    let i = ToolInput::deserialize(input).unwrap_or_default();
    let own = match name {
        "Bash" => i.command,
        "Glob" | "Grep" => i.pattern,
        "WebFetch" => i.url,
        _ => i.file_path,
    };
    own.or(i.notebook_path)
        .or(i.path)
        .map(|s| one_line(&s, 160))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cutting_counts_characters_and_marks_only_a_real_cut() {
        assert_eq!(cut("héllo", 5), "héllo");
        assert_eq!(cut("héllo", 2), "hé…");
        assert_eq!(cut("", 0), "");
        assert_eq!(one_line(" a \n  b\tc ", 3), "a b…");
        assert_eq!(one_line("a b", 3), "a b");
        assert_eq!(first_chars("ümlaut", 2), "üm");
        assert_eq!(last_chars("ümlaut", 3), "aut");
        assert_eq!(last_chars("ab", 5), "ab");
    }
}
