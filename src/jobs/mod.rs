//! Durable job records: ids, `job.json`, and the per-job directory.
//!
//! A job outlives the process that started it: every tool in every
//! localagents process (and the prompt hook) reads the same files under
//! `<state>/jobs/<id>/`. `job.json` is written atomically (temp file and
//! rename). A record that says `running` whose owning process is gone is
//! reported as `lost`, with the reason.

pub mod accept;
pub mod admit;
pub mod batch;
pub mod dir;
pub mod evict;
pub mod faults;
mod keeper;
pub mod lease;
pub mod limits;
pub mod manager;
pub mod metrics;
pub mod plan;
pub mod prewarm;
pub mod review;
pub mod run;

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::process;
use crate::shim::sse::Usage;
use crate::worktree::WorktreeInfo;

/// A job's lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Timeout,
    Lost,
}

impl Status {
    pub fn terminal(self) -> bool {
        !matches!(self, Status::Queued | Status::Running)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Running => "running",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
            Status::Timeout => "timeout",
            Status::Lost => "lost",
        }
    }

    /// Every status, for messages and schemas.
    pub const ALL: &'static str = "queued, running, succeeded, failed, cancelled, timeout or lost";

    pub fn parse(s: &str) -> Option<Status> {
        Some(match s {
            "queued" => Status::Queued,
            "running" => Status::Running,
            "succeeded" => Status::Succeeded,
            "failed" => Status::Failed,
            "cancelled" => Status::Cancelled,
            "timeout" => Status::Timeout,
            "lost" => Status::Lost,
            _ => return None,
        })
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
pub fn new_id() -> std::io::Result<String> {
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

impl std::str::FromStr for Status {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Status::parse(s.trim())
            .ok_or_else(|| format!("unknown status `{}`: use {}", s.trim(), Status::ALL))
    }
}

/// Per-job figures (see [`metrics`]).
pub use metrics::JobMetrics;

/// What a job is: a delegate session, or a batch of one-shot completions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    #[default]
    Agent,
    Batch,
}

impl JobKind {
    fn is_agent(&self) -> bool {
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
    pub metrics: Option<JobMetrics>,
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
    /// A lost job's delegate was looked for and stopped ([`Store::reap_lost`]).
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

/// Is the process that owns a running job still there? By identity when it
/// was recorded (a reused pid is not the owner), else by signal 0.
fn owner_alive(rec: &JobRecord) -> bool {
    match &rec.owner {
        Some(who) => who.is_current(),
        None => process::alive(rec.owner_pid),
    }
}

/// A list of paths, cut to its first entries when long.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum PathList {
    All(Vec<String>),
    Cut { first: Vec<String>, total: usize },
}

impl PathList {
    fn of(v: &[String], n: usize) -> PathList {
        if v.len() > n {
            PathList::Cut {
                first: v[..n].to_vec(),
                total: v.len(),
            }
        } else {
            PathList::All(v.to_vec())
        }
    }
}

/// A worktree, as summaries show it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct WorktreeSummary {
    pub branch: String,
    pub path: PathBuf,
    pub kept: bool,
    pub diffstat: Option<String>,
    pub note: Option<String>,
}

/// The compact summary tools return (well under 2 KB for normal jobs).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct JobSummary {
    pub id: String,
    #[serde(skip_serializing_if = "JobKind::is_agent")]
    pub kind: JobKind,
    pub status: Status,
    /// The served id.
    pub model: String,
    pub endpoint: String,
    pub isolation: Isolation,
    pub cwd: PathBuf,
    pub elapsed_s: Option<f64>,
    pub num_turns: Option<u64>,
    pub tool_calls: u64,
    pub files_changed: PathList,
    pub files_touched: PathList,
    pub last_activity: Option<String>,
    pub result: Option<String>,
    pub error: Option<String>,
    pub log_dir: PathBuf,
    pub worktree: Option<WorktreeSummary>,
    /// Set when every slot was busy at start.
    pub queued: Option<String>,
    pub metrics: Option<metrics::MetricsShort>,
    /// "first turn: 226 new tokens, 4,259 from cache, 0.8 s"
    pub first_turn: Option<String>,
    /// "loaded gemma-3-270m in 1.7 s" when the job loaded its model first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loaded: Option<String>,
    /// "acceptance passed (cargo test -p foo, 2 rounds)"
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acceptance: Option<String>,
    /// The last acceptance run's output tail, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acceptance_output: Option<String>,
    /// Tokens the local server processed for this job (from the shim log).
    pub usage_local: Usage,
    /// What `usage_local` would have cost at the reference model's list
    /// prices: an equivalent, not a bill.
    pub equivalent_usd: Option<f64>,
    pub reference_model: Option<String>,
    /// A batch's items, in input order, once it has finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<batch::BatchReport>,
    /// The last `local_review` of this job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review: Option<review::Review>,
    /// The model's faults, when it had any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_faults: Option<faults::ModelFaults>,
    /// What the session did: tool calls, files changed, text only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<faults::Outcome>,
    /// "the model answered in text only: no tool called, no file changed"
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_note: Option<String>,
    /// "lost its cache on 6 of 7 turns: 15,900 tokens re-processed; …":
    /// another request took the job's slot, and the fix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_note: Option<String>,
}

