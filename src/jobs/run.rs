//! One job's life: start the delegate through the shim, follow its
//! events, stop it on cancel or timeout, and record the outcome.
//!
//! [`outcome`] is the pure decision at the end (what status, which
//! sentence), so it is tested without a `claude` process.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::watch;

use super::accept;
use super::admit;
use super::args::deadline_in;
use super::dir::JobDir;
use super::faults;
use super::job::{Halt, Job, Progress};
use super::lease::{Admission, Lease};
use super::metrics;
use super::record::{JobRecord, Prepare, Status, preparing_line};
use super::runtime::Runtime;
use crate::probe;
use crate::runner;
use crate::shim::Route;
use crate::shim::log::{RequestLog, now_ts};
use crate::worktree;

/// How a checkout phase ended short of a worktree.
#[derive(Debug)]
enum Prepared {
    Cancelled,
    /// The job's deadline.
    Timeout,
    /// Git failed; what it made was removed.
    Failed(worktree::GitError),
}

/// How one delegate session ended.
struct SessionEnd {
    stop: Option<Halt>,
    result: Option<runner::ResultEvent>,
    exit: Exit,
    stderr_tail: String,
}

impl SessionEnd {
    /// A session that never started: `why` is the job's error.
    fn refused(why: String) -> SessionEnd {
        SessionEnd {
            stop: Some(Halt::Refused(why)),
            result: None,
            exit: Exit::Unknown,
            stderr_tail: String::new(),
        }
    }
}

/// How the delegate process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Its exit code (`None`: killed by a signal).
    Code(Option<i32>),
    /// Not known (it did not exit in time).
    Unknown,
}

/// The sentence for tools in `allowed_tools` that Claude Code does not have.
pub fn unknown_tools_error(missing: &[String], version: Option<&str>) -> String {
    let names = missing
        .iter()
        .map(|t| format!("`{t}`"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "allowed_tools names {names}, which Claude Code {} does not have (tool names are case-sensitive, e.g. Read, Edit, Write, Glob, Grep, Bash, WebFetch): fix allowed_tools in the call or in defaults.allowed_tools",
        version.unwrap_or("(this version)")
    )
}

/// The job's status and error from how it ended: a stop we decided, the
/// `result` event, or failing both, the exit code and the last lines of
/// stderr.
pub fn outcome(
    stop: Option<&Halt>,
    result: Option<&runner::ResultEvent>,
    exit: Exit,
    stderr_tail: &str,
    timeout_s: u64,
    events: &Path,
) -> (Status, Option<String>) {
    match (stop, result) {
        (Some(Halt::Refused(why)), _) => (Status::Failed, Some(why.clone())),
        (Some(Halt::Cancelled), _) => (
            Status::Cancelled,
            Some("cancelled; its process group was stopped".to_string()),
        ),
        (Some(Halt::Timeout), _) => (
            Status::Timeout,
            Some(format!(
                "timed out after {timeout_s} s (timeout_s); its process group was stopped; raise timeout_s or split the task"
            )),
        ),
        (_, Some(r)) if r.success => (Status::Succeeded, None),
        (_, Some(r)) => {
            let why = r
                .text
                .clone()
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| r.subtype.clone());
            let mut msg = format!("claude ended with {}: {why}", r.subtype);
            if let Some(t) = &r.terminal_reason {
                msg.push_str(&format!(" (terminal_reason {t})"));
            }
            (Status::Failed, Some(msg))
        }
        (_, None) => {
            let code = match exit {
                Exit::Code(Some(c)) => c.to_string(),
                Exit::Code(None) => "a signal".into(),
                Exit::Unknown => "unknown".into(),
            };
            let tail = stderr_tail.trim();
            let msg = if tail.is_empty() {
                format!(
                    "claude exited ({code}) without a result; see {}",
                    events.display()
                )
            } else {
                let last: Vec<&str> = tail.lines().rev().take(3).collect();
                format!(
                    "claude exited ({code}) without a result: {}",
                    last.into_iter().rev().collect::<Vec<_>>().join(" | ")
                )
            };
            (Status::Failed, Some(msg))
        }
    }
}

/// The error of a job stopped because its backend failed every request
/// for `limit`.
fn backend_down(why: &str, limit: Duration) -> String {
    format!(
        "{why}; every request failed for {} s (defaults.backend_fail_s): fix the backend, then run the job again",
        limit.as_secs()
    )
}

/// What a running job's progress says now: its turns and tokens from the
/// request log, its tool calls and last activity from the record.
fn progress_of(
    rec: &JobRecord,
    reg: &crate::shim::Registration,
    acceptance_round: Option<u32>,
) -> Progress {
    Progress {
        items: None,
        turns: reg.route.log.messages(),
        tool_calls: rec.tool_calls,
        last_activity: rec.last_activity.clone().unwrap_or_default(),
        tokens: reg.route.log.tokens(),
        acceptance_round,
    }
}

