//! A job's record (`job.json`): its lifecycle, kind and isolation, its
//! ids, and the methods that change it. Every other file of `jobs` and
//! every tool reads a job through [`JobRecord`]; the disk is
//! [`super::store`]'s.
//!
//! One writer (issue 43): the record's fields are private to this file,
//! so nothing else can set one by hand. A change is a named method here,
//! one event of the job's life that sets what it changes together
//! (`session_started`, `waits`, `checkout_started`, `set_figures`, …),
//! and every end, an agent job's or a batch's, goes through the same
//! core: [`JobRecord::finish`] and its kin, or [`JobRecord::end_outside`]
//! for an end decided outside the run. The constructors are here too:
//! [`JobRecord::new_agent`] (from a plan, [`super::plan`]) and
//! [`JobRecord::new_batch`]. What serde writes is unchanged by this, the
//! fields' names, order and skip rules: `job-every-field.json` and
//! `job-fresh.json` beside this file are records the binary before wrote,
//! and a test reads and writes them back byte for byte.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::accept;
use super::dir;
use super::faults;
use super::metrics;
use super::pending;
use super::window::{Compaction, WindowUse};
pub use super::status::Status;
use crate::config::Config;
use crate::process;
use crate::probe::load::Need;
use crate::registry::{Resolved, Target};
use crate::shim::log::now_ts;
use crate::wire::Usage;
use crate::worktree::WorktreeInfo;

mod end;
mod read;

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

/// `job.json`. Its fields are private: a record is read through its
/// accessors and changed only by the named methods of this file (see the
/// module's comment).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRecord {
    id: String,
    /// `batch` for a `local_batch` run (its items are in `batch.json`).
    #[serde(default, skip_serializing_if = "JobKind::is_agent")]
    kind: JobKind,
    /// The first 300 characters; the whole task is in `task.txt`.
    task: String,
    /// The name asked for.
    model: String,
    served_id: String,
    endpoint: String,
    base_url: String,
    /// Where the delegate ran (inside the worktree for worktree jobs).
    cwd: PathBuf,
    /// The caller's directory.
    origin_cwd: PathBuf,
    isolation: Isolation,
    status: Status,
    created: String,
    started: Option<String>,
    finished: Option<String>,
    elapsed_s: Option<f64>,
    session_id: Option<String>,
    result: Option<String>,
    error: Option<String>,
    num_turns: Option<u64>,
    tool_calls: u64,
    usage: Usage,
    files_touched: Vec<String>,
    files_changed: Vec<String>,
    worktree: Option<WorktreeInfo>,
    /// The checkout of a new worktree, the job's first phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prepare: Option<Prepare>,
    last_activity: Option<String>,
    log_dir: PathBuf,
    /// The per-slot window the session was told.
    context: Option<u64>,
    metrics: Option<metrics::JobMetrics>,
    /// What the first request cost: prompt tokens, cached, time.
    #[serde(default)]
    first_turn: Option<metrics::FirstTurn>,
    /// Set when every slot was busy at start.
    queued_note: Option<String>,
    /// "loaded gemma-3-270m in 1.7 s" when the job had to load its model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    load_note: Option<String>,
    /// The acceptance command's last run, when the job has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    acceptance: Option<accept::Acceptance>,
    /// `usage` at the reference model's list prices (the ledger), set
    /// when the job ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    equivalent_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reference_model: Option<String>,
    /// The model's faults over the job (from the request log), set when it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model_faults: Option<faults::ModelFaults>,
    /// What the session did, set when it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    outcome: Option<faults::Outcome>,
    /// The sentence about the model ("the model answered in text only: …").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model_note: Option<String>,
    /// Where the job's window went: compactions, clearings, the largest
    /// tool result.
    #[serde(default, skip_serializing_if = "WindowUse::is_empty")]
    window: WindowUse,
    /// The job's nudges and, when it ended with work pending, what was
    /// pending ([`super::pending`]).
    #[serde(default, skip_serializing_if = "pending::Ending::is_empty")]
    ending: pending::Ending,
    /// The sentence about the server's cache, when it lost the job's
    /// conversation ("lost its cache on 6 of 7 turns: …").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cache_note: Option<String>,
    // What a resume needs to run the same way.
    permission_mode: String,
    max_turns: u32,
    timeout_s: u64,
    allowed_tools: Vec<String>,
    disallowed_tools: Vec<String>,
    system_prompt_append: Option<String>,
    resumed_from: Option<String>,
    /// The user's subagent profile the delegate ran as, and what of it
    /// was not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    agent: Option<AgentUse>,
    /// The id of the tool call that started the job, as Claude Code sends
    /// it (`_meta["claudecode/toolUseId"]` of `tools/call`): the session
    /// transcript that holds it is the session that delegated the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool_use_id: Option<String>,
    /// The job guard's pid (= the process group of guard and delegate).
    pid: Option<u32>,
    /// Who that pid was, so it is never signalled once it is another process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    guard: Option<process::Identity>,
    /// The localagents process that runs it.
    owner_pid: u32,
    /// Who the owner was (boot id, start time): a reused pid is not the owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<process::Identity>,
    /// A lost job's delegate was looked for and stopped ([`super::store::Store::reap_lost`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    reaped: bool,
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

