//! Claude's side of a delegation, from the transcript Claude Code keeps of
//! the session that delegated the job.
//!
//! The ledger's gross figure counts the tokens a job processed locally;
//! what a user needs to know is whether delegating paid, so Claude's own
//! tokens for the brief, the polls and the result must come off. Claude
//! Code writes every session as JSON lines under
//! `~/.claude/projects/<project>/<session>.jsonl`: each assistant message
//! with its `usage` and its `tool_use` blocks, each tool result as a user
//! line. A job records the id of the tool call that started it
//! ([`crate::jobs::JobRecord::tool_use_id`]), so the transcript that holds
//! that id is the delegating session. Only usage, tool names, ids and the
//! size of our own tool results are read; nothing else is kept.
//!
//! The fixture `transcript-2.1.328.jsonl` is the assistant and user lines
//! of a real transcript, written by Claude Code 2.1.328 in `-p` mode as the
//! top-level session driven by the scripted fake
//! (`tasks::a_job_knows_the_tool_call_that_started_it`).

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::anthropic::{Block, Usage, blocks, lenient};

/// The most of one transcript that is read.
pub const CAP: u64 = 64 << 20;

/// Is `name` one of localagents' tools as Claude Code names MCP tools
/// (`mcp__<server>__<tool>`; the plugin's server is
/// `plugin_localagents_localagents`, a hand-registered one `localagents`)?
pub fn is_ours(name: &str) -> bool {
    let mut parts = name.splitn(3, "__");
    parts.next() == Some("mcp")
        && parts.next().is_some_and(|s| s.contains("localagents"))
        && parts.next().is_some()
}

/// What the delegating session spent on one job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Orchestration {
    /// Our tool calls that concern the job (the `run_agent` that started
    /// it, and every call naming its `job_id`).
    pub calls: u64,
    /// Output tokens of the assistant messages that made them (each
    /// message counted once: Claude Code writes one line per block).
    pub output_tokens: u64,
    /// Our tool results for those calls that a later message sent (so
    /// wrote into the prompt cache), estimated at
    /// [`crate::shim::BYTES_PER_TOKEN`] bytes a token.
    pub result_tokens: u64,
    /// Those results times the messages after the first that carried them
    /// (read from the cache).
    pub result_reads: u64,
    /// The session's model (for its prices).
    pub model: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Line {
    #[serde(rename = "type")]
    kind: String,
    message: Message,
}

/// A message: the Messages API's shape ([`crate::anthropic`]), its fields
/// read by the crate's lenient rule.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Message {
    #[serde(deserialize_with = "lenient")]
    id: Option<String>,
    #[serde(deserialize_with = "lenient")]
    model: Option<String>,
    #[serde(deserialize_with = "lenient")]
    usage: Option<Usage>,
    /// Blocks, or none for a plain string (the user's prompt), which has
    /// none of ours.
    #[serde(deserialize_with = "blocks")]
    content: Option<Vec<Block>>,
}

impl Message {
    fn blocks(&self) -> &[Block] {
        self.content.as_deref().unwrap_or_default()
    }
}

/// The input of our tools that concern a job.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct JobInput {
    #[serde(deserialize_with = "lenient")]
    job_id: Option<String>,
}

/// A transcript's lines as far as the ledger needs them, parsed once.
struct Parsed {
    /// (assistant message id, its model, output tokens, its tool_use
    /// blocks of ours as (call id, job_id input)), in order, or a user
    /// line's tool results as (answered call id, result tokens).
    lines: Vec<Entry>,
}

enum Entry {
    Assistant {
        id: String,
        model: Option<String>,
        output: u64,
        calls: Vec<(String, Option<String>)>,
    },
    Results(Vec<(String, u64)>),
}

