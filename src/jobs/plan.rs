//! A job's plan: every merge and every check between what a call asks for,
//! the user's config and the job it resumes, done before anything starts.
//!
//! This is ripgrep's lowargs → hiargs split. [`RunArgs`] is what the caller
//! said (each field optional); a [`JobPlan`] is what the job will do (each
//! field decided). [`JobPlan::resolve`] is the one place where a call's value,
//! the resumed job's value and the config's default meet, and where every
//! refusal of a call is worded, so the order of the checks, and so which
//! sentence a doubly wrong call gets, is visible in one function.
//!
//! It reads no server and starts nothing: the caller hands it the lookup of
//! a resumed job, so it is tested with a record made in the test. What needs
//! the network (resolving the model) or makes files (the job dir, a
//! worktree) comes after it, in [`super::manager::Manager::start`].

use std::path::{Path, PathBuf};

use super::args::{MAX_TIMEOUT_S, RunArgs, StartError};
use super::limits::{self, Caller};
use super::record::{AgentStart, AgentUse, Isolation, JobError, JobRecord};
use crate::config::{Config, Defaults};
use crate::registry::Target;
use crate::worktree::WorktreeInfo;

/// The brief of a resume that brings no words of its own.
pub const CONTINUE: &str = "Continue where you left off.";

/// Longest acceptance command, in bytes.
pub const MAX_ACCEPTANCE: usize = 4096;

/// What a job will do, every value decided.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPlan {
    /// The whole brief (`task.txt`).
    pub task: String,
    /// The name asked for (the call's, else the resumed job's).
    pub requested: Option<String>,
    /// What to resolve: the resumed job's served id and endpoint, else the
    /// call's.
    pub model: Option<String>,
    pub endpoint: Option<String>,
    pub isolation: Isolation,
    /// The caller's directory.
    pub origin_cwd: PathBuf,
    /// The job this one resumes.
    pub resumed: Option<Resumed>,
    pub permission_mode: String,
    pub max_turns: u32,
    pub timeout_s: u64,
    pub allowed_tools: Vec<String>,
    pub disallowed_tools: Vec<String>,
    pub system_prompt_append: Option<String>,
    /// The command that decides the job, trimmed; `None` when empty.
    pub acceptance: Option<String>,
    pub fix_rounds: u32,
    /// Load the model even if a running job uses another one.
    pub force: bool,
    /// The tool call that asked for it.
    pub tool_use_id: Option<String>,
    /// The subagent profile to run as: the call's, else the resumed job's.
    pub agent: Option<String>,
}

/// What a resume keeps of the job it continues.
#[derive(Debug, Clone, PartialEq)]
pub struct Resumed {
    pub id: String,
    pub session_id: Option<String>,
    pub worktree: Option<WorktreeInfo>,
    pub cwd: PathBuf,
}

