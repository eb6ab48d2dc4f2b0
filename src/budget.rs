//! The window budget of one job: how the per-slot window the registry
//! measured is split between the delegate's fixed prompt, its output, one
//! tool result, and the conversation, and the Claude Code settings that
//! hold it to that split.
//!
//! Why it exists: Claude Code 2.1.328 keeps a summary buffer of 13,000
//! tokens free below the window and the output budget (capped at 20,000)
//! too, so it compacts at `window − output − 13,000`. On a 32k window that
//! is 40% of it; on 16k it is 1,336 tokens, less than its own fixed
//! prompt, and every turn compacts until it gives up ("Autocompact is
//! thrashing"). Its only lever that raises that point is the window it is
//! told (`CLAUDE_CODE_MAX_CONTEXT_TOKENS`; `CLAUDE_AUTOCOMPACT_PCT_OVERRIDE`
//! can only lower it, and `CLAUDE_CODE_AUTO_COMPACT_WINDOW` is floored at
//! 100k). So under 128k a job tells it the window that puts its
//! compaction point where this budget wants it ([`Budget::claude_window`]).
//!
//! Where that point is: the compaction request carries the conversation
//! at that point plus what the last turn added (one answer of at most
//! `output` tokens and one tool result of at most `tool_result`), the
//! compaction instruction, and room for the summary. It must fit the real
//! window, so
//!
//! `compact_at = window − 2·output − tool_result − INSTRUCTION − MARGIN`.
//!
//! One tool result is held to `tool_result` (an eighth of the window) by
//! Claude Code's own caps: the Read tool's token cap (over it, a whole
//! file gives a first page and a range is refused, and the model reads on
//! in parts), Bash's output length and an MCP result's tokens. Nothing one
//! call returns can then fill a small window.
//!
//! At 128k and more nothing is set: Claude Code's defaults fit.

pub use crate::probe::{MIN_WINDOW, SMALL_WINDOW};

/// What Claude Code 2.1.328 keeps free below its window for the summary
/// (`s4`: threshold = window − min(max output, 20,000) − 13,000).
pub const SUMMARY_BUFFER: u64 = 13_000;

/// The most of the output budget Claude Code keeps free (`$2r`).
pub const OUTPUT_RESERVE_CAP: u64 = 20_000;

/// The compaction instruction Claude Code appends to the conversation, in
/// tokens, rounded up (measured on the fake and on llama-server: see
/// docs/benchmarks.md, "Long jobs on small windows").
pub const INSTRUCTION: u64 = 1_200;

/// Slack for Claude Code's own estimate of what was added since the last
/// answer (characters / 4), which a real tokenizer can exceed.
pub const MARGIN: u64 = 512;

/// How one window is spent. All in tokens but `bash_chars`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The real per-slot window.
    pub window: u64,
    /// `max_tokens` of every request (`CLAUDE_CODE_MAX_OUTPUT_TOKENS`).
    pub output: u64,
    /// The most one tool result may hold
    /// (`CLAUDE_CODE_FILE_READ_MAX_OUTPUT_TOKENS`, `MAX_MCP_OUTPUT_TOKENS`).
    pub tool_result: u64,
    /// Bash output kept, in characters (`BASH_MAX_OUTPUT_LENGTH`).
    pub bash_chars: u64,
    /// Where Claude Code compacts, in its own count of the conversation.
    pub compact_at: u64,
    /// The window Claude Code is told so that it compacts at `compact_at`
    /// (`CLAUDE_CODE_MAX_CONTEXT_TOKENS`).
    pub claude_window: u64,
}

impl Budget {
    /// The budget of `window`; `None` at [`SMALL_WINDOW`] and more, where
    /// Claude Code's defaults fit.
    pub fn of(window: u64) -> Option<Budget> {
        if window >= SMALL_WINDOW {
            return None;
        }
        let output = (window / 8).max(1024);
        let tool_result = (window / 8).max(1024);
        let compact_at = window
            .saturating_sub(2 * output + tool_result + INSTRUCTION + MARGIN)
            .max(1);
        Some(Budget {
            window,
            output,
            tool_result,
            // Bash output is dense (paths, numbers): three characters a token.
            bash_chars: tool_result * 3,
            compact_at,
            claude_window: compact_at + output.min(OUTPUT_RESERVE_CAP) + SUMMARY_BUFFER,
        })
    }

    /// The Claude Code environment that holds a session to this budget.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("CLAUDE_CODE_MAX_CONTEXT_TOKENS", self.claude_window),
            ("CLAUDE_CODE_MAX_OUTPUT_TOKENS", self.output),
            ("CLAUDE_CODE_FILE_READ_MAX_OUTPUT_TOKENS", self.tool_result),
            ("MAX_MCP_OUTPUT_TOKENS", self.tool_result),
            ("BASH_MAX_OUTPUT_LENGTH", self.bash_chars),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compaction_request_fits_the_window_it_is_sent_to() {
        for w in [16_384u64, 24_576, 32_768, 65_536, 100_000] {
            let b = Budget::of(w).unwrap();
            // Claude Code's own threshold with the window it is told.
            let threshold = b.claude_window - b.output.min(OUTPUT_RESERVE_CAP) - SUMMARY_BUFFER;
            assert_eq!(threshold, b.compact_at, "{w}");
            // The largest compaction request: the conversation just under
            // the threshold, one answer and one tool result more, the
            // instruction, and the summary's output.
            let request = b.compact_at + b.output + b.tool_result + INSTRUCTION + b.output;
            assert!(request + MARGIN <= w, "{w}: {request}");
            // Claude Code by itself (told the real window) compacts at
            // window − output − 13k: at 40% of a 32k window, under its own
            // fixed prompt on 16k. There the budget compacts later; on
            // larger windows its point is where the worst case still fits
            // (Claude Code's own would not: 64k gives 44,344 + 8,192 +
            // 25,000 of a default Read cap + …).
            let by_itself = w.saturating_sub(b.output + SUMMARY_BUFFER);
            if w <= 32_768 {
                assert!(b.compact_at > by_itself, "{w}: {} vs {by_itself}", b.compact_at);
            }
        }
        assert_eq!(Budget::of(131_072), None);
    }

    #[test]
    fn sixteen_k_leaves_room_above_the_fixed_prompt() {
        let b = Budget::of(16_384).unwrap();
        assert_eq!(b.output, 2048);
        assert_eq!(b.tool_result, 2048);
        // Claude Code's lean fixed prompt is 4,581 tokens (e2e t20): the
        // conversation holds it, a whole tool result and more.
        assert!(b.compact_at > 4_581 + b.tool_result + 1_000, "{b:?}");
    }
}