fn parse(text: &str) -> Parsed {
    let mut lines = Vec::new();
    for raw in text.lines() {
        let Ok(line) = serde_json::from_str::<Line>(raw) else {
            continue;
        };
        let m = &line.message;
        match line.kind.as_str() {
            "assistant" => {
                let Some(id) = m.id.clone() else { continue };
                let calls = m
                    .blocks()
                    .iter()
                    .filter_map(|b| match b {
                        Block::ToolUse {
                            id: Some(call),
                            name: Some(name),
                            input,
                        } if is_ours(name) => {
                            let job = JobInput::deserialize(input).unwrap_or_default().job_id;
                            Some((call.clone(), job))
                        }
                        _ => None,
                    })
                    .collect();
                lines.push(Entry::Assistant {
                    id,
                    model: m.model.clone(),
                    output: m.usage.and_then(|u| u.output_tokens).unwrap_or(0),
                    calls,
                });
            }
            "user" => {
                let results: Vec<(String, u64)> = m
                    .blocks()
                    .iter()
                    .filter_map(|b| match b {
                        Block::ToolResult {
                            tool_use_id: Some(call),
                            content,
                            ..
                        } => {
                            let bytes = serde_json::to_vec(content).map_or(0, |v| v.len());
                            Some((call.clone(), crate::shim::tokens_of_bytes(bytes as u64)))
                        }
                        _ => None,
                    })
                    .collect();
                if !results.is_empty() {
                    lines.push(Entry::Results(results));
                }
            }
            _ => {}
        }
    }
    Parsed { lines }
}

/// The orchestration of job `job_id`, started by tool call `tool_use_id`,
/// in a transcript's text. Lines that do not parse are passed over.
pub fn orchestration(text: &str, job_id: &str, tool_use_id: &str) -> Orchestration {
    of_job(&parse(text), job_id, tool_use_id)
}

fn of_job(p: &Parsed, job_id: &str, tool_use_id: &str) -> Orchestration {
    let mut o = Orchestration::default();
    let mut ours: HashSet<&str> = HashSet::new();
    let mut output: HashMap<&str, u64> = HashMap::new();
    // Distinct assistant messages so far, and for each of our results the
    // count when it came: the messages after it carried it.
    let mut seen: HashSet<&str> = HashSet::new();
    let mut results: Vec<(u64, usize)> = Vec::new();
    for e in &p.lines {
        match e {
            Entry::Assistant {
                id,
                model,
                output: out,
                calls,
            } => {
                seen.insert(id);
                for (call, job) in calls {
                    let concerns = call == tool_use_id || job.as_deref() == Some(job_id);
                    if concerns && ours.insert(call) {
                        o.calls += 1;
                        let e = output.entry(id).or_default();
                        *e = (*e).max(*out);
                        if o.model.is_none() {
                            o.model = model.clone();
                        }
                    }
                }
            }
            Entry::Results(rs) => {
                for (call, tokens) in rs {
                    if ours.contains(call.as_str()) {
                        results.push((*tokens, seen.len()));
                    }
                }
            }
        }
    }
    o.output_tokens = output.values().sum();
    for (tokens, at) in results {
        // Sent only if a message came after it: written to the cache by
        // the first, read from it by the rest.
        let carried = (seen.len() - at) as u64;
        if carried > 0 {
            o.result_tokens += tokens;
            o.result_reads += tokens * (carried - 1);
        }
    }
    o
}

impl Orchestration {
    /// What it cost at `price` under Anthropic's prompt caching: output at
    /// the output price; each result written into the cache once (1.25
    /// times the input price) by the message after it, then read from the
    /// cache by the rest.
    pub fn usd(&self, price: &crate::config::prices::Price) -> f64 {
        (self.output_tokens as f64 * price.output
            + self.result_tokens as f64 * price.input * CACHE_WRITE
            + self.result_reads as f64 * price.cache_read)
            / 1_000_000.0
    }
}

/// Anthropic's 5-minute cache write, times the input price.
pub const CACHE_WRITE: f64 = 1.25;