/// One line of `list_jobs`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct JobListItem {
    pub id: String,
    pub status: Status,
    pub model: String,
    pub created: String,
    pub elapsed_s: Option<f64>,
    /// How many files changed.
    pub files_changed: usize,
    /// The first 80 characters of the task.
    pub task: String,
    /// It called no tool and changed no file.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub text_only: bool,
    /// The sentence about the model, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_note: Option<String>,
    /// A job not running yet: where it stands ("queued: 2nd for
    /// qwen3-coder on `gpu1`, behind …", or "preparing: creating the
    /// worktree (60,112 files)").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
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

    /// The compact summary tools return.
    pub fn summary(&self) -> JobSummary {
        let cut = |s: &Option<String>, n: usize| {
            s.as_ref().map(|t| {
                if t.chars().count() > n {
                    format!("{} (job_log {} for all)", crate::fmt::cut(t, n), self.id)
                } else {
                    t.clone()
                }
            })
        };
        JobSummary {
            id: self.id.clone(),
            kind: self.kind,
            status: self.status,
            model: self.served_id.clone(),
            endpoint: self.endpoint.clone(),
            isolation: self.isolation,
            cwd: self.cwd.clone(),
            elapsed_s: self.elapsed_s.map(|e| (e * 10.0).round() / 10.0),
            num_turns: self.num_turns,
            tool_calls: self.tool_calls,
            files_changed: PathList::of(&self.files_changed, 20),
            files_touched: PathList::of(&self.files_touched, 20),
            last_activity: cut(&self.last_activity, 160),
            result: cut(&self.result, 900),
            error: cut(&self.error, 400),
            log_dir: self.log_dir.clone(),
            worktree: self.worktree.as_ref().map(|w| WorktreeSummary {
                branch: w.branch.clone(),
                path: w.path.clone(),
                kept: w.kept,
                diffstat: w.diffstat.clone(),
                note: w.note.clone(),
            }),
            queued: self.queued_note.clone(),
            metrics: self.metrics.as_ref().map(|m| m.short()),
            first_turn: self.first_turn.map(|f| f.line()),
            loaded: self.load_note.clone(),
            acceptance: self.acceptance.as_ref().map(accept::Acceptance::line),
            acceptance_output: self
                .acceptance
                .as_ref()
                .filter(|a| !a.passed)
                .map(|a| crate::fmt::last_chars(&a.output_tail, 800)),
            usage_local: self.usage,
            equivalent_usd: self.equivalent_usd,
            reference_model: self.reference_model.clone(),
            batch: (self.kind == JobKind::Batch)
                .then(|| batch::BatchReport::read(&self.log_dir))
                .flatten(),
            review: review::Review::read(&self.log_dir),
            model_faults: self.model_faults.clone().filter(faults::ModelFaults::any),
            outcome: self.outcome,
            model_note: self.model_note.clone(),
            cache_note: self.cache_note.clone(),
        }
    }

    /// One line for lists.
    pub fn list_item(&self) -> JobListItem {
        JobListItem {
            id: self.id.clone(),
            status: self.status,
            model: self.served_id.clone(),
            created: self.created.clone(),
            elapsed_s: self.elapsed_s.map(|e| e.round()),
            files_changed: self.files_changed.len(),
            task: crate::fmt::first_chars(&self.task, 80),
            text_only: self.outcome.is_some_and(|o| o.text_only),
            model_note: self.model_note.clone(),
            waiting: (self.status == Status::Queued)
                .then(|| self.last_activity.clone())
                .flatten()
                .filter(|a| a.starts_with("queued: ") || a.starts_with("preparing: ")),
        }
    }
}

