//! The `UserPromptSubmit` hook: put finished background jobs into the next
//! turn, so Claude reviews what its delegates did.
//!
//! It reads the hook's stdin JSON, finds jobs of this project (the hook's
//! cwd) that ended in the last 24 hours and were not yet reported to this
//! `session_id`, and prints `hookSpecificOutput.additionalContext`: one plain
//! factual line per job (at most 5, newest first). Each job is reported once
//! per session: a marker file `<state>/hook/<session>/<job>` is created with
//! `create_new`, which the filesystem makes atomic, so two hooks running at
//! once never report the same job twice.
//!
//! It must never block or garble a prompt: it always exits 0, prints nothing
//! when there is nothing new or its input is bad, and does no network I/O.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::json;

use crate::jobs::dir::RecordBrief;
use crate::jobs::{Store, valid_id};

/// How far back a finished job is still news.
const WINDOW_H: i64 = 24;
/// At most this many lines per prompt.
const MAX_LINES: usize = 5;

#[derive(Deserialize)]
struct Input {
    session_id: String,
    cwd: Option<PathBuf>,
    /// The session's own transcript (Claude Code passes it to every hook):
    /// a job this session delegated has its tool call there.
    #[serde(default)]
    transcript_path: Option<PathBuf>,
}

/// What the net clause needs, read once per hook call and only when a job
/// to report has a tool call: the session's transcript and the config.
#[derive(Default)]
struct NetSource {
    read: bool,
    transcript: Option<String>,
    config: Option<std::sync::Arc<crate::config::Config>>,
}

impl NetSource {
    fn get(&mut self, path: Option<&Path>) -> Option<(&str, &crate::config::Config)> {
        if !self.read {
            self.read = true;
            self.transcript = path.and_then(crate::ledger::transcript::read_bounded);
            if self.transcript.is_some() {
                self.config = crate::config::load(&crate::config::Discovery::standard(None))
                    .ok()
                    .map(|l| l.config);
            }
        }
        Some((self.transcript.as_deref()?, self.config.as_deref()?))
    }
}

/// ", net ≈ $X after Claude's own $Y": the job's net figure, when this
/// session delegated it and its transcript holds the call.
fn net(b: &RecordBrief, path: Option<&Path>, src: &mut NetSource) -> Option<String> {
    let (call, gross) = (b.tool_use_id.as_deref()?, b.equivalent_usd?);
    let (text, config) = src.get(path)?;
    if !text.contains(call) {
        return None;
    }
    let o = crate::ledger::transcript::orchestration(text, &b.id, call);
    if o.calls == 0 {
        return None;
    }
    let cost = crate::ledger::orchestration_usd(config, &o)?;
    Some(format!(
        ", net ≈ {} after Claude's own {} for delegating",
        crate::ledger::dollars(gross - cost),
        crate::ledger::dollars(cost)
    ))
}

fn duration(s: f64) -> String {
    let s = s.round() as u64;
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

fn line(b: &RecordBrief, net: Option<String>) -> String {
    let n = b.files_changed.len();
    let files = match (&b.worktree, n) {
        (Some(w), _) if w.kept => format!("{n} files changed in worktree branch {}", w.branch),
        (Some(_), _) => "no changes (worktree removed)".to_string(),
        (None, 1) => "1 file changed".to_string(),
        (None, n) => format!("{n} files changed"),
    };
    let review = if b.worktree.as_ref().is_some_and(|w| w.kept) {
        "job_status or job_diff"
    } else {
        "job_status"
    };
    let acceptance = b
        .acceptance
        .as_ref()
        .map(|a| format!(", {}", a.line()))
        .unwrap_or_default();
    let u = &b.usage;
    let tokens = u.input + u.cache_read + u.output;
    let ledger = match (b.equivalent_usd, &b.reference_model) {
        (Some(x), Some(m)) if tokens > 0 => format!(
            ", {} tokens local ≈ {} at {m} list prices",
            crate::fmt::thousands(tokens),
            crate::ledger::dollars(x)
        ),
        _ if tokens > 0 => format!(", {} tokens local", crate::fmt::thousands(tokens)),
        _ => String::new(),
    } + &net.unwrap_or_default();
    let window = b.window.as_ref().and_then(|w| w.line());
    let ending = b.ending.as_ref().and_then(|e| e.line());
    let model = [&ending, &b.model_note, &b.cache_note, &window]
        .into_iter()
        .flatten()
        .map(|n| format!("; {n}"))
        .collect::<String>();
    let who = match &b.agent {
        Some(a) => format!("{} as subagent {}", b.served_id, a.name),
        None => b.served_id.clone(),
    };
    format!(
        "localagents job {} ({who}) finished: {} in {}, {files}{acceptance}{ledger}{model}; review with {review}.",
        b.id,
        b.status.as_str(),
        duration(b.elapsed_s.unwrap_or(0.0))
    )
}

fn session_dir(state: &Path, session: &str) -> PathBuf {
    // Session ids are UUIDs; anything else is hashed into a safe name.
    let safe = if !session.is_empty()
        && session.len() <= 128
        && session
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        session.to_string()
    } else {
        let mut h: u64 = 0xcbf29ce484222325;
        for b in session.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100000001b3);
        }
        format!("h{h:016x}")
    };
    state.join("hook").join(safe)
}

