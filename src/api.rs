//! The operations behind the MCP tools and the matching CLI commands.
//!
//! Each is a plain function over explicit inputs that returns a typed result
//! or an [`Error`] whose text says what to do. The MCP handlers and the CLI
//! are thin wrappers over these, so tests can call them directly. [`Error`]
//! is the one error type at this boundary: it turns itself into an `isError`
//! tool result for MCP and into an [`ExitStatus`] for the CLI.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::config::{self, ConfigError};
pub use crate::context::Context;
use crate::error::Kind;
use crate::jobs::dir::JobDir;
use crate::jobs::manager::{Manager, RunArgs, StartError};
use crate::jobs::{Isolation, JobError, JobListItem, JobSummary, Status};
use crate::probe;
use crate::registry;
pub use crate::registry::{ResolveError, Target, resolve_target};

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
/// Longest age `cleanup_jobs` takes (a century).
pub const MAX_CLEANUP_DAYS: u64 = 36_500;
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
}

impl From<ExitStatus> for ExitCode {
    fn from(s: ExitStatus) -> ExitCode {
        match s {
            ExitStatus::Success => ExitCode::SUCCESS,
            ExitStatus::Failure => ExitCode::from(1),
            ExitStatus::Error => ExitCode::from(2),
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

/// `list_models`: the status object plus short guidance.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ModelsReport {
    #[serde(flatten)]
    pub status: registry::Status,
    pub guidance: Value,
    /// "last 7 days: 14 jobs, 3.1 M tokens local ≈ $4.20 at
    /// claude-sonnet-4.5 list prices" (an equivalent, not a bill).
    pub savings: String,
    /// One line per served model: its last `localagents eval`, or that it
    /// has none. Prefer a model that passed.
    pub evals: Vec<crate::eval::EvalLine>,
    /// Endpoints whose recent jobs lost their slot's cache, with the fix
    /// (tell the user; run fewer jobs at once meanwhile).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slot_losses: Vec<String>,
    /// Endpoints whose recent jobs ran away (a line or the template's
    /// markers over and over), with the likely cause and the fix.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runaways: Vec<String>,
}

/// `list_models`.
pub async fn list_models(ctx: &Context) -> Result<ModelsReport, Error> {
    let (_, status) = registry::status(&ctx.discovery()).await?;
    let guidance = registry::guidance(&status);
    // The ledger reads the week's records, request logs and Claude Code
    // transcripts, and the slot losses and eval lines read records too:
    // on the blocking pool, never on an async worker.
    let (c, endpoints) = (ctx.clone(), status.endpoints.clone());
    let (evals, slot_losses, runaways, savings) = tokio::task::spawn_blocking(move || {
        let evals = crate::eval::lines(&c.state_dir, &endpoints);
        let days = crate::jobs::metrics::SLOT_LOSS_DAYS;
        let store = m_store(&c);
        let slot_losses: Vec<String> = crate::jobs::metrics::recent_slot_losses(&store, days)
            .iter()
            .map(|l| l.line(days))
            .collect();
        let runaways: Vec<String> = crate::jobs::metrics::recent_runaways(&store, days)
            .iter()
            .map(|l| l.line(days))
            .collect();
        (evals, slot_losses, runaways, savings_line(&c))
    })
    .await
    .map_err(stopped)?;
    Ok(ModelsReport {
        status,
        guidance,
        savings,
        evals,
        slot_losses,
        runaways,
    })
}

/// A blocking task that ended without its answer (a panic in it).
fn stopped(e: tokio::task::JoinError) -> Error {
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
fn m_store(ctx: &Context) -> crate::jobs::Store {
    crate::jobs::Store::new(&ctx.state_dir)
}

/// The ledger over a period (`localagents savings`).
pub fn savings(
    ctx: &Context,
    since: crate::ledger::Since,
) -> Result<crate::ledger::Savings, Error> {
    let cfg = config::load(&ctx.discovery())?.config;
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let projects = crate::ledger::transcript::projects_dir(home.as_deref());
    Ok(crate::ledger::savings(
        &ctx.state_dir,
        &cfg,
        since,
        &projects,
    ))
}

/// The ledger's one line for the last 7 days (status, list_models).
pub fn savings_line(ctx: &Context) -> String {
    let since = crate::ledger::Since::Days(7);
    match savings(ctx, since) {
        Ok(s) => crate::ledger::line(&s, since),
        Err(e) => format!("savings: {e}"),
    }
}

/// Arguments of `register_endpoint`.
#[derive(Debug, Clone, Default)]
pub struct RegisterArgs {
    pub name: String,
    pub base_url: String,
    pub backend: Option<String>,
    pub host: Option<String>,
    pub notes: Option<String>,
    pub api_key_env: Option<String>,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// `register_endpoint`: validate, write the sidecar, probe the new endpoint.
/// What `register_endpoint` did.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Registered {
    pub registered: String,
    pub written_to: PathBuf,
    pub endpoint: probe::EndpointStatus,
    pub warnings: Vec<String>,
}

/// What `localagents trust` did.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TrustReport {
    /// The project directory (canonical).
    pub dir: String,
    /// The user file that records it.
    pub recorded_in: String,
    pub trusted: bool,
    /// False when it already was (or was not) trusted.
    pub changed: bool,
}

/// `localagents trust [DIR]`: read this project's models.yaml in full from
/// now on (or, with `trusted: false`, only its menu entries again). A CLI
/// command only: trust is the user's act, never a tool call's.
pub fn trust_project(ctx: &Context, dir: &Path, trusted: bool) -> Result<TrustReport, Error> {
    if ctx.explicit_config.is_some() {
        return Err(Error::Invalid(
            "with --config / LOCALAGENTS_CONFIG no project models.yaml is read, so there is nothing to trust: edit that file instead".into(),
        ));
    }
    let dir = dir.canonicalize().map_err(|e| {
        Error::Invalid(format!(
            "cannot trust {}: {e}; pass an existing directory",
            dir.display()
        ))
    })?;
    let sidecar = ctx.discovery().active_sidecar().ok_or_else(|| {
        Error::Invalid("no user config dir is known (HOME and XDG_CONFIG_HOME are unset)".into())
    })?;
    let changed = config::set_trusted(&sidecar, &dir, trusted)?;
    Ok(TrustReport {
        dir: dir.display().to_string(),
        recorded_in: sidecar.display().to_string(),
        trusted,
        changed,
    })
}

pub async fn register_endpoint(ctx: &Context, args: RegisterArgs) -> Result<Registered, Error> {
    let name = args.name.trim();
    if !valid_name(name) {
        return Err(Error::Invalid(format!(
            "invalid endpoint name `{name}`: use 1-64 letters, digits, `_`, `.` or `-`"
        )));
    }
    let base_url = config::check_base_url(&args.base_url)
        .map_err(|why| Error::Invalid(format!("invalid base_url: {why}")))?;
    let backend = match args
        .backend
        .as_deref()
        .map(str::trim)
        .filter(|b| !b.is_empty())
    {
        None => None,
        Some(b) if b.eq_ignore_ascii_case("auto") => None,
        Some(b) => Some(config::Backend::parse(b).ok_or_else(|| {
            Error::Invalid(format!(
                "unknown backend `{b}`: use llama.cpp, vllm or other, or leave it out to detect it"
            ))
        })?),
    };
    if args.api_key_env.is_some() {
        // A prompt-injected call must not be able to send a secret from the
        // environment to a URL of its choosing.
        return Err(Error::Invalid(format!(
            "register_endpoint does not take api_key_env: a key is the user's to configure, never a tool call's; ask the user to add `api_key_env: NAME` under endpoints.{name} in ~/.config/localagents/models.yaml themselves"
        )));
    }
    let discovery = ctx.discovery();
    let sidecar = discovery.active_sidecar().ok_or_else(|| {
        Error::Invalid(
            "no place to write the sidecar: no user config dir is known (HOME and XDG_CONFIG_HOME are unset); pass --config".into(),
        )
    })?;
    let mut entry = serde_yaml_ng::Mapping::new();
    entry.insert("base_url".into(), base_url.clone().into());
    if let Some(b) = backend {
        entry.insert("backend".into(), b.as_str().into());
    }
    for (k, v) in [("host", &args.host), ("notes", &args.notes)] {
        if let Some(v) = v.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
            entry.insert(k.into(), v.into());
        }
    }
    config::write_sidecar_endpoint(&sidecar, name, entry)?;
    probe::invalidate();
    let loaded = config::load(&discovery)?;
    let Some(ep) = loaded.config.endpoint(name) else {
        return Err(Error::Invalid(format!(
            "wrote {} but endpoint `{name}` did not survive the merge; run `localagents config check`",
            sidecar.display()
        )));
    };
    let budget = std::time::Duration::from_secs_f64(loaded.config.defaults.probe_timeout_s);
    let st = probe::probe_cached(ep, budget).await;
    Ok(Registered {
        registered: name.to_string(),
        written_to: sidecar,
        endpoint: st,
        warnings: loaded.warnings.clone(),
    })
}

// ---- jobs -------------------------------------------------------------

/// A job's summary with whether it is still running.
#[derive(Debug, Serialize, JsonSchema)]
pub struct JobReply {
    #[serde(flatten)]
    pub job: JobSummary,
    pub still_running: bool,
    /// What to call next while it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// `run_agent`: start a job; return its summary at once or after `wait_s`.
pub async fn run_agent(
    m: &std::sync::Arc<Manager>,
    args: RunArgs,
    wait_s: u64,
) -> Result<JobReply, Error> {
    let rec = m.start(args).await?;
    let (rec, still) = if wait_s > 0 {
        m.wait(&rec.id, Duration::from_secs(wait_s.min(MAX_WAIT.as_secs())))
            .await?
    } else {
        let still = !rec.status.terminal();
        (rec, still)
    };
    Ok(JobReply {
        next: still.then(|| {
            format!(
                "wait_job(\"{}\") to wait up to {} s, or carry on and check job_status later",
                rec.id,
                MAX_WAIT.as_secs()
            )
        }),
        job: rec.summary(),
        still_running: still,
    })
}

/// `wait_job`.
pub async fn wait_job(m: &Manager, id: &str, timeout_s: u64) -> Result<JobReply, Error> {
    let wait = Duration::from_secs(timeout_s.min(MAX_WAIT.as_secs()));
    let (rec, still) = m.wait(id, wait).await?;
    Ok(JobReply {
        job: rec.summary(),
        still_running: still,
        next: None,
    })
}

/// `job_status`.
pub fn job_status(m: &Manager, id: &str) -> Result<JobSummary, Error> {
    Ok(m.record(id)?.summary())
}

/// `list_jobs`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct JobList {
    pub jobs: Vec<JobListItem>,
    pub count: usize,
    /// True when more jobs match than are listed here.
    pub truncated: bool,
    /// Where the list stopped short of the limit asked for, and how to see
    /// the rest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Records that do not read (garbled, a symlink, another job's, not
    /// ours to read), each with its path and the reason; absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<crate::jobs::UnreadableJob>,
}

/// `list_jobs`: the newest `limit` jobs (at least one), but no more than
/// `cap` (the tool's [`MAX_LIST_LIMIT`]; the CLI has none), with a note
/// when the cap cut the list below the limit.
pub fn list_jobs(
    m: &Manager,
    status: Option<Status>,
    limit: usize,
    cap: usize,
) -> Result<JobList, Error> {
    let limit = limit.max(1);
    let take = limit.min(cap.max(1));
    // One more than is shown: whether there are more is then known.
    let (mut recs, unreadable) = m.store.scan(status, take.saturating_add(1));
    let truncated = recs.len() > take;
    recs.truncate(take);
    let jobs: Vec<JobListItem> = recs.iter().map(|r| r.list_item()).collect();
    let note = (truncated && take < limit).then(|| {
        format!(
            "only the newest {take} jobs are listed: list_jobs stops at {take}; filter by status, or run `localagents jobs --limit {limit}` for more"
        )
    });
    Ok(JobList {
        count: jobs.len(),
        jobs,
        truncated,
        note,
        unreadable,
    })
}

/// Which log of a job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LogStream {
    /// What the delegate said and did.
    #[default]
    Transcript,
    /// Every backend request (the shim's log).
    Requests,
    /// The raw stream-json events.
    Events,
}

