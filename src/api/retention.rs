//! Retention: the ended jobs older than `defaults.keep_days` (30 by
//! default, as Claude Code keeps its own sessions; 0 keeps every job) are
//! removed in the background of `serve` and `run`, never on a request's
//! path.
//!
//! It follows `cleanup_jobs`' rule: a job whose worktree or branch holds
//! commits not merged or files not committed is kept, and said so; live
//! jobs are never touched. What a removed job counted in the savings stays
//! in the savings book. Each run measures the state dir (a walk, off the
//! async workers) and writes what it did to `<state>/retention.json`,
//! which `status` reads: a user sees what went, what stayed and why, and
//! what the history costs on disk.

use std::path::{Path, PathBuf};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{CleanupArgs, Context, KeptWork, Manager, cleanup_jobs};

/// How long after `serve` starts it runs first: after its start-up, not
/// during it.
pub const SERVE_DELAY: Duration = Duration::from_secs(5);

/// How often `serve` runs it again.
pub const RETENTION_EVERY: Duration = Duration::from_secs(6 * 3600);

/// Jobs kept or skipped named in the report (the rest are counted).
const NAMED: usize = 10;

/// What the last retention run did (`<state>/retention.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RetentionReport {
    /// When it ran, RFC 3339.
    pub at: String,
    /// `defaults.keep_days` then (0: nothing is removed).
    pub keep_days: u32,
    /// Job directories removed.
    pub removed: u64,
    /// Bytes the state dir lost in the run.
    pub freed_bytes: u64,
    /// Old jobs kept for work not merged or not committed (the first ten).
    pub kept: Vec<KeptWork>,
    pub kept_total: u64,
    /// Old jobs left for another reason, a sentence each (the first ten).
    pub skipped: Vec<String>,
    /// The state dir after the run.
    pub state_bytes: u64,
    /// Job directories after the run.
    pub jobs: u64,
}

fn report_path(state_dir: &Path) -> PathBuf {
    state_dir.join("retention.json")
}

/// Bytes and job directories under a state dir: a walk that follows no
/// link (blocking: call it off the async workers).
pub fn state_size(state_dir: &Path) -> (u64, u64) {
    let mut bytes = 0u64;
    let mut stack = vec![state_dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            } else {
                bytes = bytes.saturating_add(m.len());
            }
        }
    }
    let jobs = std::fs::read_dir(state_dir.join("jobs"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(super::valid_id))
        .count() as u64;
    (bytes, jobs)
}

async fn measured(state_dir: &Path) -> (u64, u64) {
    let d = state_dir.to_path_buf();
    tokio::task::spawn_blocking(move || state_size(&d))
        .await
        .unwrap_or_default()
}

/// One run: remove the ended jobs made more than `keep_days` days ago
/// (none with 0), measure the state dir, and write the report.
pub async fn run_once(m: &Manager, keep_days: u32) -> RetentionReport {
    let state = m.store().root.parent().map(Path::to_path_buf).unwrap_or_default();
    let (before, _) = measured(&state).await;
    let (mut removed, mut kept, mut skipped) = (0u64, Vec::new(), Vec::new());
    if keep_days > 0 {
        let args = CleanupArgs {
            older_than_days: Some(u64::from(keep_days)),
            ..CleanupArgs::default()
        };
        match cleanup_jobs(m, &args).await {
            Ok(r) => {
                removed = r.removed.len() as u64;
                kept = r.kept;
                // Live jobs are named by cleanup_jobs; retention leaves
                // them without a word.
                skipped = r.skipped.into_iter().filter(|s| !s.contains(": still ")).collect();
            }
            Err(e) => skipped.push(format!("retention did not run: {e}")),
        }
    }
    let (after, jobs) = measured(&state).await;
    let kept_total = kept.len() as u64;
    kept.truncate(NAMED);
    skipped.truncate(NAMED);
    let report = RetentionReport {
        at: super::now_ts(),
        keep_days,
        removed,
        freed_bytes: before.saturating_sub(after),
        kept,
        kept_total,
        skipped,
        state_bytes: after,
        jobs,
    };
    let bytes = serde_json::to_vec_pretty(&report).unwrap_or_default();
    let path = report_path(&state);
    let written = tokio::task::spawn_blocking(move || crate::paths::write_atomic(&path, &bytes)).await;
    if let Ok(Err(e)) = written {
        tracing::warn!("cannot write what retention did: {e}");
    }
    if report.removed > 0 || report.kept_total > 0 {
        tracing::info!("{}", line(Some(&report)));
    }
    report
}

/// Retention running in a task of its own ([`spawn`]).
pub struct Retention {
    handle: tokio::task::JoinHandle<()>,
    first: tokio::sync::watch::Receiver<bool>,
}

impl Retention {
    /// Let the first run end, for at most `limit` (`run` does, when its
    /// job is over: a short job still has its history kept short), then
    /// stop it. A removal stopped half way leaves a whole job or none
    /// ([`crate::jobs::index::Index::remove`]).
    pub async fn finish(mut self, limit: Duration) {
        let _ = tokio::time::timeout(limit, self.first.wait_for(|done| *done)).await;
        self.handle.abort();
    }

    /// Stop it now (`serve`'s shutdown).
    pub fn abort(&self) {
        self.handle.abort();
    }
}

/// Run retention after `delay`, then every [`RETENTION_EVERY`], in a task
/// of its own (`serve`, `run`); `defaults.keep_days` is read each time.
pub fn spawn(m: &std::sync::Arc<Manager>, ctx: &Context, delay: Duration) -> Retention {
    let (m, ctx) = (m.clone(), ctx.clone());
    let (tx, first) = tokio::sync::watch::channel(false);
    let handle = tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        loop {
            let keep_days = crate::config::load(&ctx.discovery())
                .map(|l| l.config.defaults.keep_days)
                .unwrap_or(crate::config::DEFAULT_KEEP_DAYS);
            run_once(&m, keep_days).await;
            let _ = tx.send(true);
            tokio::time::sleep(RETENTION_EVERY).await;
        }
    });
    Retention { handle, first }
}

/// The last run's report, when there is one that reads.
pub fn last(state_dir: &Path) -> Option<RetentionReport> {
    let bytes = crate::paths::read_capped(&report_path(state_dir), 1 << 20).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// What `status` says of retention, in one line.
pub fn line(r: Option<&RetentionReport>) -> String {
    let Some(r) = r else {
        return "retention: not run yet (it runs in the background of `serve` and `run`)".into();
    };
    let size = format!(
        "the state dir holds {} in {} {}",
        crate::fmt::bytes(r.state_bytes),
        r.jobs,
        if r.jobs == 1 { "job" } else { "jobs" }
    );
    let at = r.at.get(..16).unwrap_or(&r.at).replace('T', " ");
    if r.keep_days == 0 {
        return format!(
            "retention: off (defaults.keep_days: 0), measured {at} UTC: {size}"
        );
    }
    let mut s = format!(
        "retention (jobs kept {} days), last run {at} UTC: removed {} {}, freed {}; {size}",
        r.keep_days,
        r.removed,
        if r.removed == 1 { "job" } else { "jobs" },
        crate::fmt::bytes(r.freed_bytes),
    );
    if let Some(k) = r.kept.first() {
        s.push_str(&format!(
            "; kept {} older with work not merged: job {} ({}): {}",
            r.kept_total, k.job_id, k.branch, k.review
        ));
    }
    for why in r.skipped.iter().take(1) {
        s.push_str(&format!("; left: {why}"));
    }
    s
}
