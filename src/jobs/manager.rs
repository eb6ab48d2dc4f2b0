//! Running jobs: start a delegate, follow it, stop it, record the outcome.
//!
//! One [`Manager`] per localagents process owns that process's shim and
//! its running jobs. Every state change is written to `job.json` at once, so
//! other processes (another MCP server, the prompt hook, `localagents jobs`)
//! see the same jobs. A job owned by another live process can still be
//! cancelled: a `cancel_requested` marker plus a signal to its process group.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{Isolation, JobError, JobRecord, Status, Store};
use crate::config::ConfigError;
use crate::context::Context;
use crate::registry::Unavailable;
use crate::registry::{self, ResolveError, Target};
use crate::runner;
use crate::shim::Shim;
use crate::shim::log::now_ts;
use crate::worktree::{self, GitError};

/// Longest `wait_s` / `wait_job` timeout: below Claude Code's 2-minute
/// tool budget.
pub const MAX_WAIT: Duration = Duration::from_secs(110);

/// Longest whole-job timeout (`timeout_s`): a week. Longer values are
/// refused at the API and clamped from config.
pub const MAX_TIMEOUT_S: u64 = 7 * 24 * 3600;

/// Why a job could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{}", .0.message)]
    Unavailable(Box<Unavailable>),
    #[error("{0}")]
    Invalid(String),
    #[error("config error: {0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Git(#[from] GitError),
    #[error("{0}")]
    Job(#[from] JobError),
}

impl From<ResolveError> for StartError {
    fn from(e: ResolveError) -> Self {
        match e {
            ResolveError::Config(c) => StartError::Config(c),
            ResolveError::Unavailable(u) => StartError::Unavailable(u),
            ResolveError::Invalid(s) => StartError::Invalid(s),
        }
    }
}

/// What `run_agent` / `localagents run` asks for.
#[derive(Debug, Clone, Default)]
pub struct RunArgs {
    pub task: String,
    pub model: Option<String>,
    pub endpoint: Option<String>,
    pub cwd: Option<PathBuf>,
    pub isolation: Option<Isolation>,
    pub permission_mode: Option<String>,
    pub max_turns: Option<u32>,
    /// `Some(vec![])` means no tools, not the default.
    pub allowed_tools: Option<Vec<String>>,
    pub disallowed_tools: Option<Vec<String>>,
    pub system_prompt_append: Option<String>,
    pub resume_job: Option<String>,
    pub timeout_s: Option<u64>,
    /// Who asks: a session's tool call may only narrow the user's config.
    pub caller: super::limits::Caller,
    /// A shell command that must pass for the job to succeed (run by us).
    pub acceptance: Option<String>,
    /// Fix rounds after a failed acceptance (default `defaults.fix_rounds`).
    pub fix_rounds: Option<u32>,
    /// Load the model even if that may unload one a running job uses.
    pub force: bool,
}

/// Live progress of a running job (for the CLI spinner).
#[derive(Debug, Clone, Default)]
pub struct Progress {
    pub turns: u64,
    pub tool_calls: u64,
    pub last_activity: String,
    /// Tokens so far (prompt, cached and output, summed over requests).
    pub tokens: u64,
    /// Set while the acceptance command runs.
    pub acceptance_round: Option<u32>,
    /// A batch: items done and in all.
    pub items: Option<(u64, u64)>,
}

impl Progress {
    /// "turn 3 · 5 tool calls · 12,345 tokens · Edit src/cli.rs".
    pub fn line(&self) -> String {
        if let Some((done, all)) = self.items {
            return format!("{done} of {all} items · {} tokens", self.tokens);
        }
        let mut parts = vec![
            format!("turn {}", self.turns),
            format!("{} tool calls", self.tool_calls),
            format!("{} tokens", self.tokens),
        ];
        if !self.last_activity.is_empty() {
            parts.push(self.last_activity.clone());
        }
        if let Some(r) = self.acceptance_round {
            parts.push(format!("acceptance round {r}"));
        }
        parts.join(" · ")
    }
}

