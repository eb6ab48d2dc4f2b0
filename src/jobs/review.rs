//! A local model's review of a diff: advice for Claude, never a gate.
//!
//! Reading a big mechanical diff costs Claude many tokens; a local model
//! can read it first against the brief and point at what looks wrong. The
//! answer is asked for as JSON (`verdict`, `findings`, `summary`); a model
//! that answers otherwise gets `verdict: "unparsed"` with its text as the
//! summary, never an error. The last review of a job is kept in its dir
//! (`review.json`) and shown by `job_status`.

use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::anthropic::lenient;
use crate::complete::Completion;

/// The system prompt of a review.
pub const SYSTEM: &str = "You review code changes. Answer with one JSON object and nothing else: {\"verdict\": \"looks_right\" or \"problems\", \"findings\": [{\"file\": \"path\", \"line\": 12, \"what\": \"the problem\"}], \"summary\": \"one or two sentences\"}. Report only real problems: bugs, missed requirements of the brief, broken tests. No style remarks.";

/// One problem the reviewer found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Finding {
    #[serde(default)]
    pub file: Option<String>,
    #[serde(default)]
    pub line: Option<u64>,
    pub what: String,
}

/// A review (`review.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Review {
    /// `looks_right`, `problems`, or `unparsed` (the answer was not the
    /// asked JSON; `summary` holds it).
    pub verdict: String,
    pub findings: Vec<Finding>,
    pub summary: String,
    pub model: String,
    pub endpoint: String,
    pub ms: u64,
    /// The diff was cut to this many bytes to fit the window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff_cut_to: Option<usize>,
}

impl Review {
    /// The last review kept in a job dir.
    pub fn read(dir: &Path) -> Option<Review> {
        let path = super::dir::JobDir::at(dir).review();
        let bytes = crate::paths::read_capped(&path, super::dir::MAX_RECORD_BYTES).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Keep it in the job dir.
    pub fn save(&self, dir: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        crate::paths::write_atomic(&super::dir::JobDir::at(dir).review(), &bytes)
    }
}

/// The prompt: the brief, the focus, the diff.
pub fn prompt(brief: Option<&str>, focus: Option<&str>, diff: &str) -> String {
    let mut p = String::new();
    if let Some(b) = brief {
        p.push_str("The brief the change was made for:\n<brief>\n");
        p.push_str(b);
        p.push_str("\n</brief>\n\n");
    }
    if let Some(f) = focus.filter(|f| !f.trim().is_empty()) {
        p.push_str(&format!("Look especially at: {f}\n\n"));
    }
    p.push_str("The diff:\n<diff>\n");
    p.push_str(diff);
    p.push_str("\n</diff>\n\nReview it. Answer with the JSON object only.");
    p
}

/// The asked answer: its fields read by the crate's lenient rule.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Answer {
    #[serde(deserialize_with = "lenient")]
    verdict: Option<String>,
    /// Not a list: none (each finding is read on its own).
    #[serde(deserialize_with = "lenient")]
    findings: Option<Vec<Value>>,
    #[serde(deserialize_with = "lenient")]
    summary: Option<String>,
}

/// The first JSON object in `text` (models wrap it in prose or fences).
fn json_object(text: &str) -> Option<Answer> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    if end <= start {
        return None;
    }
    match serde_json::from_str::<Value>(&text[start..=end]).ok()? {
        v @ Value::Object(_) => Answer::deserialize(&v).ok(),
        _ => None,
    }
}

/// Read the model's answer; anything not in the asked form is `unparsed`.
pub fn parse(c: &Completion, diff_cut_to: Option<usize>) -> Review {
    let base = |verdict: &str, findings: Vec<Finding>, summary: String| Review {
        verdict: verdict.into(),
        findings,
        summary,
        model: c.model.clone(),
        endpoint: c.endpoint.clone(),
        ms: c.ms,
        diff_cut_to,
    };
    let unparsed = || {
        base(
            "unparsed",
            Vec::new(),
            crate::fmt::first_chars(c.text.trim(), 4000),
        )
    };
    let Some(a) = json_object(&c.text) else {
        return unparsed();
    };
    let verdict = a.verdict.unwrap_or_default();
    if !matches!(verdict.as_str(), "looks_right" | "problems") {
        return unparsed();
    }
    let findings: Vec<Finding> = a
        .findings
        .unwrap_or_default()
        .into_iter()
        .filter_map(crate::anthropic::read::<Finding>)
        .take(50)
        .collect();
    base(
        &verdict,
        findings,
        crate::fmt::first_chars(&a.summary.unwrap_or_default(), 2000),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: &str) -> Completion {
        Completion {
            text: text.into(),
            usage: Default::default(),
            ms: 5,
            model: "m".into(),
            endpoint: "e".into(),
            stop_reason: None,
        }
    }

    #[test]
    fn the_asked_json_is_read_even_inside_prose_or_fences() {
        let r = parse(
            &answer(
                "Here you go:\n```json\n{\"verdict\":\"problems\",\"findings\":[{\"file\":\"src/a.rs\",\"line\":3,\"what\":\"off by one\"}],\"summary\":\"one bug\"}\n```",
            ),
            None,
        );
        assert_eq!(r.verdict, "problems");
        assert_eq!(
            r.findings,
            vec![Finding {
                file: Some("src/a.rs".into()),
                line: Some(3),
                what: "off by one".into()
            }]
        );
        assert_eq!(r.summary, "one bug");
    }

    #[test]
    fn anything_else_is_unparsed_with_the_text_as_summary() {
        let r = parse(&answer("Looks fine to me."), None);
        assert_eq!(r.verdict, "unparsed");
        assert_eq!(r.summary, "Looks fine to me.");
        let r = parse(&answer("{\"verdict\": \"maybe\"}"), None);
        assert_eq!(r.verdict, "unparsed");
        let r = parse(&answer("{ not json }"), None);
        assert_eq!(r.verdict, "unparsed");
    }
}
