//! The truncation guard: a server that drops part of a request without
//! saying so.
//!
//! Ollama truncates a prompt longer than its window with no error (the
//! oldest messages go, then the middle) and reports the count after the
//! cut; LM Studio's default overflow policy cuts the middle, or answers
//! 200 with an empty stream. A job on such a server carries on, turn
//! after turn, on a conversation the model never saw. The shim checks
//! what the server says it read against what it sent.
//!
//! **No byte ratio is a lower bound.** A whitespace-heavy file tokenizes
//! at up to 21.7 bytes per token and pretty-printed JSON at 57 (llama-bpe,
//! qwen2: runs of 128 to 512 spaces are single tokens), so bytes/3 or
//! bytes/8 can overstate a prompt twenty times. The bound here is
//! **runs** ([`words`]): in each word (a maximal run of non-whitespace
//! that holds a Unicode letter or digit), one for its first letter or
//! digit and one more at each switch between letters and ASCII digits,
//! punctuation between them not counted (`a[1]` is 2, `x86_64` 2,
//! `foo.bar` 1). It holds because of two facts about the vocabularies,
//! checked on all 19 that llama.cpp ships and on gemma-3's:
//! - no token holds a letter or digit, then white space, then another
//!   letter or digit, so a word's tokens are its own;
//! - no token holds both a letter and an ASCII digit (the exceptions are
//!   bert-bge's `1st`, `1980s`, …, an embedding vocabulary, and
//!   baichuan's HTML tags `<h1>` to `<h6>`), so each switch is a token
//!   boundary.
//!
//! (e2e `t23_no_token_of_any_shipped_vocabulary_holds_two_runs` reads
//! each vocabulary; `t22_the_truncation_bound_is_below_the_real_tokenizer_count`
//! checks the bound against the real server's `/tokenize`.)
//! So a text has at least as many tokens as runs. Measured, the bound is
//! 0.1 to 0.3 of the real count for prose; for dense code (`a[1] =
//! b[2];`) counting runs instead of words lifts it from about 0.25 to
//! 0.45, which is what lets the read sign see Ollama's middle cut of a
//! large Read (tests/it/truncation.rs).
//!
//! What is counted ([`Sent::of`]): `system`, `text` blocks, `tool_result`
//! text and `tool_use` input as compact JSON (templates write it with
//! `tojson`; escapes only remove white space), each field's blocks
//! joined with **no separator** (Ollama joins `system` blocks so) and the
//! whole request read as one text, so a word split across two pieces is
//! counted once. Not counted: thinking (templates may drop it), images,
//! tools' definitions and unknown blocks (a server may drop them).
//!
//! The server read `C = input_tokens + cache_read_input_tokens` (llama.cpp
//! reports the uncached part as input; vLLM and Ollama report the whole
//! prompt and no cache fields). Three signs, only on a 2xx answer (an
//! honest server refuses a prompt over its window with a 400, and Claude
//! Code compacts):
//!
//! - **window** ([`Sign::Window`]): the bound is above the window the
//!   registry knows.
//! - **read** ([`Sign::Read`]): the server read fewer tokens than the
//!   bound (an empty answer with usage 0 included, LM Studio's empty
//!   stream). A count of 0 beside a real answer is a gateway that does
//!   not count: skipped.
//! - **append** ([`Sign::Append`]): within a job the request is the
//!   previous one plus more, so the server's count grows by at least the
//!   words appended, less the thinking a template may drop from the
//!   render and [`SEAM`] tokens where the generation prompt is replaced.
//!   A truncating server stays at its window while the requests grow.
//!   Per chain (the requests whose messages start with the last one's;
//!   side requests and a compaction start their own), `M` is the largest
//!   `C_j - LB_j - T_j` so far (`T_j` the thinking bytes of request `j`,
//!   a bound on the tokens of it a template may drop); the sign is
//!   `C_k - LB_k < M - SEAM`. For an honest server `C_k >= C_j + (LB_k -
//!   LB_j) - T_j - SEAM`, so it never fires.

use std::borrow::Cow;
use std::hash::BuildHasher;

use serde::Deserialize;
use serde_json::Value;

use crate::anthropic::{Block, blocks, lenient, read};

pub use crate::wire::{Sign, Truncation};

/// Tokens of slack in the append sign: where one turn's generation prompt
/// gives way to the next turn's messages.
pub const SEAM: u64 = 32;

