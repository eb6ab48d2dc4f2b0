//! The runaway guard: a model that repeats itself until `max_tokens`.
//!
//! Small or badly served models loop: one line, or a few, over and over,
//! or their own chat-template markers (`<|im_end|>`, `<end_of_turn>`)
//! written as text because the server does not know them as stop tokens.
//! Each such turn runs to `max_tokens` (minutes of a busy GPU), and Claude
//! Code sends it back as history. [`Watch`] reads an answer's text and
//! thinking as they stream, byte by byte, in bounded memory (a count per
//! distinct line, capped; the last [`MAX_PERIOD`] bytes; the current line's
//! first [`LINE_CAP`] bytes) and no regex over the whole text, and says
//! when the answer has run away ([`Found`]):
//!
//! - **markers**: [`MARKER_LINES`] lines that begin or end with a
//!   chat-template marker (the model writing turn after turn). Prose that
//!   quotes a marker, or a short template example, stays under it.
//! - **a line**: one line (trimmed, at least [`MIN_LINE`] bytes with a
//!   letter or digit) seen [`LINE_LIMIT`] times in one answer, in any order
//!   (the real loops alternate two or three lines). A sentence end (`. `,
//!   `? `, `! `) ends a line too: a loop of sentences with no line break
//!   has a period too long for the span rule.
//! - **a span**: the last [`SPAN_BYTES`] bytes or more are one unit of at
//!   most [`MAX_PERIOD`] bytes repeated at least [`SPAN_REPEATS`] times (a
//!   token looped without a newline).
//!
//! Tool input (`input_json_delta`) is not read: a file written through
//! Write may repeat a line legitimately (a CSV, a test table).
//!
//! The thresholds come from real output (`runaway_fixtures.rs`):
//! the tiny Gemma's loop repeats its lines 20 to 46 times in 1,500 tokens
//! (the 4,096-token turns: 250 to 580 times), a Llama 2 fine-tune
//! writes a marker line every line, a Llama 3 loops a 22-byte span. So 20
//! repeats of a line, 8 marker lines or 512 bytes of one short span fire
//! within the first 2 KB of a loop (of 16 KB a 4,096-token turn writes),
//! while a ChatML example of three turns (6 marker lines), code (short
//! lines such as `}`, a 300-byte literal array) and the long normal texts
//! of the fixtures stay under them.

use std::collections::HashMap;

/// Chat-template markers that a model should never write as text: ChatML
/// (Qwen, many fine-tunes), Gemma, Llama 3, Phi-3, and the plain `</s>`.
pub const MARKERS: &[&str] = &[
    "<|im_end|>",
    "<|im_start|>",
    "<end_of_turn>",
    "<start_of_turn>",
    "<|eot_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|endoftext|>",
    "<|end|>",
    "</s>",
];

/// `defaults.runaway_limit` when unset.
pub const DEFAULT_LIMIT: u32 = crate::config::DEFAULT_RUNAWAY_LIMIT;

/// Lines that begin or end with a marker, in one answer, before it is a
/// runaway.
pub const MARKER_LINES: u32 = 8;
/// Times one line may be seen in one answer before it is a runaway.
pub const LINE_LIMIT: u32 = 20;
/// Shorter lines (`}`, `---`, `end`) repeat in normal code and are not
/// counted.
pub const MIN_LINE: usize = 8;
/// The longest unit the span rule looks for.
pub const MAX_PERIOD: usize = 32;
/// The span rule wants at least this many bytes of one repeated unit…
pub const SPAN_BYTES: usize = 512;
/// …and at least this many repeats of it.
pub const SPAN_REPEATS: usize = 16;
/// Bytes of a line kept (to compare and to quote); the rest is hashed.
pub const LINE_CAP: usize = 256;
/// Distinct lines counted per answer; later new lines are not (memory).
pub const MAX_DISTINCT: usize = 2048;
/// Characters of the unit quoted in the record and the sentence.
pub const QUOTE_CHARS: usize = 60;

pub use crate::wire::{Cause, Found};

