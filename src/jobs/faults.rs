//! What the model did wrong, and what the session really did.
//!
//! A local model can end a job "succeeded" with nothing done: it wrote its
//! tool calls as text, repeated one call, or only talked. The shim repairs
//! or stops what it can (a runaway answer is cut off) and logs each fault
//! in `requests.jsonl`; this module
//! sums them per job ([`ModelFaults`]), says what the session did
//! ([`Outcome`]), and turns both into the one sentence that the summary,
//! `list_jobs` and the hook line carry, so Claude tries another model
//! rather than review an empty diff.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The model's faults over a job, from its request log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ModelFaults {
    /// Tool calls written as text that the shim turned into `tool_use`.
    pub repaired_tool_calls: u64,
    /// Answers with text that looked like a tool call but could not be
    /// used (an unknown tool, missing required keys, broken JSON).
    pub unparsed_tool_text: u64,
    /// Times the loop guard told the model it was repeating itself.
    pub loop_notes: u64,
    /// Requests sent again with a lower `max_tokens` (vLLM's window).
    pub max_tokens_retries: u64,
    /// Complete answers with no text and no tool call.
    pub empty_responses: u64,
    /// Answers the runaway guard cut off (a line or the template's markers
    /// over and over), with the first one's repeated unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runaway_output: Option<RunawayOutput>,
    /// The server dropped part of a request without saying so: the turn
    /// the shim caught it at, the bytes sent, their lower bound of tokens
    /// and what the server said it read (the job ends there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<crate::wire::Truncation>,
}

/// The runaways of a job: how many, the first one's repeated unit, and
/// the bytes of answer the delegate never kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunawayOutput {
    /// Answers cut off.
    pub count: u64,
    /// `marker` (chat-template markers as text), `line` or `span`.
    pub cause: crate::wire::Cause,
    /// The first runaway's repeated unit, cut short.
    pub unit: String,
    /// How many times it was seen when the guard fired.
    pub repeats: u32,
    /// Text and thinking bytes of the cut answers, all of them dropped.
    pub bytes_dropped: u64,
    /// The sentence with the likely cause and the fix.
    pub why: String,
}

impl ModelFaults {
    pub fn any(&self) -> bool {
        *self != ModelFaults::default()
    }

    /// Add one request log record.
    pub fn add(&mut self, r: &crate::wire::RequestRecord) {
        self.repaired_tool_calls += r.repaired_calls;
        if r.unparsed_tool_text.is_some() {
            self.unparsed_tool_text += 1;
        }
        if r.loop_note.is_some() {
            self.loop_notes += 1;
        }
        if r.has_note(|n| matches!(n, crate::wire::Note::MaxTokensRetry { .. })) {
            self.max_tokens_retries += 1;
        }
        if r.empty {
            self.empty_responses += 1;
        }
        if self.truncated.is_none() {
            self.truncated = r.truncated.clone();
        }
        if let Some(f) = r.runaway.clone() {
            match self.runaway_output.as_mut() {
                Some(r) => {
                    r.count += 1;
                    r.bytes_dropped = r.bytes_dropped.saturating_add(f.bytes_dropped);
                }
                None => {
                    self.runaway_output = Some(RunawayOutput {
                        count: 1,
                        why: f.why,
                        cause: f.cause,
                        unit: f.unit,
                        repeats: f.repeats,
                        bytes_dropped: f.bytes_dropped,
                    });
                }
            }
        }
    }

    /// Answers the runaway guard cut off.
    pub fn runaways(&self) -> u64 {
        self.runaway_output.as_ref().map_or(0, |r| r.count)
    }
}

/// What the session did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Outcome {
    pub tool_calls: u64,
    pub files_changed: usize,
    /// It answered, but called no tool and changed no file.
    pub text_only: bool,
}

impl Outcome {
    pub fn of(tool_calls: u64, files_changed: usize, answered: bool) -> Outcome {
        Outcome {
            tool_calls,
            files_changed,
            text_only: answered && tool_calls == 0 && files_changed == 0,
        }
    }
}

pub const TEXT_ONLY: &str = "the model answered in text only: no tool called, no file changed";

/// The sentence about the model, when there is something to say.
pub fn note(faults: &ModelFaults, outcome: &Outcome) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    if outcome.text_only {
        parts.push(TEXT_ONLY.to_string());
    }
    let plural = |n: u64, one: &str, many: &str| {
        if n == 1 {
            format!("1 {one}")
        } else {
            format!("{n} {many}")
        }
    };
    if faults.repaired_tool_calls > 0 {
        parts.push(format!(
            "{} written as text were repaired",
            plural(faults.repaired_tool_calls, "tool call", "tool calls")
        ));
    }
    if faults.unparsed_tool_text > 0 {
        parts.push(format!(
            "{} held a tool call that could not be used",
            plural(faults.unparsed_tool_text, "answer", "answers")
        ));
    }
    if faults.loop_notes > 0 {
        parts.push(format!(
            "it repeated one call and got {}",
            plural(faults.loop_notes, "loop note", "loop notes")
        ));
    }
    if let Some(r) = &faults.runaway_output {
        parts.push(format!(
            "{} cut off as runaway output ({})",
            plural(r.count, "answer was", "answers were"),
            r.why.trim_start_matches("runaway output: ")
        ));
    }
    if let Some(t) = &faults.truncated {
        parts.push(format!(
            "the server dropped part of the conversation without saying so at turn {} ({} bytes sent, at least {} tokens; it read {})",
            t.turn,
            t.bytes_sent,
            t.lower_bound,
            t.read.map_or("no count".to_string(), |r| format!("{r} tokens"))
        ));
    }
    if faults.empty_responses > 0 {
        parts.push(plural(
            faults.empty_responses,
            "empty answer",
            "empty answers",
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_log_lines_add_up() {
        let mut f = ModelFaults::default();
        for l in [
            json!({"repaired_calls": 2, "repaired_tool_call": "hermes_json x2"}),
            json!({"unparsed_tool_text": "hermes_json: `X` is not an offered tool"}),
            json!({"loop_note": "you have made…"}),
            json!({"translated": "model a->b; max_tokens_retry 8192->4000"}),
            json!({"empty": true}),
            json!({"status": 200}),
        ] {
            f.add(&serde_json::from_value(l).unwrap());
        }
        assert_eq!(
            f,
            ModelFaults {
                repaired_tool_calls: 2,
                unparsed_tool_text: 1,
                loop_notes: 1,
                max_tokens_retries: 1,
                empty_responses: 1,
                runaway_output: None,
                truncated: None,
            }
        );
    }

    #[test]
    fn text_only_is_said() {
        let o = Outcome::of(0, 0, true);
        assert!(o.text_only);
        assert_eq!(
            note(&ModelFaults::default(), &o).as_deref(),
            Some(TEXT_ONLY)
        );
        assert!(!Outcome::of(1, 0, true).text_only);
        assert!(
            !Outcome::of(0, 0, false).text_only,
            "no answer is another failure"
        );
        assert_eq!(
            note(&ModelFaults::default(), &Outcome::of(3, 1, true)),
            None
        );
    }
}