struct Handle {
    cancel: watch::Sender<bool>,
    done: watch::Receiver<bool>,
    progress: watch::Receiver<Progress>,
}

struct Active {
    id: String,
    shared: Arc<AtomicBool>,
}

/// The jobs of this process.
pub struct Manager {
    pub ctx: Context,
    pub store: Store,
    shim: tokio::sync::OnceCell<Shim>,
    running: Mutex<HashMap<String, Handle>>,
    active: Mutex<HashMap<String, Vec<Active>>>,
}

fn env_dump() -> bool {
    std::env::var("LOCALAGENTS_DUMP_REQUESTS").is_ok_and(|v| v == "1")
}

impl Manager {
    pub fn new(ctx: Context) -> Arc<Manager> {
        Arc::new(Manager {
            store: Store::new(&ctx.state_dir),
            ctx,
            shim: tokio::sync::OnceCell::new(),
            running: Mutex::new(HashMap::new()),
            active: Mutex::new(HashMap::new()),
        })
    }

    pub(super) async fn shim(&self) -> std::io::Result<&Shim> {
        self.shim.get_or_try_init(|| Shim::start(0)).await
    }

    /// Jobs running in this process.
    pub fn running_ids(&self) -> Vec<String> {
        self.running
            .lock()
            .map(|r| r.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub fn progress(&self, id: &str) -> Option<watch::Receiver<Progress>> {
        self.running
            .lock()
            .ok()?
            .get(id)
            .map(|h| h.progress.clone())
    }

    /// Validate, resolve and start a job. Returns its first record at once.
    pub async fn start(self: &Arc<Self>, args: RunArgs) -> Result<JobRecord, StartError> {
        let loaded_defaults = crate::config::load(&self.ctx.discovery())?.config;
        let d = &loaded_defaults.defaults;
        // A number too big for a duration is a sentence, not a panic.
        if let Some(t) = args.timeout_s
            && (t == 0 || t > MAX_TIMEOUT_S)
        {
            return Err(StartError::Invalid(format!(
                "timeout_s must be between 1 and {MAX_TIMEOUT_S} seconds (a week), not {t}"
            )));
        }
        if args.task.trim().is_empty() && args.resume_job.is_none() {
            return Err(StartError::Invalid(
                "task is empty: give the delegate a self-contained brief".into(),
            ));
        }
        let prior = match &args.resume_job {
            Some(id) => {
                let r = self.store.load(id)?;
                if !r.status.terminal() {
                    return Err(StartError::Invalid(format!(
                        "job {id} is still {}: wait for it (wait_job) before resuming it",
                        r.status.as_str()
                    )));
                }
                if r.session_id.is_none() {
                    return Err(StartError::Invalid(format!(
                        "job {id} never started a session, so there is nothing to resume: run a new job"
                    )));
                }
                if let Some(w) = &r.worktree
                    && !w.path.exists()
                {
                    return Err(StartError::Invalid(format!(
                        "the worktree of job {id} ({}) is gone (removed because nothing changed, or cleaned up): run a new job instead",
                        w.path.display()
                    )));
                }
                Some(r)
            }
            None => None,
        };
        let isolation = match &prior {
            Some(p) => p.isolation,
            None => args.isolation.unwrap_or(Isolation::None),
        };
        let origin_cwd = match (&prior, &args.cwd) {
            (Some(p), _) => p.origin_cwd.clone(),
            (None, Some(c)) => {
                if !c.is_dir() {
                    return Err(StartError::Invalid(format!(
                        "cwd {} does not exist or is not a directory: pass an existing project directory",
                        c.display()
                    )));
                }
                c.canonicalize().unwrap_or(c.clone())
            }
            (None, None) => std::env::current_dir().map_err(|e| {
                StartError::Invalid(format!("cannot read the current directory ({e}): pass cwd"))
            })?,
        };
        if let Some(mode) = &args.permission_mode {
            super::limits::permission_mode(mode, &args.caller, d).map_err(StartError::Invalid)?;
        }
        if let super::limits::Caller::Session { project } = &args.caller {
            if prior.is_none() {
                super::limits::cwd(&origin_cwd, project, d).map_err(StartError::Invalid)?;
            }
            if let Some(tools) = &args.allowed_tools {
                super::limits::allowed_tools(tools, d).map_err(StartError::Invalid)?;
            }
        }
        let acceptance = args
            .acceptance
            .as_deref()
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_string);
        if let Some(cmd) = &acceptance {
            if cmd.len() > 4096 {
                return Err(StartError::Invalid(
                    "acceptance is longer than 4096 bytes: put the steps in a script in the tree and name it".into(),
                ));
            }
            if matches!(args.caller, super::limits::Caller::Session { .. }) {
                super::limits::acceptance(d).map_err(StartError::Invalid)?;
            }
        }
        let fix_rounds = args.fix_rounds.unwrap_or(d.fix_rounds);
        if fix_rounds > super::accept::MAX_FIX_ROUNDS {
            return Err(StartError::Invalid(format!(
                "fix_rounds must be at most {}, not {fix_rounds}",
                super::accept::MAX_FIX_ROUNDS
            )));
        }
        let claude = runner::find_claude(&loaded_defaults).map_err(StartError::Invalid)?;
        let mcp_config = d
            .mcp_config
            .as_deref()
            .map(runner::mcp_config_path)
            .transpose()
            .map_err(StartError::Invalid)?;
        let (model, endpoint) = match &prior {
            Some(p) => (Some(p.served_id.clone()), Some(p.endpoint.clone())),
            None => (args.model.clone(), args.endpoint.clone()),
        };
        let target =
            registry::resolve_target(&self.ctx, model.as_deref(), endpoint.as_deref()).await?;
        if !args.force {
            super::evict::check_load(&self.store, &target.probe, &target.resolved.served_id)
                .map_err(StartError::Invalid)?;
        }

        let id = super::new_id().map_err(JobError::from)?;
        let dir = self.store.dir(&id)?;
        crate::paths::private_dir_all(&dir).map_err(JobError::from)?;
        let task = if args.task.trim().is_empty() {
            "Continue where you left off.".to_string()
        } else {
            args.task.clone()
        };
        crate::paths::write_private(&dir.join("task.txt"), task.as_bytes())
            .map_err(JobError::from)?;

        let (worktree, cwd) = match (&prior, isolation) {
            (Some(p), _) => (p.worktree.clone(), p.cwd.clone()),
            (None, Isolation::Worktree) => {
                match worktree::create(&origin_cwd, &id, &self.ctx.state_dir.join("worktrees")) {
                    Ok((w, c)) => (Some(w), c),
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(&dir);
                        return Err(e.into());
                    }
                }
            }
            (None, Isolation::None) => (None, origin_cwd.clone()),
        };
        let pick =
            |a: &Option<Vec<String>>, p: Option<&Vec<String>>, def: &Vec<String>| -> Vec<String> {
                a.clone()
                    .or_else(|| p.cloned())
                    .unwrap_or_else(|| def.clone())
            };
        // A model the server has not loaded (or a sleeping server): the
        // answer says the job loads it first.
        let load_first = crate::probe::load::need(
            target.probe.kind,
            target
                .probe
                .models
                .iter()
                .find(|m| m.id == target.resolved.served_id)
                .and_then(|m| m.state.as_ref()),
        )
        .map(|_| {
            format!(
                "{} is not loaded on `{}`: the job loads it first (up to defaults.load_timeout_s)",
                target.resolved.served_id, target.resolved.endpoint
            )
        });
        let rec = JobRecord {
            id: id.clone(),
            kind: super::JobKind::Agent,
            task: task.chars().take(300).collect(),
            model: args
                .model
                .clone()
                .or(prior.as_ref().map(|p| p.model.clone()))
                .unwrap_or_else(|| target.resolved.requested.clone()),
            served_id: target.resolved.served_id.clone(),
            endpoint: target.resolved.endpoint.clone(),
            base_url: target.resolved.base_url.clone(),
            cwd,
            origin_cwd,
            isolation,
            status: Status::Queued,
            created: now_ts(),
            started: None,
            finished: None,
            elapsed_s: None,
            session_id: prior.as_ref().and_then(|p| p.session_id.clone()),
            result: None,
            error: None,
            num_turns: None,
            tool_calls: 0,
            usage: Default::default(),
            files_touched: Vec::new(),
            files_changed: Vec::new(),
            worktree,
            last_activity: Some(load_first.unwrap_or_else(|| "queued".into())),
            log_dir: dir.clone(),
            context: target.resolved.context,
            metrics: None,
            first_turn: None,
            queued_note: target.resolved.queued_note.clone(),
            acceptance: None,
            load_note: None,
            equivalent_usd: None,
            reference_model: None,
            model_faults: None,
            outcome: None,
            model_note: None,
            permission_mode: args
                .permission_mode
                .clone()
                .or(prior.as_ref().map(|p| p.permission_mode.clone()))
                .unwrap_or_else(|| d.permission_mode.clone()),
            max_turns: args
                .max_turns
                .or(prior.as_ref().map(|p| p.max_turns))
                .unwrap_or(d.max_turns),
            timeout_s: args
                .timeout_s
                .or(prior.as_ref().map(|p| p.timeout_s))
                .unwrap_or(d.timeout_s)
                .clamp(1, MAX_TIMEOUT_S),
            allowed_tools: pick(
                &args.allowed_tools,
                prior.as_ref().map(|p| &p.allowed_tools),
                &d.allowed_tools,
            ),
            disallowed_tools: pick(
                &args.disallowed_tools,
                prior.as_ref().map(|p| &p.disallowed_tools),
                &d.disallowed_tools,
            ),
            system_prompt_append: args
                .system_prompt_append
                .clone()
                .or(prior.as_ref().and_then(|p| p.system_prompt_append.clone())),
            resumed_from: prior.as_ref().map(|p| p.id.clone()),
            pid: None,
            owner_pid: std::process::id(),
            owner: crate::process::Identity::of(std::process::id()),
            guard: None,
            reaped: false,
        };
        self.store.save(&rec)?;

        let (cancel_rx, done_tx, prog_tx) = self.track(&id);
        let me = self.clone();
        let policy = crate::shim::Policy {
            loop_limit: d.loop_limit,
            thinking: d.thinking,
            repair: true,
            stop_on_fatal: true,
        };
        let job = Job {
            rec: rec.clone(),
            target,
            claude,
            mcp_config,
            sandbox: d.sandbox,
            acceptance,
            fix_rounds,
            acceptance_timeout: Duration::from_secs(d.acceptance_timeout_s),
            load_timeout: Duration::from_secs(d.load_timeout_s),
            setting_sources: d.setting_sources.clone(),
            default_append: d.system_prompt_append.clone(),
            dump: d.dump_requests || env_dump(),
            idle: Duration::from_secs(d.stream_idle_timeout_s),
            first_byte_s: d.first_byte_timeout_s,
            probe_budget: Duration::from_secs_f64(d.probe_timeout_s),
            policy,
        };
        tokio::spawn(async move {
            let id = job.rec.id.clone();
            me.run(job, cancel_rx, prog_tx).await;
            me.untrack(&id, &done_tx);
        });
        Ok(rec)
    }