impl LogStream {
    fn file(self, dir: &JobDir) -> PathBuf {
        match self {
            LogStream::Transcript => dir.transcript(),
            LogStream::Requests => dir.requests(),
            LogStream::Events => dir.events(),
        }
    }
}

impl std::str::FromStr for LogStream {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "" | "transcript" => Ok(LogStream::Transcript),
            "requests" => Ok(LogStream::Requests),
            "events" => Ok(LogStream::Events),
            other => Err(format!(
                "unknown stream `{other}`: use transcript, requests or events"
            )),
        }
    }
}

/// A page of a job's log.
#[derive(Debug, Serialize, JsonSchema)]
pub struct LogPage {
    pub job_id: String,
    pub stream: LogStream,
    /// Every line of the log (counted in one streaming pass: memory stays
    /// bounded whatever the log's size).
    pub total_lines: usize,
    /// The log's size in bytes.
    pub total_bytes: u64,
    pub from: usize,
    pub to: usize,
    pub next_offset: Option<usize>,
    pub text: String,
}

const LOG_CAP: usize = 20_000;
/// A line of a page is cut to this many characters.
const LINE_CAP: usize = 2000;
/// How much of a log's end a tail page reads.
const TAIL_WINDOW: u64 = 1024 * 1024;

/// `job_log`: a page of one of the job's logs. The log is read without
/// following a symlink and only if it is a regular file (a FIFO would
/// block, a device would never end), and only the page is kept: a tail is
/// read from the end, an offset page forward with a byte cap. It blocks:
/// async callers run it on a blocking thread.
pub fn job_log(
    m: &Manager,
    id: &str,
    stream: LogStream,
    tail_lines: usize,
    offset: Option<usize>,
) -> Result<LogPage, Error> {
    let dir = m.store.job_dir(id)?;
    let _ = m.store.load(id)?;
    let path = stream.file(&dir);
    let n = tail_lines.clamp(1, 2000);
    let refused = |e: std::io::Error| Error::Invalid(format!("job {id}: cannot read its log: {e}"));
    let missing = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let (lines, from, total_lines, total_bytes): (Vec<Vec<u8>>, usize, usize, u64) = match offset {
        Some(o) => match crate::paths::read_lines_from(&path, o, n, LOG_CAP, LINE_CAP * 4) {
            Ok(p) => (p.lines, o.min(p.total_lines), p.total_lines, p.total_bytes),
            Err(e) if missing(&e) => (Vec::new(), 0, 0, 0),
            Err(e) => return Err(refused(e)),
        },
        None => match crate::paths::read_tail(&path, TAIL_WINDOW) {
            Ok((bytes, _)) => {
                let (total, size) = crate::paths::count_lines(&path).map_err(refused)?;
                let mut all: Vec<Vec<u8>> =
                    bytes.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
                if bytes.last().is_none_or(|b| *b == b'\n') {
                    all.pop();
                }
                let keep = all.len().min(n);
                let all = all.split_off(all.len() - keep);
                (all, total.saturating_sub(keep), total, size)
            }
            Err(e) if missing(&e) => (Vec::new(), 0, 0, 0),
            Err(e) => return Err(refused(e)),
        },
    };
    let mut out = String::new();
    let mut to = from;
    for l in &lines {
        let l = String::from_utf8_lossy(l);
        let l = l.strip_suffix('\r').unwrap_or(&l);
        let l: String = if l.chars().count() > LINE_CAP {
            format!("{}…", l.chars().take(LINE_CAP).collect::<String>())
        } else {
            l.to_string()
        };
        if out.len() + l.len() > LOG_CAP && to > from {
            break;
        }
        out.push_str(&l);
        out.push('\n');
        to += 1;
    }
    Ok(LogPage {
        job_id: id.to_string(),
        stream,
        total_lines,
        total_bytes,
        from,
        to,
        next_offset: (to < total_lines).then_some(to),
        text: out,
    })
}

