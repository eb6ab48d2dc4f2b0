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

use super::dir::JobDir;
use super::plan::JobPlan;
use super::{Isolation, JobError, JobRecord, Store};
use crate::config::{ConfigError, Defaults};
use crate::context::Context;
use crate::error::Kind;
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

/// The instant `d` from now, or [`MAX_TIMEOUT_S`] from now when `d` is
/// too far for the clock.
pub(super) fn deadline_in(d: Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(d)
        .unwrap_or(now + Duration::from_secs(MAX_TIMEOUT_S))
}

/// Why a job could not start: its own checks ([`super::plan`]), or a
/// lower layer's error with that layer's sentence.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Git(#[from] GitError),
    #[error("{0}")]
    Job(#[from] JobError),
}

impl From<ConfigError> for StartError {
    fn from(e: ConfigError) -> Self {
        StartError::Resolve(e.into())
    }
}

impl StartError {
    pub fn kind(&self) -> Kind {
        match self {
            StartError::Resolve(e) => e.kind(),
            StartError::Invalid(_) => Kind::Invalid,
            StartError::Git(e) => e.kind(),
            StartError::Job(e) => e.kind(),
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
    /// The tool call that asked for it (see [`super::JobRecord::tool_use_id`]).
    pub tool_use_id: Option<String>,
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
    /// The latest record of each job this process runs, and of each that
    /// ended without its final record on disk (what `wait` and `record`
    /// answer from when the disk refuses a write), and their writer
    /// thread.
    keeper: super::keeper::Keeper,
}

/// How long to wait before each retry of a final record's write.
const WRITE_RETRIES: [Duration; 3] = [
    Duration::from_millis(20),
    Duration::from_millis(80),
    Duration::from_millis(320),
];

fn env_dump() -> bool {
    std::env::var("LOCALAGENTS_DUMP_REQUESTS").is_ok_and(|v| v == "1")
}

impl Manager {
    pub fn new(ctx: Context) -> Arc<Manager> {
        let state_dir = ctx.state_dir.clone();
        Arc::new(Manager {
            store: Store::new(&ctx.state_dir),
            ctx,
            shim: tokio::sync::OnceCell::new(),
            running: Mutex::new(HashMap::new()),
            active: Mutex::new(HashMap::new()),
            keeper: super::keeper::Keeper::new(Store::new(&state_dir)),
        })
    }

    pub(super) async fn shim(&self) -> std::io::Result<&Shim> {
        self.shim.get_or_try_init(|| Shim::start(0)).await
    }

    /// Prewarm the idle servers with the delegate's fixed prefix
    /// ([`super::prewarm`]), through this process's shim.
    pub async fn prewarm(&self) -> Vec<super::prewarm::Warmed> {
        let loaded = match crate::config::load(&self.ctx.discovery()) {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!("prewarm skipped: {e}");
                return Vec::new();
            }
        };
        let shim = match self.shim().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("prewarm skipped: cannot start the shim on 127.0.0.1 ({e})");
                return Vec::new();
            }
        };
        super::prewarm::run(&loaded.config, &self.ctx.state_dir, shim).await
    }

    /// A job's record: this process's own copy when it runs the job (or
    /// ran it and could not write its end), else the one on disk.
    pub fn record(&self, id: &str) -> Result<JobRecord, JobError> {
        match self.keeper.get(id) {
            Some(r) => Ok(r),
            None => self.store.load(id),
        }
    }

    /// Keep a running job's record: in memory at once, on disk by the
    /// record writer thread (never on an async worker); a failed write is
    /// logged with the record's directory and the reason, and the job goes
    /// on (its owner answers from memory).
    pub(super) fn keep(&self, rec: &JobRecord) {
        self.keeper.hold(rec);
        self.keeper.write_later(rec);
    }

    /// Keep a job's record from a place that cannot await (a run that
    /// unwound): written in order with the rest, this thread waiting.
    pub(super) fn keep_now(&self, rec: &JobRecord) {
        self.keeper.hold(rec);
        match self.keeper.write_now(rec) {
            Ok(()) => self.keeper.forget(&rec.id),
            Err(e) => tracing::error!("job {}: {e}; its owner keeps its record in memory", rec.id),
        }
    }

    /// Keep a job's final record: written with a few short retries, each
    /// failure logged. When it cannot be written the job fails with the
    /// sentence that says so, kept in memory (and tried once more on
    /// disk), so a waiter gets the end instead of a record that cannot
    /// change.
    pub(super) async fn keep_final(&self, rec: &mut JobRecord) {
        self.keeper.hold(rec);
        let mut last = None;
        for (n, pause) in std::iter::once(Duration::ZERO)
            .chain(WRITE_RETRIES)
            .enumerate()
        {
            tokio::time::sleep(pause).await;
            match self.keeper.write(rec).await {
                Ok(()) => {
                    self.keeper.forget(&rec.id);
                    return;
                }
                Err(e) => {
                    tracing::error!(
                        "job {}: {e} (try {} of {})",
                        rec.id,
                        n + 1,
                        WRITE_RETRIES.len() + 1
                    );
                    last = Some(e);
                }
            }
        }
        if let Some(e) = last {
            rec.status = super::Status::Failed;
            rec.error = Some(match rec.error.take() {
                Some(before) => format!("{e}; before that: {before}"),
                None => e.to_string(),
            });
            rec.finished.get_or_insert_with(now_ts);
            self.keeper.hold(rec);
            if self.keeper.write(rec).await.is_ok() {
                self.keeper.forget(&rec.id);
            }
        }
    }

    /// Wait until every record this process queued for the disk is
    /// written (at shutdown).
    pub async fn flush_records(&self) {
        self.keeper.flush().await;
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
        let config = crate::config::load(&self.ctx.discovery())?.config;
        let plan = JobPlan::resolve(&args, &config, |id| self.store.load(id))?;
        let claude = runner::find_claude(&config).map_err(StartError::Invalid)?;
        let mcp_config = config
            .defaults
            .mcp_config
            .as_deref()
            .map(runner::mcp_config_path)
            .transpose()
            .map_err(StartError::Invalid)?;
        let target =
            registry::resolve_target(&self.ctx, plan.model.as_deref(), plan.endpoint.as_deref())
                .await?;
        if !plan.force {
            // It may read every live record: on the blocking pool.
            let (store, probe) = (self.store.clone(), target.probe.clone());
            let served = target.resolved.served_id.clone();
            tokio::task::spawn_blocking(move || super::evict::check_load(&store, &probe, &served))
                .await
                .map_err(|e| StartError::Invalid(e.to_string()))?
                .map_err(StartError::Invalid)?;
        }

        let id = super::new_id().map_err(JobError::from)?;
        let dir = self.store.dir(&id)?;
        let brief = JobDir::at(&dir).task();
        let task = plan.task.clone();
        // The job's dir (private) and its brief, off the async workers.
        tokio::task::spawn_blocking(move || crate::paths::write_atomic(&brief, task.as_bytes()))
            .await
            .map_err(|e| JobError::Io(std::io::Error::other(e.to_string())))?
            .map_err(JobError::from)?;
        // A new worktree is planned here (its repository, HEAD and file
        // count: a start error is the caller's at once) and checked out by
        // the job itself, as its first phase: a checkout of a large tree
        // takes seconds, and the call answers by its own wait rule.
        let (worktree, cwd, checkout) = match (&plan.resumed, plan.isolation) {
            (Some(p), _) => (p.worktree.clone(), p.cwd.clone(), None),
            (None, Isolation::Worktree) => {
                let root = self.ctx.state_dir.join("worktrees");
                match worktree::plan(&plan.origin_cwd, &id, &root).await {
                    Ok(c) => (Some(c.info.clone()), c.cwd.clone(), Some(c)),
                    Err(e) => {
                        let d = dir.clone();
                        let _ = tokio::task::spawn_blocking(move || {
                            if let Err(r) = std::fs::remove_dir_all(&d) {
                                tracing::warn!("cannot remove {} ({r})", d.display());
                            }
                        })
                        .await;
                        return Err(e.into());
                    }
                }
            }
            (None, Isolation::None) => (None, plan.origin_cwd.clone(), None),
        };
        let mut rec = JobRecord::from_plan(&plan, &id, &dir, &target, worktree, cwd);
        // A job with a worktree to check out takes its place in the queue
        // once it has it: a slot is not held while git writes files.
        let admission = match &checkout {
            Some(c) => {
                rec.last_activity = Some(super::preparing_line(c.files));
                None
            }
            None => Some(self.first_look(
                &mut rec,
                &target,
                config.defaults.queue,
                plan.endpoint.is_some(),
            )),
        };
        self.keeper.write(&rec).await?;

        let (cancel_rx, done_tx, prog_tx) = self.track(&id);
        let me = self.clone();
        let mut job = Job::new(
            rec.clone(),
            target,
            claude,
            mcp_config,
            &plan,
            &config.defaults,
        );
        job.admission = admission;
        job.checkout = checkout;
        job.queue = config.defaults.queue;
        tokio::spawn(async move {
            // Untracked however the run ends (a panic in it too): its
            // waiters wake, and `running_ids` forgets it.
            let _untrack = Untrack {
                manager: me.clone(),
                id: job.rec.id.clone(),
                done: done_tx,
            };
            me.run(job, cancel_rx, prog_tx).await;
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
    /// ([`Untrack`] calls it when a job's task ends.)
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
                let r = self.record(id)?;
                if r.status.terminal() || Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        let r = self.record(id)?;
        let still = !r.status.terminal();
        Ok((r, still))
    }

    /// Cancel a job; its process group is gone within about 5 s.
    pub async fn cancel(&self, id: &str) -> Result<JobRecord, JobError> {
        let rec = self.record(id)?;
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
                let marker = self.store.job_dir(id)?.cancel_marker();
                if let Err(e) = crate::paths::write_private(&marker, now_ts().as_bytes()) {
                    tracing::warn!(
                        "cannot write {} ({e}); stopping the job's group only",
                        marker.display()
                    );
                }
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
        self.record(id)
    }

    /// Stop every job of this process (server shutdown).
    pub async fn shutdown(&self) {
        let ids = self.running_ids();
        let futs = ids.iter().map(|id| self.cancel(id));
        let _ = tokio::time::timeout(Duration::from_secs(8), futures::future::join_all(futs)).await;
        let _ = tokio::time::timeout(Duration::from_secs(2), self.flush_records()).await;
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

/// Calls [`Manager::untrack`] when a job's task ends, however it ends.
struct Untrack {
    manager: Arc<Manager>,
    id: String,
    done: watch::Sender<bool>,
}

impl Drop for Untrack {
    fn drop(&mut self) {
        self.manager.untrack(&self.id, &self.done);
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
    pub(super) probe_budget: Duration,
    /// The shim's guard for this job's model faults.
    pub(super) policy: crate::shim::Policy,
    /// Its lease on a slot, or its place in the queue.
    pub(super) admission: Option<super::admit::Admission>,
    /// The call named the endpoint (or resumes a job): no failover.
    pub(super) pinned: bool,
    /// Load the model even if that may swap out a running job's model.
    pub(super) force: bool,
    /// A new worktree still to check out: the job's first phase.
    pub(super) checkout: Option<worktree::Checkout>,
    /// `defaults.queue`: whether the job waits for a free slot.
    pub(super) queue: bool,
}

/// The shim's guard for a job's route (the prewarm's too, so its request
/// is folded as a job's is).
pub fn job_policy(d: &crate::config::Defaults) -> crate::shim::Policy {
    crate::shim::Policy {
        loop_limit: d.loop_limit,
        runaway_limit: d.runaway_limit,
        thinking: d.thinking,
        repair: true,
        stop_on_fatal: true,
    }
}

impl Job {
    /// What the job's run needs beside its record: the plan's command and
    /// rounds, and the config's timeouts and delegate settings.
    fn new(
        rec: JobRecord,
        target: Target,
        claude: PathBuf,
        mcp_config: Option<PathBuf>,
        plan: &JobPlan,
        d: &Defaults,
    ) -> Job {
        Job {
            rec,
            target,
            claude,
            mcp_config,
            sandbox: d.sandbox,
            acceptance: plan.acceptance.clone(),
            fix_rounds: plan.fix_rounds,
            acceptance_timeout: Duration::from_secs(d.acceptance_timeout_s),
            load_timeout: Duration::from_secs(d.load_timeout_s),
            setting_sources: d.setting_sources.clone(),
            default_append: d.system_prompt_append.clone(),
            dump: d.dump_requests || env_dump(),
            probe_budget: Duration::from_secs_f64(d.probe_timeout_s),
            policy: job_policy(d),
            admission: None,
            pinned: plan.endpoint.is_some(),
            force: plan.force,
            checkout: None,
            queue: d.queue,
        }
    }
}
