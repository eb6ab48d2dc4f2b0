//! `localagents eval`: which served model can do the work.
//!
//! A qualification of one served model through the real job path: first
//! the capability probe ([`probe`]: a forced tool call, a folded system
//! note, `count_tokens`, prefill and generation speed from the server's
//! own counters, the window, thinking), then a suite of small tasks
//! ([`tasks`]), each one a real job: its own repository in a temporary
//! directory, a worktree, the real Claude Code CLI through the shim, the
//! task's check as the acceptance command, one fix round. Nothing of the
//! user's is touched, and each job takes part in the eviction check like
//! any other.
//!
//! The result is kept per endpoint and served id under `<state>/eval/`,
//! with the model file's identity as the server reports it, so `status`,
//! `list_models` and `/local-status` show one line per model, and mark it
//! stale once the file or the server build changes.

pub mod probe;
pub mod tasks;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::context::Context;
use crate::jobs::faults::ModelFaults;
use crate::jobs::manager::{Manager, RunArgs};
use crate::jobs::{Isolation, JobRecord, Status};
use crate::probe::ModelFile;
use tasks::Suite;

/// What to evaluate.
#[derive(Debug, Clone)]
pub struct EvalArgs {
    pub model: Option<String>,
    pub endpoint: Option<String>,
    pub suite: Suite,
    /// Only the capability probe.
    pub probe_only: bool,
    /// Load the model even if that may unload one a running job uses.
    pub force: bool,
    /// Each task's turn limit ([`TASK_TURNS`] by default).
    pub max_turns: u32,
    /// Each task's time limit, its fix round included ([`TASK_TIMEOUT_S`]).
    pub task_timeout_s: u64,
}

/// A task's turn limit by default: the suite's tasks take a capable model
/// 4 to 8 turns (read, edit, run the check, fix); twice that is room for a
/// slow start, and a model past it is not doing the task.
pub const TASK_TURNS: u32 = 15;

/// A task's time limit by default, its fix round included: the tiny model
/// on 2 CPU cores takes 110-150 s a quick task (the real tier, e2e t14);
/// twice that ends a task that will not end (issue 46 saw one past 500 s)
/// and leaves a model on a GPU minutes to spare.
pub const TASK_TIMEOUT_S: u64 = 300;

/// One task's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    pub name: String,
    pub kind: String,
    pub passed: bool,
    /// The job that ran it.
    pub job: String,
    pub status: Status,
    /// Fix rounds used after the first try (0 or 1).
    pub fix_rounds: u32,
    pub turns: Option<u64>,
    pub tool_calls: u64,
    /// Prompt tokens the server processed anew, and served from its cache.
    pub tokens_new: u64,
    pub tokens_cached: u64,
    pub tokens_out: u64,
    /// The job's wall time.
    pub elapsed_s: f64,
    /// The eval's own time around the job (making the repository,
    /// starting and reading the job), in ms.
    pub overhead_ms: u64,
    pub model_faults: ModelFaults,
    #[serde(default)]
    pub text_only: bool,
    /// Why it failed: the check that failed, or the job's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The end of the check's output when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tail: Option<String>,
}

/// A whole eval, as printed and as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    pub endpoint: String,
    pub served_id: String,
    /// The model file and server build at the time (stale once changed).
    pub file: Option<ModelFile>,
    /// `quick`, `standard`, or `probe` (the probe alone).
    pub suite: String,
    /// RFC 3339, UTC.
    pub finished: String,
    pub passed: usize,
    pub total: usize,
    pub probe: probe::Capabilities,
    pub tasks: Vec<TaskResult>,
    /// The wall time of the whole eval.
    pub elapsed_s: f64,
    /// Set when it was stopped before the end (nothing is stored then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<String>,
}

/// An eval failure: one sentence.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{0}")]
    Resolve(String),
    #[error("cannot make the eval's repositories in {dir}: {why}")]
    Repo { dir: PathBuf, why: String },
    #[error("cannot start the eval's job for {task}: {why}")]
    Start { task: String, why: String },
    #[error("cannot write the eval result {path}: {why}")]
    Store { path: PathBuf, why: String },
}

/// Live progress for the CLI.
#[derive(Debug, Clone, Default)]
pub struct EvalProgress {
    /// 0 while probing, then 1..=n.
    pub task: usize,
    pub of: usize,
    pub name: String,
    pub line: String,
}

