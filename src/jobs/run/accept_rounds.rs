//! The acceptance rounds: run the job's command ourselves; while it
//! fails and rounds remain, resume the same session with a fix brief.

use crate::jobs::accept;
use crate::jobs::dir::JobDir;
use crate::jobs::job::Halt;
use crate::jobs::run::session::progress_now;
use crate::jobs::run::{JobRun, Live, SessionEnd};
use crate::runner;

impl Live<'_, '_> {
    /// The acceptance rounds: run the command; while it fails and rounds
    /// remain, resume the session with a fix brief. Returns how the last
    /// session ended (a stop, when the command was cancelled or hit the
    /// job's deadline).
    pub(super) async fn acceptance_rounds(
        &mut self,
        command: &str,
        mut end: SessionEnd,
    ) -> SessionEnd {
        let (rt, reg, deadline) = (self.run.rt, self.reg, self.deadline);
        let JobRun { job, rec, .. } = &mut *self.run;
        let dir = rec.log_dir().to_path_buf();
        let (env, env_remove) = runner::over_clean_env(
            vec![("LOCALAGENTS_JOB".into(), rec.id().to_string())],
            job.target.endpoint.api_key_env.as_deref(),
        );
        let mut round = 0;
        loop {
            round += 1;
            let JobRun {
                job,
                rec,
                cancel,
                progress,
                ..
            } = &mut *self.run;
            rec.acceptance_round(round, command);
            rt.keep(rec);
            let _ = progress.send(progress_now(rec, reg, Some(round)));
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let spec = accept::Spec {
                command,
                cwd: rec.cwd(),
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
            rec.acceptance_ran(accept::Acceptance {
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
            rt.keep(rec);
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
            let passed = rec.acceptance().is_some_and(|a| a.passed);
            if passed || round > job.fix_rounds || rec.session_id().is_none() {
                break;
            }
            let brief = rec
                .acceptance()
                .map(accept::fix_brief)
                .unwrap_or_default();
            let session = rec.session_id().map(str::to_string);
            let turns = self.run.rec.max_turns();
            let fix = self.session(&brief, session, turns).await;
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
}