/// One answer's watch. Feed it the text and thinking as they come; it
/// keeps a bounded state and returns a [`Found`] once, when the answer has
/// run away.
#[derive(Debug)]
pub struct Watch {
    /// The current line's first [`LINE_CAP`] bytes.
    line: Vec<u8>,
    /// Hash of the current line's bytes past [`LINE_CAP`].
    tail_hash: u64,
    tail_len: usize,
    counts: HashMap<u64, u32>,
    marker_lines: u32,
    /// The first marker a line ended with (an end-of-turn marker names
    /// the fault best).
    end_marker: Option<&'static str>,
    /// The last [`MAX_PERIOD`] bytes, a ring, and how many were written.
    ring: [u8; MAX_PERIOD],
    written: u64,
    /// `runs[p]`: consecutive bytes equal to the byte `p` before them.
    runs: [u32; MAX_PERIOD + 1],
    bytes: u64,
    fired: bool,
    /// The byte before.
    prev: u8,
}

impl Default for Watch {
    fn default() -> Self {
        Watch {
            line: Vec::with_capacity(64),
            tail_hash: FNV_OFFSET,
            tail_len: 0,
            counts: HashMap::new(),
            marker_lines: 0,
            end_marker: None,
            ring: [0; MAX_PERIOD],
            written: 0,
            runs: [0; MAX_PERIOD + 1],
            bytes: 0,
            fired: false,
            prev: 0,
        }
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// Does this (trimmed) line end or begin with a chat-template marker?
/// Returns it (the end first: an end-of-turn marker names the fault).
fn marker_line(line: &[u8]) -> Option<&'static str> {
    MARKERS
        .iter()
        .find(|m| line.ends_with(m.as_bytes()))
        .or_else(|| MARKERS.iter().find(|m| line.starts_with(m.as_bytes())))
        .copied()
}

impl Watch {
    pub fn new() -> Watch {
        Watch::default()
    }

    /// Text and thinking bytes seen so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Has it fired?
    pub fn fired(&self) -> bool {
        self.fired
    }

    /// A new content block begins: the current line ends there.
    pub fn block_break(&mut self) -> Option<Found> {
        self.end_line()
    }

    /// The answer is complete: its last line counts too.
    pub fn finish(&mut self) -> Option<Found> {
        self.end_line()
    }

    /// Feed the next piece of the answer's text. `Some` once, when it has
    /// run away; nothing after that.
    pub fn feed(&mut self, text: &[u8]) -> Option<Found> {
        if self.fired {
            return None;
        }
        for &b in text {
            self.bytes += 1;
            if let Some(f) = self.span_byte(b) {
                return self.fire(f);
            }
            let sentence_end = b == b' ' && matches!(self.prev, b'.' | b'?' | b'!');
            self.prev = b;
            if b == b'\n' || sentence_end {
                if let Some(f) = self.end_line() {
                    return Some(f);
                }
            } else if self.line.len() < LINE_CAP {
                self.line.push(b);
            } else {
                self.tail_hash = fnv(self.tail_hash, &[b]);
                self.tail_len += 1;
            }
        }
        None
    }

    fn fire(&mut self, f: Found) -> Option<Found> {
        self.fired = true;
        Some(f)
    }

    /// The span rule, one byte at a time: O([`MAX_PERIOD`]) a byte.
    fn span_byte(&mut self, b: u8) -> Option<Found> {
        let n = self.written;
        let mut hit = None;
        for p in 1..=MAX_PERIOD {
            if n >= p as u64 && self.ring[((n - p as u64) % MAX_PERIOD as u64) as usize] == b {
                self.runs[p] = self.runs[p].saturating_add(1);
                let span = self.runs[p] as usize + p;
                if hit.is_none() && span >= SPAN_BYTES && span / p >= SPAN_REPEATS {
                    hit = Some(p);
                }
            } else {
                self.runs[p] = 0;
            }
        }
        self.ring[(n % MAX_PERIOD as u64) as usize] = b;
        self.written += 1;
        let p = hit?;
        // The unit: the last `p` bytes, oldest first.
        let unit: Vec<u8> = (0..p as u64)
            .map(|k| self.ring[((self.written - p as u64 + k) % MAX_PERIOD as u64) as usize])
            .collect();
        let span = self.runs[p] as usize + p;
        Some(Found {
            cause: Cause::Span,
            unit: quote(&unit),
            repeats: u32::try_from(span / p).unwrap_or(u32::MAX),
            bytes_dropped: self.bytes,
            why: String::new(),
        })
    }

