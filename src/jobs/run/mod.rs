//! One job's life: start the delegate through the shim, follow its
//! events, stop it on cancel or timeout, and record the outcome.
//!
//! [`outcome`] is the pure decision at the end (what status, which
//! sentence), so it is tested without a `claude` process.
//!
//! A run is one `JobRun`, which owns what its phases share (the job, its
//! record, its cancel and progress channels, when it started); the phases
//! are its methods, one file each: the checkout and the wait for a slot
//! (`prepare.rs`), the delegate session (`session.rs`), the acceptance
//! rounds (`accept_rounds.rs`) and the end (`finish.rs`). From the route
//! on, a `Live` adds the route and the deadline.

mod accept_rounds;
mod finish;
mod nudge;
mod prepare;
mod session;

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::admit;
use super::args::deadline_in;
use super::dir::JobDir;
use super::job::{Halt, Job, Progress};
use super::lease::Lease;
use super::record::{JobRecord, Status};
use super::runtime::Runtime;
use crate::probe;
use crate::runner;
use crate::shim::Route;
use crate::shim::log::RequestLog;
use crate::worktree;

/// How one delegate session ended.
pub(super) struct SessionEnd {
    stop: Option<Halt>,
    result: Option<runner::ResultEvent>,
    exit: Exit,
    stderr_tail: String,
    /// The delegate's last words in this session.
    said: Option<String>,
    /// The calls of its last turn.
    last_calls: Vec<String>,
    /// Tool calls it made in this session.
    tool_calls: u64,
}

impl SessionEnd {
    /// The step its last words announce, when the session ended on its own
    /// ([`crate::jobs::pending::announced`]): what the nudge answers and
    /// what an incomplete end names.
    fn announced_step(&self) -> Option<String> {
        let r = self.result.as_ref().filter(|r| r.success)?;
        crate::jobs::pending::announced(r.text.as_deref().or(self.said.as_deref())?)
    }

    /// A session that never started: `why` is the job's error.
    fn refused(why: String) -> SessionEnd {
        SessionEnd {
            stop: Some(Halt::Refused(why)),
            result: None,
            exit: Exit::Unknown,
            stderr_tail: String::new(),
            said: None,
            last_calls: Vec::new(),
            tool_calls: 0,
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

/// Why a job failed before its delegate ran: its model would not load,
/// the shim or the delegate would not start. The sentence is the job's
/// error.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// Loading or waking the model failed (the loader's sentence).
    #[error("{0}")]
    Load(String),
    #[error("cannot start the shim on 127.0.0.1 ({0})")]
    Shim(std::io::Error),
    #[error("cannot register the job with the shim ({0})")]
    Register(std::io::Error),
    #[error(
        "cannot write the delegate's prompt to {} ({source}): check that the state dir is writable",
        path.display()
    )]
    Prompt {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(
        "cannot start {} ({source}): check that it is the Claude Code CLI and executable",
        claude.display()
    )]
    Spawn {
        claude: std::path::PathBuf,
        source: std::io::Error,
    },
}

impl LaunchError {
    pub fn kind(&self) -> crate::error::Kind {
        use crate::error::Kind;
        match self {
            LaunchError::Load(_) => Kind::ModelUnavailable,
            LaunchError::Spawn { .. } => Kind::Invalid,
            LaunchError::Shim(_) | LaunchError::Register(_) | LaunchError::Prompt { .. } => {
                Kind::Io
            }
        }
    }
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
            // A session Claude Code itself stopped says "success" with an
            // error; that is no success.
            let mut msg = if r.subtype == "success" {
                format!("Claude Code stopped the session: {why}")
            } else {
                format!("claude ended with {}: {why}", r.subtype)
            };
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
        if rec.status().terminal() {
            return;
        }
        tracing::error!("job {} stopped before it finished", self.id);
        rec.end_outside(
            Status::Failed,
            "the job stopped before it finished: an internal error of localagents (its log on stderr says more); run it again".into(),
        );
        self.runtime.keep_now(&rec);
        self.runtime.unmark_active(rec.endpoint(), rec.id());
    }
}

/// One job's run: what its phases share.
pub(super) struct JobRun<'a> {
    rt: &'a Runtime,
    job: Job,
    rec: JobRecord,
    cancel: watch::Receiver<bool>,
    progress: watch::Sender<Progress>,
    /// When the run began (its checkout and its wait count toward
    /// `timeout_s`).
    started: Instant,
}

/// A run from its route on: the route through the shim and the job's
/// deadline beside the run.
pub(super) struct Live<'r, 'a> {
    run: &'r mut JobRun<'a>,
    reg: &'r crate::shim::Registration,
    deadline: tokio::time::Instant,
}