impl JobPlan {
    /// Merge and check a call: the call's value, else the resumed job's,
    /// else the config's default. `prior` looks up the job `resume_job`
    /// names. `Err` is the sentence for the caller.
    pub fn resolve(
        args: &RunArgs,
        config: &Config,
        prior: impl FnOnce(&str) -> Result<JobRecord, JobError>,
    ) -> Result<JobPlan, StartError> {
        let d = &config.defaults;
        check_call(args)?;
        let prior = match &args.resume_job {
            Some(id) => Some(resumable(id, prior(id)?)?),
            None => None,
        };
        let prior = prior.as_ref();
        let isolation = match prior {
            Some(p) => p.isolation(),
            None => args.isolation.unwrap_or(Isolation::None),
        };
        let origin_cwd = match prior {
            Some(p) => p.origin_cwd().to_path_buf(),
            None => origin_cwd(args.cwd.as_deref())?,
        };
        check_limits(args, d, &origin_cwd, prior.is_some())?;
        let acceptance = acceptance(args, d)?;
        let fix_rounds = args.fix_rounds.unwrap_or(d.fix_rounds);
        if fix_rounds > super::accept::MAX_FIX_ROUNDS {
            return Err(StartError::Invalid(format!(
                "fix_rounds must be at most {}, not {fix_rounds}",
                super::accept::MAX_FIX_ROUNDS
            )));
        }
        let tools = |call: &Option<Vec<String>>, from: Option<&[String]>, def: &Vec<String>| {
            call.clone()
                .or_else(|| from.map(<[String]>::to_vec))
                .unwrap_or_else(|| def.clone())
        };
        Ok(JobPlan {
            task: if args.task.trim().is_empty() {
                CONTINUE.to_string()
            } else {
                args.task.clone()
            },
            requested: args.model.clone().or(prior.map(|p| p.model().to_string())),
            model: match prior {
                Some(p) => Some(p.served_id().to_string()),
                None => args.model.clone(),
            },
            endpoint: match prior {
                Some(p) => Some(p.endpoint().to_string()),
                None => args.endpoint.clone(),
            },
            isolation,
            origin_cwd,
            resumed: prior.map(|p| Resumed {
                id: p.id().to_string(),
                session_id: p.session_id().map(str::to_string),
                worktree: p.worktree().cloned(),
                cwd: p.cwd().to_path_buf(),
            }),
            permission_mode: args
                .permission_mode
                .clone()
                .or(prior.map(|p| p.permission_mode().to_string()))
                .unwrap_or_else(|| d.permission_mode.clone()),
            max_turns: args
                .max_turns
                .or(prior.map(|p| p.max_turns()))
                .unwrap_or(d.max_turns),
            timeout_s: args
                .timeout_s
                .or(prior.map(|p| p.timeout_s()))
                .unwrap_or(d.timeout_s)
                .clamp(1, MAX_TIMEOUT_S),
            allowed_tools: tools(
                &args.allowed_tools,
                prior.map(|p| p.allowed_tools()),
                &d.allowed_tools,
            ),
            disallowed_tools: tools(
                &args.disallowed_tools,
                prior.map(|p| p.disallowed_tools()),
                &d.disallowed_tools,
            ),
            system_prompt_append: args
                .system_prompt_append
                .clone()
                .or(prior.and_then(|p| p.system_prompt_append().map(str::to_string))),
            acceptance,
            fix_rounds,
            force: args.force,
            tool_use_id: args.tool_use_id.clone(),
            agent: args
                .agent
                .clone()
                .or_else(|| prior.and_then(|p| p.agent().map(|a| a.name.clone()))),
        })
    }
}

/// What a call gets wrong on its own: a timeout no duration holds, no task.
fn check_call(args: &RunArgs) -> Result<(), StartError> {
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
    if args.task.len() > MAX_TASK_BYTES {
        return Err(StartError::Invalid(format!(
            "the task is {} KiB; a brief may be at most {} KiB (1 MiB): put the long material in a file in the project and name its path in the task",
            crate::fmt::thousands((args.task.len() as u64).div_ceil(1024)),
            crate::fmt::thousands(MAX_TASK_BYTES as u64 / 1024),
        )));
    }
    Ok(())
}

/// A job can be resumed when it has ended, had a session, and its worktree
/// (if it had one) is still there.
fn resumable(id: &str, r: JobRecord) -> Result<JobRecord, StartError> {
    if !r.status().terminal() {
        return Err(StartError::Invalid(format!(
            "job {id} is still {}: wait for it (wait_job) before resuming it",
            r.status().as_str()
        )));
    }
    if r.session_id().is_none() {
        return Err(StartError::Invalid(format!(
            "job {id} never started a session, so there is nothing to resume: run a new job"
        )));
    }
    if let Some(w) = r.worktree()
        && !w.path.exists()
    {
        return Err(StartError::Invalid(format!(
            "the worktree of job {id} ({}) is gone (removed because nothing changed, or cleaned up): run a new job instead",
            w.path.display()
        )));
    }
    Ok(r)
}

/// The directory a new job starts from: the call's (it must exist), else
/// the current one.
fn origin_cwd(cwd: Option<&Path>) -> Result<PathBuf, StartError> {
    match cwd {
        Some(c) => {
            if !c.is_dir() {
                return Err(StartError::Invalid(format!(
                    "cwd {} does not exist or is not a directory: pass an existing project directory",
                    c.display()
                )));
            }
            Ok(c.canonicalize().unwrap_or(c.to_path_buf()))
        }
        None => std::env::current_dir().map_err(|e| {
            StartError::Invalid(format!("cannot read the current directory ({e}): pass cwd"))
        }),
    }
}

