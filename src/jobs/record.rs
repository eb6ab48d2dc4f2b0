//! A job's record (`job.json`): its lifecycle, kind and isolation, its
//! ids, and the methods that change it. Every other file of `jobs` and
//! every tool reads a job through [`JobRecord`]; the disk is
//! [`super::store`]'s.

use std::path::PathBuf;
use std::time::Instant;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::accept;
use super::dir;
use super::faults;
use super::metrics;
pub use super::status::Status;
use crate::config::Config;
use crate::process;
use crate::registry::Resolved;
use crate::shim::log::now_ts;
use crate::wire::Usage;
use crate::worktree::WorktreeInfo;

/// A subagent profile a job runs as (`.claude/agents/<name>.md`), and
/// what localagents did not take of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentUse {
    pub name: String,
    /// `project` or `user`.
    pub scope: crate::config::agents::Scope,
    pub path: PathBuf,
    /// The tools the delegate was offered: the profile's, of those the
    /// job's `allowed_tools` less `disallowed_tools` allow (all of those
    /// when the profile names none).
    pub tools: Vec<String>,
    /// The profile's tools the config does not allow: not offered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped_tools: Vec<String>,
    /// The profile's `model:`, ignored: the delegate stays on the local
    /// endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignored_model: Option<String>,
}

impl AgentUse {
    /// What a job does with `profile` under its tool limits.
    pub fn of(
        profile: &crate::config::agents::Profile,
        allowed: &[String],
        disallowed: &[String],
    ) -> AgentUse {
        let allow = crate::runner::offered_tools(allowed, disallowed);
        let (tools, dropped_tools) = match &profile.tools {
            None => (allow, Vec::new()),
            Some(want) => want
                .iter()
                .cloned()
                .partition(|t| allow.iter().any(|a| a == t)),
        };
        AgentUse {
            name: profile.name.clone(),
            scope: profile.scope,
            path: profile.path.clone(),
            tools,
            dropped_tools,
            ignored_model: profile.model.clone(),
        }
    }

    /// The `--agents` JSON that defines it for the delegate
    /// ([`crate::runner::agents_json`]).
    pub fn definition(&self, profile: &crate::config::agents::Profile) -> String {
        crate::runner::agents_json(
            &self.name,
            profile.description.as_deref().unwrap_or(&self.name),
            &profile.prompt,
            &self.tools,
        )
    }

    /// "ran as subagent test-writer (project); not offered: WebFetch;
    /// its model: opus ignored"
    pub fn line(&self) -> String {
        let mut s = format!("ran as subagent {} ({})", self.name, self.scope.as_str());
        if !self.dropped_tools.is_empty() {
            s.push_str(&format!(
                "; not offered (the config does not allow them): {}",
                self.dropped_tools.join(", ")
            ));
        }
        if let Some(m) = &self.ignored_model {
            s.push_str(&format!(
                "; its `model: {m}` ignored (the delegate stays local)"
            ));
        }
        s
    }
}

/// A bad job id or a missing job, with what to do.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(
        "`{0}` is not a job id (they look like 20261130-061500-1a2b3c4d); list_jobs shows them"
    )]
    BadId(String),
    #[error("no job {0}: list_jobs shows the jobs there are")]
    NotFound(String),
    #[error("job {id}: cannot read its record ({why}); its directory is {dir}")]
    Unreadable {
        id: String,
        why: String,
        dir: PathBuf,
    },
    #[error("could not write the job record in {}: {source}", dir.display())]
    Write {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl JobError {
    pub fn kind(&self) -> crate::error::Kind {
        use crate::error::Kind;
        match self {
            JobError::BadId(_) => Kind::BadJobId,
            JobError::NotFound(_) => Kind::NoSuchJob,
            JobError::Unreadable { .. } => Kind::UnreadableJob,
            JobError::Io(_) | JobError::Write { .. } => Kind::Io,
        }
    }
}

/// A new id: sortable UTC time plus 32 random bits.
pub fn new_job_id() -> std::io::Result<String> {
    let mut b = [0u8; 4];
    getrandom::fill(&mut b).map_err(|e| std::io::Error::other(format!("no randomness: {e}")))?;
    let t = chrono::Utc::now().format("%Y%m%d-%H%M%S");
    Ok(format!(
        "{t}-{:02x}{:02x}{:02x}{:02x}",
        b[0], b[1], b[2], b[3]
    ))
}

/// Ids are `YYYYMMDD-HHMMSS-xxxxxxxx`; nothing else reaches the filesystem.
pub fn valid_id(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 24
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[8] == b'-'
        && b[9..15].iter().all(u8::is_ascii_digit)
        && b[15] == b'-'
        && b[16..]
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// How a job was isolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Work in the tree itself.
    None,
    /// A fresh git worktree on branch `local-agent/<job>`, kept only if it changed.
    Worktree,
}

impl std::str::FromStr for Isolation {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "" | "none" => Ok(Isolation::None),
            "worktree" => Ok(Isolation::Worktree),
            other => Err(format!(
                "isolation must be \"none\" or \"worktree\", not \"{other}\""
            )),
        }
    }
}