/// Chains kept per route (the main conversation, its side requests).
pub const MAX_CHAINS: usize = 8;

/// What a letter or digit is, for the runs of a word.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Class {
    /// `0`-`9`: no token holds one beside a letter.
    Digit,
    /// Any other letter or digit.
    Other,
}

/// Counts runs across pieces read as one text.
#[derive(Debug, Default, Clone, Copy)]
struct Words {
    n: u64,
    /// The class of the word's last letter or digit; `None` between words.
    last: Option<Class>,
}

impl Words {
    fn feed(&mut self, s: &str) {
        // ASCII a byte at a time; anything else as chars.
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() && b[i].is_ascii() {
            let c = b[i];
            self.step(
                c.is_ascii_whitespace() || c == 0x0b,
                c.is_ascii_alphanumeric(),
                c.is_ascii_digit(),
            );
            i += 1;
        }
        if i == b.len() {
            return;
        }
        for c in s[i..].chars() {
            self.step(c.is_whitespace(), c.is_alphanumeric(), c.is_ascii_digit());
        }
    }

    /// One character: white space ends a word; a letter or digit of
    /// another class than the word's last starts a run.
    fn step(&mut self, space: bool, alnum: bool, ascii_digit: bool) {
        if space {
            self.last = None;
        } else if alnum {
            let class = if ascii_digit {
                Class::Digit
            } else {
                Class::Other
            };
            if self.last != Some(class) {
                self.n += 1;
                self.last = Some(class);
            }
        }
    }

    /// The runs so far.
    fn count(&self) -> u64 {
        self.n
    }
}

/// The runs of `s`: a word's first letter or digit, and each switch
/// between letters and ASCII digits within it.
pub fn words(s: &str) -> u64 {
    let mut w = Words::default();
    w.feed(s);
    w.count()
}

/// A request as the guard reads it.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Request {
    system: Value,
    #[serde(deserialize_with = "lenient")]
    messages: Vec<Message>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Message {
    #[serde(deserialize_with = "lenient")]
    role: String,
    /// A string or a list of blocks.
    content: Value,
}

/// A field that is a string or a list of blocks, as blocks.
#[derive(Deserialize)]
struct Content(#[serde(deserialize_with = "blocks")] Option<Vec<Block>>);

fn content_blocks(v: &Value) -> Vec<Block> {
    read::<Content>(v.clone()).and_then(|c| c.0).unwrap_or_default()
}

/// The pieces of text a content field holds, in order, and its thinking
/// bytes.
fn pieces(content: &Value, out: &mut Vec<Cow<'static, str>>, thinking: &mut u64) {
    if let Value::String(s) = content {
        out.push(Cow::Owned(s.clone()));
        return;
    }
    for b in content_blocks(content) {
        match b {
            Block::Text { text } => out.extend(text.map(Cow::Owned)),
            Block::Thinking { thinking: t } => {
                *thinking += t.map_or(0, |t| t.len() as u64);
            }
            Block::ToolUse { input, .. } => {
                out.push(Cow::Owned(serde_json::to_string(&input).unwrap_or_default()));
            }
            Block::ToolResult { content, .. } => pieces(&content, out, thinking),
            Block::Unknown => {}
        }
    }
}

/// A request's counted text: the system prompt's pieces, each message's
/// role and pieces, and the thinking bytes.
#[derive(Default)]
struct Parsed<'a> {
    system: Vec<Cow<'a, str>>,
    messages: Vec<(Cow<'a, str>, Vec<Cow<'a, str>>)>,
    thinking: u64,
}

/// The lenient read: any JSON object, a field of the wrong type read as
/// absent. Slower (a whole `Value` tree); used when [`fast`] refuses.
fn lenient_read(body: &[u8]) -> Option<Parsed<'static>> {
    let v: Value = serde_json::from_slice(body).ok()?;
    if !v.is_object() {
        return None;
    }
    let req: Request = read(v).unwrap_or_default();
    let mut p = Parsed::default();
    pieces(&req.system, &mut p.system, &mut p.thinking);
    for m in &req.messages {
        let mut ps = Vec::new();
        pieces(&m.content, &mut ps, &mut p.thinking);
        p.messages.push((Cow::Owned(m.role.clone()), ps));
    }
    Some(p)
}

