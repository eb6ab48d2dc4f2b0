//! Real small models' early stops (issue 46): the last words of a turn
//! that announced a step and called no tool, copied verbatim from the
//! threads that reported them, with their sources. [`replay`] makes a
//! scripted model that reads a file first (each of these models had called
//! tools earlier in its session), stops with those words, and, nudged,
//! takes the step. And the scripted stops of issue 46's tests: a model
//! that announces a step and stops ([`announcer`]) and one that needs
//! eight turns ([`eight_writes`]).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::script::{self, Reply, Script};

/// One reported early stop.
#[derive(Debug, Clone, Copy)]
pub struct EarlyStop {
    /// The model and server named in the thread.
    pub model: &'static str,
    /// The assistant's last text, verbatim.
    pub said: &'static str,
    /// The thread that quotes it.
    pub source: &'static str,
}

pub const STOPS: &[EarlyStop] = &[
    EarlyStop {
        model: "Qwen3.6-27B in Claude Code (stop_reason end_turn, 92 output tokens)",
        said: "\n\nNow let me write the full Rust implementation.",
        source: "https://github.com/QwenLM/Qwen3.8/issues/150",
    },
    EarlyStop {
        model: "qwen-coder-plus (Qwen auth provider), after ReadFile calls",
        said: "Let me check the tool formatter which might be involved in handling responses:",
        source: "https://github.com/vybestack/llxprt-code/issues/152",
    },
    EarlyStop {
        model: "moonshotai/kimi-k2 on OpenRouter, after a text_editor write",
        said: "Now let me create the main server structure:",
        source: "https://github.com/aaif-goose/goose/issues/3739",
    },
    EarlyStop {
        model: "DeepSeek V4 Pro",
        said: "Now 2.1, 3.1, 3.2. Let me do all three.",
        source: "https://github.com/agentscope-ai/QwenPaw/issues/6921",
    },
    EarlyStop {
        model: "a delegate of claude-code-delegate-local (reported success: True)",
        said: "I'll run the tests to verify everything works correctly",
        source: "https://github.com/fegone/claude-code-delegate-local (CHANGELOG.md, Fixed 2026-08-08, second pass)",
    },
];

/// The nudge's first words, as the delegate reads them.
pub const NUDGE: &str = "You ended your turn without calling a tool.";

/// A model that Reads `file`'s directory listing (a real call first),
/// stops with `stop.said`, and once nudged Writes `file`, then reports.
pub fn replay(stop: &EarlyStop, file: String) -> Script {
    let said = stop.said;
    Arc::new(move |req: &Value| {
        let results = script::tool_results(req);
        let nudged = req.to_string().contains(NUDGE);
        match (nudged, results) {
            (false, 0) => Reply::Tool {
                name: "Bash".into(),
                input: json!({"command": "ls", "description": "List the files"}),
            },
            (false, _) => Reply::Text(said.into()),
            (true, 1) => Reply::Tool {
                name: "Write".into(),
                input: json!({"file_path": file, "content": "done\n"}),
            },
            (true, _) => Reply::Text("Done: wrote out.txt.".into()),
        }
    })
}

/// A model that announces `step` and stops; nudged, it writes `file`
/// (when `acts`) and reports, or announces the same step again.
pub fn announcer(step: &'static str, file: String, acts: bool) -> script::Script {
    Arc::new(move |req: &Value| {
        let results = script::tool_results(req);
        let after_nudge = req.to_string().contains(NUDGE);
        match (after_nudge && acts, results) {
            (true, 0) => Reply::Tool {
                name: "Write".into(),
                input: json!({"file_path": file, "content": "notes\n"}),
            },
            (true, _) => Reply::Text("Done: wrote notes.txt.".into()),
            (false, _) => Reply::Text(step.into()),
        }
    })
}

/// Writes `f<n>.txt` for the n-th turn, saying so first; it needs 8.
pub fn eight_writes(dir: std::path::PathBuf) -> script::Script {
    Arc::new(move |req: &Value| {
        let n = script::tool_results(req);
        if n < 8 {
            Reply::TextThen {
                text: format!("Next I'll write f{n}.txt."),
                then: Box::new(Reply::Tool {
                    name: "Write".into(),
                    input: json!({"file_path": dir.join(format!("f{n}.txt")), "content": "x\n"}),
                }),
            }
        } else {
            Reply::Text("Done: wrote all eight files.".into())
        }
    })
}