/// A page of a job's diff.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DiffPage {
    pub job_id: String,
    pub isolation: Isolation,
    pub branch: Option<String>,
    pub diffstat: Option<String>,
    pub files_changed: Vec<String>,
    /// The whole diff's size in bytes, when this page reached its end
    /// (`null`: the diff goes on past `next_offset`; git stopped writing
    /// it there, so a huge diff costs what one page costs).
    pub total_bytes: Option<usize>,
    pub offset: usize,
    pub next_offset: Option<usize>,
    /// Files in the diff.
    pub files: usize,
    /// What this page leaves out, when the diff goes on: how many files
    /// start past it, and the first of them.
    pub left_out: Option<String>,
    pub diff: String,
}

/// `job_diff`: the full diff of a job, paged by bytes. Git runs on the
/// blocking pool and stops at the page's end.
pub async fn job_diff(
    m: &Manager,
    id: &str,
    max_bytes: usize,
    offset: usize,
) -> Result<DiffPage, Error> {
    let rec = m.record(id)?;
    let of = match &rec.worktree {
        Some(w) if tokio::fs::try_exists(&w.path).await.unwrap_or(false) => {
            crate::worktree::DiffOf::Worktree(w.clone())
        }
        Some(w) => {
            return Err(Error::Invalid(format!(
                "job {id}'s worktree is gone ({}): {}",
                w.path.display(),
                w.note.clone().unwrap_or_else(|| "it was removed".into())
            )));
        }
        None => crate::worktree::DiffOf::Paths {
            cwd: rec.cwd.clone(),
            paths: rec.files_changed.clone(),
        },
    };
    let max = max_bytes.clamp(1000, 100_000);
    let page = crate::worktree::patch_page(of, offset, max)
        .await
        .map_err(|e| Error::Invalid(format!("job {id}: cannot compute the diff: {e}")))?;
    let left_out = page.next_offset.map(|next| {
        let after = page.files.saturating_sub(page.files_reached);
        match &page.first_left_out {
            Some(first) if after > 0 => format!(
                "this page ends at byte {next} in file {} of {}; {} more files follow, from {first}: call again with offset {next}",
                page.files_reached,
                page.files,
                crate::fmt::thousands(after as u64)
            ),
            _ => format!(
                "this page ends at byte {next} in file {} of {}: call again with offset {next}",
                page.files_reached, page.files
            ),
        }
    });
    Ok(DiffPage {
        job_id: id.to_string(),
        isolation: rec.isolation,
        branch: rec.worktree.as_ref().map(|w| w.branch.clone()),
        diffstat: rec.worktree.as_ref().and_then(|w| w.diffstat.clone()),
        files_changed: rec.files_changed.clone(),
        total_bytes: page.total_bytes,
        offset: page.offset,
        next_offset: page.next_offset,
        files: page.files,
        left_out,
        diff: page.text,
    })
}