/// A record that does not read, as lists show it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct UnreadableJob {
    /// The name of its directory.
    pub id: String,
    /// Always `unreadable`.
    pub status: String,
    /// Its `job.json`.
    pub path: PathBuf,
    /// Why it does not read, and what to do.
    pub error: String,
}

/// The job directories under a state dir.
#[derive(Debug, Clone)]
pub struct Store {
    pub root: PathBuf,
}

impl Store {
    pub fn new(state_dir: &Path) -> Store {
        Store {
            root: state_dir.join("jobs"),
        }
    }

    pub fn dir(&self, id: &str) -> Result<PathBuf, JobError> {
        Ok(self.job_dir(id)?.path().to_path_buf())
    }

    pub fn save(&self, rec: &JobRecord) -> Result<(), JobError> {
        let dir = self.job_dir(&rec.id)?;
        let bytes = serde_json::to_vec_pretty(rec).map_err(std::io::Error::other)?;
        crate::paths::write_atomic_bare(&dir.record(), &bytes).map_err(|source| JobError::Write {
            dir: dir.path().to_path_buf(),
            source,
        })
    }

    /// [`Store::save`] where the job goes on whatever happens (a progress
    /// note, a step of a running job): a failed write is not dropped but
    /// logged, with the record's path and the reason (a full disk, a
    /// read-only state dir).
    pub fn save_or_log(&self, rec: &JobRecord) {
        if let Err(e) = self.save(rec) {
            tracing::error!(
                "cannot write the record of job {} ({}): {e}; the job goes on, but what it did may be missing from its record",
                rec.id,
                dir::JobDir::at(&self.root.join(&rec.id)).record().display()
            );
        }
    }

