//! The fakes' token count: GPT-2-style pre-tokens (` ?\p{L}+`,
//! ` ?\p{N}{1,3}`, ` ?[^\s\p{L}\p{N}]+`, `\s+`) of a text.
//!
//! The fakes used to count bytes / 4, which is below the shim's lower
//! bound of a request's tokens (its words: runs of non-whitespace with a
//! letter or digit) for short words (`1\n2\n3`, two bytes a word): an
//! honest fake would have looked like a server that truncates. Every
//! word holds a run of letters or digits, which is a pre-token of its
//! own, and JSON escaping only splits runs (`a\nb` gives `a`, `\`, `nb`),
//! so this count is never below the shim's bound. It is another method
//! than the bound's, so the guard is not tested against its own sums.

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
