//! The operations behind the MCP tools and the matching CLI commands: the
//! one door of the CLI, the MCP server and the page into jobs, the shim
//! and the registry.
//!
//! Each is a plain function over explicit inputs that returns a typed result
//! or an [`Error`] whose text says what to do. The MCP handlers and the CLI
//! are thin wrappers over these, so tests can call them directly. [`Error`]
//! is the one error type at this boundary: it turns itself into an `isError`
//! tool result for MCP and into an [`ExitStatus`] for the CLI. This file
//! holds the error, the shared helpers and the re-exports; the operations
//! live by area in `models.rs`, `jobs.rs`, `page.rs`, `oneshot.rs` and
//! `serve.rs`, and are re-exported here (callers write `api::X`).

mod jobs;
mod models;
mod oneshot;
mod page;
pub mod retention;
mod serve;

use std::process::ExitCode;

use crate::config::ConfigError;
pub use crate::context::Context;
use crate::error::Kind;
use crate::jobs::JobError;
use crate::jobs::manager::StartError;
use crate::registry;
pub use crate::registry::{ResolveError, Target, resolve_target};
use crate::signals::Stop;

pub use jobs::*;
pub use models::*;
pub use oneshot::*;
pub use page::*;
pub use serve::*;

// The job types the CLI, the MCP server and the page read and pass back,
// so they name no module below this one.
pub use crate::jobs::batch::{BatchArgs, BatchReport};
pub use crate::jobs::job::Progress;
pub use crate::jobs::limits::Caller;
pub use crate::jobs::manager::{Manager, RunArgs};
pub use crate::jobs::plan::MAX_TASK_BYTES;
pub use crate::jobs::review::Review;
pub use crate::jobs::{Isolation, JobListItem, JobRecord, JobSummary, Status, valid_id};
/// The time now as the records write it (RFC 3339, UTC).
pub use crate::shim::log::now_ts;

/// Longest `wait_s` / `wait_job` timeout: below Claude Code's 2-minute
/// tool budget. The skill and the tool docs quote it (tested).
pub use crate::jobs::manager::MAX_WAIT;
/// `list_jobs` default page.
pub const DEFAULT_LIST_LIMIT: usize = 20;
/// The most jobs one `list_jobs` tool result lists (its result is read
/// into Claude's context); `localagents jobs --limit N` has no cap.
pub const MAX_LIST_LIMIT: usize = 200;
/// `job_log` default page.
pub const DEFAULT_TAIL_LINES: usize = 80;
/// `job_diff` default page.
pub const DEFAULT_DIFF_BYTES: usize = 20_000;
/// `cleanup_jobs` default age.
pub const DEFAULT_CLEANUP_DAYS: u64 = 7;
/// Longest age `cleanup_jobs` takes (a century): `defaults.keep_days`'
/// longest, which retention passes it.
pub const MAX_CLEANUP_DAYS: u64 = crate::config::MAX_KEEP_DAYS as u64;
pub use crate::jobs::manager::MAX_TIMEOUT_S;

/// How a command ended, as the process exit code (uv's `ExitStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// 0: it did what was asked (also when endpoints are down: a finding).
    Success,
    /// 1: a runtime failure (a job that did not succeed, a missing job).
    Failure,
    /// 2: a usage or config error.
    Error,
    /// 128 + the signal's number (130, 143, 129): a signal stopped the
    /// command, which stopped its work first (a job's record says
    /// `cancelled`).
    Stopped(Stop),
}

impl ExitStatus {
    /// How a command that ran job `rec` ends: the signal that stopped it,
    /// if one did (also when printing failed: after SIGHUP the terminal
    /// may be gone, and the job is cancelled and its record written either
    /// way), else a print error, else the job's own end.
    pub fn of_job(
        rec: &JobRecord,
        stopped: Option<Stop>,
        printed: anyhow::Result<()>,
    ) -> anyhow::Result<ExitStatus> {
        match stopped {
            Some(stop) => Ok(ExitStatus::Stopped(stop)),
            None => printed.map(|()| {
                if rec.status() == Status::Succeeded {
                    ExitStatus::Success
                } else {
                    ExitStatus::Failure
                }
            }),
        }
    }
}

impl From<ExitStatus> for ExitCode {
    fn from(s: ExitStatus) -> ExitCode {
        match s {
            ExitStatus::Success => ExitCode::SUCCESS,
            ExitStatus::Failure => ExitCode::from(1),
            ExitStatus::Error => ExitCode::from(2),
            ExitStatus::Stopped(stop) => ExitCode::from(stop.exit_code()),
        }
    }
}

/// A failure a caller can act on. The text is one or two sentences that
/// name the fix; [`Error::kind`] names the failure for a program. A lower
/// layer's error is wrapped with its own sentence, not copied.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("config error: {0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("{0}")]
    Job(#[from] JobError),
}

impl Error {
    /// What kind of failure this is.
    pub fn kind(&self) -> Kind {
        match self {
            Error::Config(_) => Kind::Config,
            Error::Invalid(_) => Kind::Invalid,
            Error::Resolve(e) => e.kind(),
            Error::Start(e) => e.kind(),
            Error::Job(e) => e.kind(),
        }
    }

    /// Nothing serves the model: whom to ask for what.
    pub fn unavailable(&self) -> Option<&registry::Unavailable> {
        match self {
            Error::Resolve(ResolveError::Unavailable(u))
            | Error::Start(StartError::Resolve(ResolveError::Unavailable(u))) => Some(u),
            _ => None,
        }
    }

    /// The exit status of a CLI command that failed with this.
    pub fn exit_status(&self) -> ExitStatus {
        match self.kind() {
            Kind::Config => ExitStatus::Error,
            _ => ExitStatus::Failure,
        }
    }
}

/// Parse a closed-set argument, or say what the choices are.
pub fn parse_arg<T: std::str::FromStr<Err = String>>(v: Option<&str>) -> Result<Option<T>, Error> {
    v.map(str::parse).transpose().map_err(Error::Invalid)
}

/// A blocking task that ended without its answer (a panic in it).
pub(crate) fn stopped(e: tokio::task::JoinError) -> Error {
    Error::Invalid(format!(
        "the call stopped before it answered ({e}): an internal error of localagents"
    ))
}

/// Run `f`, a read or write of records, logs or the tree, with the
/// manager on tokio's blocking pool: such work scales with the state dir
/// and the repository, and on an async worker it would stall every job's
/// relay and every MCP answer sharing the worker. The MCP handlers call
/// the blocking operations of this module through it.
pub async fn blocking<T: Send + 'static>(
    m: &std::sync::Arc<Manager>,
    f: impl FnOnce(&Manager) -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    let m = m.clone();
    tokio::task::spawn_blocking(move || f(&m))
        .await
        .map_err(stopped)?
}

/// The job store of this context's state dir.
pub(crate) fn m_store(ctx: &Context) -> crate::jobs::Store {
    crate::jobs::Store::new(&ctx.state_dir)
}