/// What an agent job's first record takes from its plan
/// ([`super::plan::JobPlan`]), every value decided: the call's words and
/// what a resume needs to run the same way.
#[derive(Debug, Clone)]
pub struct AgentStart {
    /// The brief as the record keeps it (its first characters).
    pub task: String,
    /// The name asked for, when there was one.
    pub requested: Option<String>,
    pub origin_cwd: PathBuf,
    pub isolation: Isolation,
    /// The job it resumes, and that job's session.
    pub resumed_from: Option<String>,
    pub session_id: Option<String>,
    pub tool_use_id: Option<String>,
    /// The worktree it runs in, when it has one.
    pub worktree: Option<WorktreeInfo>,
    /// What the job says it does first ("queued", a model to load).
    pub last_activity: String,
    /// The subagent profile it runs as.
    pub agent: Option<AgentUse>,
    pub permission_mode: String,
    pub max_turns: u32,
    pub timeout_s: u64,
    pub allowed_tools: Vec<String>,
    pub disallowed_tools: Vec<String>,
    pub system_prompt_append: Option<String>,
}

/// How a batch ended, as its record says it ([`JobRecord::batch_ended`]).
#[derive(Debug, Clone)]
pub struct BatchEnd {
    pub status: Status,
    /// "40 items: 38 answered, 2 failed, in 3.1 s (…)".
    pub result: String,
    pub error: Option<String>,
    /// Items with an outcome, of `total`.
    pub done: usize,
    pub total: usize,
    /// The items' usage, summed.
    pub usage: Usage,
    pub elapsed: Duration,
}

/// The records a job starts with: the one place a record is written out
/// field by field (`JobRecord::new`), and what an agent job and a batch
/// set on top.
impl JobRecord {
    /// A new job's first record: who serves it, where its files go,
    /// nothing done yet.
    fn new(id: &str, kind: JobKind, dir: &Path, t: &Target, cwd: PathBuf) -> JobRecord {
        let d = &t.config.defaults;
        JobRecord {
            id: id.to_string(),
            kind,
            task: String::new(),
            model: t.resolved.requested.clone(),
            served_id: t.resolved.served_id.clone(),
            endpoint: t.resolved.endpoint.clone(),
            base_url: t.resolved.base_url.clone(),
            cwd: cwd.clone(),
            origin_cwd: cwd,
            isolation: Isolation::None,
            status: Status::Queued,
            created: now_ts(),
            started: None,
            finished: None,
            elapsed_s: None,
            session_id: None,
            result: None,
            error: None,
            num_turns: None,
            tool_calls: 0,
            usage: Default::default(),
            files_touched: Vec::new(),
            files_changed: Vec::new(),
            worktree: None,
            prepare: None,
            last_activity: None,
            log_dir: dir.to_path_buf(),
            context: t.resolved.context,
            metrics: None,
            first_turn: None,
            queued_note: None,
            load_note: None,
            acceptance: None,
            equivalent_usd: None,
            reference_model: None,
            model_faults: None,
            outcome: None,
            model_note: None,
            cache_note: None,
            window: WindowUse::default(),
            ending: pending::Ending::default(),
            permission_mode: d.permission_mode.clone(),
            max_turns: 0,
            timeout_s: d.timeout_s,
            allowed_tools: Vec::new(),
            disallowed_tools: Vec::new(),
            system_prompt_append: None,
            resumed_from: None,
            agent: None,
            tool_use_id: None,
            pid: None,
            guard: None,
            owner_pid: std::process::id(),
            owner: process::Identity::of(std::process::id()),
            reaped: false,
        }
    }