// ---- a job's page (`localagents ui`) ------------------------------------

/// A job as its records on disk show it, whichever process runs it: what
/// the page shows and its live updates repeat.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LiveProgress {
    pub status: Status,
    /// Requests to the model so far (each is a turn of the session).
    pub turns: u64,
    pub tool_calls: u64,
    /// Prompt, cached and output tokens, summed over the requests.
    pub tokens: u64,
    pub last_activity: Option<String>,
    /// The acceptance command's round, once it has run.
    pub acceptance_round: Option<u32>,
    pub elapsed_s: Option<f64>,
}

/// One `/v1/messages` request of a job (a line of its `requests.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestPoint {
    pub ts: String,
    pub status: u16,
    /// Prompt tokens the server processed anew.
    pub new_tokens: u64,
    /// Prompt tokens the server had in its cache.
    pub cached_tokens: u64,
    pub output_tokens: u64,
    pub ttft_ms: Option<u64>,
    pub ms: u64,
    pub error: Option<String>,
}

/// The most of a request log a page reads (its tail).
pub const REQUESTS_READ_CAP: u64 = 16 << 20;
/// The most of a brief or transcript a page shows (its tail).
pub const TEXT_READ_CAP: u64 = 256 << 10;

#[derive(serde::Deserialize)]
struct LoggedRequest {
    #[serde(default)]
    ts: String,
    #[serde(default)]
    path: String,
    #[serde(default)]
    status: u16,
    #[serde(default)]
    ms: u64,
    #[serde(default)]
    ttft_ms: Option<u64>,
    #[serde(default)]
    usage: crate::shim::sse::Usage,
    #[serde(default)]
    error: Option<String>,
}

