//! A job's window economy, as its record keeps it: the compactions Claude
//! Code made (read from its `compact_boundary` events), the shim's
//! clearings of old tool results, and the largest tool result the
//! delegate got. It says where a job's window went, and a job that failed
//! on its window is told apart from one that failed for another reason.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::runner::Compaction;

/// The window economy of one job (`window` in `job.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WindowUse {
    /// Compactions, one per `compact_boundary` event.
    pub compactions: u64,
    /// Each one: its trigger and Claude Code's count before (and after).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compacted: Vec<Compaction>,
    /// Batches of old tool results the shim replaced with a stub.
    pub clearings: u64,
    /// Tool results replaced, over those batches.
    pub results_cleared: u64,
    /// The largest tool result the delegate got.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest_tool_result: Option<ToolResultSize>,
}

/// One tool result's size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ToolResultSize {
    /// The call (`Read src/a.rs`).
    pub call: String,
    pub bytes: u64,
    /// Estimated as bytes / 4, Claude Code's own rough count.
    pub tokens: u64,
}

/// Compactions kept in the record: the first ones say the most; the
/// count goes on.
const MAX_KEPT: usize = 20;

impl WindowUse {
    /// Nothing happened to the window.
    pub fn is_empty(&self) -> bool {
        *self == WindowUse::default()
    }

    /// Claude Code compacted.
    pub fn compacted(&mut self, c: Compaction) {
        self.compactions += 1;
        if self.compacted.len() < MAX_KEPT {
            self.compacted.push(c);
        }
    }

    /// A tool result of `bytes` for `call`.
    pub fn tool_result(&mut self, call: &str, bytes: u64) {
        if self.largest_tool_result.as_ref().is_none_or(|l| bytes > l.bytes) {
            self.largest_tool_result = Some(ToolResultSize {
                call: crate::fmt::one_line(call, 120),
                bytes,
                tokens: bytes.div_ceil(4),
            });
        }
    }

    /// The shim's clearings so far on the job's route.
    pub fn cleared(&mut self, batches: u64, results: u64) {
        self.clearings = batches;
        self.results_cleared = results;
    }

    /// One line: "compacted 3 times (15,672 → 2,104 tokens last), cleared
    /// old tool results twice (14 results), largest tool result 8,200
    /// tokens (Read part03.txt)". `None` when nothing happened.
    pub fn line(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.compactions > 0 {
            let last = self.compacted.last().map(|c| match (c.pre_tokens, c.post_tokens) {
                (Some(a), Some(b)) => format!(
                    " ({} → {} tokens last)",
                    crate::fmt::thousands(a),
                    crate::fmt::thousands(b)
                ),
                (Some(a), None) => format!(" (last at {} tokens)", crate::fmt::thousands(a)),
                _ => String::new(),
            });
            parts.push(format!(
                "compacted {}{}",
                times(self.compactions),
                last.unwrap_or_default()
            ));
        }
        if self.clearings > 0 {
            parts.push(format!(
                "cleared old tool results {} ({} results)",
                times(self.clearings),
                self.results_cleared
            ));
        }
        if parts.is_empty() {
            return None;
        }
        if let Some(l) = &self.largest_tool_result {
            parts.push(format!(
                "largest tool result {} tokens ({})",
                crate::fmt::thousands(l.tokens),
                l.call
            ));
        }
        Some(parts.join(", "))
    }
}

/// Claude Code's `terminal_reason`s of a session that ran out of window:
/// compaction kept refilling, the context hit the blocking limit, or the
/// server refused a prompt too long.
const WINDOW_REASONS: &[&str] = &["rapid_refill_breaker", "blocking_limit", "prompt_too_long"];

/// Did a session that ended with `terminal_reason` and `text` run out of
/// its window?
pub fn ran_out(terminal_reason: Option<&str>, text: &str) -> bool {
    terminal_reason.is_some_and(|r| WINDOW_REASONS.contains(&r))
        || text.contains("Autocompact is thrashing")
        || text.starts_with("Prompt is too long")
}

/// The job's error when its session ran out of `window`: the window, what
/// happened to it, what Claude Code said, and the server's fix.
pub fn out_of_window(
    window: Option<u64>,
    used: &WindowUse,
    claude_said: &str,
    fix: &str,
) -> String {
    let w = window
        .map(|w| format!("its {}-token window", crate::fmt::thousands(w)))
        .unwrap_or_else(|| "its window".into());
    let what = used
        .line()
        .map(|l| format!(" ({l})"))
        .unwrap_or_default();
    format!(
        "the job ran out of {w}{what}; Claude Code said: {}; {fix}",
        crate::fmt::one_line(claude_said.trim_end_matches('.'), 200)
    )
}

fn times(n: u64) -> String {
    match n {
        1 => "once".into(),
        2 => "twice".into(),
        n => format!("{n} times"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_that_ran_out_of_window_is_said_with_the_servers_fix() {
        let said = "Autocompact is thrashing: the context refilled to the limit within 3 turns of the previous compact, 3 times in a row.";
        assert!(ran_out(Some("rapid_refill_breaker"), said));
        assert!(ran_out(None, said));
        assert!(ran_out(Some("blocking_limit"), "Prompt is too long"));
        assert!(!ran_out(Some("max_turns"), "Reached max turns"));
        let mut used = WindowUse::default();
        used.compacted(Compaction {
            trigger: "auto".into(),
            pre_tokens: Some(15_355),
            post_tokens: Some(6_775),
        });
        let fix = crate::config::Backend::LlamaCpp.window_fix("m");
        assert_eq!(
            out_of_window(Some(32_768), &used, said, &fix),
            "the job ran out of its 32,768-token window (compacted once (15,355 → 6,775 tokens last)); Claude Code said: Autocompact is thrashing: the context refilled to the limit within 3 turns of the previous compact, 3 times in a row; restart llama-server with a larger `-c`, or fewer `--parallel` slots (each slot gets `-c` divided by `--parallel`; 65536 a slot is comfortable)"
        );
        for (b, needle) in [
            (crate::config::Backend::Vllm, "--max-model-len"),
            (crate::config::Backend::Ollama, "OLLAMA_CONTEXT_LENGTH"),
            (crate::config::Backend::LmStudio, "lms load m --context-length"),
        ] {
            assert!(b.window_fix("m").contains(needle), "{b:?}");
        }
    }

    #[test]
    fn the_line_says_compactions_clearings_and_the_largest_result() {
        let mut w = WindowUse::default();
        assert_eq!(w.line(), None);
        w.tool_result("Read a.txt", 400);
        w.tool_result("Read b.txt", 8000);
        w.tool_result("Bash ls", 10);
        assert_eq!(w.line(), None, "a result alone is no event");
        for pre in [15_672, 15_900, 16_000] {
            w.compacted(Compaction {
                trigger: "auto".into(),
                pre_tokens: Some(pre),
                post_tokens: None,
            });
        }
        w.cleared(2, 14);
        assert_eq!(
            w.line().unwrap(),
            "compacted 3 times (last at 16,000 tokens), cleared old tool results twice (14 results), largest tool result 2,000 tokens (Read b.txt)"
        );
    }
}
