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
use serde_json::Value;

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
    /// Our tool results for those calls, estimated at
    /// [`crate::shim::BYTES_PER_TOKEN`] bytes a token.
    pub result_tokens: u64,
    /// Those results times the later assistant messages that carried them
    /// as input (the first carries them into the cache, the rest read it).
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

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Message {
    id: Option<String>,
    model: Option<String>,
    usage: Option<Usage>,
    content: Content,
}

/// A message's `content`: blocks, or a plain string (the user's prompt),
/// which has none of ours.
#[derive(Debug, Default, Deserialize)]
#[serde(transparent)]
struct Content(Value);

impl Content {
    fn blocks(&self) -> &[Value] {
        self.0.as_array().map_or(&[], Vec::as_slice)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Usage {
    output_tokens: u64,
}

/// The orchestration of job `job_id`, started by tool call `tool_use_id`,
/// in a transcript's text. Lines that do not parse are passed over.
pub fn orchestration(text: &str, job_id: &str, tool_use_id: &str) -> Orchestration {
    let mut o = Orchestration::default();
    let mut ours: HashSet<String> = HashSet::new();
    let mut output: HashMap<String, u64> = HashMap::new();
    // Each of our results: its tokens, and the assistant messages after it.
    let mut results: Vec<(u64, HashSet<String>)> = Vec::new();
    for raw in text.lines() {
        let Ok(line) = serde_json::from_str::<Line>(raw) else {
            continue;
        };
        let m = &line.message;
        match line.kind.as_str() {
            "assistant" => {
                let Some(id) = m.id.clone() else { continue };
                for (_, later) in results.iter_mut() {
                    later.insert(id.clone());
                }
                for b in m.content.blocks() {
                    let name = b["name"].as_str().unwrap_or_default();
                    let call = b["id"].as_str().unwrap_or_default();
                    let concerns = b["type"] == "tool_use"
                        && is_ours(name)
                        && (call == tool_use_id || b["input"]["job_id"] == job_id);
                    if concerns && ours.insert(call.to_string()) {
                        o.calls += 1;
                        let out = m.usage.as_ref().map_or(0, |u| u.output_tokens);
                        let e = output.entry(id.clone()).or_default();
                        *e = (*e).max(out);
                        if o.model.is_none() {
                            o.model = m.model.clone();
                        }
                    }
                }
            }
            "user" => {
                for b in m.content.blocks() {
                    let answers = b["tool_use_id"].as_str().unwrap_or_default();
                    if b["type"] == "tool_result" && ours.contains(answers) {
                        let bytes = serde_json::to_vec(&b["content"]).map_or(0, |v| v.len());
                        results.push((crate::shim::tokens_of_bytes(bytes as u64), HashSet::new()));
                    }
                }
            }
            _ => {}
        }
    }
    o.output_tokens = output.values().sum();
    for (tokens, later) in &results {
        o.result_tokens += tokens;
        o.result_reads += tokens * later.len() as u64;
    }
    o
}

impl Orchestration {
    /// What it cost at `price` under Anthropic's prompt caching: output at
    /// the output price; each result written into the cache once (1.25
    /// times the input price) by the message after it, then read from the
    /// cache by the rest.
    pub fn usd(&self, price: &crate::config::prices::Price) -> f64 {
        let rereads = self.result_reads.saturating_sub(self.result_tokens);
        (self.output_tokens as f64 * price.output
            + self.result_tokens.min(self.result_reads) as f64 * price.input * CACHE_WRITE
            + rereads as f64 * price.cache_read)
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
    let mut pending: Vec<&(String, String)> = jobs.iter().collect();
    let Ok(dirs) = std::fs::read_dir(projects) else {
        return out;
    };
    'all: for d in dirs.flatten() {
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
            let fresh = match (since, f.metadata().and_then(|m| m.modified())) {
                (Some(s), Ok(m)) => m >= s,
                _ => true,
            };
            if !fresh {
                continue;
            }
            let Some(text) = read_bounded(&p) else {
                continue;
            };
            pending.retain(|(job, call)| {
                if !text.contains(&format!("\"id\":\"{call}\"")) {
                    return true;
                }
                out.insert(job.clone(), orchestration(&text, job, call));
                false
            });
            if pending.is_empty() {
                break 'all;
            }
        }
    }
    out
}

/// Read at most [`CAP`] bytes of a regular file (no link, no FIFO).
pub fn read_bounded(path: &Path) -> Option<String> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.file_type().is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(CAP)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The transcript under `projects` (Claude Code's `projects` dir) that
/// holds tool call `tool_use_id`, and its text. Looks one level of project
/// dirs down, at `*.jsonl` regular files only.
pub fn find(projects: &Path, tool_use_id: &str) -> Option<(PathBuf, String)> {
    let needle = format!("\"id\":\"{tool_use_id}\"");
    let dirs = std::fs::read_dir(projects).ok()?;
    for d in dirs.flatten() {
        let Ok(ft) = d.file_type() else { continue };
        if !ft.is_dir() {
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
            if let Some(text) = read_bounded(&p)
                && text.contains(&needle)
            {
                return Some((p, text));
            }
        }
    }
    None
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
        // One assistant message came after it.
        assert_eq!(o.result_reads, tokens);
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