/// A job's model requests, oldest first (from the last
/// [`REQUESTS_READ_CAP`] bytes of its log).
pub fn job_requests(m: &Manager, id: &str) -> Result<Vec<RequestPoint>, Error> {
    let dir = m.store.job_dir(id)?;
    let text = match crate::paths::read_tail(&dir.requests(), REQUESTS_READ_CAP) {
        Ok((bytes, _)) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(Error::Invalid(format!("job {id}: {e}"))),
    };
    Ok(text
        .split(|b| *b == b'\n')
        .filter_map(|l| serde_json::from_slice::<LoggedRequest>(l).ok())
        .filter(|r| r.path == "/v1/messages")
        .map(|r| RequestPoint {
            ts: r.ts,
            status: r.status,
            new_tokens: r.usage.input,
            cached_tokens: r.usage.cache_read,
            output_tokens: r.usage.output,
            ttft_ms: r.ttft_ms,
            ms: r.ms,
            error: r.error,
        })
        .collect())
}

/// A job's progress from its record and request log.
pub fn job_progress(m: &Manager, id: &str) -> Result<LiveProgress, Error> {
    let rec = m.store.load(id)?;
    let requests = job_requests(m, id)?;
    Ok(progress_of(&rec, &requests))
}

/// A job's progress from its record and the requests already read.
pub fn progress_of(rec: &crate::jobs::JobRecord, requests: &[RequestPoint]) -> LiveProgress {
    LiveProgress {
        status: rec.status,
        turns: requests.len() as u64,
        tool_calls: rec.tool_calls,
        tokens: requests
            .iter()
            .map(|r| r.new_tokens + r.cached_tokens + r.output_tokens)
            .sum(),
        acceptance_round: rec.acceptance.as_ref().map(|a| a.rounds),
        last_activity: rec.last_activity.clone(),
        elapsed_s: rec.elapsed_s,
    }
}