/// Finishes the record of a run that returned or unwound without finishing
/// it (a panic in a phase): a job of a live owner is never left `queued` or
/// `running`. Every phase finishes the record itself, so on a normal end
/// this finds it ended and does nothing.
struct EndGuard<'a> {
    runtime: &'a Runtime,
    id: String,
}

impl Drop for EndGuard<'_> {
    fn drop(&mut self) {
        let Ok(mut rec) = self.runtime.record(&self.id) else {
            return;
        };
        if rec.status.terminal() {
            return;
        }
        tracing::error!("job {} stopped before it finished", self.id);
        rec.status = Status::Failed;
        rec.error = Some(
            "the job stopped before it finished: an internal error of localagents (its log on stderr says more); run it again".into(),
        );
        rec.finished = Some(now_ts());
        self.runtime.keep_now(&rec);
        self.runtime.unmark_active(&rec.endpoint, &rec.id);
    }
}

/// The job's end: its status, its error (when there is one), when it
/// finished and how long it took since `started`.
fn finish(rec: &mut JobRecord, status: Status, error: Option<String>, started: Instant) {
    rec.status = status;
    if error.is_some() {
        rec.error = error;
    }
    rec.finished = Some(now_ts());
    rec.elapsed_s = Some(started.elapsed().as_secs_f64());
}

impl Runtime {
    /// A job that fails before its session starts (a load, the shim):
    /// finished as failed with `why`, saved, and no longer active on its
    /// endpoint.
    async fn fail_before_session(&self, rec: &mut JobRecord, why: String, started: Instant) {
        finish(rec, Status::Failed, Some(why), started);
        self.keep_final(rec).await;
        self.unmark_active(&rec.endpoint, &rec.id);
    }

    /// The admission phase: the job's lease on a slot (`None`: not
    /// leased), once it has one; or the stop that ended its wait.
    async fn admitted(
        &self,
        job: &mut Job,
        rec: &mut JobRecord,
        cancel: &mut watch::Receiver<bool>,
        progress: &watch::Sender<Progress>,
    ) -> Result<Option<Lease>, Halt> {
        match job.admission.take() {
            Some(Admission::Go(l)) => Ok(l),
            Some(Admission::Wait(ticket)) => {
                let lease = admit::wait_for_slot(self, job, rec, ticket, cancel, progress).await?;
                // What the server says now, not before the wait: its
                // slots, counters and the model's state.
                job.target.probe = probe::probe(&job.target.endpoint, job.probe_budget).await;
                rec.queued_note = None;
                Ok(lease)
            }
            None => Ok(None),
        }
    }

    /// A job cancelled or timed out while it waited for a slot.
    async fn stop_while_queued(&self, rec: &mut JobRecord, stop: &Halt, started: Instant) {
        let (status, error) = match stop {
            Halt::Cancelled => (
                Status::Cancelled,
                "cancelled while it waited for a slot".to_string(),
            ),
            Halt::Timeout => (
                Status::Timeout,
                format!(
                    "timed out after {} s (timeout_s) while it waited for a slot: raise timeout_s, run fewer jobs at once, or start the server with more --parallel slots",
                    rec.timeout_s
                ),
            ),
            Halt::Refused(why) => (Status::Failed, why.clone()),
        };
        finish(rec, status, Some(error), started);
        rec.last_activity = Some(format!("{} while queued", status.as_str()));
        self.keep_final(rec).await;
    }

    /// The checkout phase of a job with a new worktree: git writes the
    /// files on the blocking pool while the job's record says so, and a
    /// cancel or the job's deadline ends the job at once (git's checkout,
    /// which cannot be interrupted while it writes, removes the worktree
    /// and its branch when it returns).
    async fn prepare(
        &self,
        rec: &mut JobRecord,
        c: &worktree::Checkout,
        deadline: tokio::time::Instant,
        cancel: &mut watch::Receiver<bool>,
        progress: &watch::Sender<Progress>,
    ) -> Result<(), Prepared> {
        let t0 = Instant::now();
        rec.prepare = Some(Prepare {
            files: c.files,
            started: now_ts(),
            finished: None,
            elapsed_s: None,
        });
        rec.last_activity = Some(preparing_line(c.files));
        self.keep(rec);
        let _ = progress.send(Progress {
            last_activity: preparing_line(c.files),
            ..Progress::default()
        });
        let marker = JobDir::at(&rec.log_dir).cancel_marker();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let work = worktree::check_out(c, stop.clone());
        tokio::pin!(work);
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        let done = loop {
            tokio::select! {
                r = &mut work => break r.map_err(Prepared::Failed),
                _ = cancel.changed() => break Err(Prepared::Cancelled),
                _ = tokio::time::sleep_until(deadline) => break Err(Prepared::Timeout),
                _ = tick.tick() => {
                    if tokio::fs::try_exists(&marker).await.unwrap_or(false) {
                        break Err(Prepared::Cancelled);
                    }
                }
            }
        };
        if matches!(done, Err(Prepared::Cancelled | Prepared::Timeout)) {
            stop.store(true, Ordering::SeqCst);
        }
        if let Some(p) = rec.prepare.as_mut() {
            p.finished = Some(now_ts());
            p.elapsed_s = Some(t0.elapsed().as_secs_f64());
        }
        done
    }

