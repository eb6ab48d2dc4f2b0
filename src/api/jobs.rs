//! A delegate's job from start to cleanup: `run_agent`, `wait_job`,
//! `job_status`, `list_jobs`, `job_log`, `job_diff`, `cancel_job` and
//! `cleanup_jobs`.

use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;

use super::{
    DEFAULT_CLEANUP_DAYS, Error, Isolation, JobListItem, JobSummary, MAX_CLEANUP_DAYS, MAX_WAIT,
    Manager, RunArgs, Status, stopped,
};
use crate::jobs::dir::JobDir;

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
        m.wait(rec.id(), Duration::from_secs(wait_s.min(MAX_WAIT.as_secs())))
            .await?
    } else {
        let still = !rec.status().terminal();
        (rec, still)
    };
    Ok(JobReply {
        next: still.then(|| {
            format!(
                "wait_job(\"{}\") to wait up to {} s, or carry on and check job_status later",
                rec.id(),
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
/// `cap` (the tool's [`MAX_LIST_LIMIT`](super::MAX_LIST_LIMIT); the CLI has none), with a note
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
    let (mut recs, unreadable) = m.list(status, take.saturating_add(1));
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
    let dir = m.job_dir(id)?;
    let _ = m.record(id)?;
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
        let l = crate::fmt::cut(l, LINE_CAP);
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
    let rec = m.job(id).await?;
    let of = match rec.worktree() {
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
            cwd: rec.cwd().to_path_buf(),
            paths: rec.files_changed().to_vec(),
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
        isolation: rec.isolation(),
        branch: rec.worktree().map(|w| w.branch.clone()),
        diffstat: rec.worktree().and_then(|w| w.diffstat.clone()),
        files_changed: rec.files_changed().to_vec(),
        total_bytes: page.total_bytes,
        offset: page.offset,
        next_offset: page.next_offset,
        files: page.files,
        left_out,
        diff: page.text,
    })
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
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, JsonSchema)]
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
    /// Leave the live jobs without a word in `skipped` (retention: they
    /// are never its business).
    pub unnamed_live: bool,
}

/// The records `cleanup_jobs` looks at: job `one`'s, else the live jobs'
/// (which it names and leaves) and those of the ended jobs made before
/// `cutoff`, from the index, each as it loads. On the blocking pool.
async fn records_to_clean(
    m: &Manager,
    one: Option<String>,
    cutoff: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<(String, Result<crate::jobs::JobRecord, crate::jobs::JobError>)>, Error> {
    let store = m.store().clone();
    tokio::task::spawn_blocking(move || -> Result<Vec<_>, Error> {
        if let Some(id) = &one {
            store.dir(id)?;
            return Ok(vec![(id.clone(), store.load(id))]);
        }
        let mut out = store.active();
        for e in store.ended_before(cutoff) {
            match store.load(&e.id) {
                Err(crate::jobs::JobError::NotFound(_)) => {}
                r => out.push((e.id, r)),
            }
        }
        Ok(out)
    })
    .await
    .map_err(stopped)?
}

/// Why a job's worktree stays: work nobody reviewed yet, or a check or
/// removal that failed (its sentence).
enum Held {
    Kept(KeptWork),
    Skipped(String),
}

/// Remove job `id`'s worktree and branch (or, in a dry run, say it would)
/// unless it holds work not merged or committed and `force` is not set.
/// Returns what was removed.
async fn clean_worktree(
    w: &crate::worktree::WorktreeInfo,
    id: &str,
    a: &CleanupArgs,
) -> Result<String, Held> {
    if !a.force {
        match crate::worktree::unreviewed(w).await {
            Ok(None) => {}
            Ok(Some(why)) => {
                return Err(Held::Kept(KeptWork {
                    job_id: id.to_string(),
                    branch: w.branch.clone(),
                    path: w.path.display().to_string(),
                    reason: why.to_string(),
                    review: format!(
                        "review with `localagents job diff {id}` (or job_diff), merge what you want, then cleanup_jobs with job_id {id} and force: true"
                    ),
                }));
            }
            Err(e) => {
                return Err(Held::Skipped(format!(
                    "{id}: cannot tell whether its worktree is merged ({e}); kept"
                )));
            }
        }
    }
    if !a.dry_run
        && let Err(e) = crate::worktree::remove(w, id).await
    {
        return Err(Held::Skipped(format!("{id}: {e}")));
    }
    Ok(format!(
        "worktree {} and branch {}",
        w.path.display(),
        w.branch
    ))
}

/// Remove an ended job's directory (its savings kept in the book first),
/// on the blocking pool; a failure is logged with its reason.
async fn remove_job(m: &Manager, rec: crate::jobs::JobRecord) -> Result<(), ()> {
    let store = m.store().clone();
    let r = tokio::task::spawn_blocking(move || store.remove(&rec).map_err(|e| e.to_string()))
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
    r.map_err(|e| tracing::warn!("cannot remove a job's directory: {e}"))
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
        m.reap_lost().await;
    }
    let job_id = a.job_id.as_deref();
    let mut removed = Vec::new();
    let mut kept = Vec::new();
    let mut skipped = Vec::new();
    let cutoff = chrono::Utc::now()
        .checked_sub_signed(chrono::Duration::days(days as i64))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC);
    let loaded = records_to_clean(m, a.job_id.clone(), cutoff).await?;
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
        if !rec.status().terminal() {
            if !a.unnamed_live {
                skipped.push(format!("{id}: still {}", rec.status().as_str()));
            }
            continue;
        }
        if job_id.is_none() {
            let created = chrono::DateTime::parse_from_rfc3339(rec.created())
                .map(|t| t.with_timezone(&chrono::Utc));
            if created.is_ok_and(|c| c > cutoff) {
                continue;
            }
        }
        let mut what = Vec::new();
        if let Some(w) = rec.worktree()
            && (w.kept || w.path.exists())
        {
            match clean_worktree(w, &id, a).await {
                Ok(done) => what.push(done),
                Err(Held::Kept(k)) => {
                    kept.push(k);
                    continue;
                }
                Err(Held::Skipped(why)) => {
                    skipped.push(why);
                    continue;
                }
            }
        }
        if let Ok(dir) = m.store().dir(&id)
            && (a.dry_run || remove_job(m, rec).await.is_ok())
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