/// The tail of one of a job's text files (its brief, its transcript):
/// at most [`TEXT_READ_CAP`] bytes, empty when the file is not there.
pub fn job_text(m: &Manager, id: &str, which: JobText) -> Result<String, Error> {
    let dir = m.store.job_dir(id)?;
    let path = match which {
        JobText::Brief => dir.task(),
        JobText::Transcript => dir.transcript(),
    };
    match crate::paths::read_tail(&path, TEXT_READ_CAP) {
        Ok((bytes, _)) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(Error::Invalid(format!("job {id}: {e}"))),
    }
}

/// Which text of a job ([`job_text`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobText {
    /// `task.txt`: the whole brief.
    Brief,
    /// `transcript.txt`: what the delegate said and did.
    Transcript,
}

/// A job's whole record.
pub fn job_record(m: &Manager, id: &str) -> Result<crate::jobs::JobRecord, Error> {
    Ok(m.store.load(id)?)
}

/// `cancel_job`.
pub async fn cancel_job(m: &Manager, id: &str) -> Result<JobSummary, Error> {
    Ok(m.cancel(id).await?.summary())
}

/// One job `cleanup_jobs` removed (or would remove, in a dry run).
#[derive(Debug, Serialize, JsonSchema)]
pub struct Removed {
    pub job_id: String,
    pub removed: Vec<String>,
}

/// A job whose worktree holds work that is nowhere else: kept.
#[derive(Debug, Serialize, JsonSchema)]
pub struct KeptWork {
    pub job_id: String,
    pub branch: String,
    pub path: String,
    /// What would be lost.
    pub reason: String,
    /// How to look at it, and how to remove it anyway.
    pub review: String,
}

/// What `cleanup_jobs` did.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CleanupReport {
    /// True when nothing was removed: `removed` lists what would go.
    pub dry_run: bool,
    pub removed: Vec<Removed>,
    /// Worktrees with uncommitted files or unmerged commits, kept unless `force`.
    pub kept: Vec<KeptWork>,
    pub skipped: Vec<String>,
    pub older_than_days: Option<u64>,
}

/// What `cleanup_jobs` should do.
#[derive(Debug, Clone, Default)]
pub struct CleanupArgs {
    /// Default [`DEFAULT_CLEANUP_DAYS`]; at most [`MAX_CLEANUP_DAYS`].
    pub older_than_days: Option<u64>,
    pub job_id: Option<String>,
    /// List what would be removed, remove nothing.
    pub dry_run: bool,
    /// Remove worktrees with unmerged or uncommitted work too.
    pub force: bool,
}