    /// A job whose checkout failed, or that was cancelled or timed out
    /// while git checked out its worktree.
    async fn stop_while_preparing(
        &self,
        rec: &mut JobRecord,
        why: Prepared,
        c: &worktree::Checkout,
        started: Instant,
    ) {
        let files = crate::fmt::thousands(c.files as u64);
        let (status, error) = match why {
            Prepared::Cancelled => (
                Status::Cancelled,
                format!("cancelled while git checked out its worktree ({files} files)"),
            ),
            Prepared::Timeout => (
                Status::Timeout,
                format!(
                    "timed out after {} s (timeout_s) while git checked out its worktree ({files} files): raise timeout_s, or use isolation \"none\" for a tree this large",
                    rec.timeout_s
                ),
            ),
            Prepared::Failed(e) => (
                Status::Failed,
                format!("could not create the job's worktree ({files} files): {e}"),
            ),
        };
        if let Some(w) = rec.worktree.as_mut() {
            w.kept = false;
            w.note = Some(match status {
                Status::Failed => "not created: worktree and branch removed".into(),
                _ => "stopped during the checkout: git removes the worktree and its branch as soon as its checkout returns".into(),
            });
        }
        finish(rec, status, Some(error), started);
        rec.last_activity = Some(format!("{} while preparing", status.as_str()));
        self.keep_final(rec).await;
    }

    pub(super) async fn run(
        &self,
        mut job: Job,
        mut cancel: watch::Receiver<bool>,
        progress: watch::Sender<Progress>,
    ) {
        let mut rec = job.rec.clone();
        let _end = EndGuard {
            runtime: self,
            id: rec.id.clone(),
        };
        let dir = rec.log_dir.clone();
        let started = Instant::now();
        // A new worktree: checked out first, then the job queues for a slot.
        let fresh_worktree = job.checkout.is_some();
        if let Some(c) = job.checkout.take() {
            let deadline = deadline_in(Duration::from_secs(rec.timeout_s));
            if let Err(e) = self
                .prepare(&mut rec, &c, deadline, &mut cancel, &progress)
                .await
            {
                return self.stop_while_preparing(&mut rec, e, &c, started).await;
            }
            job.admission = Some(admit::first_look(
                &self.ctx.state_dir,
                &mut rec,
                &job.target,
                job.queue,
                job.pinned,
            ));
            self.keep(&rec);
        }
        // Held for the whole job: dropped when `run` returns.
        let _lease = match self
            .admitted(&mut job, &mut rec, &mut cancel, &progress)
            .await
        {
            Ok(l) => l,
            Err(stop) => return self.stop_while_queued(&mut rec, &stop, started).await,
        };
        let queued_for = started.elapsed();
        let shared = self.mark_active(&rec.endpoint, &rec.id);

        if let Err(e) = self.load_model(&job, &mut rec).await {
            return self.fail_before_session(&mut rec, e, started).await;
        }

        let reg = match self.open_route(&job, &rec).await {
            Ok(r) => r,
            Err(e) => return self.fail_before_session(&mut rec, e, started).await,
        };

        // Server state before: the probe that resolved the model (at most a
        // second old) has the slots and the counters.
        let before = &job.target.probe;
        let slots_at_start = before.slots;
        if let Some(s) = slots_at_start
            && s.free == 0
        {
            rec.queued_note = Some(format!(
                "all {} slots of `{}` were busy at start: the job queued on the server",
                s.total, rec.endpoint
            ));
        }
        // A worktree just checked out from HEAD has nothing changed: no
        // walk of the tree is needed to know it.
        let snap_before = if fresh_worktree {
            Some(worktree::Snapshot::new())
        } else {
            worktree::snapshot(&rec.cwd).await
        };

        let task = tokio::fs::read_to_string(JobDir::at(&dir).task())
            .await
            .unwrap_or_else(|_| rec.task.clone());
        // The time it waited for a slot counts toward timeout_s.
        let deadline = deadline_in(Duration::from_secs(rec.timeout_s).saturating_sub(queued_for));
        let resume = if rec.resumed_from.is_some() {
            rec.session_id.clone()
        } else {
            None
        };
        let mut end = self
            .session(
                &job,
                &mut rec,
                &reg,
                &task,
                resume,
                deadline,
                &mut cancel,
                &progress,
            )
            .await;

        // Acceptance: run the command ourselves; resume the same session
        // with a fix brief while rounds remain.
        if let Some(command) = job.acceptance.clone()
            && end.stop.is_none()
            && end.result.is_some()
            && reg.route.guard.fatal().is_none()
        {
            end = self
                .acceptance_rounds(
                    &job,
                    &mut rec,
                    &reg,
                    &command,
                    end,
                    deadline,
                    &mut cancel,
                    &progress,
                )
                .await;
        }

        self.finalize(&job, &mut rec, &reg, end, snap_before, &shared, started)
            .await;
        self.keep_final(&mut rec).await;
        self.unmark_active(&rec.endpoint, &rec.id);
        drop(reg);
    }

