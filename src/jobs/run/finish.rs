//! The job's end: the outcome (the acceptance command decides over the
//! delegate's word, a fatal answer over both), what changed in the tree,
//! the figures from the request log and the server's counters, then the
//! record finished as that status.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::jobs::dir::JobDir;
use crate::jobs::job::{Halt, Job};
use crate::jobs::metrics;
use crate::jobs::pending;
use crate::jobs::record::{JobRecord, Status};
use crate::jobs::run::{JobRun, Live, SessionEnd, outcome};
use crate::probe;
use crate::worktree;

impl Live<'_, '_> {
    /// The job's end: the outcome (the acceptance command decides over the
    /// delegate's word, a fatal answer over both), what changed in the
    /// tree, the figures from the request log and the server's counters,
    /// then the record finished as that status.
    pub(super) async fn finalize(
        &mut self,
        end: SessionEnd,
        snap_before: Option<worktree::Snapshot>,
        shared: &AtomicBool,
    ) {
        let (reg, started) = (self.reg, self.run.started);
        let JobRun { job, rec, .. } = &mut *self.run;
        let dir = rec.log_dir().to_path_buf();
        // Outcome.
        let announced = end.announced_step();
        let SessionEnd {
            stop,
            result,
            exit: exit_code,
            stderr_tail,
            said,
            last_calls,
            tool_calls: _,
        } = end;
        let (mut status, mut error) = outcome(
            stop.as_ref(),
            result.as_ref(),
            exit_code,
            &stderr_tail,
            rec.timeout_s(),
            &JobDir::at(&dir).events(),
        );
        // A session that ran out of its window says so, with the fix.
        if stop.is_none()
            && let Some(why) = out_of_window(job, rec, result.as_ref())
        {
            error = Some(why);
        }
        // Work left pending. Without an acceptance command it is the job's
        // end; with one, the command decides, and a turn limit it failed
        // after is kept beside its failure.
        if stop.is_none()
            && let Some(i) = incomplete(result.as_ref(), announced, said.as_deref(), &last_calls)
            && let Some(why) = left_pending(rec, i, job.acceptance.is_some())
        {
            status = Status::Failed;
            error = Some(why);
        }
        if stop.is_none()
            && let Some(a) = rec.acceptance()
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
            rec.session_result(r.text.clone(), r.num_turns);
        }
        if !stderr_tail.trim().is_empty() {
            write_stderr(JobDir::at(&dir).stderr(), stderr_tail.clone()).await;
        }
        tree_changes(rec, snap_before).await;
        let m = figures(job, &dir, shared).await;
        // "Answered": the session ended with its own report, not with a
        // failure of the server or of the shim's guard.
        let fatal = reg.route.guard.fatal();
        let answered = result.as_ref().is_some_and(|r| r.success) && fatal.is_none();
        let llama_cpp = job.target.backend == crate::config::Backend::LlamaCpp;
        rec.set_figures(m, &job.target.config, answered, llama_cpp);
        // A failure no retry could mend (a template or grammar the server
        // cannot build, a model stuck in a loop): its sentence is the
        // job's error, not Claude Code's echo of it.
        // A passed acceptance command still decides.
        let accepted = rec.acceptance().is_some_and(|a| a.passed);
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
        rec.finish_session(status, error, started);
    }
}

/// The error of a session that ran out of its window, with the server's
/// fix.
fn out_of_window(
    job: &Job,
    rec: &JobRecord,
    result: Option<&crate::runner::ResultEvent>,
) -> Option<String> {
    let r = result.filter(|r| !r.success)?;
    let text = r.text.as_deref().unwrap_or_default();
    if !crate::jobs::window::ran_out(r.terminal_reason.as_deref(), text) {
        return None;
    }
    let fix = job.target.backend.window_fix(rec.served_id());
    Some(crate::jobs::window::out_of_window(
        rec.context(),
        rec.window(),
        text,
        &fix,
    ))
}

/// Keep what was pending in the record; without an acceptance command it
/// is the job's end: its error sentence. With one, the command decides,
/// and only a turn limit it failed after is kept.
fn left_pending(rec: &mut JobRecord, i: pending::Incomplete, acceptance: bool) -> Option<String> {
    if !acceptance {
        let why = pending::sentence(&i, rec.max_turns(), rec.ending().nudges.len());
        rec.ended_incomplete(i);
        return Some(why);
    }
    if i.why == pending::Why::MaxTurns && rec.acceptance().is_some_and(|a| !a.passed) {
        rec.ended_incomplete(i);
    }
    None
}

