//! What a job's run needs beside its record (`Job`: the plan's command
//! and rounds, the config's timeouts and delegate settings, its place in
//! the queue), its live progress ([`Progress`]), and the stops a job's run decides
//! ([`Halt`]).

use std::path::PathBuf;
use std::time::Duration;

use super::lease::Admission;
use super::plan::JobPlan;
use super::policy::job_policy;
use super::record::JobRecord;
use crate::config::Defaults;
use crate::registry::Target;
use crate::worktree;

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

fn env_dump() -> bool {
    std::env::var("LOCALAGENTS_DUMP_REQUESTS").is_ok_and(|v| v == "1")
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
    pub(super) admission: Option<Admission>,
    /// The call named the endpoint (or resumes a job): no failover.
    pub(super) pinned: bool,
    /// Load the model even if that may swap out a running job's model.
    pub(super) force: bool,
    /// A new worktree still to check out: the job's first phase.
    pub(super) checkout: Option<worktree::Checkout>,
    /// `defaults.queue`: whether the job waits for a free slot.
    pub(super) queue: bool,
    /// Its telemetry, when the process exports any ([`crate::otel`]).
    pub(super) trace: Option<crate::otel::JobTrace>,
}

impl Job {
    /// What the job's run needs beside its record: the plan's command and
    /// rounds, and the config's timeouts and delegate settings.
    pub(super) fn new(
        rec: JobRecord,
        target: Target,
        claude: PathBuf,
        mcp_config: Option<PathBuf>,
        plan: &JobPlan,
        d: &Defaults,
    ) -> Job {
        let trace = crate::otel::current().map(|t| {
            t.job(crate::otel::JobStart {
                job_id: rec.id().to_string(),
                agent: rec.agent().map_or("localagents", |a| &a.name).to_string(),
                provider: target.backend.as_str().to_string(),
                model: target.resolved.served_id.clone(),
                base_url: target.endpoint.base_url.clone(),
            })
        });
        Job {
            trace,
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

/// A stop we decided, over whatever the delegate says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Halt {
    /// The job cannot go on: the sentence is its error (a tool Claude Code
    /// does not have, a delegate that does not start, an acceptance command
    /// that cannot run).
    Refused(String),
    Cancelled,
    Timeout,
}