    /// An agent job's first record, queued: what its plan decided (`s`),
    /// the target that serves it, its files in `dir`, and where it runs
    /// (`cwd`, inside the worktree for a worktree job).
    pub fn new_agent(id: &str, dir: &Path, t: &Target, cwd: PathBuf, s: AgentStart) -> JobRecord {
        let mut rec = JobRecord::new(id, JobKind::Agent, dir, t, cwd);
        rec.task = s.task;
        if let Some(m) = s.requested {
            rec.model = m;
        }
        rec.origin_cwd = s.origin_cwd;
        rec.isolation = s.isolation;
        rec.session_id = s.session_id;
        rec.resumed_from = s.resumed_from;
        rec.tool_use_id = s.tool_use_id;
        rec.worktree = s.worktree;
        rec.last_activity = Some(s.last_activity);
        rec.queued_note = t.resolved.queued_note.clone();
        rec.permission_mode = s.permission_mode;
        rec.max_turns = s.max_turns;
        rec.timeout_s = s.timeout_s;
        rec.allowed_tools = s.allowed_tools;
        rec.disallowed_tools = s.disallowed_tools;
        rec.system_prompt_append = s.system_prompt_append;
        rec.agent = s.agent;
        rec
    }

    /// A batch's first record: `items` one-shot completions of `model`
    /// (the name asked for, when there was one), running from the start,
    /// in `base`.
    pub fn new_batch(
        id: &str,
        dir: &Path,
        t: &Target,
        base: PathBuf,
        items: usize,
        model: Option<String>,
    ) -> JobRecord {
        let mut rec = JobRecord::new(id, JobKind::Batch, dir, t, base);
        rec.task = format!("batch of {items} items");
        if let Some(m) = model {
            rec.model = m;
        }
        rec.status = Status::Running;
        rec.started = Some(now_ts());
        rec.last_activity = Some(batch_line(0, items));
        rec
    }
}

/// What a batch says it has done: "12 of 40 items".
fn batch_line(done: usize, total: usize) -> String {
    format!("{done} of {total} items")
}

/// Most of a delegate's answer kept in `job.json` (every listing parses
/// the record); a longer answer is written whole to `result.txt`.
pub const MAX_RESULT_BYTES: usize = 64 * 1024;

/// What happens to a job before its session: the wait for a slot, the
/// checkout of its worktree, the load of its model. Each method is one
/// event and sets what it changes together.
impl JobRecord {
    /// A new worktree is to be checked out before the job queues: it says
    /// so from its first record.
    pub fn checkout_planned(&mut self, files: usize) {
        self.last_activity = Some(preparing_line(files));
    }

    /// Git began writing the worktree's `files`.
    pub fn checkout_started(&mut self, files: usize) {
        self.prepare = Some(Prepare {
            files,
            started: now_ts(),
            finished: None,
            elapsed_s: None,
        });
        self.last_activity = Some(preparing_line(files));
    }

    /// The checkout, begun at `t0`, returned (done or stopped).
    pub fn checkout_ended(&mut self, t0: Instant) {
        if let Some(p) = self.prepare.as_mut() {
            p.finished = Some(now_ts());
            p.elapsed_s = Some(t0.elapsed().as_secs_f64());
        }
    }

    /// The job waits in the queue for a slot; `line` says where
    /// ("queued: 2nd for qwen3-coder on `gpu1`, behind …").
    pub fn waits(&mut self, line: String) {
        self.last_activity = Some(line);
    }

    /// A slot is free for it and no one is ahead: it starts.
    pub fn slot_free(&mut self) {
        self.last_activity = Some("queued: a slot is free, starting".into());
    }

    /// Its wait in the queue is over: the note that every slot was busy
    /// when it started no longer holds.
    pub fn left_queue(&mut self) {
        self.queued_note = None;
    }

    /// The job moves to another endpoint serving its model (a free slot
    /// there while it waited).
    pub fn move_to(&mut self, r: &Resolved) {
        self.endpoint = r.endpoint.clone();
        self.base_url = r.base_url.clone();
        self.context = r.context;
    }

    /// All `total` slots of its endpoint were busy when the session
    /// started: the server queues it.
    pub fn busy_at_start(&mut self, total: u64) {
        self.queued_note = Some(format!(
            "all {total} slots of `{}` were busy at start: the job queued on the server",
            self.endpoint
        ));
    }

    /// Its model is being loaded (or its server woken) first.
    pub fn model_loading(&mut self, need: Need) {
        let verb = match need {
            Need::Load => "loading",
            Need::Wake => "waking the server for",
        };
        self.last_activity = Some(format!("{verb} {} on {}", self.served_id, self.endpoint));
    }

    /// Its model is loaded (or its server awake) after `took`; `context`
    /// is the window the loaded instance says, when it says one.
    pub fn model_loaded(&mut self, need: Need, took: Duration, context: Option<u64>) {
        self.load_note = Some(match need {
            Need::Load => format!("loaded {} in {:.1} s", self.served_id, took.as_secs_f64()),
            Need::Wake => format!("woke the server in {:.1} s", took.as_secs_f64()),
        });
        if context.is_some() {
            self.context = context;
        }
    }
}