    /// The job's end: the outcome (the acceptance command decides over the
    /// delegate's word, a fatal answer over both), what changed in the
    /// tree, the figures from the request log and the server's counters,
    /// then the record finished as that status.
    #[allow(clippy::too_many_arguments)]
    async fn finalize(
        &self,
        job: &Job,
        rec: &mut JobRecord,
        reg: &crate::shim::Registration,
        end: SessionEnd,
        snap_before: Option<worktree::Snapshot>,
        shared: &AtomicBool,
        started: Instant,
    ) {
        let dir = rec.log_dir.clone();
        let before = &job.target.probe;
        let slots_at_start = before.slots;
        // Outcome.
        let SessionEnd {
            stop,
            result,
            exit: exit_code,
            stderr_tail,
        } = end;
        let (mut status, mut error) = outcome(
            stop.as_ref(),
            result.as_ref(),
            exit_code,
            &stderr_tail,
            rec.timeout_s,
            &JobDir::at(&dir).events(),
        );
        if stop.is_none()
            && let Some(a) = &rec.acceptance
        {
            // The command, not the delegate's word, decides.
            if a.passed {
                status = Status::Succeeded;
                error = None;
            } else {
                status = Status::Failed;
                error = Some(a.failure());
            }
        }
        if let Some(r) = &result {
            rec.set_result(r.text.clone());
            rec.num_turns = r.num_turns;
        }
        if !stderr_tail.trim().is_empty() {
            let path = JobDir::at(&dir).stderr();
            let tail = stderr_tail.clone();
            let wrote = tokio::task::spawn_blocking(move || {
                crate::paths::write_atomic(&path, tail.as_bytes())
            })
            .await;
            if let Ok(Err(e)) = wrote {
                tracing::error!("{e}");
            }
        }

        // What changed.
        let snap_after = worktree::snapshot(&rec.cwd).await;
        if let (Some(b), Some(a)) = (snap_before, &snap_after) {
            rec.files_changed = worktree::changed(&b, a);
        }
        if let Some(w) = rec.worktree.as_mut() {
            // The snapshot just taken is the worktree's status: whether it
            // is dirty needs no second walk.
            let dirty = snap_after.as_ref().map(|a| !a.is_empty());
            match worktree::finish(w, &rec.id, dirty).await {
                Ok(done) => *w = done,
                Err(e) => {
                    w.note = Some(format!("could not inspect the worktree: {e}"));
                    w.kept = tokio::fs::try_exists(&w.path).await.unwrap_or(true);
                }
            }
        }

        // Figures.
        let log_dir = dir.clone();
        let mut m = tokio::task::spawn_blocking(move || metrics::from_log(&log_dir))
            .await
            .unwrap_or_default();
        m.slots_at_start = slots_at_start;
        let after = probe::probe(&job.target.endpoint, job.probe_budget).await;
        if let (Some(b), Some(a)) = (&before.counters, &after.counters) {
            m.server = Some(metrics::server_delta(b, a, shared.load(Ordering::SeqCst)));
        }
        rec.usage = m.usage;
        rec.equivalent_usd =
            job.target
                .config
                .equivalent_usd(m.usage.input, m.usage.cache_read, m.usage.output);
        rec.reference_model = Some(job.target.config.defaults.reference_model.clone());
        rec.first_turn = m.first_turn;
        // "Answered": the session ended with its own report, not with a
        // failure of the server or of the shim's guard.
        let fatal = reg.route.guard.fatal();
        let answered = result.as_ref().is_some_and(|r| r.success) && fatal.is_none();
        let outcome = faults::Outcome::of(rec.tool_calls, rec.files_changed.len(), answered);
        rec.model_faults = Some(m.faults.clone());
        rec.model_note = faults::note(&m.faults, &outcome);
        rec.cache_note = m.cache_note(job.target.backend == crate::config::Backend::LlamaCpp);
        rec.outcome = Some(outcome);
        rec.metrics = Some(m);
        // A failure no retry could mend (a template or grammar the server
        // cannot build, a model stuck in a loop): its sentence is the
        // job's error, not Claude Code's echo of it.
        // A passed acceptance command still decides.
        let accepted = rec.acceptance.as_ref().is_some_and(|a| a.passed);
        if stop.is_none()
            && !accepted
            && let Some(why) = fatal
        {
            status = Status::Failed;
            error = Some(why);
        }
        // A job that timed out or failed while its backend failed every
        // request: the shim's sentence for it says why, not the bare end.
        if matches!(status, Status::Timeout | Status::Failed)
            && !matches!(stop, Some(Halt::Refused(_)))
            && let Some(f) = reg.route.guard.backend_failing()
        {
            error = Some(match error {
                Some(e) if status == Status::Timeout => format!("{}; {e}", f.why),
                _ => f.why,
            });
        }
        finish(rec, status, error, started);
        rec.last_activity = Some(format!(
            "{} after {:.0}s",
            status.as_str(),
            started.elapsed().as_secs_f64()
        ));
    }