/// What a session's call may ask for ([`limits`]): the permission mode for
/// any caller; the directory (of a new job) and the tools for a session.
fn check_limits(
    args: &RunArgs,
    d: &Defaults,
    origin_cwd: &Path,
    resuming: bool,
) -> Result<(), StartError> {
    if let Some(mode) = &args.permission_mode {
        limits::permission_mode(mode, &args.caller, d)?;
    }
    if let Caller::Session { project } = &args.caller {
        if !resuming {
            limits::cwd(origin_cwd, project, d)?;
        }
        if let Some(tools) = &args.allowed_tools {
            limits::allowed_tools(tools, d)?;
        }
    }
    Ok(())
}

/// The acceptance command, trimmed (`None` when empty); bounded, and for a
/// session only where [`limits::acceptance`] allows one.
fn acceptance(args: &RunArgs, d: &Defaults) -> Result<Option<String>, StartError> {
    let Some(cmd) = args
        .acceptance
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty())
    else {
        return Ok(None);
    };
    if cmd.len() > MAX_ACCEPTANCE {
        return Err(StartError::Invalid(format!(
            "acceptance is longer than {MAX_ACCEPTANCE} bytes: put the steps in a script in the tree and name it"
        )));
    }
    if matches!(args.caller, Caller::Session { .. }) {
        limits::acceptance(d)?;
    }
    Ok(Some(cmd.to_string()))
}

impl JobRecord {
    /// An agent job's first record, queued: the plan's values, the target
    /// that serves it, where it runs (`cwd`, inside `worktree` for a
    /// worktree job) and the subagent it runs as.
    pub fn from_plan(
        plan: &JobPlan,
        id: &str,
        dir: &Path,
        t: &Target,
        worktree: Option<WorktreeInfo>,
        cwd: PathBuf,
        agent: Option<AgentUse>,
    ) -> JobRecord {
        let start = AgentStart {
            task: crate::fmt::first_chars(&plan.task, TASK_CHARS),
            requested: plan.requested.clone(),
            origin_cwd: plan.origin_cwd.clone(),
            isolation: plan.isolation,
            resumed_from: plan.resumed.as_ref().map(|p| p.id.clone()),
            session_id: plan.resumed.as_ref().and_then(|p| p.session_id.clone()),
            tool_use_id: plan.tool_use_id.clone(),
            worktree,
            last_activity: load_first(t).unwrap_or_else(|| "queued".into()),
            agent,
            permission_mode: plan.permission_mode.clone(),
            max_turns: plan.max_turns,
            timeout_s: plan.timeout_s,
            allowed_tools: plan.allowed_tools.clone(),
            disallowed_tools: plan.disallowed_tools.clone(),
            system_prompt_append: plan.system_prompt_append.clone(),
        };
        JobRecord::new_agent(id, dir, t, cwd, start)
    }
}

/// The longest brief (or resume prompt), in bytes: the delegate reads it
/// on its stdin, and a model's window holds far less anyway.
pub const MAX_TASK_BYTES: usize = 1024 * 1024;

/// How much of the task a record keeps (the whole task is in `task.txt`).
pub const TASK_CHARS: usize = 300;

