//! Running jobs: start a delegate, follow it, stop it, record the outcome.
//!
//! One [`Manager`] per localagents process owns that process's shim and
//! its running jobs. Every state change is written to `job.json` at once, so
//! other processes (another MCP server, the prompt hook, `localagents jobs`)
//! see the same jobs. A job owned by another live process can still be
//! cancelled: a `cancel_requested` marker plus a signal to its process group.
//!
//! The manager is the top of `jobs`: what the API calls. What the runs
//! share lives in `runtime.rs`; a run itself in [`super::run`], a
//! batch in [`super::batch`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::admit;
use super::dir::JobDir;
use super::job::{Job, Progress};
use super::plan::JobPlan;
use super::record::{Isolation, JobError, JobRecord, Status, new_job_id};
use super::runtime::{Runtime, Untrack};
use super::store::{Store, UnreadableJob};
use crate::context::Context;
use crate::probe;
use crate::registry;
use crate::runner;
use crate::shim::log::now_ts;
use crate::worktree;

pub use super::args::{MAX_TIMEOUT_S, MAX_WAIT, RunArgs, StartError};
pub use super::policy::job_policy;

/// The subagent profile a plan names, found as the delegate's Claude Code
/// would find it (project, then user): an unknown name is refused now,
/// naming those there are. It reads files: off the async workers.
async fn find_profile(plan: &JobPlan) -> Result<Option<crate::config::agents::Profile>, StartError> {
    let Some(name) = &plan.agent else {
        return Ok(None);
    };
    let (name, project) = (name.clone(), plan.origin_cwd.clone());
    let found =
        tokio::task::spawn_blocking(move || crate::config::agents::find(&name, Some(&project)))
            .await
            .map_err(|e| StartError::Invalid(e.to_string()))?;
    Ok(Some(found.map_err(StartError::Invalid)?))
}

/// Write a job's brief and its subagent's definition (the job's dir is
/// private), off the async workers.
async fn write_brief(
    brief: std::path::PathBuf,
    task: String,
    agents_file: std::path::PathBuf,
    definition: Option<String>,
) -> Result<(), JobError> {
    tokio::task::spawn_blocking(move || {
        crate::paths::write_atomic(&brief, task.as_bytes())?;
        match definition {
            Some(d) => crate::paths::write_atomic(&agents_file, d.as_bytes()),
            None => Ok(()),
        }
    })
    .await
    .map_err(|e| JobError::Io(std::io::Error::other(e.to_string())))?
    .map_err(JobError::from)
}

/// The jobs of this process.
pub struct Manager {
    pub ctx: Context,
    /// The disk (every process's jobs). The tools read through
    /// [`Manager::record`], [`Manager::job`], [`Manager::list`] and
    /// [`Manager::job_dir`], which answer this process's own jobs from
    /// memory first.
    store: Store,
    /// What the runs share: the shim, the running jobs, the records held
    /// in memory.
    rt: Arc<Runtime>,
}