    /// A model that a router has not loaded (or a sleeping server): load
    /// or wake it first, then take the real window from the instance. The
    /// error is the job's.
    async fn load_model(&self, job: &Job, rec: &mut JobRecord) -> Result<(), String> {
        let state = job
            .target
            .probe
            .models
            .iter()
            .find(|m| m.id == rec.served_id)
            .and_then(|m| m.state.clone());
        if let Some(need) = probe::load::need(job.target.probe.kind, state.as_ref()) {
            let verb = match need {
                probe::load::Need::Load => "loading",
                probe::load::Need::Wake => "waking the server for",
            };
            rec.last_activity = Some(format!("{verb} {} on {}", rec.served_id, rec.endpoint));
            self.keep(rec);
            let swap = job.target.probe.kind == Some(probe::ServerKind::LlamaSwap);
            let took = probe::load::ready(
                &job.target.endpoint,
                &rec.served_id,
                need,
                swap,
                job.load_timeout,
            )
            .await?;
            rec.load_note = Some(match need {
                probe::load::Need::Load => {
                    format!("loaded {} in {:.1} s", rec.served_id, took.as_secs_f64())
                }
                probe::load::Need::Wake => {
                    format!("woke the server in {:.1} s", took.as_secs_f64())
                }
            });
            probe::invalidate();
            let now = probe::probe(&job.target.endpoint, job.probe_budget).await;
            if let Some(c) = now
                .models
                .iter()
                .find(|m| m.id == rec.served_id)
                .and_then(|m| m.context)
            {
                rec.context = Some(c);
            }
            self.keep(rec);
        }
        Ok(())
    }

    /// The job's route through the shim: its log, its timeouts and its
    /// guard. The error is the job's.
    async fn open_route(
        &self,
        job: &Job,
        rec: &JobRecord,
    ) -> Result<crate::shim::Registration, String> {
        let shim = self
            .shim()
            .await
            .map_err(|e| format!("cannot start the shim on 127.0.0.1 ({e})"))?;
        shim.register(Route::for_target(
            rec.id.clone(),
            &job.target,
            rec.context,
            RequestLog::new(&rec.log_dir, job.dump),
            job.policy,
        ))
        .map_err(|e| format!("cannot register the job with the shim ({e})"))
    }

    /// The acceptance rounds: run the command; while it fails and rounds
    /// remain, resume the session with a fix brief. Returns how the last
    /// session ended (a stop, when the command was cancelled or hit the
    /// job's deadline).
    #[allow(clippy::too_many_arguments)]
    async fn acceptance_rounds(
        &self,
        job: &Job,
        rec: &mut JobRecord,
        reg: &crate::shim::Registration,
        command: &str,
        mut end: SessionEnd,
        deadline: tokio::time::Instant,
        cancel: &mut watch::Receiver<bool>,
        progress: &watch::Sender<Progress>,
    ) -> SessionEnd {
        let dir = rec.log_dir.clone();
        let (env, env_remove) = runner::over_clean_env(
            vec![("LOCALAGENTS_JOB".into(), rec.id.clone())],
            job.target.endpoint.api_key_env.as_deref(),
        );
        let mut round = 0;
        loop {
            round += 1;
            rec.last_activity = Some(format!("acceptance round {round}: {command}"));
            self.keep(rec);
            let _ = progress.send(progress_of(rec, reg, Some(round)));
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let spec = accept::Spec {
                command,
                cwd: &rec.cwd,
                output: JobDir::at(&dir).acceptance(),
                env_remove: &env_remove,
                env: &env,
                timeout: job.acceptance_timeout.min(left),
                cancel_marker: JobDir::at(&dir).cancel_marker(),
            };
            let run = match accept::run_once(&spec, round, cancel).await {
                Ok(r) => r,
                Err(e) => {
                    end.stop = Some(Halt::Refused(format!(
                        "cannot run the acceptance command `{command}` ({e})"
                    )));
                    break;
                }
            };
            let job_deadline_hit = run.stopped == Some(accept::Stop::Timeout)
                && tokio::time::Instant::now() >= deadline;
            rec.acceptance = Some(accept::Acceptance {
                command: command.to_string(),
                passed: run.exit_code == Some(0),
                exit_code: run.exit_code,
                rounds: round,
                output_tail: run.output_tail,
                elapsed_s: run.elapsed.as_secs_f64(),
                stopped: run.stopped.map(|s| match s {
                    accept::Stop::Timeout => format!(
                        "timed out after {:.0} s (defaults.acceptance_timeout_s)",
                        run.elapsed.as_secs_f64()
                    ),
                    accept::Stop::Cancelled => "cancelled".into(),
                }),
            });
            self.keep(rec);
            match run.stopped {
                Some(accept::Stop::Cancelled) => {
                    end.stop = Some(Halt::Cancelled);
                    break;
                }
                Some(accept::Stop::Timeout) if job_deadline_hit => {
                    end.stop = Some(Halt::Timeout);
                    break;
                }
                _ => {}
            }
            let passed = rec.acceptance.as_ref().is_some_and(|a| a.passed);
            if passed || round > job.fix_rounds || rec.session_id.is_none() {
                break;
            }
            let brief = rec
                .acceptance
                .as_ref()
                .map(accept::fix_brief)
                .unwrap_or_default();
            let session = rec.session_id.clone();
            let fix = self
                .session(job, rec, reg, &brief, session, deadline, cancel, progress)
                .await;
            // Keep the first report if the fix round says nothing.
            let keep = end.result.take();
            end = SessionEnd {
                result: fix.result.or(keep),
                ..fix
            };
            // A fix session that ended on a failure no retry can mend
            // (stuck, a template or grammar): no more rounds.
            if end.stop.is_some() || reg.route.guard.fatal().is_some() {
                break;
            }
        }
        end
    }