    /// The current line is complete: count it.
    fn end_line(&mut self) -> Option<Found> {
        if self.fired {
            return None;
        }
        let line = std::mem::take(&mut self.line);
        let (tail_hash, tail_len) = (self.tail_hash, self.tail_len);
        self.tail_hash = FNV_OFFSET;
        self.tail_len = 0;
        let trimmed = line.trim_ascii();
        let found = if let Some(m) = marker_line(trimmed) {
            self.marker_lines += 1;
            if trimmed.ends_with(m.as_bytes()) {
                self.end_marker.get_or_insert(m);
            }
            (self.marker_lines >= MARKER_LINES).then(|| Found {
                cause: Cause::Marker,
                unit: self.end_marker.unwrap_or(m).to_string(),
                repeats: self.marker_lines,
                bytes_dropped: self.bytes,
                why: String::new(),
            })
        } else if trimmed.len() + tail_len >= MIN_LINE
            && trimmed
                .iter()
                .any(|c| c.is_ascii_alphanumeric() || *c >= 0x80)
        {
            let key = fnv(fnv(FNV_OFFSET, trimmed), &tail_hash.to_le_bytes());
            let at_cap = self.counts.len() >= MAX_DISTINCT;
            let n = match self.counts.get_mut(&key) {
                Some(n) => {
                    *n += 1;
                    *n
                }
                None if !at_cap => {
                    self.counts.insert(key, 1);
                    1
                }
                None => 0,
            };
            (n >= LINE_LIMIT).then(|| Found {
                cause: Cause::Line,
                unit: quote(trimmed),
                repeats: n,
                bytes_dropped: self.bytes,
                why: String::new(),
            })
        } else {
            None
        };
        // Reuse the buffer.
        self.line = line;
        self.line.clear();
        match found {
            Some(f) => self.fire(f),
            None => None,
        }
    }
}

/// A unit as the record quotes it: lossy UTF-8, line breaks shown as `\n`,
/// cut to [`QUOTE_CHARS`].
fn quote(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes).replace('\n', "\\n");
    crate::fmt::cut(&s, QUOTE_CHARS)
}

