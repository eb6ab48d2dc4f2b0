//! What a delegate left undone when its session ended, and the one nudge
//! that asks it to go on.
//!
//! Small local models often end a turn with "I'll now update the tests."
//! and no tool call. Claude Code takes any turn without a tool call as the
//! end of the session, so the job would read `succeeded` with the step
//! never taken. [`announced`] finds such a step in the delegate's last
//! words; the job then resumes the same session once with [`NUDGE`]
//! (`defaults.nudges`, 1 by default), and a delegate that stops again
//! with a step announced, or that runs out of turns, ends `failed` with an
//! [`Incomplete`] that names what was pending ([`sentence`]).
//!
//! Why a resume and not Claude Code's Stop hook: the decision needs what
//! only the job knows (the session's result, the last answer's
//! `stop_reason` from the shim, the acceptance command, the turns left),
//! the resumed round is the path the fix rounds already take (the
//! conversation is sent again byte for byte, so the server's cache holds),
//! and no program has to run from the delegate's settings at each stop.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The nudge: the peers' wording (claude-code-delegate-local 0.6), which
/// lets a delegate that had finished say so, and asks one that had not to
/// act. Neutral: no "STOP", no order to commit (a small model answers
/// those with an acknowledgement and nothing else).
pub const NUDGE: &str = "You ended your turn without calling a tool. If the task is fully complete and verified, say so plainly and stop. If you were about to do something, do it now by calling the tool.";

/// One nudge of a job: the step the delegate had announced, and whether
/// it went on (called a tool) after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Nudge {
    /// The announced step the nudge answered ("I'll now update the tests.").
    pub after: String,
    /// The delegate called a tool after the nudge.
    pub resumed: bool,
}

/// Why a job ended with work pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// Claude Code's turn limit (`max_turns`) came first.
    MaxTurns,
    /// It ended its last turn announcing a step it did not take (after its
    /// nudges, or with nudges off).
    Announced,
}

/// A job that ended with work pending: never `succeeded`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Incomplete {
    pub why: Why,
    /// What was pending: the last step it announced, or the calls of its
    /// last turn whose results it never saw.
    pub pending: String,
}

/// A job's nudges and, when it ended with work pending, what was pending.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Ending {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nudges: Vec<Nudge>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<Incomplete>,
}

impl Ending {
    pub fn is_empty(&self) -> bool {
        self.nudges.is_empty() && self.incomplete.is_none()
    }

    /// What the summary, the hook line and the page say of it: "incomplete,
    /// pending: \"I'll now update the tests.\" (nudged once)", or "nudged
    /// once, and it went on"; `None` when there is nothing to say.
    pub fn line(&self) -> Option<String> {
        let n = self.nudges.len();
        let times = match n {
            1 => "once".to_string(),
            2 => "twice".to_string(),
            n => format!("{n} times"),
        };
        match (&self.incomplete, n) {
            (Some(i), 0) => Some(format!("incomplete, pending: {}", quoted(i))),
            (Some(i), _) => Some(format!("incomplete, pending: {} (nudged {times})", quoted(i))),
            (None, 0) => None,
            (None, _) => {
                let went_on = self.nudges.iter().filter(|x| x.resumed).count();
                Some(if went_on == n {
                    format!("nudged {times}, and it went on")
                } else {
                    format!("nudged {times}, and it said it was done")
                })
            }
        }
    }
}

/// The pending step as the line quotes it: an announced step in quotes,
/// the turn limit's account as it is.
fn quoted(i: &Incomplete) -> String {
    match i.why {
        Why::Announced => format!("\"{}\"", i.pending),
        Why::MaxTurns => format!("out of turns; {}", i.pending),
    }
}

/// The longest step quoted back.
const QUOTE: usize = 200;

/// Words that open a sentence without changing what it says ("Now, I'll
/// …", "Next I will …").
const OPENERS: &[&str] = &[
    "now", "next", "then", "first", "ok", "okay", "great", "alright", "good", "perfect", "so",
    "finally", "and",
];

/// How a sentence that announces a step begins (after [`OPENERS`]).
const INTENT: &[&str] = &[
    "i'll ",
    "i will ",
    "i'm going to ",
    "i am going to ",
    "i'm now going to ",
    "let me ",
    "let's ",
    "i need to ",
    "i now need to ",
    "i should now ",
    "i'll now ",
    "the next step is ",
    "my next step is ",
    "next step: ",
];

/// Sentences that begin like an announcement and are not one.
const NOT_INTENT: &[&str] = &[
    "let me know",
    "i'll be ",
    "i will be ",
    "i'll leave ",
    "i will leave ",
    "let's keep ",
    // Pleasantries, not steps ("I'll help you with that.").
    "i'll help",
    "i will help",
    "let me help",
    "i'll do my best",
    "i'll wait",
    "i will wait",
];