/// What a job is: a delegate session, or a batch of one-shot completions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    #[default]
    Agent,
    Batch,
}

impl JobKind {
    /// An agent job (the default kind, left out of `job.json`).
    pub fn is_agent(&self) -> bool {
        *self == JobKind::Agent
    }
}

/// `job.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: String,
    /// `batch` for a `local_batch` run (its items are in `batch.json`).
    #[serde(default, skip_serializing_if = "JobKind::is_agent")]
    pub kind: JobKind,
    /// The first 300 characters; the whole task is in `task.txt`.
    pub task: String,
    /// The name asked for.
    pub model: String,
    pub served_id: String,
    pub endpoint: String,
    pub base_url: String,
    /// Where the delegate ran (inside the worktree for worktree jobs).
    pub cwd: PathBuf,
    /// The caller's directory.
    pub origin_cwd: PathBuf,
    pub isolation: Isolation,
    pub status: Status,
    pub created: String,
    pub started: Option<String>,
    pub finished: Option<String>,
    pub elapsed_s: Option<f64>,
    pub session_id: Option<String>,
    pub result: Option<String>,
    pub error: Option<String>,
    pub num_turns: Option<u64>,
    pub tool_calls: u64,
    pub usage: Usage,
    pub files_touched: Vec<String>,
    pub files_changed: Vec<String>,
    pub worktree: Option<WorktreeInfo>,
    /// The checkout of a new worktree, the job's first phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare: Option<Prepare>,
    pub last_activity: Option<String>,
    pub log_dir: PathBuf,
    /// The per-slot window the session was told.
    pub context: Option<u64>,
    pub metrics: Option<metrics::JobMetrics>,
    /// What the first request cost: prompt tokens, cached, time.
    #[serde(default)]
    pub first_turn: Option<metrics::FirstTurn>,
    /// Set when every slot was busy at start.
    pub queued_note: Option<String>,
    /// "loaded gemma-3-270m in 1.7 s" when the job had to load its model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_note: Option<String>,
    /// The acceptance command's last run, when the job has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance: Option<accept::Acceptance>,
    /// `usage` at the reference model's list prices (the ledger), set
    /// when the job ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equivalent_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_model: Option<String>,
    /// The model's faults over the job (from the request log), set when it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_faults: Option<faults::ModelFaults>,
    /// What the session did, set when it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<faults::Outcome>,
    /// The sentence about the model ("the model answered in text only: …").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_note: Option<String>,
    /// The sentence about the server's cache, when it lost the job's
    /// conversation ("lost its cache on 6 of 7 turns: …").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_note: Option<String>,
    // What a resume needs to run the same way.
    pub permission_mode: String,
    pub max_turns: u32,
    pub timeout_s: u64,
    pub allowed_tools: Vec<String>,
    pub disallowed_tools: Vec<String>,
    pub system_prompt_append: Option<String>,
    pub resumed_from: Option<String>,
    /// The user's subagent profile the delegate ran as, and what of it
    /// was not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentUse>,
    /// The id of the tool call that started the job, as Claude Code sends
    /// it (`_meta["claudecode/toolUseId"]` of `tools/call`): the session
    /// transcript that holds it is the session that delegated the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    /// The job guard's pid (= the process group of guard and delegate).
    pub pid: Option<u32>,
    /// Who that pid was, so it is never signalled once it is another process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<process::Identity>,
    /// The localagents process that runs it.
    pub owner_pid: u32,
    /// Who the owner was (boot id, start time): a reused pid is not the owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<process::Identity>,
    /// A lost job's delegate was looked for and stopped ([`super::store::Store::reap_lost`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reaped: bool,
}