/// Watch a whole text at once (a non-streamed answer's blocks).
pub fn scan_blocks<'a>(blocks: impl IntoIterator<Item = &'a str>) -> Option<Found> {
    let mut w = Watch::new();
    for b in blocks {
        if let Some(f) = w.feed(b.as_bytes()) {
            return Some(f);
        }
        if let Some(f) = w.block_break() {
            return Some(f);
        }
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shim::runaway_fixtures as fx;

    fn scan(text: &str) -> Option<Found> {
        scan_blocks([text])
    }

    #[test]
    fn markers_written_turn_after_turn_fire_and_a_quoted_marker_does_not() {
        let f = scan(fx::LLAMA2_CHATML).expect("the real loop fires");
        assert_eq!(f.cause, Cause::Marker, "{f:?}");
        assert_eq!(f.unit, "<|im_end|>");
        assert_eq!(f.repeats, MARKER_LINES);
        assert_eq!(
            f.sentence(true),
            "runaway output: the model writes its end-of-turn marker `<|im_end|>` as text: its chat template's stop token is not set; start llama-server with `--jinja` and the GGUF's own template"
        );
        for text in [
            "Each turn ends with `<|im_end|>`, which the server reads as the stop token.",
            "A ChatML prompt looks like this:\n<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n",
            "Gemma ends a turn with <end_of_turn> and Llama 3 with <|eot_id|>; strike text with <s>this</s>.",
        ] {
            assert_eq!(scan(text), None, "{text}");
        }
        let eot = "Sure.\n".to_string() + &"<end_of_turn>\n<start_of_turn>user\n".repeat(4);
        assert_eq!(scan(&eot).map(|f| f.unit), Some("<end_of_turn>".into()));
    }

    #[test]
    fn a_repeated_line_fires_at_the_limit_in_any_order() {
        let f = scan(fx::GEMMA_LOOP).expect("the real loop fires");
        assert_eq!(f.cause, Cause::Line, "{f:?}");
        assert_eq!(f.repeats, LINE_LIMIT);
        assert!(
            (f.bytes_dropped as usize) < fx::GEMMA_LOOP.len() / 2,
            "it fires in the first half: {f:?}"
        );
        let mut text = String::new();
        for i in 0..LINE_LIMIT - 1 {
            text.push_str("The same sentence, again and again.\n");
            text.push_str(&format!("step {i}\n"));
        }
        assert_eq!(scan(&text), None, "one short of the limit");
        text.push_str("  The same sentence, again and again.  \n");
        assert_eq!(scan(&text).map(|f| f.repeats), Some(LINE_LIMIT));
    }

    #[test]
    fn sentences_looped_without_a_newline_fire() {
        let looped =
            "You are a user (a user or a user-agent-agent user). You are not a user. ".repeat(30);
        let f = scan(&looped).expect("fires");
        assert_eq!(f.cause, Cause::Line, "{f:?}");
        assert_eq!(f.repeats, LINE_LIMIT);
    }

    #[test]
    fn a_span_looped_without_a_newline_fires() {
        // The thread quotes the loop's start; the model went on with its
        // last unit.
        let text = format!("{}{}", fx::LLAMA3_SPAN, "  Let me   (   Let me)".repeat(30));
        let f = scan(&text).expect("fires");
        assert_eq!(f.cause, Cause::Span, "{f:?}");
        assert!(f.unit.contains("Let me"), "{f:?}");
        assert_eq!(
            scan(fx::LLAMA3_SPAN),
            None,
            "the quoted start alone is under the span"
        );
        let f = scan(&"the ".repeat(200)).expect("fires");
        assert_eq!((f.unit.as_str(), f.cause), ("the ", Cause::Span));
        assert_eq!(f.bytes_dropped, SPAN_BYTES as u64);
        let f = scan(&"!".repeat(600)).expect("fires");
        assert_eq!((f.unit.as_str(), f.cause), ("!", Cause::Span));
        assert_eq!(scan(&"=".repeat(200)), None, "a rule line is not a loop");
        assert_eq!(
            scan(&format!("let zeros = [{}];", "0, ".repeat(100))),
            None,
            "300 bytes of a literal array is not a loop"
        );
    }

    #[test]
    fn normal_answers_do_not_fire() {
        for (name, text) in fx::NORMAL {
            assert_eq!(scan(text), None, "{name}");
        }
        // Short lines that repeat in code do not count.
        let code: String = (0..100)
            .map(|i| format!("if a{i}:\n    pass\n}}\n---\n"))
            .collect();
        assert_eq!(scan(&code), None);
    }

    #[test]
    fn every_split_point_fires_at_the_same_byte() {
        for text in [fx::LLAMA2_CHATML, fx::GEMMA_LOOP] {
            let whole = scan(text).unwrap();
            let bytes = text.as_bytes();
            // Cut across two feeds at every offset of the first 600
            // bytes, then in pieces of every size to 17.
            for at in 0..bytes.len().min(600) {
                let mut w = Watch::new();
                let got = w.feed(&bytes[..at]).or_else(|| w.feed(&bytes[at..]));
                assert_eq!(got.as_ref(), Some(&whole), "split at {at}");
            }
            for step in 1..=17 {
                let mut w = Watch::new();
                let got = bytes.chunks(step).find_map(|c| w.feed(c));
                assert_eq!(got.as_ref(), Some(&whole), "pieces of {step}");
            }
        }
    }

    #[test]
    fn memory_is_bounded() {
        let mut w = Watch::new();
        for i in 0..MAX_DISTINCT * 3 {
            assert_eq!(
                w.feed(format!("distinct line number {i}\n").as_bytes()),
                None
            );
        }
        assert!(w.counts.len() <= MAX_DISTINCT);
        assert_eq!(
            w.feed(&vec![b'x'; 100_000]).map(|f| f.cause),
            Some(Cause::Span)
        );
        assert!(w.line.capacity() <= LINE_CAP.next_power_of_two() * 2);
    }
}