/// Where the results live.
pub fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("eval")
}

/// A file-name-safe form of an endpoint or served id (ids are paths or
/// `org/name:quant`).
fn safe(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.len() > 120 {
        out.truncate(120);
    }
    if out.is_empty() || out.starts_with('.') {
        out.insert(0, '_');
    }
    out
}

fn result_path(state_dir: &Path, endpoint: &str, served_id: &str) -> PathBuf {
    dir(state_dir)
        .join(safe(endpoint))
        .join(format!("{}.json", safe(served_id)))
}

/// The stored result for a served model, if any.
pub fn stored(state_dir: &Path, endpoint: &str, served_id: &str) -> Option<EvalReport> {
    let p = result_path(state_dir, endpoint, served_id);
    let bytes = crate::paths::read_capped(&p, 4 * 1024 * 1024).ok()?;
    serde_json::from_slice::<EvalReport>(&bytes)
        .ok()
        .filter(|r| r.served_id == served_id && r.endpoint == endpoint)
}

fn store(state_dir: &Path, r: &EvalReport) -> Result<PathBuf, EvalError> {
    let p = result_path(state_dir, &r.endpoint, &r.served_id);
    let err = |why: String| EvalError::Store {
        path: p.clone(),
        why,
    };
    if let Some(parent) = p.parent() {
        crate::paths::private_dir_all(parent).map_err(|e| err(e.to_string()))?;
    }
    let bytes = serde_json::to_vec_pretty(r).map_err(|e| err(e.to_string()))?;
    crate::paths::write_atomic(&p, &bytes).map_err(|e| err(e.to_string()))?;
    Ok(p)
}

/// Why a stored result no longer speaks for what is served now.
pub fn stale(stored: &Option<ModelFile>, now: &Option<ModelFile>) -> Option<String> {
    let (Some(a), Some(b)) = (stored, now) else {
        return None;
    };
    if a.path.is_some() && b.path.is_some() && a.path != b.path {
        return Some("stale: another model file is served now".into());
    }
    if a.size.is_some() && b.size.is_some() && a.size != b.size {
        return Some("stale: the model file changed".into());
    }
    if a.build.is_some() && b.build.is_some() && a.build != b.build {
        return Some(format!(
            "stale: the server build changed ({} → {})",
            a.build.as_deref().unwrap_or("?"),
            b.build.as_deref().unwrap_or("?")
        ));
    }
    None
}

/// The share of tool calls that came as valid calls (not repaired from
/// text, not left unusable in the text).
pub fn valid_share(r: &EvalReport) -> Option<f64> {
    let calls: u64 = r.tasks.iter().map(|t| t.tool_calls).sum();
    let repaired: u64 = r
        .tasks
        .iter()
        .map(|t| t.model_faults.repaired_tool_calls)
        .sum();
    let unusable: u64 = r
        .tasks
        .iter()
        .map(|t| t.model_faults.unparsed_tool_text)
        .sum();
    let all = calls + unusable;
    (all > 0).then(|| calls.saturating_sub(repaired) as f64 / all as f64)
}

/// The first runaway of the probe or a task: its sentence.
pub fn runaway(r: &EvalReport) -> Option<&str> {
    r.probe.runaway.as_deref().or_else(|| {
        r.tasks.iter().find_map(|t| {
            t.model_faults
                .runaway_output
                .as_ref()
                .map(|o| o.why.as_str())
        })
    })
}

/// "eval standard 5/6 (2026-12-01) · tool calls 100% valid · prefill 1,850
/// tok/s · gen 62 tok/s"
pub fn line(r: &EvalReport) -> String {
    let mut parts = Vec::new();
    let day = r.finished.get(..10).unwrap_or(&r.finished);
    if r.suite == "probe" {
        parts.push(format!("eval probe only ({day})"));
    } else {
        parts.push(format!("eval {} {}/{} ({day})", r.suite, r.passed, r.total));
    }
    match valid_share(r) {
        Some(s) => parts.push(format!("tool calls {:.0}% valid", s * 100.0)),
        None if r.suite != "probe" => parts.push("no tool calls".into()),
        None => parts.push(format!("forced tool call: {}", r.probe.tool_call)),
    }
    if let Some(why) = runaway(r) {
        parts.push(format!(
            "ran away: {}",
            why.trim_start_matches("runaway output: ")
        ));
    }
    if let Some(p) = r.probe.prefill_tok_s {
        parts.push(format!(
            "prefill {} tok/s",
            crate::fmt::thousands(p.round() as u64)
        ));
    }
    if let Some(g) = r.probe.gen_tok_s {
        parts.push(format!(
            "gen {} tok/s",
            crate::fmt::thousands(g.round() as u64)
        ));
    }
    parts.join(" · ")
}