/// A job's checkout of its new worktree: how many files, when it began
/// and when it ended (a large tree takes seconds; the job says so).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Prepare {
    /// Files in HEAD's tree: what git writes.
    pub files: usize,
    pub started: String,
    pub finished: Option<String>,
    pub elapsed_s: Option<f64>,
}

/// What a job in its checkout phase says it does:
/// "preparing: creating the worktree (60,112 files)".
pub fn preparing_line(files: usize) -> String {
    format!(
        "preparing: creating the worktree ({} files)",
        crate::fmt::thousands(files as u64)
    )
}

/// Most of a delegate's answer kept in `job.json` (every listing parses
/// the record); a longer answer is written whole to `result.txt`.
pub const MAX_RESULT_BYTES: usize = 64 * 1024;

impl JobRecord {
    /// Set the delegate's answer: whole when it is at most
    /// [`MAX_RESULT_BYTES`], else its start and where the whole answer is
    /// (`result.txt` in the job's directory, written atomically).
    pub fn set_result(&mut self, text: Option<String>) {
        self.result = match text {
            Some(t) if t.len() > MAX_RESULT_BYTES => {
                let path = dir::JobDir::at(&self.log_dir).result();
                let whole = match crate::paths::write_atomic(&path, t.as_bytes()) {
                    Ok(()) => format!(
                        "the whole answer ({} bytes) is in {}",
                        t.len(),
                        path.display()
                    ),
                    Err(e) => {
                        tracing::error!("job {}: {e}", self.id);
                        format!("the rest of its {} bytes is lost: {e}", t.len())
                    }
                };
                let mut end = MAX_RESULT_BYTES;
                while !t.is_char_boundary(end) {
                    end -= 1;
                }
                Some(format!("{}… ({whole})", &t[..end]))
            }
            t => t,
        };
    }
}

/// The writes of a job's life that touch several fields at once: one
/// method each, so a record's fields change together wherever it happens.
impl JobRecord {
    /// The job's end: its status, its error (when there is one), when it
    /// finished and how long it took since `started`.
    pub fn finish(&mut self, status: Status, error: Option<String>, started: Instant) {
        self.status = status;
        if error.is_some() {
            self.error = error;
        }
        self.finished = Some(now_ts());
        self.elapsed_s = Some(started.elapsed().as_secs_f64());
    }

    /// An end decided outside the job's run (its owner is gone, its final
    /// record could not be written): `status` and its sentence; when it
    /// finished is kept if the record has it.
    pub fn end_outside(&mut self, status: Status, error: String) {
        self.status = status;
        self.error = Some(error);
        self.finished.get_or_insert_with(now_ts);
    }

    /// The job moves to another endpoint serving its model (a free slot
    /// there while it waited).
    pub fn move_to(&mut self, r: &Resolved) {
        self.endpoint = r.endpoint.clone();
        self.base_url = r.base_url.clone();
        self.context = r.context;
    }

    /// The delegate started, as the process group `pgid`.
    pub fn session_started(&mut self, pgid: u32) {
        self.pid = Some(pgid);
        self.guard = process::Identity::of(pgid);
        self.status = Status::Running;
        self.started.get_or_insert_with(now_ts);
        self.last_activity = Some("starting claude".into());
    }

    /// The figures of the job's end: its usage and what it would have
    /// cost, its first turn, the model's faults and what the session did
    /// (`answered`: it ended with its own report), and the sentences
    /// about the model and the server's cache (`llama_cpp`: name
    /// llama-server's flags as the fix).
    /// The built-in tools the delegate is offered: its subagent's, else
    /// the allowed ones less those denied.
    pub fn offered_tools(&self) -> Vec<String> {
        match &self.agent {
            Some(a) => a.tools.clone(),
            None => crate::runner::offered_tools(&self.allowed_tools, &self.disallowed_tools),
        }
    }