/// A model the server has not loaded (or a sleeping server): the first
/// record says the job loads it first.
fn load_first(t: &Target) -> Option<String> {
    let state = t
        .probe
        .models
        .iter()
        .find(|m| m.id == t.resolved.served_id)
        .and_then(|m| m.state.as_ref());
    crate::probe::load::need(t.probe.kind, state).map(|_| {
        format!(
            "{} is not loaded on `{}`: the job loads it first (up to defaults.load_timeout_s)",
            t.resolved.served_id, t.resolved.endpoint
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::builtin()
    }

    /// A job `status` to resume (a resumable one has ended).
    fn prior(id: &str, status: &str) -> JobRecord {
        serde_json::from_value(serde_json::json!({
            "id": id, "task": "t", "model": "coder", "served_id": "qwen3-coder",
            "endpoint": "local", "base_url": "http://127.0.0.1:8080", "cwd": "/tmp",
            "origin_cwd": "/tmp", "isolation": "none", "status": status,
            "created": "2026-01-01T00:00:00.000Z", "started": null, "finished": null,
            "elapsed_s": null, "session_id": "s-1", "result": null, "error": null,
            "num_turns": null, "tool_calls": 0,
            "usage": {"input": 0, "cache_read": 0, "output": 0}, "files_touched": [],
            "files_changed": [], "worktree": null, "last_activity": null,
            "log_dir": "/tmp", "context": null, "metrics": null, "queued_note": null,
            "permission_mode": "plan", "max_turns": 7, "timeout_s": 99,
            "allowed_tools": ["Read"], "disallowed_tools": [],
            "system_prompt_append": "be brief", "resumed_from": null, "pid": null,
            "owner_pid": 1
        }))
        .expect("a record")
    }

    fn args(task: &str) -> RunArgs {
        RunArgs {
            task: task.into(),
            cwd: Some(std::env::temp_dir()),
            ..Default::default()
        }
    }

    fn no_prior(_: &str) -> Result<JobRecord, JobError> {
        panic!("no job is resumed here")
    }

    #[test]
    fn a_call_value_wins_over_the_resumed_job_and_the_default() {
        let cfg = config();
        let mut a = args("");
        a.resume_job = Some("j1".into());
        a.max_turns = Some(3);
        let plan = JobPlan::resolve(&a, &cfg, |id| Ok(prior(id, "succeeded"))).unwrap();
        assert_eq!(plan.max_turns, 3, "the call's");
        assert_eq!(plan.permission_mode, "plan", "the resumed job's");
        assert_eq!(plan.timeout_s, 99);
        assert_eq!(plan.allowed_tools, vec!["Read".to_string()]);
        assert_eq!(plan.system_prompt_append.as_deref(), Some("be brief"));
        assert_eq!(plan.task, CONTINUE);
        assert_eq!(plan.model.as_deref(), Some("qwen3-coder"));
        assert_eq!(plan.requested.as_deref(), Some("coder"));
        assert_eq!(plan.resumed.unwrap().session_id.as_deref(), Some("s-1"));

        let plan = JobPlan::resolve(&args("fix it"), &cfg, no_prior).unwrap();
        let d = &cfg.defaults;
        assert_eq!(plan.permission_mode, d.permission_mode, "the default");
        assert_eq!(plan.max_turns, d.max_turns);
        assert_eq!(plan.allowed_tools, d.allowed_tools);
        assert_eq!(plan.fix_rounds, d.fix_rounds);
        assert!(plan.resumed.is_none());
    }

    #[test]
    fn a_call_wrong_twice_gets_the_sentence_of_its_first_fault() {
        let cfg = config();
        let mut a = args("t");
        a.timeout_s = Some(0);
        a.resume_job = Some("j1".into());
        // The lookup is not even made: the timeout is checked first.
        let e = JobPlan::resolve(&a, &cfg, no_prior)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("timeout_s must be between 1 and"), "{e}");

        let mut a = args("t");
        a.resume_job = Some("j1".into());
        let e = JobPlan::resolve(&a, &cfg, |id| Ok(prior(id, "running")))
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "job j1 is still running: wait for it (wait_job) before resuming it"
        );

        let mut a = args("t");
        a.acceptance = Some(format!("  {}  ", "x".repeat(MAX_ACCEPTANCE + 1)));
        a.fix_rounds = Some(999);
        let e = JobPlan::resolve(&a, &cfg, no_prior)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("acceptance is longer than 4096 bytes"), "{e}");
    }

    #[test]
    fn an_empty_acceptance_is_none_and_a_set_one_is_trimmed() {
        let cfg = config();
        let mut a = args("t");
        a.acceptance = Some("   ".into());
        assert_eq!(
            JobPlan::resolve(&a, &cfg, no_prior).unwrap().acceptance,
            None
        );
        a.acceptance = Some("  make test \n".into());
        assert_eq!(
            JobPlan::resolve(&a, &cfg, no_prior)
                .unwrap()
                .acceptance
                .as_deref(),
            Some("make test")
        );
    }
}