    /// Register a job of this process: its cancel, done and progress
    /// channels (what `wait`, `cancel` and progress read).
    pub(super) fn track(
        &self,
        id: &str,
    ) -> (
        watch::Receiver<bool>,
        watch::Sender<bool>,
        watch::Sender<Progress>,
    ) {
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let (done_tx, done_rx) = watch::channel(false);
        let (prog_tx, prog_rx) = watch::channel(Progress::default());
        if let Ok(mut r) = self.running.lock() {
            r.insert(
                id.to_string(),
                Handle {
                    cancel: cancel_tx,
                    done: done_rx,
                    progress: prog_rx,
                },
            );
        }
        (cancel_rx, done_tx, prog_tx)
    }

    /// The job has ended: drop its handle, wake its waiters.
    pub(super) fn untrack(&self, id: &str, done: &watch::Sender<bool>) {
        if let Ok(mut r) = self.running.lock() {
            r.remove(id);
        }
        let _ = done.send(true);
    }

    /// Wait until the job ends or `timeout` passes. Returns the record and
    /// whether it is still running.
    pub async fn wait(&self, id: &str, timeout: Duration) -> Result<(JobRecord, bool), JobError> {
        let timeout = timeout.min(MAX_WAIT);
        let done = self
            .running
            .lock()
            .ok()
            .and_then(|r| r.get(id).map(|h| h.done.clone()));
        let _ = self.store.dir(id)?;
        if let Some(mut done) = done {
            let _ = tokio::time::timeout(timeout, done.wait_for(|d| *d)).await;
        } else {
            let deadline = Instant::now() + timeout.min(MAX_WAIT);
            loop {
                let r = self.store.load(id)?;
                if r.status.terminal() || Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        let r = self.store.load(id)?;
        let still = !r.status.terminal();
        Ok((r, still))
    }

    /// Cancel a job; its process group is gone within about 5 s.
    pub async fn cancel(&self, id: &str) -> Result<JobRecord, JobError> {
        let rec = self.store.load(id)?;
        if rec.status.terminal() {
            return Ok(rec);
        }
        let handle = self
            .running
            .lock()
            .ok()
            .and_then(|r| r.get(id).map(|h| (h.cancel.clone(), h.done.clone())));
        match handle {
            Some((cancel, mut done)) => {
                let _ = cancel.send(true);
                let _ = tokio::time::timeout(Duration::from_secs(6), done.wait_for(|d| *d)).await;
            }
            None => {
                // Owned by another localagents process: ask it, and stop the
                // delegate ourselves so it ends within the same bound.
                let dir = self.store.dir(id)?;
                let _ =
                    crate::paths::write_private(&dir.join("cancel_requested"), now_ts().as_bytes());
                if let Some(guard) = &rec.guard {
                    crate::process::stop_recorded(guard, crate::process::GRACE).await;
                }
                let deadline = Instant::now() + Duration::from_secs(5);
                while Instant::now() < deadline {
                    if self.store.load(id)?.status.terminal() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        self.store.load(id)
    }

    /// Stop every job of this process (server shutdown).
    pub async fn shutdown(&self) {
        let ids = self.running_ids();
        let futs = ids.iter().map(|id| self.cancel(id));
        let _ = tokio::time::timeout(Duration::from_secs(8), futures::future::join_all(futs)).await;
    }

    pub(super) fn mark_active(&self, endpoint: &str, id: &str) -> Arc<AtomicBool> {
        let flag = Arc::new(AtomicBool::new(false));
        if let Ok(mut a) = self.active.lock() {
            let list = a.entry(endpoint.to_string()).or_default();
            if !list.is_empty() {
                flag.store(true, Ordering::SeqCst);
                for other in list.iter() {
                    other.shared.store(true, Ordering::SeqCst);
                }
            }
            list.push(Active {
                id: id.to_string(),
                shared: flag.clone(),
            });
        }
        flag
    }

    pub(super) fn unmark_active(&self, endpoint: &str, id: &str) {
        if let Ok(mut a) = self.active.lock()
            && let Some(list) = a.get_mut(endpoint)
        {
            list.retain(|x| x.id != id);
        }
    }
}

pub(super) struct Job {
    pub(super) rec: JobRecord,
    pub(super) target: Target,
    pub(super) claude: PathBuf,
    pub(super) mcp_config: Option<PathBuf>,
    pub(super) sandbox: bool,
    pub(super) acceptance: Option<String>,
    pub(super) fix_rounds: u32,
    pub(super) acceptance_timeout: Duration,
    pub(super) load_timeout: Duration,
    pub(super) setting_sources: Vec<String>,
    pub(super) default_append: String,
    pub(super) dump: bool,
    pub(super) idle: Duration,
    pub(super) first_byte_s: Option<u64>,
    pub(super) probe_budget: Duration,
    /// The shim's guard for this job's model faults.
    pub(super) policy: crate::shim::Policy,
}