/// The orchestration of each job of `jobs` (job id, tool call id) found in
/// the transcripts under `projects`: each transcript is read once, and only
/// those written since `since` (seconds since the epoch), if given.
pub fn scan(
    projects: &Path,
    jobs: &[(String, String)],
    since: Option<std::time::SystemTime>,
) -> HashMap<String, Orchestration> {
    let mut out = HashMap::new();
    // Tool call id -> job id, for the calls not found yet.
    let mut pending: HashMap<&str, &str> =
        jobs.iter().map(|(j, c)| (c.as_str(), j.as_str())).collect();
    if pending.is_empty() {
        return out;
    }
    walk(projects, since, |_, text| {
        // One pass over the text for every `"id":"…"` it holds.
        let here: Vec<(&str, &str)> = ids_in(text)
            .filter_map(|id| pending.get_key_value(id).map(|(c, j)| (*c, *j)))
            .collect();
        if !here.is_empty() {
            let parsed = parse(text);
            for (call, job) in here {
                if pending.remove(call).is_some() {
                    out.insert(job.to_string(), of_job(&parsed, job, call));
                }
            }
        }
        !pending.is_empty()
    });
    out
}

/// Every `"id":"…"` value in `text`.
fn ids_in(text: &str) -> impl Iterator<Item = &str> {
    const KEY: &str = "\"id\":\"";
    text.match_indices(KEY).filter_map(|(i, _)| {
        let rest = &text[i + KEY.len()..];
        rest.find('"').map(|end| &rest[..end])
    })
}