/// The read of a well-formed request, borrowing its text from the body
/// and skipping what is not counted (tools' definitions above all): the
/// same pieces as [`lenient_read`] (`Sent::of` of the shim bench's 226 KB
/// body: 0.86 ms with the lenient read alone, 0.35 ms with this one). Any
/// field of an unexpected type refuses the whole body, and the lenient
/// read takes it.
mod fast {
    use std::borrow::Cow;

    use serde::de::{Deserializer, SeqAccess, Visitor};
    use serde::Deserialize;
    use serde_json::Value;

    #[derive(Deserialize)]
    pub struct Req<'a> {
        #[serde(borrow, default)]
        pub system: Option<Content<'a>>,
        #[serde(borrow, default)]
        pub messages: Vec<Msg<'a>>,
    }

    #[derive(Deserialize)]
    pub struct Msg<'a> {
        #[serde(borrow, default)]
        pub role: Cow<'a, str>,
        #[serde(borrow, default)]
        pub content: Option<Content<'a>>,
    }

    /// A string, or a list of blocks.
    pub enum Content<'a> {
        Text(Cow<'a, str>),
        Blocks(Vec<Block<'a>>),
    }

    #[derive(Deserialize)]
    pub struct Block<'a> {
        #[serde(borrow, rename = "type")]
        pub kind: Cow<'a, str>,
        #[serde(borrow, default)]
        pub text: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        pub thinking: Option<Cow<'a, str>>,
        #[serde(default)]
        pub input: Option<Value>,
        #[serde(borrow, default)]
        pub content: Option<Content<'a>>,
    }

    impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<'a>(std::marker::PhantomData<&'a ()>);
            impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
                type Value = Content<'a>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a string or a list of blocks")
                }
                fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Content<'a>, E> {
                    Ok(Content::Text(Cow::Borrowed(s)))
                }
                fn visit_str<E>(self, s: &str) -> Result<Content<'a>, E> {
                    Ok(Content::Text(Cow::Owned(s.to_string())))
                }
                fn visit_string<E>(self, s: String) -> Result<Content<'a>, E> {
                    Ok(Content::Text(Cow::Owned(s)))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content<'a>, A::Error> {
                    let mut out = Vec::new();
                    while let Some(b) = seq.next_element()? {
                        out.push(b);
                    }
                    Ok(Content::Blocks(out))
                }
            }
            d.deserialize_any(V(std::marker::PhantomData))
        }
    }
}

impl<'a> fast::Content<'a> {
    fn pieces(self, out: &mut Vec<Cow<'a, str>>, thinking: &mut u64) {
        let blocks = match self {
            fast::Content::Text(t) => return out.push(t),
            fast::Content::Blocks(b) => b,
        };
        for b in blocks {
            match b.kind.as_ref() {
                "text" => out.extend(b.text),
                "thinking" => *thinking += b.thinking.map_or(0, |t| t.len() as u64),
                "tool_use" => out.push(Cow::Owned(
                    serde_json::to_string(&b.input.unwrap_or(Value::Null)).unwrap_or_default(),
                )),
                "tool_result" => {
                    if let Some(c) = b.content {
                        c.pieces(out, thinking);
                    }
                }
                _ => {}
            }
        }
    }
}

/// [`fast`]'s read, `None` when the body is not shaped as it expects.
fn fast_read(body: &[u8]) -> Option<Parsed<'_>> {
    // An object only (a derived struct would also read a list).
    if body.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let req: fast::Req = serde_json::from_slice(body).ok()?;
    let mut p = Parsed::default();
    if let Some(c) = req.system {
        c.pieces(&mut p.system, &mut p.thinking);
    }
    for m in req.messages {
        let mut ps = Vec::new();
        if let Some(c) = m.content {
            c.pieces(&mut ps, &mut p.thinking);
        }
        p.messages.push((m.role, ps));
    }
    Some(p)
}

/// What the guard keeps of one request sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sent {
    /// Bytes of the body sent.
    pub bytes: u64,
    /// The lower bound of its tokens.
    pub lower_bound: u64,
    /// Bytes of thinking it holds.
    pub thinking_bytes: u64,
    /// The system prompt's hash: a chain's head.
    pub head: u64,
    /// Each message's hash (its counted text and role).
    pub messages: Vec<u64>,
}