/// What happens in a session and its acceptance rounds, as the
/// delegate's events and the command tell it.
impl JobRecord {
    /// The delegate started, as the process group `pgid`.
    pub fn session_started(&mut self, pgid: u32) {
        self.pid = Some(pgid);
        self.guard = process::Identity::of(pgid);
        self.status = Status::Running;
        self.started.get_or_insert_with(now_ts);
        self.last_activity = Some("starting claude".into());
    }

    /// The delegate's session has its id (what a resume continues).
    pub fn session_named(&mut self, session_id: String) {
        self.session_id = Some(session_id);
    }

    /// What one event of the session did: `tool_calls` more calls, the
    /// files it touched (each once), and what it does now.
    pub fn session_progress(
        &mut self,
        tool_calls: u64,
        files_touched: Vec<String>,
        activity: Option<String>,
    ) {
        self.tool_calls += tool_calls;
        for p in files_touched {
            if !self.files_touched.contains(&p) {
                self.files_touched.push(p);
            }
        }
        if activity.is_some() {
            self.last_activity = activity;
        }
    }

    /// Claude Code compacted the conversation.
    pub fn window_compacted(&mut self, c: Compaction) {
        self.window.compacted(c);
    }

    /// The delegate got a tool result of `bytes` for `call`.
    pub fn window_tool_result(&mut self, call: &str, bytes: u64) {
        self.window.tool_result(call, bytes);
    }

    /// The shim's clearings of old tool results on the job's route.
    pub fn window_cleared(&mut self, batches: u64, results: u64) {
        self.window.cleared(batches, results);
    }

    /// The session's own report: its answer (whole when it is at most
    /// [`MAX_RESULT_BYTES`], else its start and where the whole answer
    /// is) and how many turns it took.
    pub fn session_result(&mut self, text: Option<String>, num_turns: Option<u64>) {
        self.set_result(text);
        self.num_turns = num_turns;
    }

    /// Acceptance round `round` runs `command`.
    pub fn acceptance_round(&mut self, round: u32, command: &str) {
        self.last_activity = Some(format!("acceptance round {round}: {command}"));
    }

    /// The acceptance command's last run.
    pub fn acceptance_ran(&mut self, a: accept::Acceptance) {
        self.acceptance = Some(a);
    }

    /// Set the delegate's answer: whole when it is at most
    /// [`MAX_RESULT_BYTES`], else its start and where the whole answer is
    /// (`result.txt` in the job's directory, written atomically).
    fn set_result(&mut self, text: Option<String>) {
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

    /// Every end goes through one core: a batch's end writes what
    /// `finish` writes (the status, when, how long; an earlier error
    /// stays when the end brings none), and an end decided outside the
    /// run keeps when the job finished.
    #[test]
    fn every_end_writes_the_same_fields_through_one_core() {
        let d = tempfile::tempdir().unwrap();
        let created = "2026-12-01T00:00:00.000Z";
        let mut agent = test_record("20261201-000000-00000001", d.path(), "running", created);
        agent.error = Some("the report could not be written".into());
        agent.finish(Status::Failed, None, Instant::now());
        assert_eq!(agent.status(), Status::Failed);
        assert_eq!(agent.error(), Some("the report could not be written"));
        assert!(agent.finished().is_some() && agent.elapsed_s().is_some());

        let mut batch = test_record("20261201-000000-00000002", d.path(), "running", created);
        let usage = Usage {
            input: 10,
            cache_read: 5,
            output: 3,
        };
        let end = BatchEnd {
            status: Status::Succeeded,
            result: "2 items: 2 answered, 0 failed".into(),
            error: None,
            done: 2,
            total: 2,
            usage,
            elapsed: Duration::from_millis(1500),
        };
        batch.batch_ended(end, &Config::builtin());
        assert_eq!(batch.status(), Status::Succeeded);
        assert_eq!(batch.elapsed_s(), Some(1.5));
        assert!(batch.finished().is_some() && batch.error().is_none());
        assert_eq!(batch.result(), Some("2 items: 2 answered, 0 failed"));
        assert_eq!(batch.last_activity(), Some("2 of 2 items"));
        assert_eq!(batch.usage(), usage);
        assert!(batch.reference_model().is_some());

        let finished = batch.finished().map(str::to_string);
        batch.end_outside(Status::Lost, "its owner is gone".into());
        assert_eq!(batch.status(), Status::Lost);
        assert_eq!(batch.finished(), finished.as_deref());
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