/// `cleanup_jobs`: remove finished jobs' dirs, and their worktrees and
/// branches when nothing in them would be lost (or `force`).
pub async fn cleanup_jobs(m: &Manager, a: &CleanupArgs) -> Result<CleanupReport, Error> {
    let days = a.older_than_days.unwrap_or(DEFAULT_CLEANUP_DAYS);
    if days > MAX_CLEANUP_DAYS {
        return Err(Error::Invalid(format!(
            "older_than_days must be at most {MAX_CLEANUP_DAYS} (a century), not {days}"
        )));
    }
    if !a.dry_run {
        m.store.reap_lost().await;
    }
    let job_id = a.job_id.as_deref();
    let mut removed = Vec::new();
    let mut kept = Vec::new();
    let mut skipped = Vec::new();
    // Every record is read: on the blocking pool.
    let (store, one) = (m.store.clone(), a.job_id.clone());
    let loaded = tokio::task::spawn_blocking(move || -> Result<Vec<_>, Error> {
        let ids: Vec<String> = match &one {
            Some(id) => {
                store.dir(id)?;
                vec![id.clone()]
            }
            None => store.ids(),
        };
        Ok(ids
            .into_iter()
            .map(|id| {
                let r = store.load(&id);
                (id, r)
            })
            .collect())
    })
    .await
    .map_err(stopped)??;
    let cutoff = chrono::Utc::now()
        .checked_sub_signed(chrono::Duration::days(days as i64))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC);
    for (id, rec) in loaded {
        let rec = match rec {
            Ok(r) => r,
            Err(e) => {
                if job_id.is_some() {
                    return Err(e.into());
                }
                continue;
            }
        };
        if !rec.status.terminal() {
            skipped.push(format!("{id}: still {}", rec.status.as_str()));
            continue;
        }
        if job_id.is_none() {
            let created = chrono::DateTime::parse_from_rfc3339(&rec.created)
                .map(|t| t.with_timezone(&chrono::Utc));
            if created.is_ok_and(|c| c > cutoff) {
                continue;
            }
        }
        let mut what = Vec::new();
        if let Some(w) = &rec.worktree
            && (w.kept || w.path.exists())
        {
            if !a.force {
                match crate::worktree::unreviewed(w).await {
                    Ok(None) => {}
                    Ok(Some(why)) => {
                        kept.push(KeptWork {
                            job_id: id.clone(),
                            branch: w.branch.clone(),
                            path: w.path.display().to_string(),
                            reason: why.to_string(),
                            review: format!(
                                "review with `localagents job diff {id}` (or job_diff), merge what you want, then cleanup_jobs with job_id {id} and force: true"
                            ),
                        });
                        continue;
                    }
                    Err(e) => {
                        skipped.push(format!(
                            "{id}: cannot tell whether its worktree is merged ({e}); kept"
                        ));
                        continue;
                    }
                }
            }
            if !a.dry_run
                && let Err(e) = crate::worktree::remove(w, &id).await
            {
                skipped.push(format!("{id}: {e}"));
                continue;
            }
            what.push(format!(
                "worktree {} and branch {}",
                w.path.display(),
                w.branch
            ));
        }
        if let Ok(dir) = m.store.dir(&id)
            && (a.dry_run || tokio::fs::remove_dir_all(&dir).await.is_ok())
        {
            what.push(format!("job dir {}", dir.display()));
        }
        removed.push(Removed {
            job_id: id,
            removed: what,
        });
    }
    Ok(CleanupReport {
        dry_run: a.dry_run,
        removed,
        kept,
        skipped,
        older_than_days: job_id.is_none().then_some(days),
    })
}

/// Who calls a one-shot tool: a session's file paths must stay inside its
/// project; the user's own CLI is not limited.
fn check_files(
    ctx: &Context,
    files: &[PathBuf],
    caller: &crate::jobs::limits::Caller,
) -> Result<(), Error> {
    if let crate::jobs::limits::Caller::Session { project } = caller {
        let cfg = config::load(&ctx.discovery())?.config;
        for f in files {
            crate::jobs::limits::file(f, project, &cfg.defaults).map_err(Error::Invalid)?;
        }
    }
    Ok(())
}

/// Where relative file paths resolve for a caller.
fn base_dir(caller: &crate::jobs::limits::Caller) -> PathBuf {
    match caller {
        crate::jobs::limits::Caller::Session { project } => project.clone(),
        crate::jobs::limits::Caller::User => std::env::current_dir().unwrap_or_default(),
    }
}

/// `local_complete` / `localagents complete`: one answer, no session.
pub async fn local_complete(
    ctx: &Context,
    ask: crate::complete::Ask,
    model: Option<&str>,
    endpoint: Option<&str>,
    options: crate::complete::Options,
    caller: &crate::jobs::limits::Caller,
) -> Result<crate::complete::Completion, Error> {
    check_files(ctx, &ask.files, caller)?;
    let files = crate::complete::read_files(&ask.files, &base_dir(caller))
        .map_err(|e| Error::Invalid(e.to_string()))?;
    let target = resolve_target(ctx, model, endpoint).await?;
    crate::jobs::evict::check_load(
        &crate::jobs::Store::new(&ctx.state_dir),
        &target.probe,
        &target.resolved.served_id,
    )
    .map_err(Error::Invalid)?;
    let dir = ctx.state_dir.join("complete");
    let out = crate::complete::run(&target, &dir, &ask, &files, &options).await;
    crate::complete::log_result(&dir, &target, &ask, &out);
    out.map_err(|e| Error::Invalid(e.to_string()))
}

