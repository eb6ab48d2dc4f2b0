//! The fakes' token count: GPT-2-style pre-tokens (` ?\p{L}+`,
//! ` ?\p{N}{1,3}`, ` ?[^\s\p{L}\p{N}]+`, `\s+`) of a text.
//!
//! The fakes used to count bytes / 4, which is below the shim's lower
//! bound of a request's tokens (its runs: letters and digits, split at
//! white space and at each switch between letters and ASCII digits) for
//! short words (`1\n2\n3`, two bytes a word): an honest fake would have
//! looked like a server that truncates. Every run of letters, or of
//! digits, is a pre-token of its own or more, and JSON escaping only
//! splits runs (`a\nb` gives `a`, `\`, `nb`), so this count is never
//! below the shim's bound. It is another method than the bound's, so the
//! guard is not tested against its own sums.

use serde_json::Value;

#[derive(PartialEq, Clone, Copy)]
enum Class {
    Letter,
    Digit,
    Other,
    Space,
}

fn class(c: char) -> Class {
    if c.is_whitespace() {
        Class::Space
    } else if c.is_alphabetic() {
        Class::Letter
    } else if c.is_numeric() {
        Class::Digit
    } else {
        Class::Other
    }
}

/// The pre-tokens of `s`.
pub fn count_str(s: &str) -> u64 {
    let mut n = 0u64;
    let mut prev: Option<Class> = None;
    let mut digits = 0u32;
    // A single space before a non-space run starts that run's token.
    let mut lead = false;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        let k = class(c);
        if c == ' ' && chars.peek().is_some_and(|d| class(*d) != Class::Space) {
            lead = true;
            continue;
        }
        let same = !lead && prev == Some(k) && (k != Class::Digit || digits < 3);
        lead = false;
        if !same {
            n += 1;
            digits = 0;
        }
        if k == Class::Digit {
            digits += 1;
        }
        prev = Some(k);
    }
    n
}

/// The pre-tokens of a JSON value written compact.
pub fn count(v: &Value) -> u64 {
    count_str(&v.to_string())
}

/// The pre-tokens of a prompt's first `bytes` bytes (cut back to a char).
pub fn count_prefix(s: &str, bytes: usize) -> u64 {
    let mut end = bytes.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    count_str(&s[..end]).min(count_str(s))
}

/// What a server that cuts silently keeps of a request of `whole` tokens
/// with a `window`, Ollama's way (`server/prompt.go:20-92` at v0.33.0-rc2,
/// ../shared/reference/ollama-lmstudio.md A3): whole messages dropped from
/// the front (the system prompt and tools, and the last message, stay)
/// until the prompt fits; if it still does not, the middle is cut to
/// about half the window (`num_ctx - (num_ctx - num_keep)/2`, num_keep
/// 4 + BOS, `llm/llama_server.go:279-318`). Returns `whole` when it fits.
pub fn silently_cut(req: &Value, whole: u64, window: u64) -> u64 {
    let mut kept = whole;
    if let Some(ms) = req["messages"].as_array() {
        let each: Vec<u64> = ms.iter().map(count).collect();
        let mut i = 0;
        while kept > window && i + 1 < each.len() {
            kept = kept.saturating_sub(each[i]);
            i += 1;
        }
    }
    if kept > window {
        kept = window - window.saturating_sub(5) / 2;
    }
    kept
}