/// One line per served model for `status` and `list_models`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct EvalLine {
    pub endpoint: String,
    pub model: String,
    /// "eval standard 5/6 (2026-12-01) · …", or "never evaluated: …".
    pub line: String,
    pub evaluated: bool,
    /// Why the result no longer speaks for what is served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<String>,
}

/// The eval line of every model the probes saw.
pub fn lines(state_dir: &Path, endpoints: &[crate::probe::EndpointStatus]) -> Vec<EvalLine> {
    let mut out = Vec::new();
    for e in endpoints.iter().filter(|e| e.up) {
        for m in &e.models {
            let line = match stored(state_dir, &e.name, &m.id) {
                Some(r) => {
                    let stale = stale(&r.file, &m.file);
                    let mut text = line(&r);
                    if let Some(s) = &stale {
                        text.push_str(&format!(" · {s}"));
                    }
                    EvalLine {
                        endpoint: e.name.clone(),
                        model: m.id.clone(),
                        line: text,
                        evaluated: true,
                        stale,
                    }
                }
                None => EvalLine {
                    endpoint: e.name.clone(),
                    model: m.id.clone(),
                    line: format!(
                        "never evaluated: localagents eval --model {} --endpoint {}",
                        crate::session_env::sh_quote(&m.id),
                        e.name
                    ),
                    evaluated: false,
                    stale: None,
                },
            };
            out.push(line);
        }
    }
    out
}

/// The tables a person reads: the probe, then one row per task.
pub fn table(r: &EvalReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "{} on `{}`: {}", r.served_id, r.endpoint, line(r));
    probe_table(&mut out, &r.probe);
    if r.tasks.is_empty() {
        return out;
    }
    task_table(&mut out, &r.tasks);
    if let Some(c) = &r.cancelled {
        let _ = writeln!(out, "\n{c}: nothing was stored");
    }
    out
}

/// The probe's table: one row per capability.
fn probe_table(out: &mut String, p: &probe::Capabilities) {
    use std::fmt::Write as _;
    let speed = |v: Option<f64>, n: Option<u64>| match (v, n) {
        (Some(v), Some(n)) => format!(
            "{} tok/s ({} tokens)",
            crate::fmt::thousands(v.round() as u64),
            crate::fmt::thousands(n)
        ),
        _ => p.speed_source.clone(),
    };
    let _ = writeln!(out);
    let _ = writeln!(out, "| probe | result |");
    let _ = writeln!(out, "|---|---|");
    let _ = writeln!(out, "| forced tool call | {} |", p.tool_call);
    let _ = writeln!(
        out,
        "| folded system note | {} |",
        if p.folded_system_accepted {
            "accepted".to_string()
        } else {
            format!(
                "refused: {}",
                p.folded_system_error.as_deref().unwrap_or("")
            )
        }
    );
    let _ = writeln!(
        out,
        "| count_tokens | {} |",
        if p.count_tokens { "yes" } else { "no" }
    );
    let _ = writeln!(
        out,
        "| prefill | {} |",
        speed(p.prefill_tok_s, p.prefill_tokens)
    );
    let _ = writeln!(out, "| generation | {} |", speed(p.gen_tok_s, p.gen_tokens));
    let _ = writeln!(
        out,
        "| window per slot | {} |",
        p.window
            .map(crate::fmt::thousands)
            .unwrap_or_else(|| "unknown".into())
    );
    let _ = writeln!(
        out,
        "| thinking | {} |",
        if p.thinking { "yes" } else { "no" }
    );
}