    /// One delegate session: start claude (fresh, or resuming `resume`)
    /// with `task`, follow its events into the record, stop it on cancel or
    /// at the deadline. Used for the job's session and for fix rounds.
    #[allow(clippy::too_many_arguments)]
    async fn session(
        &self,
        job: &Job,
        rec: &mut JobRecord,
        reg: &crate::shim::Registration,
        task: &str,
        resume: Option<String>,
        deadline: tokio::time::Instant,
        cancel: &mut watch::Receiver<bool>,
        progress: &watch::Sender<Progress>,
    ) -> SessionEnd {
        let mut child = match spawn_delegate(job, rec, reg, task, resume.as_deref()) {
            Ok(c) => c,
            Err(why) => return SessionEnd::refused(why),
        };
        let pgid = child.id().unwrap_or(0);
        rec.pid = Some(pgid);
        rec.guard = crate::process::Identity::of(pgid);
        rec.status = Status::Running;
        rec.started.get_or_insert_with(now_ts);
        rec.last_activity = Some("starting claude".into());
        self.keep(rec);

        let stderr = child.stderr().take();
        let stderr_task = tokio::spawn(async move {
            let mut buf = Vec::new();
            if let Some(mut e) = stderr {
                let _ = e.read_to_end(&mut buf).await;
            }
            crate::fmt::last_chars(&String::from_utf8_lossy(&buf), 2000)
        });
        let mut follow = Follow {
            offered: runner::offered_tools(&rec.allowed_tools, &rec.disallowed_tools),
            events: open_log(&JobDir::at(&rec.log_dir).events()),
            transcript: open_log(&JobDir::at(&rec.log_dir).transcript()),
            result: None,
        };
        let lines = child.stdout().take().map(|o| BufReader::new(o).lines());
        let cancel_marker = JobDir::at(&rec.log_dir).cancel_marker();
        let backend_fail = Duration::from_secs(job.target.config.defaults.backend_fail_s);
        let mut stop = self
            .follow(
                rec,
                reg,
                &mut follow,
                lines,
                deadline,
                backend_fail,
                cancel,
                progress,
            )
            .await;
        if stop.is_some() {
            crate::process::stop_group(pgid, crate::process::GRACE).await;
        }
        // The leader has closed stdout; give it a moment to exit, then make
        // sure nothing of its group is left.
        let exit = tokio::time::timeout(Duration::from_secs(10), child.inner_mut().wait()).await;
        if crate::process::group_alive(pgid) {
            crate::process::stop_group(pgid, Duration::from_secs(1)).await;
        }
        let _ = child.try_wait();
        let stderr_tail = stderr_task.await.unwrap_or_default();
        let result = follow.result;
        if cancel_marker.exists() && stop.is_none() && result.as_ref().is_none_or(|r| !r.success) {
            stop = Some(Halt::Cancelled);
        }
        SessionEnd {
            stop,
            result,
            exit: match &exit {
                Ok(Ok(s)) => Exit::Code(s.code()),
                _ => Exit::Unknown,
            },
            stderr_tail,
        }
    }

