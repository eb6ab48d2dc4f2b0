//! One delegate session: start claude through the job's route (fresh, or
//! resuming), follow its events into the record and the job's logs, and
//! stop it on cancel, at the deadline, on a refusal read from its events
//! or when its backend fails every request. The job's session and each
//! fix round are one.

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::jobs::dir::JobDir;
use crate::jobs::job::{Halt, Job, Progress};
use crate::jobs::record::JobRecord;
use crate::jobs::run::{Exit, JobRun, LaunchError, Live, SessionEnd, unknown_tools_error};
use crate::runner;

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
pub(super) fn progress_now(
    rec: &JobRecord,
    reg: &crate::shim::Registration,
    acceptance_round: Option<u32>,
) -> Progress {
    Progress {
        items: None,
        turns: reg.route.log.messages(),
        tool_calls: rec.tool_calls(),
        last_activity: rec.last_activity().map(str::to_string).unwrap_or_default(),
        tokens: reg.route.log.tokens(),
        acceptance_round,
    }
}

impl Live<'_, '_> {
    /// One delegate session of `turns` turns: start claude (fresh, or
    /// resuming `resume`) with `task` and its turn budget, follow its
    /// events into the record, stop it on cancel or at the deadline. Used
    /// for the job's session, its nudges and its fix rounds.
    pub(super) async fn session(
        &mut self,
        task: &str,
        resume: Option<String>,
        turns: u32,
    ) -> SessionEnd {
        let (rt, reg) = (self.run.rt, self.reg);
        let JobRun { job, rec, .. } = &mut *self.run;
        reg.route.guard.turn_budget.start(turns);
        let task = with_budget(task, turns);
        let mut child = match spawn_delegate(job, rec, reg, &task, resume.as_deref(), turns) {
            Ok(c) => c,
            Err(why) => return SessionEnd::refused(why.to_string()),
        };
        let pgid = child.id().unwrap_or(0);
        rec.session_started(pgid);
        rt.keep(rec);

        let stderr = child.stderr().take();
        let stderr_task = tokio::spawn(async move {
            let mut buf = Vec::new();
            if let Some(mut e) = stderr {
                let _ = e.read_to_end(&mut buf).await;
            }
            crate::fmt::last_chars(&String::from_utf8_lossy(&buf), 2000)
        });
        let events = JobDir::at(rec.log_dir()).events();
        let mut follow = Follow {
            offered: rec.offered_tools(),
            calls: Default::default(),
            // A resumed job's events go on after its earlier sessions'.
            events_bytes: tokio::fs::metadata(&events).await.map_or(0, |m| m.len()),
            events: open_log(&events),
            transcript: open_log(&JobDir::at(rec.log_dir()).transcript()),
            result: None,
            said: None,
            last_calls: Vec::new(),
            after_results: true,
            tool_calls: 0,
        };
        let lines = child.stdout().take().map(|o| BufReader::new(o).lines());
        let cancel_marker = JobDir::at(rec.log_dir()).cancel_marker();
        let backend_fail = Duration::from_secs(job.target.config.defaults.backend_fail_s);
        let mut stop = self.follow(&mut follow, lines, backend_fail).await;
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
        let (batches, results) = reg.route.guard.clearing.totals();
        self.run.rec.window_cleared(batches, results);
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
            said: follow.said,
            last_calls: follow.last_calls,
            tool_calls: follow.tool_calls,
        }
    }

    /// Follow the delegate's stdout until it closes, or until a stop: a
    /// cancel (the channel, or another process's `cancel_requested`), the
    /// deadline, a refusal read from its events, or a backend that has
    /// failed every request for `backend_fail` (`defaults.backend_fail_s`;
    /// zero: never). The record is saved at most every half second.
    async fn follow(
        &mut self,
        f: &mut Follow,
        mut lines: Option<tokio::io::Lines<BufReader<tokio::process::ChildStdout>>>,
        backend_fail: Duration,
    ) -> Option<Halt> {
        let (rt, reg, deadline) = (self.run.rt, self.reg, self.deadline);
        let JobRun {
            rec,
            cancel,
            progress,
            ..
        } = &mut *self.run;
        let cancel_marker = JobDir::at(rec.log_dir()).cancel_marker();
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
                    let _ = progress.send(progress_now(rec, reg, None));
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
                    let (batches, results) = reg.route.guard.clearing.totals();
                    if batches != rec.window().clearings {
                        rec.window_cleared(batches, results);
                        dirty = true;
                    }
                    if dirty {
                        rt.keep(rec);
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
    max_turns: u32,
) -> Result<crate::process::Guarded, LaunchError> {
    let append = rec
        .system_prompt_append()
        .map(str::to_string)
        .unwrap_or_else(|| job.default_append.clone());
    // A subagent: its definition, written to the job's dir at start.
    let agents_file = JobDir::at(rec.log_dir()).agents();
    let agent = rec.agent().map(|a| runner::AgentArg {
        name: &a.name,
        file: &agents_file,
        tools: &a.tools,
    });
    let settings = runner::RunSettings {
        served_id: rec.served_id(),
        window: rec.context(),
        window_rule: crate::session_env::WindowRule::of(&job.target.config.defaults),
        permission_mode: rec.permission_mode(),
        allowed_tools: rec.allowed_tools(),
        disallowed_tools: rec.disallowed_tools(),
        max_turns,
        setting_sources: &job.setting_sources,
        system_prompt_append: &append,
        resume_session: resume,
        mcp_config: job.mcp_config.as_deref(),
        sandbox: job.sandbox,
        shim_silence: Some(reg.route.longest_silence()),
        agent,
    };
    let mut launch = runner::launch(
        job.claude.clone(),
        rec.cwd(),
        &reg.base_url,
        &job.target.endpoint,
        &settings,
        task,
    );
    // Every process of the job inherits it: a tag to find them by.
    launch.env.push(("LOCALAGENTS_JOB".into(), rec.id().to_string()));
    // Its spans go under the job's; its own telemetry, when the user
    // turned Claude Code's on, is tagged with the job's id (issue 47).
    if let Some(t) = &job.trace {
        launch.env.extend(t.delegate_env());
    }
    let prompt = JobDir::at(rec.log_dir()).prompt();
    runner::write_prompt(&launch, &prompt).map_err(|source| LaunchError::Prompt {
        path: prompt.clone(),
        source,
    })?;
    runner::spawn(&launch, &prompt).map_err(|source| LaunchError::Spawn {
        claude: launch.claude.clone(),
        source,
    })
}

/// The brief with its turn budget said (issue 46): the delegate knows
/// from the start how many turns it has. The line comes first: two jobs
/// with the same limit share it, so the server's cache keeps it with the
/// fixed prompt before it.
pub(super) fn with_budget(task: &str, turns: u32) -> String {
    format!(
        "Turn budget: {turns} turns (each reply that calls tools is one). Plan to finish within them.\n\n{}",
        task.trim_start()
    )
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
    /// Tool calls whose result has not come yet: id → what it was.
    calls: std::collections::HashMap<String, String>,
    events: Option<tokio::fs::File>,
    /// Bytes in `events.jsonl`, earlier sessions' included (its cap is
    /// the job's).
    events_bytes: u64,
    transcript: Option<tokio::fs::File>,
    result: Option<runner::ResultEvent>,
    /// The assistant's last words (its last text that was not blank).
    said: Option<String>,
    /// The calls of its latest turn.
    last_calls: Vec<String>,
    /// Tool results came after the latest calls: the next call begins a
    /// new turn.
    after_results: bool,
    /// Tool calls of this session.
    tool_calls: u64,
}

impl Follow {
    /// One line of the delegate's stream-json: logged as it came, read into
    /// the record and the transcript. `Some` when the session must stop (a
    /// tool it was offered is missing).
    async fn line(&mut self, rec: &mut JobRecord, line: &str) -> Option<Halt> {
        let kept = runner::event_to_keep(line, self.events_bytes);
        self.events_bytes += kept.len() as u64 + 1;
        append(&mut self.events, "events.jsonl", &[kept]).await;
        let info = runner::parse_event(line);
        if let Some(s) = info.session_id {
            rec.session_named(s);
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
        rec.session_progress(info.tool_calls, info.files_touched, info.last_activity);
        if let Some(t) = info.said {
            self.said = Some(t);
        }
        if !info.tool_uses.is_empty() {
            if self.after_results {
                self.last_calls.clear();
                self.after_results = false;
            }
            self.last_calls
                .extend(info.tool_uses.iter().map(|(_, what)| what.clone()));
        }
        self.tool_calls += info.tool_calls;
        if !info.tool_results.is_empty() {
            self.after_results = true;
        }
        self.calls.extend(info.tool_uses);
        for (id, bytes) in info.tool_results {
            let call = self.calls.remove(&id).unwrap_or_else(|| "?".into());
            rec.window_tool_result(&call, bytes);
        }
        if let Some(c) = info.compaction {
            rec.window_compacted(c);
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