/// A task's model faults in a few words, `-` for none.
fn faults_cell(t: &TaskResult) -> String {
    let f = &t.model_faults;
    let mut faults = Vec::new();
    if f.repaired_tool_calls > 0 {
        faults.push(format!("{} repaired", f.repaired_tool_calls));
    }
    if f.unparsed_tool_text > 0 {
        faults.push(format!("{} unusable", f.unparsed_tool_text));
    }
    if f.loop_notes > 0 {
        faults.push("looped".into());
    }
    if f.empty_responses > 0 {
        faults.push(format!("{} empty", f.empty_responses));
    }
    if f.runaways() > 0 {
        faults.push(format!("{} ran away", f.runaways()));
    }
    if t.text_only {
        faults.push("text only".into());
    }
    if faults.is_empty() {
        "-".into()
    } else {
        faults.join(", ")
    }
}

/// The tasks' table: one row per task.
fn task_table(out: &mut String, tasks: &[TaskResult]) {
    use std::fmt::Write as _;
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| task | passed | fix rounds | turns | tool calls | tokens new / cached | time | faults | why |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
    for t in tasks {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} / {} | {:.1} s | {} | {} |",
            t.name,
            if t.passed { "yes" } else { "no" },
            t.fix_rounds,
            t.turns.map(|n| n.to_string()).unwrap_or_else(|| "-".into()),
            t.tool_calls,
            crate::fmt::thousands(t.tokens_new),
            crate::fmt::thousands(t.tokens_cached),
            t.elapsed_s,
            faults_cell(t),
            t.failure
                .as_deref()
                .map(|w| crate::fmt::one_line(w, 120))
                .unwrap_or_else(|| "-".into()),
        );
    }
}

fn task_result(t: &tasks::Task, rec: &JobRecord, overhead: Duration) -> TaskResult {
    let acc = rec.acceptance();
    let passed = rec.status() == Status::Succeeded && acc.is_some_and(|a| a.passed);
    let faults = rec.model_faults().cloned().unwrap_or_default();
    let text_only = rec.outcome().is_some_and(|o| o.text_only);
    let (failure, output_tail) = if passed {
        (None, None)
    } else {
        let check = acc.and_then(|a| tasks::failed_check(&a.output_tail));
        let why = match (check, rec.error()) {
            (Some(c), _) => format!("check failed: {c}"),
            (None, Some(e)) => e.to_string(),
            (None, None) => format!("the job ended {}", rec.status().as_str()),
        };
        // A limit the task hit is named first: the suite went on past it.
        let why = match (rec.status(), &rec.ending().incomplete) {
            (Status::Timeout, _) => format!(
                "time limit: {} s (--task-timeout) reached; {why}",
                rec.timeout_s()
            ),
            (_, Some(i)) if i.why == crate::jobs::pending::Why::MaxTurns => format!(
                "turn limit: {} turns (--max-turns) reached; {why}",
                rec.max_turns()
            ),
            _ => why,
        };
        let why = match (text_only, rec.model_note()) {
            (true, Some(n)) => format!("{why} ({n})"),
            _ => why,
        };
        (
            Some(why),
            acc.map(|a| crate::fmt::last_chars(&a.output_tail, 600)),
        )
    };
    TaskResult {
        name: t.name.into(),
        kind: t.kind.into(),
        passed,
        job: rec.id().to_string(),
        status: rec.status(),
        fix_rounds: acc.map(|a| a.rounds.saturating_sub(1)).unwrap_or(0),
        turns: rec.num_turns(),
        tool_calls: rec.tool_calls(),
        tokens_new: rec.usage().input,
        tokens_cached: rec.usage().cache_read,
        tokens_out: rec.usage().output,
        elapsed_s: rec.elapsed_s().unwrap_or(0.0),
        overhead_ms: overhead.as_millis() as u64,
        model_faults: faults,
        text_only,
        failure,
        output_tail,
    }
}