impl Manager {
    pub fn new(ctx: Context) -> Arc<Manager> {
        Arc::new(Manager {
            store: Store::new(&ctx.state_dir),
            rt: Arc::new(Runtime::new(ctx.clone())),
            ctx,
        })
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
        let shim = match self.rt.shim().await {
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
        self.rt.record(id)
    }

    /// [`Manager::record`] off the async workers: a record this process
    /// holds at once, else read on the blocking pool.
    pub async fn job(&self, id: &str) -> Result<JobRecord, JobError> {
        if let Some(r) = self.rt.held(id) {
            return Ok(r);
        }
        let (store, id) = (self.store.clone(), id.to_string());
        tokio::task::spawn_blocking(move || store.load(&id))
            .await
            .map_err(|e| JobError::Io(std::io::Error::other(e.to_string())))?
    }

    /// Records, newest first, and those that do not read (at most `limit`
    /// of each): this process's own jobs as it holds them, the rest from
    /// disk ([`Store::scan`]). It reads every record: async callers run
    /// it on the blocking pool.
    pub fn list(
        &self,
        status: Option<Status>,
        limit: usize,
    ) -> (Vec<JobRecord>, Vec<UnreadableJob>) {
        self.store
            .scan_through(status, limit, |id| self.rt.held(id))
    }

    /// Is `id` a job this process holds or whose record is on disk (read
    /// or not)?
    pub fn knows(&self, id: &str) -> bool {
        self.rt.held(id).is_some() || self.store.load_raw(id).is_ok()
    }

    /// The records of the live jobs of every process (and those lost and
    /// not yet reaped), newest first, this process's own as it holds them
    /// ([`Store::active`]). It reads their records: async callers run it
    /// on the blocking pool.
    pub fn active(&self) -> Vec<JobRecord> {
        self.store
            .active()
            .into_iter()
            .filter_map(|(id, r)| self.rt.held(&id).or(r.ok()))
            .collect()
    }

    /// The disk, for what reads or removes the whole store off the async
    /// workers (`cleanup_jobs`, the eviction check). A record goes through
    /// [`Manager::record`] or [`Manager::job`], which answer with this
    /// process's own copy first: the one owner of a running job's record.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The directory of job `id` and its files (a checked id), whether
    /// or not it has a record yet.
    pub fn job_dir(&self, id: &str) -> Result<JobDir, JobError> {
        self.store.job_dir(id)
    }

    /// Stop the guards of lost jobs still running ([`Store::reap_lost`]);
    /// the ids of those stopped.
    pub async fn reap_lost(&self) -> Vec<String> {
        self.store.reap_lost().await
    }

    /// Wait until every record this process queued for the disk is
    /// written (at shutdown).
    pub async fn flush_records(&self) {
        self.rt.flush_records().await;
    }

    /// Jobs running in this process.
    pub fn running_ids(&self) -> Vec<String> {
        self.rt.running_ids()
    }

    pub fn progress(&self, id: &str) -> Option<tokio::sync::watch::Receiver<Progress>> {
        self.rt.progress(id)
    }

    /// Refuse a job whose model's load would unload one a running job
    /// uses ([`super::evict::check_load`]). It may read every live record:
    /// on the blocking pool.
    async fn check_load(&self, target: &registry::Target) -> Result<(), StartError> {
        let (store, probe) = (self.store.clone(), target.probe.clone());
        let served = target.resolved.served_id.clone();
        tokio::task::spawn_blocking(move || super::evict::check_load(&store, &probe, &served))
            .await
            .map_err(|e| StartError::Invalid(e.to_string()))??;
        Ok(())
    }

    /// Where job `id` runs: a resumed job's tree, a new worktree planned
    /// (checked out later by the job), or the origin. A plan that fails
    /// removes the job's dir `dir`.
    async fn plan_worktree(
        &self,
        plan: &JobPlan,
        id: &str,
        dir: &std::path::Path,
    ) -> Result<
        (
            Option<worktree::WorktreeInfo>,
            std::path::PathBuf,
            Option<worktree::Checkout>,
        ),
        StartError,
    > {
        // A new worktree is planned here (its repository, HEAD and file
        // count: a start error is the caller's at once) and checked out by
        // the job itself, as its first phase: a checkout of a large tree
        // takes seconds, and the call answers by its own wait rule.
        Ok(match (&plan.resumed, plan.isolation) {
            (Some(p), _) => (p.worktree.clone(), p.cwd.clone(), None),
            (None, Isolation::Worktree) => {
                let root = self.ctx.state_dir.join("worktrees");
                match worktree::plan(&plan.origin_cwd, id, &root).await {
                    Ok(c) => (Some(c.info.clone()), c.cwd.clone(), Some(c)),
                    Err(e) => {
                        let d = dir.to_path_buf();
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
        })
    }

    /// Validate, resolve and start a job. Returns its first record at once.
    pub async fn start(&self, args: RunArgs) -> Result<JobRecord, StartError> {
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
        let profile = find_profile(&plan).await?;
        let target =
            registry::resolve_target(&self.ctx, plan.model.as_deref(), plan.endpoint.as_deref())
                .await?;
        if let Some(refusal) = probe::window_refusal(
            target.backend,
            &target.resolved.endpoint,
            &target.resolved.served_id,
            target.resolved.context,
        ) {
            return Err(StartError::Invalid(refusal));
        }
        if !plan.force {
            self.check_load(&target).await?;
        }

        let id = new_job_id().map_err(JobError::from)?;
        let dir = self.store.create(&id)?;
        let (brief, agents_file) = (JobDir::at(&dir).task(), JobDir::at(&dir).agents());
        let task = plan.task.clone();
        // What of the profile the job uses, and its definition for the
        // delegate (`--agents FILE`).
        let agent = profile
            .as_ref()
            .map(|p| super::record::AgentUse::of(p, &plan.allowed_tools, &plan.disallowed_tools));
        let definition = agent
            .as_ref()
            .zip(profile.as_ref())
            .map(|(a, p)| a.definition(p));
        write_brief(brief, task, agents_file, definition).await?;
        let (worktree, cwd, checkout) = self.plan_worktree(&plan, &id, &dir).await?;
        let mut rec = JobRecord::from_plan(&plan, &id, &dir, &target, worktree, cwd, agent);
        // A job with a worktree to check out takes its place in the queue
        // once it has it: a slot is not held while git writes files.
        let admission = match &checkout {
            Some(c) => {
                rec.checkout_planned(c.files);
                None
            }
            None => Some(admit::first_look(
                &self.ctx.state_dir,
                &mut rec,
                &target,
                config.defaults.queue,
                plan.endpoint.is_some(),
            )),
        };
        self.rt.keep_first(&rec).await?;

        let (cancel_rx, done_tx, prog_tx) = self.rt.track(&id);
        let rt = self.rt.clone();
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
                runtime: rt.clone(),
                id: job.rec.id().to_string(),
                done: done_tx,
            };
            super::run::run(&rt, job, cancel_rx, prog_tx).await;
        });
        Ok(rec)
    }

    /// Wait until the job ends or `timeout` passes. Returns the record and
    /// whether it is still running.
    ///
    /// A job of this process has ended when its task has: its final record
    /// is then on disk (or the disk refused it and the record says so). Its
    /// final record is held in memory a moment before that, while the
    /// write is under way; reading "not running" off it alone let
    /// `localagents run` exit before the write landed, and a later reader
    /// found the record `running` with its owner gone: `lost`.
    pub async fn wait(&self, id: &str, timeout: Duration) -> Result<(JobRecord, bool), JobError> {
        let timeout = timeout.min(MAX_WAIT);
        let done = self
            .rt
            .running
            .lock()
            .ok()
            .and_then(|r| r.get(id).map(|h| h.done.clone()));
        let _ = self.store.dir(id)?;
        if let Some(mut done) = done {
            // Err: the task's sender is gone, which is an end too.
            let ended = !matches!(
                tokio::time::timeout(timeout, done.wait_for(|d| *d)).await,
                Err(_elapsed)
            );
            return Ok((self.record(id)?, !ended));
        }
        // Another process's job: its record on disk says.
        let deadline = Instant::now() + timeout;
        loop {
            let r = self.record(id)?;
            if r.status().terminal() || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let r = self.record(id)?;
        let still = !r.status().terminal();
        Ok((r, still))
    }

    /// Cancel a job; its process group is gone within about 5 s.
    pub async fn cancel(&self, id: &str) -> Result<JobRecord, JobError> {
        let rec = self.record(id)?;
        if rec.status().terminal() {
            return Ok(rec);
        }
        let handle = self
            .rt
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
                if let Some(guard) = rec.guard() {
                    crate::process::stop_recorded(guard, crate::process::GRACE).await;
                }
                let deadline = Instant::now() + Duration::from_secs(5);
                while Instant::now() < deadline {
                    if self.store.load(id)?.status().terminal() {
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

    /// Start a batch as a job; it runs in this process
    /// (`batch::start`).
    pub async fn start_batch(
        &self,
        args: super::batch::BatchArgs,
    ) -> Result<JobRecord, StartError> {
        super::batch::start(&self.rt, args).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manager in a fresh state dir and a job id there whose job.json is
    /// a directory that is not empty: no rename can replace it, every
    /// write of the record fails.
    fn a_job_whose_record_cannot_be_written()
    -> (tempfile::TempDir, Arc<Manager>, String, std::path::PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let m = Manager::new(crate::context::Context {
            explicit_config: None,
            state_dir: tmp.path().to_path_buf(),
        });
        let id = new_job_id().unwrap();
        let dir = m.store.dir(&id).unwrap();
        std::fs::create_dir_all(dir.join("job.json").join("x")).unwrap();
        (tmp, m, id, dir)
    }

    #[tokio::test]
    async fn a_final_record_the_disk_refuses_fails_the_job_and_its_owner_answers_from_memory() {
        let (_tmp, m, id, dir) = a_job_whose_record_cannot_be_written();
        let mut rec =
            crate::jobs::record::test_record(&id, &dir, "succeeded", "2026-12-01T00:00:00Z");
        rec.session_result(Some("done".into()), None);
        let started = std::time::Instant::now();
        m.rt.keep_final(&mut rec).await;
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(rec.status(), Status::Failed);
        let want = format!("could not write the job record in {}: ", dir.display());
        assert!(
            rec.error().unwrap().starts_with(&want),
            "{:?}",
            rec.error()
        );
        // The owner answers from what it kept, at once.
        assert_eq!(m.record(&id).unwrap().status(), Status::Failed);
        let (r, still) = m.wait(&id, Duration::from_secs(1)).await.unwrap();
        assert_eq!((r.status(), still), (Status::Failed, false));
    }

    /// A final record held in memory while its write is under way is not
    /// yet the job's end: `wait` says "still running" until the job's task
    /// is done, so `localagents run` never exits before the disk has it.
    #[tokio::test]
    async fn a_final_record_not_yet_on_disk_is_not_an_end() {
        // The write cannot land, so the final record stays in memory only,
        // as it does for the moment its write takes.
        let (_tmp, m, id, dir) = a_job_whose_record_cannot_be_written();
        let (_cancel, done, _progress) = m.rt.track(&id);
        let mut rec =
            crate::jobs::record::test_record(&id, &dir, "succeeded", "2026-12-01T00:00:00Z");
        rec.session_result(Some("done".into()), None);
        m.rt.keep(&rec);
        assert_eq!(m.record(&id).unwrap().status(), Status::Succeeded);
        let (r, still) = m.wait(&id, Duration::from_millis(50)).await.unwrap();
        assert_eq!(
            (r.status(), still),
            (Status::Succeeded, true),
            "the job's task has not ended: its final record may not be on disk"
        );
        m.rt.untrack(&id, &done);
        let (r, still) = m.wait(&id, Duration::from_millis(50)).await.unwrap();
        assert_eq!((r.status(), still), (Status::Succeeded, false));
    }
}