/// Run a job to its end: the task [`super::manager::Manager::start`]
/// spawns.
pub(super) async fn run(
    rt: &Runtime,
    job: Job,
    cancel: watch::Receiver<bool>,
    progress: watch::Sender<Progress>,
) {
    let rec = job.rec.clone();
    let _end = EndGuard {
        runtime: rt,
        id: rec.id().to_string(),
    };
    let mut run = JobRun {
        rt,
        job,
        rec,
        cancel,
        progress,
        started: Instant::now(),
    };
    run.go().await;
    if let Some(t) = &run.job.trace
        && run.rec.status().terminal()
    {
        t.ended(&finish::telemetry_end(&run.rec));
    }
}

impl JobRun<'_> {
    /// The phases in order; each ends the record itself when it stops the
    /// job.
    async fn go(&mut self) {
        let dir = self.rec.log_dir().to_path_buf();
        // A new worktree: checked out first, then the job queues for a slot.
        let fresh_worktree = self.job.checkout.is_some();
        if let Some(c) = self.job.checkout.take() {
            let deadline = deadline_in(Duration::from_secs(self.rec.timeout_s()));
            if let Err(e) = self.prepare(&c, deadline).await {
                return self.stop_while_preparing(e, &c).await;
            }
            let job = &self.job;
            let admission = admit::first_look(
                &self.rt.ctx.state_dir,
                &mut self.rec,
                &job.target,
                job.queue,
                job.pinned,
            );
            self.job.admission = Some(admission);
            self.rt.keep(&self.rec);
        }
        // Held for the whole job: dropped when `go` returns.
        let _lease = match self.admitted().await {
            Ok(l) => l,
            Err(stop) => return self.stop_while_queued(&stop).await,
        };
        let queued_for = self.started.elapsed();
        let shared = self.rt.mark_active(self.rec.endpoint(), self.rec.id());

        if let Err(e) = self.load_model().await {
            return self.fail_before_session(e).await;
        }

        let reg = match self.open_route(_lease.as_ref()).await {
            Ok(r) => r,
            Err(e) => return self.fail_before_session(e).await,
        };

        // Server state before: the probe that resolved the model (at most a
        // second old) has the slots and the counters.
        let rec = &mut self.rec;
        let slots_at_start = self.job.target.probe.slots;
        if let Some(s) = slots_at_start
            && s.free == 0
        {
            rec.busy_at_start(s.total);
        }
        // A worktree just checked out from HEAD has nothing changed: no
        // walk of the tree is needed to know it.
        let snap_before = if fresh_worktree {
            Some(worktree::Snapshot::new())
        } else {
            worktree::snapshot(rec.cwd()).await
        };

        let task = tokio::fs::read_to_string(JobDir::at(&dir).task())
            .await
            .unwrap_or_else(|_| rec.task().to_string());
        // The time it waited for a slot counts toward timeout_s.
        let deadline = deadline_in(Duration::from_secs(rec.timeout_s()).saturating_sub(queued_for));
        let resume = if rec.resumed_from().is_some() {
            rec.session_id().map(str::to_string)
        } else {
            None
        };
        let pinned = reg.route.pinned_slot();
        if resume.is_some() {
            self.restore_slot(pinned).await;
        }
        let mut live = Live {
            run: self,
            reg: &reg,
            deadline,
        };
        let max_turns = live.run.rec.max_turns();
        let mut end = live.session(&task, resume, max_turns).await;

        // Acceptance: run the command ourselves; resume the same session
        // with a fix brief while rounds remain. Without one, a delegate that
        // stopped announcing a step is nudged to take it.
        match live.run.job.acceptance.clone() {
            Some(command)
                if end.stop.is_none()
                    && end.result.is_some()
                    && reg.route.guard.fatal().is_none() =>
            {
                end = live.acceptance_rounds(&command, end).await;
            }
            Some(_) => {}
            None => end = live.nudges(end).await,
        }

        live.finalize(end, snap_before, &shared).await;
        self.rt.keep_final(&mut self.rec).await;
        // Still holding the slot: its cache, saved for a later resume.
        self.save_slot(pinned).await;
        self.rt.unmark_active(self.rec.endpoint(), self.rec.id());
        drop(reg);
    }

    /// A resumed job pinned to `slot`: the slot file its earlier job was
    /// saved to, restored into it, so its first request finds the
    /// conversation in the cache. Best effort: said in the log.
    async fn restore_slot(&self, slot: Option<u64>) {
        let (Some(slot), Some(prior)) = (slot, self.rec.resumed_from()) else {
            return;
        };
        let (state, endpoint, prior) = (
            self.rt.ctx.state_dir.clone(),
            self.rec.endpoint().to_string(),
            prior.to_string(),
        );
        let file = tokio::task::spawn_blocking(move || super::saved::find(&state, &endpoint, &prior))
            .await
            .ok()
            .flatten();
        let Some(file) = file else {
            tracing::info!(job = %self.rec.id(), "no saved slot of the resumed job: it starts cold");
            return;
        };
        match probe::saved::restore(&self.job.target.endpoint, slot, &file).await {
            Ok(m) => tracing::info!(job = %self.rec.id(), slot, tokens = m.tokens(), "restored the resumed job's slot from {file}"),
            Err(e) => tracing::warn!(job = %self.rec.id(), slot, "could not restore the resumed job's slot from {file}: {e}"),
        }
    }

    /// A job pinned to `slot` has ended its sessions: the slot's cache,
    /// saved on the server under the ring's name for it
    /// ([`super::saved`]). Best effort: a server without
    /// `--slot-save-path` says so at debug level (`doctor` names the flag).
    async fn save_slot(&self, slot: Option<u64>) {
        let Some(slot) = slot else { return };
        let (state, endpoint, id) = (
            self.rt.ctx.state_dir.clone(),
            self.rec.endpoint().to_string(),
            self.rec.id().to_string(),
        );
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let placed = {
            let (state, endpoint, id) = (state.clone(), endpoint.clone(), id.clone());
            tokio::task::spawn_blocking(move || super::saved::place(&state, &endpoint, &id, &now)).await
        };
        let file = match placed {
            Ok(Ok(f)) => f,
            Ok(Err(e)) => return tracing::warn!(job = %id, "cannot record a saved slot: {e}"),
            Err(_) => return,
        };
        match probe::saved::save(&self.job.target.endpoint, slot, &file).await {
            Ok(m) => tracing::info!(job = %id, slot, tokens = m.tokens(), "saved the job's slot as {file}"),
            Err(e) => {
                if matches!(e, probe::saved::SlotError::NoSavePath | probe::saved::SlotError::NoSlots) {
                    tracing::debug!(job = %id, "the job's slot is not saved: {e}");
                } else {
                    tracing::warn!(job = %id, slot, "could not save the job's slot: {e}");
                }
                let _ = tokio::task::spawn_blocking(move || super::saved::forget(&state, &endpoint, &id)).await;
            }
        }
    }

    /// A job that fails before its session starts (a load, the shim):
    /// finished as failed with `why`, saved, and no longer active on its
    /// endpoint.
    async fn fail_before_session(&mut self, why: LaunchError) {
        let (rt, started) = (self.rt, self.started);
        let JobRun { rec, .. } = self;
        rec.finish(Status::Failed, Some(why.to_string()), started);
        rt.keep_final(rec).await;
        rt.unmark_active(rec.endpoint(), rec.id());
    }

    /// A model that a router has not loaded (or a sleeping server): load
    /// or wake it first, then take the real window from the instance. The
    /// error is the job's.
    async fn load_model(&mut self) -> Result<(), LaunchError> {
        let rt = self.rt;
        let JobRun { job, rec, .. } = self;
        let state = job
            .target
            .probe
            .models
            .iter()
            .find(|m| m.id == rec.served_id())
            .and_then(|m| m.state.clone());
        if let Some(need) = probe::load::need(job.target.probe.kind, state.as_ref()) {
            rec.model_loading(need);
            rt.keep(rec);
            let took = probe::load::ready(
                &job.target.endpoint,
                rec.served_id(),
                need,
                job.target.probe.kind,
                job.load_timeout,
            )
            .await
            .map_err(LaunchError::Load)?;
            probe::invalidate();
            let now = probe::probe(&job.target.endpoint, job.probe_budget).await;
            let context = now
                .models
                .iter()
                .find(|m| m.id == rec.served_id())
                .and_then(|m| m.context);
            rec.model_loaded(need, took, context);
            rt.keep(rec);
            // The window is known only now: a small one starts no job.
            if let Some(refusal) = context
                .and_then(|c| probe::small_window(job.target.backend, rec.served_id(), c))
            {
                return Err(LaunchError::Load(refusal));
            }
        }
        Ok(())
    }

    /// The job's route through the shim: its log, its timeouts and its
    /// guard. The error is the job's.
    async fn open_route(
        &self,
        lease: Option<&Lease>,
    ) -> Result<crate::shim::Registration, LaunchError> {
        let (rt, job, rec) = (self.rt, &self.job, &self.rec);
        let shim = rt.shim().await.map_err(LaunchError::Shim)?;
        shim.register(
            Route::for_target(
                rec.id().to_string(),
                &job.target,
                rec.context(),
                RequestLog::new(rec.log_dir(), job.dump).traced(job.trace.clone()),
                job.policy,
            )
            .pinned(lease.map(|l| l.slot), job.target.probe.kind),
        )
        .map_err(LaunchError::Register)
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
        let id = crate::jobs::record::new_job_id().unwrap();
        let dir = m.store.dir(&id).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        let mut rec =
            crate::jobs::record::test_record(&id, &dir, "running", &crate::shim::log::now_ts());
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
        assert_eq!(after.status(), Status::Failed);
        assert!(
            after
                .error()
                .unwrap()
                .starts_with("the job stopped before it finished")
        );
        // A record the run finished is left as it is.
        rec.finish(Status::Succeeded, None, Instant::now());
        m.store.save(&rec).unwrap();
        drop(EndGuard {
            runtime: &m,
            id: id.clone(),
        });
        assert_eq!(m.store.load(&id).unwrap().status(), Status::Succeeded);
    }
}