    /// Follow the delegate's stdout until it closes, or until a stop: a
    /// cancel (the channel, or another process's `cancel_requested`), the
    /// deadline, a refusal read from its events, or a backend that has
    /// failed every request for `backend_fail` (`defaults.backend_fail_s`;
    /// zero: never). The record is saved at most every half second.
    #[allow(clippy::too_many_arguments)]
    async fn follow(
        &self,
        rec: &mut JobRecord,
        reg: &crate::shim::Registration,
        f: &mut Follow,
        mut lines: Option<tokio::io::Lines<BufReader<tokio::process::ChildStdout>>>,
        deadline: tokio::time::Instant,
        backend_fail: Duration,
        cancel: &mut watch::Receiver<bool>,
        progress: &watch::Sender<Progress>,
    ) -> Option<Halt> {
        let cancel_marker = JobDir::at(&rec.log_dir).cancel_marker();
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let mut dirty = false;
        loop {
            let next = async {
                match lines.as_mut() {
                    Some(l) => l.next_line().await,
                    None => Ok(None),
                }
            };
            tokio::select! {
                line = next => {
                    let Ok(Some(line)) = line else { return None };
                    if let Some(refused) = f.line(rec, &line).await {
                        return Some(refused);
                    }
                    dirty = true;
                    let _ = progress.send(progress_of(rec, reg, None));
                }
                _ = cancel.changed() => return Some(Halt::Cancelled),
                _ = tokio::time::sleep_until(deadline) => return Some(Halt::Timeout),
                _ = tick.tick() => {
                    if cancel_marker.exists() {
                        return Some(Halt::Cancelled);
                    }
                    if !backend_fail.is_zero()
                        && let Some(f) = reg.route.guard.backend_failing()
                        && f.for_ >= backend_fail
                    {
                        return Some(Halt::Refused(backend_down(&f.why, backend_fail)));
                    }
                    if dirty {
                        self.keep(rec);
                        dirty = false;
                    }
                }
            }
        }
    }
}

/// Start the delegate for one session, through the job's route. `Err` is
/// the job's error.
fn spawn_delegate(
    job: &Job,
    rec: &JobRecord,
    reg: &crate::shim::Registration,
    task: &str,
    resume: Option<&str>,
) -> Result<crate::process::Guarded, String> {
    let append = rec
        .system_prompt_append
        .clone()
        .unwrap_or_else(|| job.default_append.clone());
    let settings = runner::RunSettings {
        served_id: &rec.served_id,
        window: rec.context,
        permission_mode: &rec.permission_mode,
        allowed_tools: &rec.allowed_tools,
        disallowed_tools: &rec.disallowed_tools,
        max_turns: rec.max_turns,
        setting_sources: &job.setting_sources,
        system_prompt_append: &append,
        resume_session: resume,
        mcp_config: job.mcp_config.as_deref(),
        sandbox: job.sandbox,
        shim_silence: Some(reg.route.longest_silence()),
    };
    let mut launch = runner::launch(
        job.claude.clone(),
        &rec.cwd,
        &reg.base_url,
        &job.target.endpoint,
        &settings,
        task,
    );
    // Every process of the job inherits it: a tag to find them by.
    launch.env.push(("LOCALAGENTS_JOB".into(), rec.id.clone()));
    let prompt = super::dir::JobDir::at(&rec.log_dir).prompt();
    runner::write_prompt(&launch, &prompt).map_err(|e| {
        format!(
            "cannot write the delegate's prompt to {} ({e}): check that the state dir is writable",
            prompt.display()
        )
    })?;
    runner::spawn(&launch, &prompt).map_err(|e| {
        format!(
            "cannot start {} ({e}): check that it is the Claude Code CLI and executable",
            launch.claude.display()
        )
    })
}

/// A log file of the job's dir, opened for appending; `None` (logged) when
/// it cannot be: the job goes on without it.
fn open_log(path: &Path) -> Option<tokio::fs::File> {
    match crate::paths::append_private(path) {
        Ok(f) => Some(tokio::fs::File::from_std(f)),
        Err(e) => {
            tracing::error!(
                "cannot open {} ({e}); the job goes on without it",
                path.display()
            );
            None
        }
    }
}

/// What a session's events are read into, besides the record.
struct Follow {
    /// The tools the session was offered (to check `system/init` against).
    offered: Vec<String>,
    events: Option<tokio::fs::File>,
    transcript: Option<tokio::fs::File>,
    result: Option<runner::ResultEvent>,
}

impl Follow {
    /// One line of the delegate's stream-json: logged as it came, read into
    /// the record and the transcript. `Some` when the session must stop (a
    /// tool it was offered is missing).
    async fn line(&mut self, rec: &mut JobRecord, line: &str) -> Option<Halt> {
        append(&mut self.events, "events.jsonl", &[line]).await;
        let info = runner::parse_event(line);
        if let Some(s) = info.session_id {
            rec.session_id = Some(s);
        }
        if let Some(tools) = &info.init_tools {
            let missing = runner::missing_tools(&self.offered, tools);
            if !missing.is_empty() {
                return Some(Halt::Refused(unknown_tools_error(
                    &missing,
                    info.claude_version.as_deref(),
                )));
            }
        }
        append(&mut self.transcript, "transcript.txt", &info.transcript).await;
        rec.tool_calls += info.tool_calls;
        for p in info.files_touched {
            if !rec.files_touched.contains(&p) {
                rec.files_touched.push(p);
            }
        }
        if let Some(a) = info.last_activity {
            rec.last_activity = Some(a);
        }
        if let Some(r) = info.result {
            self.result = Some(r);
        }
        None
    }
}