impl Sent {
    /// Read a request body; `None` when it is not a JSON object.
    pub fn of(body: &[u8]) -> Option<Sent> {
        let p = match fast_read(body) {
            Some(p) => p,
            None => lenient_read(body)?,
        };
        let mut w = Words::default();
        // A fixed seed: hashes compare across the requests of a job.
        let hasher = foldhash::fast::FixedState::with_seed(0x4c41_5452_554e_4331);
        let head = hasher.hash_one(&p.system);
        for piece in &p.system {
            w.feed(piece);
        }
        let mut messages = Vec::with_capacity(p.messages.len());
        for (role, ps) in &p.messages {
            messages.push(hasher.hash_one((role, ps)));
            for piece in ps {
                w.feed(piece);
            }
        }
        Some(Sent {
            bytes: body.len() as u64,
            lower_bound: w.count(),
            thinking_bytes: p.thinking,
            head,
            messages,
        })
    }
}

/// What the server said it read of a request, from its answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Read {
    /// `input_tokens + cache_read_input_tokens`; `None`: no usage.
    pub tokens: Option<u64>,
    /// The answer held no text and no tool call.
    pub empty: bool,
}

/// The window sign: the bound is above the window.
pub fn over_window(sent: &Sent, window: Option<u64>) -> Option<Sign> {
    let w = window?;
    (sent.lower_bound > w).then_some(Sign::Window)
}

/// The read sign: the server read less than the bound.
pub fn read_less(sent: &Sent, read: Read) -> Option<Sign> {
    let c = read.tokens?;
    if c == 0 && !read.empty {
        // A gateway that counts nothing.
        return None;
    }
    (c < sent.lower_bound).then_some(Sign::Read)
}

/// One chain of requests, each the previous one plus more.
#[derive(Debug, Clone)]
struct Chain {
    head: u64,
    messages: Vec<u64>,
    /// The largest `C_j - LB_j - T_j` so far.
    m: Option<i128>,
    /// The turn that set `m`, its count and its bound.
    at: (u64, u64, u64),
    /// When it was last used (for the oldest to go).
    used: u64,
}

/// The chains of one route.
#[derive(Debug, Default)]
pub struct Ledger {
    chains: Vec<Chain>,
    clock: u64,
}

impl Ledger {
    /// The append sign for `sent`, read as `c` at `turn`, and the request
    /// kept as its chain's last. A sign fired keeps nothing (the job ends).
    pub fn append(&mut self, turn: u64, sent: &Sent, c: u64) -> Option<(Sign, String)> {
        self.clock += 1;
        let idx = self.chains.iter().position(|ch| {
            ch.head == sent.head
                && !ch.messages.is_empty()
                && sent.messages.len() >= ch.messages.len()
                && sent.messages[..ch.messages.len()] == ch.messages[..]
        });
        let here = c as i128 - sent.lower_bound as i128;
        if let Some(i) = idx
            && let Some(m) = self.chains[i].m
            && here < m - SEAM as i128
        {
            let (j, cj, lbj) = self.chains[i].at;
            let grew = c as i128 - cj as i128;
            let appended = sent.lower_bound.saturating_sub(lbj);
            return Some((
                Sign::Append,
                format!("its count went from {cj} at turn {j} to {c} ({grew:+}) while at least {appended} tokens were appended"),
            ));
        }
        let mine = here - sent.thinking_bytes as i128;
        let clock = self.clock;
        let ch = match idx {
            Some(i) => &mut self.chains[i],
            None => {
                if self.chains.len() >= MAX_CHAINS
                    && let Some(old) = (0..self.chains.len()).min_by_key(|&i| self.chains[i].used)
                {
                    self.chains.remove(old);
                }
                self.chains.push(Chain {
                    head: sent.head,
                    messages: Vec::new(),
                    m: None,
                    at: (0, 0, 0),
                    used: clock,
                });
                let n = self.chains.len() - 1;
                &mut self.chains[n]
            }
        };
        ch.messages = sent.messages.clone();
        ch.used = clock;
        if ch.m.is_none_or(|m| mine > m) {
            ch.m = Some(mine);
            ch.at = (turn, c, sent.lower_bound);
        }
        None
    }
}