/// `f`, unless `cancelled` turns true first (polled five times a second).
async fn or_cancelled<F: std::future::Future>(
    f: F,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Option<F::Output> {
    tokio::pin!(f);
    loop {
        tokio::select! {
            out = &mut f => return Some(out),
            _ = tokio::time::sleep(Duration::from_millis(200)) => {
                if cancelled() {
                    return None;
                }
            }
        }
    }
}

/// The capability probe, in `work/probe`; when cancelled, what is known
/// of the model (its window) and why the eval stops.
async fn probe_step(
    target: &crate::registry::Target,
    work: &Path,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> (probe::Capabilities, Option<String>) {
    match or_cancelled(probe::run(target, &work.join("probe")), cancelled).await {
        Some(caps) => (caps, None),
        None => (
            probe::Capabilities {
                window: target.resolved.context,
                ..Default::default()
            },
            Some("cancelled during the capability probe".to_string()),
        ),
    }
}

/// Start task `t` as a worktree job on its fresh `repo`, its `check` as
/// the acceptance with one fix round; `None` when cancelled first.
async fn start_task(
    manager: &Manager,
    t: &tasks::Task,
    args: &EvalArgs,
    (served, endpoint): (&str, &str),
    (repo, check): (PathBuf, PathBuf),
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Option<Result<JobRecord, EvalError>> {
    let started = or_cancelled(
        manager.start(RunArgs {
            task: t.prompt(),
            model: Some(served.to_string()),
            endpoint: Some(endpoint.to_string()),
            cwd: Some(repo),
            isolation: Some(Isolation::Worktree),
            acceptance: Some(format!(
                "python3 -B {}",
                crate::session_env::sh_quote(&check.display().to_string())
            )),
            fix_rounds: Some(1),
            max_turns: Some(args.max_turns),
            timeout_s: Some(args.task_timeout_s),
            force: args.force,
            ..Default::default()
        }),
        cancelled,
    )
    .await?;
    Some(started.map_err(|e| EvalError::Start {
        task: t.name.into(),
        why: e.to_string(),
    }))
}

/// Wait for a task's job to end, reporting its progress (`task` of `of`,
/// named `name`) as it goes; when `cancelled` turns true the job is
/// cancelled and `stop` says so.
async fn wait_task(
    manager: &Manager,
    rec: &JobRecord,
    (task, of, name): (usize, usize, &str),
    progress: &mut impl FnMut(EvalProgress),
    cancelled: &(dyn Fn() -> bool + Sync),
    stop: &mut Option<String>,
) -> Result<JobRecord, EvalError> {
    let id = rec.id().to_string();
    let mut prog = manager.progress(&id);
    loop {
        if cancelled() {
            let _ = manager.cancel(&id).await;
            *stop = Some(format!("cancelled during task {name}"));
        }
        match manager.wait(&id, Duration::from_millis(500)).await {
            Ok((rec, false)) => return Ok(rec),
            Ok((rec, true)) => {
                let p = prog
                    .as_mut()
                    .map(|p| p.borrow_and_update().clone())
                    .unwrap_or_default();
                progress(EvalProgress {
                    task,
                    of,
                    name: name.into(),
                    line: format!(
                        "request {} · tool calls {} · {}",
                        p.turns,
                        rec.tool_calls().max(p.tool_calls),
                        crate::fmt::first_chars(&p.last_activity, 50)
                    ),
                });
            }
            Err(e) => {
                return Err(EvalError::Start {
                    task: name.into(),
                    why: e.to_string(),
                });
            }
        }
    }
}

/// Run an eval. `progress` is called as it goes; `cancelled` is polled
/// (once a second at least): when it turns true the running job is
/// cancelled and the eval ends without storing anything.
pub async fn run(
    ctx: &Context,
    args: &EvalArgs,
    mut progress: impl FnMut(EvalProgress),
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<EvalReport, EvalError> {
    let started = Instant::now();
    let target =
        crate::registry::resolve_target(ctx, args.model.as_deref(), args.endpoint.as_deref())
            .await
            .map_err(|e| EvalError::Resolve(e.to_string()))?;
    let served = target.resolved.served_id.clone();
    let endpoint = target.resolved.endpoint.clone();
    let file = target
        .probe
        .models
        .iter()
        .find(|m| m.id == served)
        .and_then(|m| m.file.clone());
    let work = tempfile::Builder::new()
        .prefix("localagents-eval-")
        .tempdir()
        .map_err(|e| EvalError::Repo {
            dir: std::env::temp_dir(),
            why: e.to_string(),
        })?;
    let list = if args.probe_only {
        Vec::new()
    } else {
        tasks::suite(args.suite)
    };
    progress(EvalProgress {
        task: 0,
        of: list.len(),
        name: "probe".into(),
        line: format!("probing {served} on `{endpoint}`"),
    });
    let (caps, mut stop) = probe_step(&target, work.path(), cancelled).await;
    let manager = Manager::new(ctx.clone());
    let mut results = Vec::new();
    for (i, t) in list.iter().enumerate() {
        if stop.is_some() {
            break;
        }
        if cancelled() {
            stop = Some("cancelled".to_string());
            break;
        }
        let t0 = Instant::now();
        let (repo, check) = t
            .materialize(work.path())
            .await
            .map_err(|e| EvalError::Repo {
                dir: work.path().to_path_buf(),
                why: e.to_string(),
            })?;
        let Some(rec) = start_task(&manager, t, args, (&served, &endpoint), (repo, check), cancelled).await
        else {
            stop = Some(format!("cancelled before task {} started", t.name));
            break;
        };
        let rec = rec?;
        let of = list.len();
        let rec = wait_task(&manager, &rec, (i + 1, of, t.name), &mut progress, cancelled, &mut stop).await?;
        if let Some(w) = rec.worktree()
            && w.path.exists()
        {
            let _ = crate::worktree::remove(w, rec.id()).await;
        }
        // The eval's own share: the task's wall time less the job's.
        let job_wall = Duration::from_secs_f64(rec.elapsed_s().unwrap_or(0.0));
        let overhead = t0.elapsed().saturating_sub(job_wall);
        results.push(task_result(t, &rec, overhead));
        if stop.is_some() {
            break;
        }
    }
    let passed = results.iter().filter(|r| r.passed).count();
    let report = EvalReport {
        endpoint,
        served_id: served,
        file,
        suite: if args.probe_only {
            "probe".into()
        } else {
            args.suite.as_str().into()
        },
        finished: crate::shim::log::now_ts(),
        passed,
        total: list.len(),
        probe: caps,
        tasks: results,
        elapsed_s: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        cancelled: stop,
    };
    if report.cancelled.is_none() {
        store(&ctx.state_dir, &report)?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(tasks: Vec<(u64, u64, u64)>) -> EvalReport {
        EvalReport {
            endpoint: "gpu".into(),
            served_id: "qwen".into(),
            file: None,
            suite: "standard".into(),
            finished: "2026-12-01T10:00:00.000Z".into(),
            passed: 5,
            total: 6,
            probe: probe::Capabilities {
                prefill_tok_s: Some(1850.4),
                gen_tok_s: Some(61.8),
                ..Default::default()
            },
            tasks: tasks
                .into_iter()
                .map(|(calls, repaired, unparsed)| TaskResult {
                    name: "t".into(),
                    kind: "k".into(),
                    passed: true,
                    job: "j".into(),
                    status: Status::Succeeded,
                    fix_rounds: 0,
                    turns: None,
                    tool_calls: calls,
                    tokens_new: 0,
                    tokens_cached: 0,
                    tokens_out: 0,
                    elapsed_s: 0.0,
                    overhead_ms: 0,
                    model_faults: ModelFaults {
                        repaired_tool_calls: repaired,
                        unparsed_tool_text: unparsed,
                        ..Default::default()
                    },
                    text_only: false,
                    failure: None,
                    output_tail: None,
                })
                .collect(),
            elapsed_s: 1.0,
            cancelled: None,
        }
    }

    #[test]
    fn the_line_says_passes_validity_and_speeds() {
        assert_eq!(
            line(&report(vec![(10, 0, 0), (6, 0, 0)])),
            "eval standard 5/6 (2026-12-01) · tool calls 100% valid · prefill 1,850 tok/s · gen 62 tok/s"
        );
        assert!(line(&report(vec![(8, 2, 2)])).contains("tool calls 60% valid"));
        assert!(line(&report(vec![(0, 0, 0)])).contains("no tool calls"));
    }

    #[test]
    fn a_changed_file_or_build_is_stale() {
        let f = |p: &str, b: &str| {
            Some(ModelFile {
                path: Some(p.into()),
                size: None,
                build: Some(b.into()),
            })
        };
        assert_eq!(stale(&f("/m/a.gguf", "b1"), &f("/m/a.gguf", "b1")), None);
        assert!(stale(&f("/m/a.gguf", "b1"), &f("/m/b.gguf", "b1")).is_some());
        assert!(
            stale(&f("/m/a.gguf", "b1"), &f("/m/a.gguf", "b2"))
                .unwrap()
                .contains("b1 → b2")
        );
        assert_eq!(stale(&None, &f("/m/a.gguf", "b1")), None);
    }

    #[test]
    fn names_are_safe_in_paths() {
        assert_eq!(safe("unsloth/Qwen3:Q4"), "unsloth_Qwen3_Q4");
        assert_eq!(safe("../x"), "_.._x");
        assert_eq!(safe(""), "_");
    }
}