/// What `local_batch` answers: the results when it finished in time, else
/// the job to wait for.
#[derive(Debug, Serialize, JsonSchema)]
pub struct BatchReply {
    pub job_id: String,
    pub still_running: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<crate::jobs::batch::BatchReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// `local_batch` / `localagents batch`: check the items' files and start
/// the batch as a job.
pub async fn start_batch(
    m: &std::sync::Arc<Manager>,
    mut args: crate::jobs::batch::BatchArgs,
    caller: &crate::jobs::limits::Caller,
) -> Result<crate::jobs::JobRecord, Error> {
    let files: Vec<PathBuf> = args.items.iter().flat_map(|i| i.files.clone()).collect();
    check_files(&m.ctx, &files, caller)?;
    args.base = base_dir(caller);
    Ok(m.start_batch(args).await?)
}

/// Wait up to `wait_s` for batch `id`: its results, or the job to wait for.
pub async fn batch_reply(m: &Manager, id: &str, wait_s: u64) -> Result<BatchReply, Error> {
    let (rec, still) = m
        .wait(id, Duration::from_secs(wait_s.min(MAX_WAIT.as_secs())))
        .await?;
    let summary = rec.summary();
    Ok(BatchReply {
        next: still.then(|| {
            format!(
                "wait_job(\"{}\") to wait up to {} s more; its results come with it",
                rec.id,
                MAX_WAIT.as_secs()
            )
        }),
        job_id: rec.id,
        still_running: still,
        result: summary.result,
        batch: summary.batch,
    })
}

/// What `local_review` reviews.
#[derive(Debug, Clone, Default)]
pub struct ReviewArgs {
    pub job_id: Option<String>,
    pub diff: Option<String>,
    pub model: Option<String>,
    pub endpoint: Option<String>,
    pub focus: Option<String>,
}

/// `local_review`: a local model reviews a job's diff (against its brief)
/// or a given diff. Kept in the job's dir when it is a job's.
pub async fn local_review(
    m: &Manager,
    a: ReviewArgs,
) -> Result<crate::jobs::review::Review, Error> {
    use crate::jobs::review;
    let (diff, brief, dir, paged) = match (&a.job_id, &a.diff) {
        (Some(id), None) => {
            let rec = m.store.load(id)?;
            if !rec.status.terminal() {
                return Err(Error::Invalid(format!(
                    "job {id} is still {}: review it when it has finished (wait_job)",
                    rec.status.as_str()
                )));
            }
            let page = job_diff(m, id, 100_000, 0).await?;
            if page.total_bytes == Some(0) {
                return Err(Error::Invalid(format!(
                    "job {id} changed nothing: there is no diff to review"
                )));
            }
            let brief = tokio::fs::read_to_string(JobDir::at(&rec.log_dir).task())
                .await
                .ok();
            let paged = page.next_offset.is_some().then_some(page.diff.len());
            (page.diff, brief, Some(rec.log_dir), paged)
        }
        (None, Some(d)) if !d.trim().is_empty() => (d.clone(), None, None, None),
        _ => {
            return Err(Error::Invalid(
                "pass job_id (a finished job) or diff (unified diff text), one of them".into(),
            ));
        }
    };
    let target = resolve_target(&m.ctx, a.model.as_deref(), a.endpoint.as_deref()).await?;
    crate::jobs::evict::check_load(&m.store, &target.probe, &target.resolved.served_id)
        .map_err(Error::Invalid)?;
    // Leave room for the brief, the instructions and the answer; bytes
    // per token low (shim::BYTES_PER_TOKEN) so the cut errs towards fitting.
    let brief_tokens = crate::shim::tokens_of_bytes(
        (brief.as_deref().map_or(0, str::len) + a.focus.as_deref().map_or(0, str::len)) as u64,
    );
    let budget = target.resolved.context.map(|w| {
        (w.saturating_sub(1500 + 1024 + brief_tokens) * crate::shim::BYTES_PER_TOKEN) as usize
    });
    let (diff, cut) = match budget {
        Some(b) if diff.len() > b => {
            let mut end = b;
            while !diff.is_char_boundary(end) {
                end -= 1;
            }
            (diff[..end].to_string(), Some(end))
        }
        _ => (diff, paged),
    };
    let ask = crate::complete::Ask {
        prompt: review::prompt(brief.as_deref(), a.focus.as_deref(), &diff),
        system: Some(review::SYSTEM.into()),
        files: Vec::new(),
    };
    let log_dir = dir
        .clone()
        .unwrap_or_else(|| m.ctx.state_dir.join("complete"));
    let options = crate::complete::Options {
        max_tokens: Some(1024),
        temperature: Some(0.0),
    };
    let c = crate::complete::run(&target, &log_dir, &ask, &[], &options)
        .await
        .map_err(|e| Error::Invalid(e.to_string()))?;
    let r = review::parse(&c, cut);
    if let Some(dir) = &dir
        && let Err(e) = r.save(dir)
    {
        tracing::error!(
            "cannot keep the review with its job in {}: {e}",
            dir.display()
        );
    }
    Ok(r)
}