/// Read at most [`CAP`] bytes of a regular file (no link, no FIFO).
pub fn read_bounded(path: &Path) -> Option<String> {
    use std::os::unix::fs::OpenOptionsExt;
    // No link followed, no FIFO waited on; the type is checked on the
    // handle, so nothing can be swapped in between.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !f.metadata().ok()?.file_type().is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    f.take(CAP).read_to_end(&mut bytes).ok()?;
    Some(match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// The transcript under `projects` (Claude Code's `projects` dir) that
/// holds tool call `tool_use_id`, and its text.
pub fn find(projects: &Path, tool_use_id: &str) -> Option<(PathBuf, String)> {
    let needle = format!("\"id\":\"{tool_use_id}\"");
    let mut found = None;
    walk(projects, None, |p, text| {
        if text.contains(&needle) {
            found = Some((p.to_path_buf(), text.to_string()));
            return false;
        }
        true
    });
    found
}

/// Each regular `*.jsonl` file one project dir down under `projects`
/// (written since `since`, if given), read with [`read_bounded`], until
/// `each` says stop.
fn walk(
    projects: &Path,
    since: Option<std::time::SystemTime>,
    mut each: impl FnMut(&Path, &str) -> bool,
) {
    let Ok(dirs) = std::fs::read_dir(projects) else {
        return;
    };
    for d in dirs.flatten() {
        if !d.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(files) = std::fs::read_dir(d.path()) else {
            continue;
        };
        for f in files.flatten() {
            let p = f.path();
            if p.extension().is_none_or(|x| x != "jsonl") {
                continue;
            }
            // `DirEntry::metadata` does not follow a link.
            let fresh = match (since, f.metadata().and_then(|m| m.modified())) {
                (Some(s), Ok(m)) => m >= s,
                _ => true,
            };
            if !fresh {
                continue;
            }
            if let Some(text) = read_bounded(&p)
                && !each(&p, &text)
            {
                return;
            }
        }
    }
}

/// Claude Code's `projects` dir: `$CLAUDE_CONFIG_DIR/projects`, else
/// `~/.claude/projects`.
/// (No home and no `CLAUDE_CONFIG_DIR`: a path that does not exist, so
/// every job counts gross only.)
pub fn projects_dir(home: Option<&Path>) -> PathBuf {
    match (std::env::var_os("CLAUDE_CONFIG_DIR"), home) {
        (Some(d), _) if !d.is_empty() => PathBuf::from(d).join("projects"),
        (_, Some(h)) => h.join(".claude").join("projects"),
        _ => PathBuf::from("/nonexistent/.claude/projects"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const REAL: &str = include_str!("transcript-2.1.328.jsonl");
    const JOB: &str = "20261202-064511-850ad26e";
    const CALL: &str = "toolu_msg_fake_00005eed00000001";

    #[test]
    fn the_real_transcript_gives_the_run_agent_call_and_its_result() {
        let o = orchestration(REAL, JOB, CALL);
        assert_eq!(o.calls, 1, "{o:?}");
        assert_eq!(o.output_tokens, 9, "{o:?}");
        assert_eq!(o.model.as_deref(), Some("gemma3-270m"));
        // The result line, measured independently.
        let result = REAL
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .flat_map(|v| {
                v["message"]["content"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .find(|b| b["tool_use_id"] == CALL)
            .unwrap();
        let tokens = crate::shim::tokens_of_bytes(
            serde_json::to_vec(&result["content"]).unwrap().len() as u64,
        );
        assert_eq!(o.result_tokens, tokens);
        // One assistant message came after it: it wrote the result into
        // the cache, and none read it again.
        assert_eq!(o.result_reads, 0);
        // Another job's id finds nothing.
        assert_eq!(
            orchestration(REAL, "20261202-000000-00000000", "toolu_other"),
            Orchestration::default()
        );
    }

    /// Constructed in the real lines' shape: a poll naming the job, written
    /// as two lines of one message (Claude Code writes a line per block),
    /// a call of another tool, and a line that is not JSON.
    #[test]
    fn polls_count_once_per_message_and_other_tools_not_at_all() {
        let poll = |block: Value| {
            serde_json::json!({"type": "assistant", "message": {"id": "msg_2", "model": "claude-sonnet-4-6",
                "usage": {"output_tokens": 40}, "content": [block]}})
            .to_string()
        };
        let text = [
            REAL.to_string(),
            poll(serde_json::json!({"type": "text", "text": "Waiting."})),
            poll(serde_json::json!({"type": "tool_use", "id": "toolu_2", "name": "mcp__plugin_localagents_localagents__wait_job", "input": {"job_id": JOB}})),
            poll(serde_json::json!({"type": "tool_use", "id": "toolu_3", "name": "Bash", "input": {"job_id": JOB}})),
            "not json".into(),
        ]
        .join("\n");
        let o = orchestration(&text, JOB, CALL);
        assert_eq!(o.calls, 2, "{o:?}");
        assert_eq!(o.output_tokens, 9 + 40, "{o:?}");
    }

    #[test]
    fn our_tools_by_their_claude_code_names() {
        assert!(is_ours("mcp__localagents__run_agent"));
        assert!(is_ours("mcp__plugin_localagents_localagents__wait_job"));
        assert!(!is_ours("mcp__other__run_agent"));
        assert!(!is_ours("Bash"));
        assert!(!is_ours("mcp__localagents"));
    }

    #[test]
    fn find_reads_only_regular_jsonl_files_one_project_down() {
        let dir = tempfile::tempdir().unwrap();
        let proj = dir.path().join("-tmp-work");
        std::fs::create_dir_all(&proj).unwrap();
        std::fs::write(proj.join("s.jsonl"), REAL).unwrap();
        std::fs::write(proj.join("other.txt"), REAL).unwrap();
        let (p, text) = find(dir.path(), CALL).unwrap();
        assert_eq!(p, proj.join("s.jsonl"));
        assert_eq!(text, REAL);
        assert!(find(dir.path(), "toolu_nothing").is_none());
        // A link to a transcript is not followed.
        std::fs::remove_file(proj.join("s.jsonl")).unwrap();
        let elsewhere = dir.path().join("elsewhere.jsonl");
        std::fs::write(&elsewhere, REAL).unwrap();
        std::os::unix::fs::symlink(&elsewhere, proj.join("s.jsonl")).unwrap();
        assert!(find(dir.path(), CALL).is_none());
        assert!(find(&dir.path().join("missing"), CALL).is_none());
    }
}