/// What a session that ended on its own left pending: the turn limit came
/// first, or its last words announce a step it did not take.
fn incomplete(
    result: Option<&crate::runner::ResultEvent>,
    announced: Option<String>,
    said: Option<&str>,
    last_calls: &[String],
) -> Option<pending::Incomplete> {
    if result?.subtype == "error_max_turns" {
        return Some(pending::Incomplete {
            why: pending::Why::MaxTurns,
            pending: pending::at_turn_limit(last_calls, said),
        });
    }
    Some(pending::Incomplete {
        why: pending::Why::Announced,
        pending: announced?,
    })
}

/// Keep the session's stderr tail in the job's dir (`stderr.txt`).
async fn write_stderr(path: std::path::PathBuf, tail: String) {
    let wrote =
        tokio::task::spawn_blocking(move || crate::paths::write_atomic(&path, tail.as_bytes()))
            .await;
    if let Ok(Err(e)) = wrote {
        tracing::error!("{e}");
    }
}

/// What changed: the files the session changed in its tree since
/// `snap_before`, and its worktree's end (kept when dirty).
async fn tree_changes(rec: &mut JobRecord, snap_before: Option<worktree::Snapshot>) {
    let snap_after = worktree::snapshot(rec.cwd()).await;
    if let (Some(b), Some(a)) = (snap_before, &snap_after) {
        rec.tree_changed(worktree::changed(&b, a));
    }
    if let Some(mut w) = rec.worktree().cloned() {
        // The snapshot just taken is the worktree's status: whether it
        // is dirty needs no second walk.
        let dirty = snap_after.as_ref().map(|a| !a.is_empty());
        match worktree::finish(&w, rec.id(), dirty).await {
            Ok(done) => w = done,
            Err(e) => {
                w.note = Some(format!("could not inspect the worktree: {e}"));
                w.kept = tokio::fs::try_exists(&w.path).await.unwrap_or(true);
            }
        }
        rec.worktree_ended(w);
    }
}

/// The job's figures: its request log's, with the server's counters
/// before and after it (behind a router, the replica that served it).
async fn figures(job: &Job, dir: &std::path::Path, shared: &AtomicBool) -> metrics::JobMetrics {
    let before = &job.target.probe;
    let log_dir = dir.to_path_buf();
    let mut m = tokio::task::spawn_blocking(move || metrics::from_log(&log_dir))
        .await
        .unwrap_or_default();
    m.slots_at_start = before.slots;
    let after = probe::probe(&job.target.endpoint, job.probe_budget).await;
    if let (Some(b), Some(a)) = (&before.counters, &after.counters) {
        m.server = Some(metrics::server_delta(b, a, shared.load(Ordering::SeqCst)));
    } else if !before.replicas.is_empty() {
        // Behind a router: the replica that served the job, or none.
        let prompt = m.usage.input + m.usage.cache_read;
        let shared = shared.load(Ordering::SeqCst);
        m.server = metrics::router_delta(&before.replicas, &after.replicas, prompt, shared);
    }
    m.router = metrics::router_view(
        &before.replicas,
        &after.replicas,
        job.target.endpoint.session_header.as_deref(),
    );
    m
}

/// How the job ended, for its telemetry span and counters: its status,
/// `error.type` (`incomplete`, `runaway` or `truncated` before the bare
/// status), its turns, calls and the model faults seen, by name.
pub(super) fn telemetry_end(rec: &JobRecord) -> crate::otel::JobEnd {
    let status = rec.status();
    let faults = rec
        .model_faults()
        .or(rec.metrics().map(|m| &m.faults))
        .cloned()
        .unwrap_or_default();
    let runaways = faults.runaway_output.as_ref().map_or(0, |r| r.count);
    let names: Vec<String> = [
        ("repaired_tool_calls", faults.repaired_tool_calls > 0),
        ("unparsed_tool_text", faults.unparsed_tool_text > 0),
        ("loop_notes", faults.loop_notes > 0),
        ("max_tokens_retries", faults.max_tokens_retries > 0),
        ("empty_responses", faults.empty_responses > 0),
        ("runaway_output", runaways > 0),
        ("truncated", faults.truncated.is_some()),
    ]
    .into_iter()
    .filter(|(_, seen)| *seen)
    .map(|(n, _)| n.to_string())
    .collect();
    let error_type = (status != Status::Succeeded).then(|| {
        if rec.ending().incomplete.is_some() {
            "incomplete"
        } else if faults.truncated.is_some() {
            "truncated"
        } else if runaways > 0 {
            "runaway"
        } else {
            status.as_str()
        }
        .to_string()
    });
    crate::otel::JobEnd {
        status: status.as_str().to_string(),
        error_type,
        conversation_id: rec.session_id().map(str::to_string),
        turns: rec.num_turns(),
        tool_calls: rec.tool_calls(),
        faults: names,
        slot_losses: rec.metrics().map_or(0, |m| m.slot_losses),
        runaways,
    }
}