/// The fix for a server that truncates silently, by its backend's name.
pub fn fix(backend: &str, model: &str) -> String {
    match backend {
        "ollama" => "give it a larger window: restart it with `OLLAMA_CONTEXT_LENGTH=65536 ollama serve`, or set `PARAMETER num_ctx 65536` in the model's Modelfile".into(),
        "llama.cpp" => "start llama-server without `--context-shift` and with a larger window per slot (`-c` divided by `-np`)".into(),
        "sglang" => "give it a larger window, and start it without `--allow-auto-truncate`: restart SGLang with a larger `--context-length`".into(),
        b => match crate::config::Backend::parse(b) {
            Some(b) if b != crate::config::Backend::Other && b != crate::config::Backend::Vllm => {
                b.window_fix(model)
            }
            _ => "serve the model with a larger window, and have the server refuse a prompt over it rather than cut it".into(),
        },
    }
}

/// The job's sentence for a truncation, with the likely cause and the fix.
pub fn sentence(t: &Truncation, backend: &str, base_url: &str, model: &str, detail: &str) -> String {
    let what = match t.sign {
        Sign::Window => format!(
            "the request at turn {} holds at least {} tokens ({} bytes), more than the {}-token window it reported, yet it answered",
            t.turn,
            t.lower_bound,
            t.bytes_sent,
            t.window.unwrap_or(0)
        ),
        Sign::Read => format!(
            "it read {} tokens of the request at turn {}, which holds at least {} ({} bytes)",
            t.read.unwrap_or(0),
            t.turn,
            t.lower_bound,
            t.bytes_sent
        ),
        Sign::Append => format!(
            "at turn {} ({} bytes, at least {} tokens) {detail}",
            t.turn, t.bytes_sent, t.lower_bound
        ),
    };
    let window = t
        .window
        .map(|w| format!(", which may be smaller than the {w} tokens it reported"))
        .unwrap_or_default();
    format!(
        "silent truncation: {backend} at {base_url} dropped part of the conversation without saying so: {what}; the model never saw the whole prompt (the server cuts a prompt longer than its window{window}): {}",
        fix(backend, model)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sent(v: Value) -> Sent {
        Sent::of(&serde_json::to_vec(&v).unwrap()).unwrap()
    }

    /// The fast read and the lenient one give the same pieces, roles and
    /// thinking, so a chain's hashes do not depend on which read took a
    /// body; the fast one refuses what it does not expect.
    #[test]
    fn the_fast_read_gives_the_lenient_reads_pieces() {
        let bodies = [
            json!({"system": "plain", "messages": [{"role": "user", "content": "hi \"there\"\n"}]}),
            json!({"system": [{"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "b"}],
                "tools": [{"name": "Read", "input_schema": {}}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "do it"}, {"type": "image", "source": {}}]},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "hmm ü", "signature": ""},
                        {"type": "redacted_thinking", "data": "x"},
                        {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/a b", "n": [1, 2]}},
                        {"type": "tool_use", "id": "t2", "name": "Bash"}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "line 1\tx"}]},
                        {"type": "tool_result", "tool_use_id": "t2", "content": "out", "is_error": true},
                        {"type": "tool_result", "tool_use_id": "t3"}]},
                    {"role": "assistant", "content": null}]}),
        ];
        for b in &bodies {
            let bytes = serde_json::to_vec(b).unwrap();
            let f = fast_read(&bytes).expect("well formed");
            let l = lenient_read(&bytes).unwrap();
            assert_eq!(f.system, l.system, "{b}");
            assert_eq!(f.messages, l.messages, "{b}");
            assert_eq!(f.thinking, l.thinking, "{b}");
        }
        // Shapes the fast read refuses; the lenient one reads them.
        for odd in [
            json!({"messages": 3}),
            json!({"messages": [{"role": 2, "content": "x"}]}),
            json!({"messages": [{"role": "user", "content": [1, {"type": "text", "text": "y"}]}]}),
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}),
        ] {
            let bytes = serde_json::to_vec(&odd).unwrap();
            assert!(fast_read(&bytes).is_none(), "{odd}");
            assert!(Sent::of(&bytes).is_some(), "{odd}");
        }
        assert!(fast_read(b"[null, []]").is_none());
    }

    #[test]
    fn words_hold_a_letter_or_digit() {
        assert_eq!(words(""), 0);
        assert_eq!(words("   \n\t  "), 0);
        assert_eq!(words("a b  c"), 3);
        assert_eq!(words("--- === ***"), 0, "punctuation alone is no word");
        // A letter then a digit: two runs a word.
        assert_eq!(words("x=1; y=2;"), 4);
        assert_eq!(words("1\n2\n3\n"), 3);
        assert_eq!(words("héllo wörld 日本"), 3);
        assert_eq!(words("{\"a\":\"b c\"}"), 2);
    }

    /// A switch between letters and ASCII digits is a token boundary in
    /// every vocabulary llama.cpp ships; punctuation between two letter
    /// runs, or two digit runs, is not counted (a token may span it).
    #[test]
    fn a_word_counts_each_switch_between_letters_and_digits() {
        assert_eq!(words("a[1]"), 2);
        assert_eq!(words("a[1] = b[2] + c[3];"), 6);
        assert_eq!(words("x86_64"), 2);
        assert_eq!(words("foo.bar"), 1);
        assert_eq!(words("2026-12-04"), 1);
        assert_eq!(words("0x1f"), 4);
        assert_eq!(words("sha256sum"), 3);
        // Digits of other scripts (gemma-3 has `১২শ`) are not switches.
        assert_eq!(words("১২শ"), 1);
        // Runs join across pieces, as words do.
        let mut w = Words::default();
        w.feed("ab");
        w.feed("12 c");
        assert_eq!(w.count(), 3);
    }

    #[test]
    fn blocks_join_with_no_separator_and_thinking_is_not_counted() {
        // "ab" + "cd" read as "abcd": one word.
        let s = sent(json!({"system": [{"type":"text","text":"one ab"},{"type":"text","text":"cd two"}],
            "messages": []}));
        assert_eq!(s.lower_bound, 3);
        let s = sent(json!({"messages": [
            {"role":"user","content":"hello there"},
            {"role":"assistant","content":[
                {"type":"thinking","thinking":"many words of thought here","signature":"x"},
                {"type":"text","text":" ok"},
                {"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"/a b", "n": 1}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1",
                "content":[{"type":"text","text":"line one"}]},
                {"type":"tool_result","tool_use_id":"t2","content":"x y z"},
                {"type":"image","source":{}}]}]}));
        assert_eq!(s.thinking_bytes, 26);
        // One text, no separators: `hello there ok{"file_path":"/a
        // b","n":1}line onex y z`: pieces that touch make one word, and
        // `b","n":1}line` is three runs (letters, a digit, letters).
        assert_eq!(s.lower_bound, 9);
        assert_eq!(s.messages.len(), 3);
    }

    #[test]
    fn tool_input_is_read_as_compact_json() {
        let s = sent(json!({"messages":[{"role":"assistant","content":[
            {"type":"tool_use","id":"t","name":"Bash","input":{"command":"ls   -la"}}]}]}));
        // {"command":"ls   -la"}: `{"command":"ls` and `-la"}`.
        assert_eq!(s.lower_bound, 2);
    }

    #[test]
    fn bad_bodies_do_not_panic() {
        assert!(Sent::of(b"not json").is_none());
        assert!(Sent::of(b"[1,2]").is_none());
        let s = Sent::of(br#"{"messages": 3, "system": {"a": 1}}"#).unwrap();
        assert_eq!(s.lower_bound, 0);
        let s = Sent::of(br#"{"messages": [1, {"role": 2, "content": [null, 3, {"type": 7}]}]}"#)
            .unwrap();
        assert_eq!(s.lower_bound, 0);
    }

    #[test]
    fn window_and_read_signs() {
        let s = Sent {
            lower_bound: 5000,
            ..Sent::default()
        };
        assert_eq!(over_window(&s, Some(4096)), Some(Sign::Window));
        assert_eq!(over_window(&s, Some(8192)), None);
        assert_eq!(over_window(&s, None), None);
        let r = |tokens, empty| Read { tokens, empty };
        assert_eq!(read_less(&s, r(Some(4096), false)), Some(Sign::Read));
        assert_eq!(read_less(&s, r(Some(5000), false)), None);
        assert_eq!(read_less(&s, r(None, true)), None, "no usage: nothing known");
        assert_eq!(read_less(&s, r(Some(0), false)), None, "a gateway that counts nothing");
        assert_eq!(
            read_less(&s, r(Some(0), true)),
            Some(Sign::Read),
            "LM Studio's empty stream with usage 0"
        );
    }

    /// A conversation that grows by `n` messages a turn.
    fn convo(turns: usize, thinking: bool) -> Vec<Sent> {
        let mut msgs = vec![json!({"role":"user","content":"please read the files"})];
        let mut out = Vec::new();
        for t in 0..turns {
            out.push(sent(json!({"system":"you are a coder", "messages": msgs.clone()})));
            let mut a = vec![];
            if thinking {
                a.push(json!({"type":"thinking","thinking":"x".repeat(400)}));
            }
            a.push(json!({"type":"tool_use","id":format!("t{t}"),"name":"Read","input":{"file_path":format!("/f{t}")}}));
            msgs.push(json!({"role":"assistant","content":a}));
            let body = (0..500).map(|i| format!("word{i}")).collect::<Vec<_>>().join(" ");
            msgs.push(json!({"role":"user","content":[{"type":"tool_result","tool_use_id":format!("t{t}"),"content":body}]}));
        }
        out
    }

    #[test]
    fn an_honest_sequence_never_fires_even_when_thinking_is_dropped() {
        let reqs = convo(12, true);
        let mut l = Ledger::default();
        for (i, s) in reqs.iter().enumerate() {
            // Honest: 1.3 tokens a word, plus a template of 3000, less the
            // thinking a template drops from the render (all of it, but
            // the last turn's, from turn 3 on).
            let dropped = if i >= 3 { s.thinking_bytes.saturating_sub(400) } else { 0 };
            let c = 3000 + s.lower_bound * 13 / 10 + s.thinking_bytes - dropped;
            assert_eq!(read_less(s, Read { tokens: Some(c), empty: false }), None);
            assert_eq!(l.append(i as u64 + 1, s, c), None, "turn {}", i + 1);
        }
    }

    #[test]
    fn a_truncating_sequence_fires_at_the_turn_it_cuts() {
        let reqs = convo(12, false);
        let mut l = Ledger::default();
        // The fourth request fits, the fifth does not.
        let window = 3000 + reqs[3].lower_bound * 13 / 10;
        let mut fired = None;
        for (i, s) in reqs.iter().enumerate() {
            let honest = 3000 + s.lower_bound * 13 / 10;
            let c = honest.min(window);
            if let Some((sign, detail)) = l.append(i as u64 + 1, s, c) {
                assert_eq!(sign, Sign::Append);
                assert!(detail.contains("appended"), "{detail}");
                fired = Some(i + 1);
                break;
            }
        }
        // Turn 5 is the first request over the window: caught there.
        assert_eq!(fired, Some(5));
    }

    #[test]
    fn a_side_request_or_a_compaction_starts_its_own_chain() {
        let reqs = convo(6, false);
        let mut l = Ledger::default();
        for (i, s) in reqs.iter().enumerate().take(4) {
            assert_eq!(l.append(i as u64, s, 3000 + s.lower_bound * 2), None);
        }
        // A compacted conversation: a new first message, a far lower count.
        let c = sent(json!({"system":"you are a coder","messages":[{"role":"user","content":"summary of it all"}]}));
        assert_eq!(l.append(5, &c, 3010), None);
        // A side request with another system prompt.
        let t = sent(json!({"system":"write a title","messages":[{"role":"user","content":"hi"}]}));
        assert_eq!(l.append(6, &t, 40), None);
        // The main conversation goes on.
        assert_eq!(l.append(7, &reqs[4], 3000 + reqs[4].lower_bound * 2), None);
    }

    #[test]
    fn the_sentence_names_the_cause_and_the_fix() {
        let t = Truncation {
            sign: Sign::Read,
            turn: 7,
            bytes_sent: 412_771,
            lower_bound: 41_230,
            read: Some(31_998),
            window: Some(65_536),
        };
        let s = sentence(&t, "ollama", "http://127.0.0.1:11434", "qwen3", "");
        assert!(s.contains("dropped part of the conversation"), "{s}");
        assert!(s.contains("OLLAMA_CONTEXT_LENGTH=65536 ollama serve"), "{s}");
        assert!(s.contains("31998 tokens of the request at turn 7"), "{s}");
        let s = sentence(&t, "lmstudio", "http://h:1234", "qwen/qwen3", "");
        assert!(s.contains("lms load qwen/qwen3 --context-length 65536"), "{s}");
    }
}