/// The lines to report for this hook input, marking each as reported.
pub fn report(state_dir: &Path, input: &[u8]) -> Vec<String> {
    let Ok(inp) = serde_json::from_slice::<Input>(input) else {
        return Vec::new();
    };
    let Some(cwd) = inp.cwd.or_else(|| std::env::current_dir().ok()) else {
        return Vec::new();
    };
    let cwd = cwd.canonicalize().unwrap_or(cwd);
    let sdir = session_dir(state_dir, &inp.session_id);
    let store = Store::new(state_dir);
    let now = chrono::Utc::now();
    let mut out = Vec::new();
    let mut src = NetSource::default();
    for e in store.recent(Some(now - chrono::Duration::hours(WINDOW_H * 2))) {
        if out.len() >= MAX_LINES
            || !valid_id(&e.id)
            || !e.status.terminal()
            || !(e.origin_cwd == cwd
                || cwd.starts_with(&e.origin_cwd)
                || e.origin_cwd.starts_with(&cwd))
            || sdir.join(&e.id).exists()
        {
            continue;
        }
        let Some(b) = store.brief(&e.id) else {
            continue;
        };
        let recent = b
            .finished
            .as_deref()
            .and_then(|f| chrono::DateTime::parse_from_rfc3339(f).ok())
            .is_some_and(|f| now.signed_duration_since(f) < chrono::Duration::hours(WINDOW_H));
        if !recent {
            continue;
        }
        if crate::paths::private_dir_all(&sdir).is_err() {
            return out;
        }
        // The line is ready before the marker, so a hook stopped while it
        // reads the transcript has marked nothing.
        let text = line(&b, net(&b, inp.transcript_path.as_deref(), &mut src));
        // Only the hook that creates the marker reports the job.
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(sdir.join(&b.id))
        {
            Ok(_) => out.push(text),
            Err(_) => continue,
        }
    }
    out
}

/// Run the hook: stdin in, JSON (or nothing) out. Never fails.
pub fn prompt_submit(state_dir: &Path) -> Option<String> {
    let mut input = Vec::new();
    // Bounded read: a hook input is small.
    let _ = std::io::stdin()
        .take(4 * 1024 * 1024)
        .read_to_end(&mut input);
    let lines = report(state_dir, &input);
    if lines.is_empty() {
        return None;
    }
    Some(
        json!({
            "hookSpecificOutput": {
                "hookEventName": "UserPromptSubmit",
                "additionalContext": lines.join("\n"),
            }
        })
        .to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_input_reports_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        for input in [
            &b""[..],
            b"not json",
            b"{}",
            b"{\"session_id\": 5}",
            b"\xff\xfe",
        ] {
            assert!(report(tmp.path(), input).is_empty());
        }
    }

    #[test]
    fn the_line_says_the_acceptance_result() {
        let b: RecordBrief = serde_json::from_value(serde_json::json!({
            "id": "20261130-041200-ab12cd34", "served_id": "qwen3.8-27b", "status": "succeeded",
            "finished": "2026-11-30T04:15:12Z", "elapsed_s": 192.0, "origin_cwd": "/p",
            "files_changed": ["a.rs"],
            "acceptance": {"command": "cargo test -p foo", "passed": true, "exit_code": 0,
                "rounds": 2, "output_tail": "ok", "elapsed_s": 3.1}
        }))
        .unwrap();
        assert_eq!(
            line(&b, None),
            "localagents job 20261130-041200-ab12cd34 (qwen3.8-27b) finished: succeeded in 3m12s, 1 file changed, acceptance passed (cargo test -p foo, 2 rounds); review with job_status."
        );
    }

    #[test]
    fn the_line_says_the_server_lost_the_cache() {
        let b: RecordBrief = serde_json::from_value(serde_json::json!({
            "id": "20261130-041200-ab12cd34", "served_id": "qwen3.8-27b", "status": "succeeded",
            "finished": "2026-11-30T04:15:12Z", "elapsed_s": 60.0, "origin_cwd": "/p",
            "cache_note": "lost its cache on 6 of 7 turns: 15,900 tokens re-processed; another job shared the slot"
        }))
        .unwrap();
        assert_eq!(
            line(&b, None),
            "localagents job 20261130-041200-ab12cd34 (qwen3.8-27b) finished: succeeded in 1m00s, 0 files changed; lost its cache on 6 of 7 turns: 15,900 tokens re-processed; another job shared the slot; review with job_status."
        );
    }

    #[test]
    fn the_line_says_where_the_window_went() {
        let b: RecordBrief = serde_json::from_value(serde_json::json!({
            "id": "20261130-041200-ab12cd34", "served_id": "qwen3.8-27b", "status": "succeeded",
            "finished": "2026-11-30T04:15:12Z", "elapsed_s": 60.0, "origin_cwd": "/p",
            "window": {"compactions": 1, "compacted": [{"trigger": "auto", "pre_tokens": 15672, "post_tokens": 4473}],
                "clearings": 2, "results_cleared": 9,
                "largest_tool_result": {"call": "Read src/lib.rs", "bytes": 16380, "tokens": 4095}}
        }))
        .unwrap();
        assert_eq!(
            line(&b, None),
            "localagents job 20261130-041200-ab12cd34 (qwen3.8-27b) finished: succeeded in 1m00s, 0 files changed; compacted once (15,672 → 4,473 tokens last), cleared old tool results twice (9 results), largest tool result 4,095 tokens (Read src/lib.rs); review with job_status."
        );
    }

    #[test]
    fn session_ids_become_safe_names() {
        let d = session_dir(Path::new("/s"), "../../etc");
        assert!(d.starts_with("/s/hook") && !d.to_string_lossy().contains(".."));
        assert_eq!(
            session_dir(Path::new("/s"), "abc-123"),
            Path::new("/s/hook/abc-123")
        );
    }
}
