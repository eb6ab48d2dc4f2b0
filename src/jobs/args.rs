//! What a job is asked with ([`RunArgs`]), why it may not start
//! ([`StartError`]), and the time limits every phase shares.

use std::path::PathBuf;
use std::time::Duration;

use super::limits::Caller;
use super::record::{Isolation, JobError};
use crate::config::ConfigError;
use crate::error::Kind;
use crate::registry::ResolveError;
use crate::worktree::GitError;

/// Longest `wait_s` / `wait_job` timeout: below Claude Code's 2-minute
/// tool budget.
pub const MAX_WAIT: Duration = Duration::from_secs(110);

/// Longest whole-job timeout (`timeout_s`): a week. Longer values are
/// refused at the API and clamped from config.
pub const MAX_TIMEOUT_S: u64 = 7 * 24 * 3600;

/// The instant `d` from now, or [`MAX_TIMEOUT_S`] from now when `d` is
/// too far for the clock.
pub(crate) fn deadline_in(d: Duration) -> tokio::time::Instant {
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
    #[error(transparent)]
    Refused(#[from] super::limits::Refused),
    #[error(transparent)]
    InUse(#[from] super::evict::InUse),
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
            StartError::Refused(e) => e.kind(),
            StartError::InUse(e) => e.kind(),
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
    pub caller: Caller,
    /// A shell command that must pass for the job to succeed (run by us).
    pub acceptance: Option<String>,
    /// Fix rounds after a failed acceptance (default `defaults.fix_rounds`).
    pub fix_rounds: Option<u32>,
    /// Load the model even if that may unload one a running job uses.
    pub force: bool,
    /// The tool call that asked for it (see [`super::record::JobRecord::tool_use_id`]).
    pub tool_use_id: Option<String>,
    /// The user's subagent profile the delegate runs as
    /// (`.claude/agents/<name>.md`): its prompt and, of its tools, those
    /// the config allows.
    pub agent: Option<String>,
}