/// Append lines to a job log. A failed write is logged and the file left
/// alone from then on (a full disk): the job goes on, its record says the
/// rest.
async fn append<S: AsRef<str>>(file: &mut Option<tokio::fs::File>, name: &str, lines: &[S]) {
    let Some(f) = file.as_mut() else { return };
    for l in lines {
        if let Err(e) = f.write_all(format!("{}\n", l.as_ref()).as_bytes()).await {
            tracing::error!("cannot write {name} ({e}); the rest of it is not kept");
            *file = None;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(success: bool, text: &str, reason: Option<&str>) -> runner::ResultEvent {
        runner::ResultEvent {
            success,
            text: Some(text.into()),
            num_turns: Some(2),
            usage: None,
            subtype: if success {
                "success"
            } else {
                "error_max_turns"
            }
            .into(),
            terminal_reason: reason.map(str::to_string),
        }
    }

    #[test]
    fn outcomes() {
        let ev = Path::new("/j/events.jsonl");
        let ok = result(true, "done", None);
        assert_eq!(
            outcome(None, Some(&ok), Exit::Code(Some(0)), "", 60, ev),
            (Status::Succeeded, None)
        );
        // A stop we decided wins over whatever the delegate said.
        let (s, e) = outcome(Some(&Halt::Timeout), Some(&ok), Exit::Unknown, "", 60, ev);
        assert_eq!(s, Status::Timeout);
        assert!(e.unwrap().contains("timed out after 60 s"));
        let (s, e) = outcome(Some(&Halt::Cancelled), None, Exit::Unknown, "", 60, ev);
        assert_eq!(
            (s, e.unwrap().starts_with("cancelled")),
            (Status::Cancelled, true)
        );
        let (s, e) = outcome(
            Some(&Halt::Refused("allowed_tools names `X`".into())),
            None,
            Exit::Code(None),
            "",
            60,
            ev,
        );
        assert_eq!(
            (s, e.as_deref()),
            (Status::Failed, Some("allowed_tools names `X`"))
        );
        let bad = result(false, "Prompt is too long", Some("blocking_limit"));
        let (s, e) = outcome(None, Some(&bad), Exit::Code(Some(1)), "", 60, ev);
        assert_eq!(s, Status::Failed);
        assert_eq!(
            e.unwrap(),
            "claude ended with error_max_turns: Prompt is too long (terminal_reason blocking_limit)"
        );
        let (_, e) = outcome(None, None, Exit::Code(Some(2)), "a\nb\nc\nd\n", 60, ev);
        assert_eq!(e.unwrap(), "claude exited (2) without a result: b | c | d");
        let (_, e) = outcome(None, None, Exit::Code(None), "  ", 60, ev);
        assert_eq!(
            e.unwrap(),
            "claude exited (a signal) without a result; see /j/events.jsonl"
        );
    }

    #[test]
    fn a_run_that_ends_without_finishing_its_record_fails_it() {
        let tmp = tempfile::tempdir().unwrap();
        let m = Runtime::new(crate::context::Context {
            explicit_config: None,
            state_dir: tmp.path().to_path_buf(),
        });
        let id = crate::jobs::record::new_id().unwrap();
        let dir = m.store.dir(&id).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        let mut rec: JobRecord = serde_json::from_value(serde_json::json!({
            "id": id, "task": "t", "model": "m", "served_id": "m", "endpoint": "box",
            "base_url": "http://127.0.0.1:1", "cwd": "/tmp", "origin_cwd": "/tmp",
            "isolation": "none", "status": "running", "created": now_ts(), "started": null,
            "finished": null, "elapsed_s": null, "session_id": null, "result": null,
            "error": null, "num_turns": null, "tool_calls": 0,
            "usage": {"input": 0, "cache_read": 0, "output": 0}, "files_touched": [],
            "files_changed": [], "worktree": null, "last_activity": null, "log_dir": dir,
            "context": null, "metrics": null, "queued_note": null,
            "permission_mode": "acceptEdits", "max_turns": 1, "timeout_s": 60,
            "allowed_tools": [], "disallowed_tools": [], "system_prompt_append": null,
            "resumed_from": null, "pid": null, "owner_pid": std::process::id()
        }))
        .unwrap();
        m.store.save(&rec).unwrap();
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _end = EndGuard {
                runtime: &m,
                id: id.clone(),
            };
            panic!("a phase panicked");
        }));
        assert!(unwound.is_err());
        let after = m.store.load(&id).unwrap();
        assert_eq!(after.status, Status::Failed);
        assert!(
            after
                .error
                .unwrap()
                .starts_with("the job stopped before it finished")
        );
        // A record the run finished is left as it is.
        rec.status = Status::Succeeded;
        m.store.save(&rec).unwrap();
        drop(EndGuard {
            runtime: &m,
            id: id.clone(),
        });
        assert_eq!(m.store.load(&id).unwrap().status, Status::Succeeded);
    }
}