/// The step a delegate's last words announce and its turn did not take:
/// the last sentence of its last paragraph, when it opens with an intent
/// ("I'll …", "Let me …", "Next, I will …"), quoted back as written (cut
/// to 200 characters). `None` for a report ("Done: …", "Let me know if …").
pub fn announced(text: &str) -> Option<String> {
    let last = last_sentence(text)?;
    let mut s = last.to_lowercase().replace('\u{2019}', "'");
    loop {
        let t = s.trim_start();
        let word_end = t
            .find(|c: char| !c.is_alphabetic())
            .unwrap_or(t.len());
        if word_end > 0 && OPENERS.contains(&&t[..word_end]) {
            s = t[word_end..]
                .trim_start_matches([',', ':', '!', '.', ' '])
                .to_string();
            continue;
        }
        s = t.to_string();
        break;
    }
    if NOT_INTENT.iter().any(|n| s.starts_with(n)) {
        return None;
    }
    INTENT
        .iter()
        .any(|i| s.starts_with(i))
        .then(|| crate::fmt::one_line(last, QUOTE))
}

/// The last sentence of the last paragraph of `text` (a fenced block or a
/// list item counts as a paragraph's line), trimmed; `None` for blank text.
fn last_sentence(text: &str) -> Option<&str> {
    let text = text.trim_end();
    let para_start = text.rfind("\n\n").map_or(0, |i| i + 2);
    let para = text[para_start..].trim();
    let line = para.lines().last()?.trim();
    if line.is_empty() {
        return None;
    }
    // Sentence ends: '.', '!' or '?' followed by a space, within the line;
    // a trailing ':' or '.' belongs to the last sentence.
    let body = line.trim_end_matches(['.', '!', '?', ':', ' ']);
    let start = body
        .char_indices()
        .rev()
        .find(|&(i, c)| {
            matches!(c, '.' | '!' | '?') && body[i + c.len_utf8()..].starts_with(' ')
        })
        .map(|(i, c)| i + c.len_utf8())
        .unwrap_or(0);
    let s = line[start..].trim();
    (!s.is_empty()).then_some(s)
}

/// The job's error for work left pending: one sentence that says what was
/// pending and what to do.
pub fn sentence(i: &Incomplete, max_turns: u32, nudges: usize) -> String {
    match i.why {
        Why::MaxTurns => format!(
            "incomplete: the delegate used all {max_turns} turns (max_turns) with work pending: {}; resume it with more turns (max_turns), or split the task",
            i.pending
        ),
        Why::Announced if nudges > 0 => format!(
            "incomplete: the delegate stopped after announcing a step it did not take, again after {}: \"{}\"; resume it to go on, or give the task to a stronger model",
            if nudges == 1 {
                "a nudge".to_string()
            } else {
                format!("{nudges} nudges")
            },
            i.pending
        ),
        Why::Announced => format!(
            "incomplete: the delegate stopped after announcing a step it did not take: \"{}\" (defaults.nudges is 0: it was not asked to go on); resume it to go on",
            i.pending
        ),
    }
}

/// What was pending when the turns ran out: the calls of the last turn,
/// whose results the delegate never saw, and the step it last announced.
pub fn at_turn_limit(last_calls: &[String], last_said: Option<&str>) -> String {
    let said = last_said.and_then(announced);
    let calls = (!last_calls.is_empty()).then(|| {
        format!(
            "its last turn called {}, whose results it never saw",
            crate::fmt::one_line(&last_calls.join(", "), QUOTE)
        )
    });
    match (calls, said) {
        (Some(c), Some(s)) => format!("{c}; it had said \"{s}\""),
        (Some(c), None) => c,
        (None, Some(s)) => format!("it had said \"{s}\""),
        (None, None) => "its last turn's work was not finished".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announced_step_is_found_and_a_report_is_not() {
        for (text, want) in [
            ("I'll now update the tests.", Some("I'll now update the tests.")),
            (
                "The parser is done.\n\nNow let me add the tests:",
                Some("Now let me add the tests:"),
            ),
            (
                "Added the flag. Next, I will write the tests for it.",
                Some("Next, I will write the tests for it."),
            ),
            ("I’m going to run cargo test next.", Some("I’m going to run cargo test next.")),
            ("Done: added --json and its tests. All pass.", None),
            ("The task is complete. Let me know if you need anything else.", None),
            ("I'll be glad to help further.", None),
            ("Hello! I'll help you with that.", None),
            ("", None),
            ("   \n\n  ", None),
        ] {
            assert_eq!(announced(text).as_deref(), want, "{text:?}");
        }
    }

    #[test]
    fn the_sentence_names_what_was_pending() {
        let i = Incomplete {
            why: Why::Announced,
            pending: "I'll now update the tests.".into(),
        };
        let s = sentence(&i, 10, 1);
        assert!(s.starts_with("incomplete: "), "{s}");
        assert!(s.contains("again after a nudge: \"I'll now update the tests.\""), "{s}");
        let m = Incomplete {
            why: Why::MaxTurns,
            pending: at_turn_limit(&["Write d.txt".into()], Some("Now I'll write d.txt.")),
        };
        assert_eq!(
            sentence(&m, 5, 0),
            "incomplete: the delegate used all 5 turns (max_turns) with work pending: its last turn called Write d.txt, whose results it never saw; it had said \"Now I'll write d.txt.\"; resume it with more turns (max_turns), or split the task"
        );
    }
}