    /// Load a record as stored, without the lost check.
    pub fn load_raw(&self, id: &str) -> Result<JobRecord, JobError> {
        let jd = self.job_dir(id)?;
        let dir = jd.path().to_path_buf();
        if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(JobError::Unreadable {
                id: id.to_string(),
                why: format!(
                    "{} is a symlink, and a job's directory is never one: remove the link",
                    dir.display()
                ),
                dir,
            });
        }
        let bytes = match crate::paths::read_capped(&jd.record(), dir::MAX_RECORD_BYTES) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(JobError::NotFound(id.to_string()));
            }
            Err(e) => return Err(e.into()),
        };
        let rec: JobRecord = serde_json::from_slice(&bytes).map_err(|e| JobError::Unreadable {
            id: id.to_string(),
            why: format!("{}: {e}", jd.record().display()),
            dir: dir.clone(),
        })?;
        if rec.id != id {
            return Err(JobError::Unreadable {
                id: id.to_string(),
                why: format!(
                    "{} names job {}, not {id}: a record is never copied or moved between job directories; remove it",
                    jd.record().display(),
                    crate::fmt::first_chars(&rec.id, 64)
                ),
                dir,
            });
        }
        Ok(rec)
    }

    /// Load a record; a running job whose owner process is gone becomes
    /// `lost` (and is saved so). Reading never signals anything: an
    /// orphaned delegate is stopped by [`Store::reap_lost`].
    pub fn load(&self, id: &str) -> Result<JobRecord, JobError> {
        let mut rec = self.load_raw(id)?;
        if !rec.status.terminal() && rec.owner_pid != std::process::id() && !owner_alive(&rec) {
            rec.status = Status::Lost;
            rec.error = Some(format!(
                "the localagents process that ran this job (pid {}) is gone, so its delegate was lost; run it again, or resume_job to continue its session",
                rec.owner_pid,
            ));
            rec.finished.get_or_insert_with(crate::shim::log::now_ts);
            self.save_or_log(&rec);
        }
        Ok(rec)
    }

    /// The reaping step: stop the guards of lost jobs that are somehow still
    /// running (a guard ends its job by itself when its owner dies, so this
    /// is a second line). A recorded pid is signalled only while it is
    /// still the guard we started ([`process::Identity::is_current`]).
    /// Returns the ids of the jobs whose guard was stopped.
    pub async fn reap_lost(&self) -> Vec<String> {
        // Every record is read (and a lost one saved): on the blocking
        // pool, never on an async worker.
        let me = self.clone();
        let lost = tokio::task::spawn_blocking(move || {
            me.ids()
                .into_iter()
                .filter_map(|id| me.load(&id).ok())
                .filter(|r| r.status == Status::Lost && !r.reaped)
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        let mut reaped = Vec::new();
        for mut rec in lost {
            if let Some(guard) = &rec.guard
                && process::stop_recorded(guard, process::GRACE).await
            {
                reaped.push(rec.id.clone());
            }
            rec.reaped = true;
            let me = self.clone();
            let _ = tokio::task::spawn_blocking(move || me.save_or_log(&rec)).await;
        }
        reaped
    }

    /// Every job id, newest first.
    pub fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| valid_id(n))
            .collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        ids
    }

    /// The ids of jobs created at or after `since` (all, with `None`),
    /// newest first. Ids start with their UTC creation time, so older ones
    /// are never read.
    pub fn ids_since(&self, since: Option<chrono::DateTime<chrono::Utc>>) -> Vec<String> {
        let mut ids = self.ids();
        if let Some(since) = since {
            let oldest = since.format("%Y%m%d-%H%M%S").to_string();
            ids.retain(|id| id.as_str() >= oldest.as_str());
        }
        ids
    }

    /// Records, newest first (unreadable ones skipped: [`Store::scan`]
    /// lists them).
    pub fn list(&self, status: Option<Status>, limit: usize) -> Vec<JobRecord> {
        self.scan(status, limit).0
    }

    /// Records, newest first, and the records met on the way that do not
    /// read (at most `limit` of each), with their path and the reason. A
    /// directory without a record yet (a job being made) is neither.
    pub fn scan(
        &self,
        status: Option<Status>,
        limit: usize,
    ) -> (Vec<JobRecord>, Vec<UnreadableJob>) {
        let (mut out, mut bad) = (Vec::new(), Vec::new());
        for id in self.ids() {
            match self.load(&id) {
                Ok(r) if status.is_none_or(|s| r.status == s) => {
                    out.push(r);
                    if out.len() >= limit {
                        break;
                    }
                }
                Ok(_) | Err(JobError::NotFound(_)) => {}
                Err(e) if bad.len() < limit => bad.push(UnreadableJob {
                    path: self.root.join(&id).join("job.json"),
                    id,
                    status: "unreadable".into(),
                    error: e.to_string(),
                }),
                Err(_) => {}
            }
        }
        (out, bad)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_summary_key_set_is_pinned() {
        // A job that has just been queued: every key a client may rely on
        // is there (null when unknown); the rest appear only when they say
        // something (kind beside agent, a load, acceptance, a batch, a
        // review, model faults, an outcome, a model note). docs/guide.md's
        // MCP tools section says the same.
        let rec: JobRecord = serde_json::from_value(serde_json::json!({
            "id": "20261201-000000-00000000", "task": "t", "model": "m",
            "served_id": "m", "endpoint": "box", "base_url": "http://127.0.0.1:9",
            "cwd": "/tmp", "origin_cwd": "/tmp", "isolation": "none",
            "status": "queued", "created": "2026-12-01T00:00:00Z", "tool_calls": 0,
            "usage": {"input": 0, "cache_read": 0, "output": 0}, "files_touched": [], "files_changed": [], "log_dir": "/tmp/l",
            "permission_mode": "acceptEdits", "max_turns": 10, "timeout_s": 60,
            "allowed_tools": [], "disallowed_tools": [], "owner_pid": 1
        }))
        .unwrap();
        let v = serde_json::to_value(rec.summary()).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "id",
                "status",
                "model",
                "endpoint",
                "isolation",
                "cwd",
                "elapsed_s",
                "num_turns",
                "tool_calls",
                "files_changed",
                "files_touched",
                "last_activity",
                "result",
                "error",
                "log_dir",
                "worktree",
                "queued",
                "metrics",
                "first_turn",
                "usage_local",
                "equivalent_usd",
                "reference_model",
            ]
        );
    }

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

    #[test]
    fn ids_are_sortable_and_validated() {
        let a = new_id().unwrap();
        assert!(valid_id(&a), "{a}");
        for bad in [
            "../x",
            "nope",
            "",
            "20261130-061500-1a2b3c4",
            "20261130-061500-1a2b3c4G",
            "20261130/061500-1a2b3c4d",
            "20261130-061500-../../..",
        ] {
            assert!(!valid_id(bad), "{bad}");
        }
        let store = Store::new(Path::new("/tmp/x"));
        assert!(matches!(store.dir("../x"), Err(JobError::BadId(_))));
        assert!(matches!(store.load("nope"), Err(JobError::BadId(_))));
    }
}
