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
//!
//! That report also says when the last pass was: every `serve` (one per
//! Claude Code session) and every `run` share the state dir, so a pass is
//! made only when the last one, by any of them, is [`RETENTION_EVERY`] old
//! or was made with another `keep_days`. A session's start does not walk
//! the whole history again.

use std::path::{Path, PathBuf};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{CleanupArgs, Context, KeptWork, Manager, cleanup_jobs};

/// How long after `serve` starts it runs first: after its start-up, not
/// during it.
pub const SERVE_DELAY: Duration = Duration::from_secs(5);

/// How often a pass is made, by whichever `serve` or `run` comes first.
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
    let bytes = crate::paths::dir_bytes(state_dir);
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
    let state = state_dir(m);
    let (before, jobs_before) = measured(&state).await;
    let (mut removed, mut kept, mut skipped) = (0u64, Vec::new(), Vec::new());
    if keep_days > 0 {
        let args = CleanupArgs {
            older_than_days: Some(u64::from(keep_days)),
            unnamed_live: true,
            ..CleanupArgs::default()
        };
        match cleanup_jobs(m, &args).await {
            Ok(r) => {
                removed = r.removed.len() as u64;
                kept = r.kept;
                skipped = r.skipped;
            }
            Err(e) => skipped.push(format!("retention did not run: {e}")),
        }
    }
    // Measured again only when something went.
    let (after, jobs) = if removed == 0 {
        (before, jobs_before)
    } else {
        measured(&state).await
    };
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

fn state_dir(m: &Manager) -> PathBuf {
    m.store().root.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// `defaults.keep_days` in the user's config now (its default when the
/// config does not load).
fn keep_days(ctx: &Context) -> u32 {
    crate::config::load(&ctx.discovery())
        .map(|l| l.config.defaults.keep_days)
        .unwrap_or(crate::config::DEFAULT_KEEP_DAYS)
}

/// How long until a pass is due after `last`: none (zero) when there is no
/// last pass, when it kept another number of days, or when it is
/// [`RETENTION_EVERY`] old or says a time to come (a clock set back).
fn until_due(last: Option<&RetentionReport>, keep_days: u32, now: chrono::DateTime<chrono::Utc>) -> Duration {
    let Some(last) = last.filter(|l| l.keep_days == keep_days) else {
        return Duration::ZERO;
    };
    let Ok(at) = chrono::DateTime::parse_from_rfc3339(&last.at) else {
        return Duration::ZERO;
    };
    match (now - at.with_timezone(&chrono::Utc)).to_std() {
        Ok(age) => RETENTION_EVERY.saturating_sub(age),
        Err(_) => Duration::ZERO,
    }
}

/// A pass if one is due ([`until_due`]), else how long until one is.
async fn pass_if_due(m: &Manager, ctx: &Context) -> Result<RetentionReport, Duration> {
    let keep_days = keep_days(ctx);
    let state = state_dir(m);
    let last = tokio::task::spawn_blocking(move || last(&state)).await.ok().flatten();
    match until_due(last.as_ref(), keep_days, chrono::Utc::now()) {
        wait if wait.is_zero() => Ok(run_once(m, keep_days).await),
        wait => Err(wait),
    }
}

/// What `run` does beside its job: a pass if one is due. It is awaited
/// when the job is over, for a short while, then stopped: a removal
/// stopped half way leaves a whole job or none
/// ([`crate::jobs::index::Index::remove`]).
pub async fn run_if_due(m: &Manager, ctx: &Context) -> Option<RetentionReport> {
    pass_if_due(m, ctx).await.ok()
}

/// `serve`'s retention, in a task of its own: after `delay`, a pass
/// whenever one is due (by this or any other process), checked again
/// when it would be; `defaults.keep_days` is read each time.
pub fn spawn(m: &std::sync::Arc<Manager>, ctx: &Context, delay: Duration) -> tokio::task::JoinHandle<()> {
    let (m, ctx) = (m.clone(), ctx.clone());
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        loop {
            // After a pass, a full period: one whose report could not be
            // written is not made again at once.
            let wait = pass_if_due(&m, &ctx).await.map_or_else(|wait| wait, |_| RETENTION_EVERY);
            tokio::time::sleep(wait).await;
        }
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn report(at: &str, keep_days: u32) -> RetentionReport {
        RetentionReport {
            at: at.into(),
            keep_days,
            removed: 0,
            freed_bytes: 0,
            kept: Vec::new(),
            kept_total: 0,
            skipped: Vec::new(),
            state_bytes: 0,
            jobs: 0,
        }
    }

    #[test]
    fn a_pass_is_due_once_a_period_whoever_made_the_last() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-06T12:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        // Never run, or unreadable: now.
        assert_eq!(until_due(None, 30, now), Duration::ZERO);
        assert_eq!(until_due(Some(&report("yesterday", 30)), 30, now), Duration::ZERO);
        // An hour ago: the rest of the period.
        let hour_ago = report("2026-12-06T11:00:00.000Z", 30);
        assert_eq!(until_due(Some(&hour_ago), 30, now), RETENTION_EVERY - Duration::from_secs(3600));
        // Another keep_days in the config since: now.
        assert_eq!(until_due(Some(&hour_ago), 7, now), Duration::ZERO);
        // A period ago or more, or a time to come: now.
        assert_eq!(until_due(Some(&report("2026-12-06T06:00:00Z", 30)), 30, now), Duration::ZERO);
        assert_eq!(until_due(Some(&report("2026-12-05T00:00:00Z", 30)), 30, now), Duration::ZERO);
        assert_eq!(until_due(Some(&report("2027-01-01T00:00:00Z", 30)), 30, now), Duration::ZERO);
    }
}