    pub fn set_figures(
        &mut self,
        m: metrics::JobMetrics,
        config: &Config,
        answered: bool,
        llama_cpp: bool,
    ) {
        self.usage = m.usage;
        self.equivalent_usd =
            config.equivalent_usd(m.usage.input, m.usage.cache_read, m.usage.output);
        self.reference_model = Some(config.defaults.reference_model.clone());
        self.first_turn = m.first_turn;
        let outcome = faults::Outcome::of(self.tool_calls, self.files_changed.len(), answered);
        self.model_faults = Some(m.faults.clone());
        self.model_note = faults::note(&m.faults, &outcome);
        self.cache_note = m.cache_note(llama_cpp);
        self.outcome = Some(outcome);
        self.metrics = Some(m);
    }
}

/// A plain record for unit tests elsewhere in src/jobs: job `id` with its
/// files in `dir`, `status`, created at `created`, owned by this process.
#[cfg(test)]
pub(crate) fn test_record(
    id: &str,
    dir: &std::path::Path,
    status: &str,
    created: &str,
) -> JobRecord {
    serde_json::from_value(serde_json::json!({
        "id": id, "task": "t", "model": "m", "served_id": "m", "endpoint": "box",
        "base_url": "http://127.0.0.1:1", "cwd": "/tmp", "origin_cwd": "/tmp",
        "isolation": "none", "status": status, "created": created, "started": null,
        "finished": null, "elapsed_s": null, "session_id": null, "result": null,
        "error": null, "num_turns": null, "tool_calls": 0,
        "usage": {"input": 0, "cache_read": 0, "output": 0}, "files_touched": [],
        "files_changed": [], "worktree": null, "last_activity": null, "log_dir": dir,
        "context": null, "metrics": null, "queued_note": null,
        "permission_mode": "acceptEdits", "max_turns": 1, "timeout_s": 60,
        "allowed_tools": [], "disallowed_tools": [], "system_prompt_append": null,
        "resumed_from": null, "pid": null, "owner_pid": std::process::id()
    }))
    .expect("a test record")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_answer_keeps_its_start_in_the_record_and_the_whole_in_result_txt() {
        let d = tempfile::tempdir().unwrap();
        let mut rec: JobRecord = serde_json::from_value(serde_json::json!({
            "id": "20261201-000000-00000000", "task": "t", "model": "m",
            "served_id": "m", "endpoint": "box", "base_url": "http://127.0.0.1:9",
            "cwd": "/tmp", "origin_cwd": "/tmp", "isolation": "none",
            "status": "running", "created": "2026-12-01T00:00:00Z", "tool_calls": 0,
            "usage": {"input": 0, "cache_read": 0, "output": 0}, "files_touched": [], "files_changed": [], "log_dir": d.path(),
            "permission_mode": "acceptEdits", "max_turns": 10, "timeout_s": 60,
            "allowed_tools": [], "disallowed_tools": [], "owner_pid": 1
        }))
        .unwrap();
        rec.set_result(Some("short".into()));
        assert_eq!(rec.result.as_deref(), Some("short"));
        let long = "é".repeat(3 * MAX_RESULT_BYTES);
        rec.set_result(Some(long.clone()));
        let kept = rec.result.clone().unwrap();
        assert!(kept.len() < MAX_RESULT_BYTES + 300, "{}", kept.len());
        assert!(kept.contains("result.txt"), "{}", &kept[kept.len() - 200..]);
        let whole = std::fs::read_to_string(d.path().join("result.txt")).unwrap();
        assert_eq!(whole, long);
    }

    /// `job.json` as the binary before issue 43 wrote it: one record with
    /// every field set, one just made (the fields left out when empty are
    /// out). Each reads, and is written back byte for byte: the same
    /// names, order and skip rules, so old records read and tools show
    /// the same.
    #[test]
    fn a_record_written_before_reads_and_is_written_back_byte_for_byte() {
        for (name, text) in [
            ("job-every-field.json", include_str!("job-every-field.json")),
            ("job-fresh.json", include_str!("job-fresh.json")),
        ] {
            let rec: JobRecord =
                serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            let again = String::from_utf8(serde_json::to_vec_pretty(&rec).unwrap()).unwrap();
            assert_eq!(again, text.strip_suffix('\n').unwrap_or(text), "{name}");
        }
        let every: serde_json::Value =
            serde_json::from_str(include_str!("job-every-field.json")).unwrap();
        let unset: Vec<&String> = every
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, v)| v.is_null())
            .map(|(k, _)| k)
            .collect();
        assert!(unset.is_empty(), "job-every-field.json leaves {unset:?} unset");
    }
}

