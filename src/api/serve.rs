//! The two long-running commands of the CLI: `localagents run` drives one
//! job in the foreground ([`run_job`]) and `localagents shim` serves a
//! whole local Claude Code session ([`serve_shim`]). The CLI keeps the
//! spinner, the printing and the signals (`crate::signals`); the jobs and
//! the shim stay behind this door.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use super::{Context, Error, JobRecord, Manager, Progress, RunArgs, Target};
use crate::shim::log::RequestLog;
use crate::shim::{Registration, Route, Shim};
use crate::signals::Stop;

/// What [`run_job`] reports while its job runs.
pub enum RunEvent<'a> {
    /// The job started: its record.
    Started(&'a JobRecord),
    /// Still running (about once a second): its record and live progress.
    Running(&'a JobRecord, Progress),
    /// Interrupted: the job is being cancelled.
    Cancelling(&'a str),
}

/// How [`run_job`]'s job ended: its id, and the signal that cancelled it,
/// if one did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEnd {
    pub id: String,
    pub stopped: Option<Stop>,
}

/// `localagents run`: start a job and wait for it, reporting its progress
/// to `report` about once a second; when `stop` completes first, the job
/// is cancelled (its record written, its processes gone) before this
/// returns. The start itself is not interrupted: a stop that comes while
/// the job starts (the caller listens from before) cancels it as soon as
/// it has started.
pub async fn run_job(
    m: &std::sync::Arc<Manager>,
    args: RunArgs,
    stop: impl Future<Output = Stop>,
    mut report: impl FnMut(RunEvent<'_>),
) -> Result<RunEnd, Error> {
    let rec = m.start(args).await?;
    let id = rec.id().to_string();
    report(RunEvent::Started(&rec));
    let mut progress = m.progress(&id);
    tokio::pin!(stop);
    let stopped = loop {
        tokio::select! {
            s = &mut stop => break Some(s),
            r = m.wait(&id, Duration::from_secs(1)) => {
                match r {
                    Ok((_, false)) => break None,
                    Ok((rec, true)) => {
                        let p = progress.as_mut().map(|p| p.borrow_and_update().clone()).unwrap_or_default();
                        report(RunEvent::Running(&rec, p));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
    };
    if stopped.is_some() {
        report(RunEvent::Cancelling(&id));
        let _ = m.cancel(&id).await;
    }
    Ok(RunEnd { id, stopped })
}

/// The model settings of a shim at `port` that is started separately
/// (`localagents shim --print-settings`): its session environment.
pub fn shim_settings_env(target: &Target, port: u16) -> Vec<(String, String)> {
    let d = &target.config.defaults;
    let idle = crate::shim::first_byte_timeout(d.first_byte_timeout_s, target.resolved.context)
        .max(Duration::from_secs(d.stream_idle_timeout_s));
    standalone_env(&format!("http://127.0.0.1:{port}"), target, idle)
}

/// The environment of a Claude Code session through a shim at `url` that
/// may go `idle` between two bytes: the model and its window, the stream
/// timeout, and a credential that keeps the CLI from asking for a login.
fn standalone_env(url: &str, target: &Target, idle: Duration) -> Vec<(String, String)> {
    let r = &target.resolved;
    let rule = crate::session_env::WindowRule::of(&target.config.defaults);
    let mut env = crate::session_env::session_env(url, &r.served_id, r.context, rule);
    env.push(crate::session_env::stream_idle_env(idle));
    env.push(crate::session_env::standalone_credential());
    env
}

/// Why [`serve_shim`] did not start.
#[derive(Debug, thiserror::Error)]
pub enum ShimStartError {
    /// Nothing can listen on the port.
    #[error("{0}")]
    Listen(std::io::Error),
    /// No token could be made for the route.
    #[error("{0}")]
    Token(std::io::Error),
}

/// A shim serving one session: it serves until dropped.
pub struct ShimServing {
    // Dropped before the server, as the route's registration must be.
    reg: Registration,
    _server: Shim,
    /// Where the requests are logged (a `requests.jsonl`).
    pub requests_log: PathBuf,
}

impl ShimServing {
    /// What `ANTHROPIC_BASE_URL` should be.
    pub fn base_url(&self) -> &str {
        &self.reg.base_url
    }

    /// The session environment that points claude at this shim.
    pub fn session_env(&self, target: &Target) -> Vec<(String, String)> {
        standalone_env(&self.reg.base_url, target, self.reg.route.longest_silence())
    }
}

/// `localagents shim`: a shim on 127.0.0.1:`port` (0: any free port) for
/// `target`, logging to a new dir under the state dir; `open` serves it
/// without a token.
pub async fn serve_shim(
    ctx: &Context,
    target: &Target,
    port: u16,
    open: bool,
) -> Result<ShimServing, ShimStartError> {
    let r = &target.resolved;
    let started = chrono::Local::now().format("%Y%m%d-%H%M%S").to_string();
    let log_dir = ctx.state_dir.join("shim").join(started);
    let dump = target.config.defaults.dump_requests
        || std::env::var("LOCALAGENTS_DUMP_REQUESTS").is_ok_and(|v| v == "1");
    let policy = crate::shim::Policy {
        loop_limit: target.config.defaults.loop_limit,
        runaway_limit: target.config.defaults.runaway_limit,
        thinking: target.config.defaults.thinking,
        repair: true,
        stop_on_fatal: false,
        clear: target.config.defaults.clear_tool_results,
    };
    let mut route = Route::for_target(
        "standalone".into(),
        target,
        r.context,
        RequestLog::new(&log_dir, dump),
        policy,
    );
    // One session per shim process: the Claude Code session it serves.
    route.session = Some(format!(
        "standalone-{}-{}",
        chrono::Utc::now().format("%Y%m%d-%H%M%S"),
        std::process::id()
    ));
    let server = Shim::start(port).await.map_err(ShimStartError::Listen)?;
    let reg = if open {
        server.register_open(route)
    } else {
        server.register(route).map_err(ShimStartError::Token)?
    };
    Ok(ShimServing {
        reg,
        _server: server,
        requests_log: log_dir.join(crate::wire::REQUESTS),
    })
}
