//! Answers without a session: `local_complete`, `local_batch` and
//! `local_review`, with the file checks a session's caller gets.

use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;

use super::{
    BatchArgs, BatchReport, Caller, Context, Error, JobRecord, MAX_WAIT, Manager, Review, job_diff,
    resolve_target,
};
use crate::config;
use crate::jobs::dir::JobDir;

/// Who calls a one-shot tool: a session's file paths must stay inside its
/// project; the user's own CLI is not limited.
fn check_files(ctx: &Context, files: &[PathBuf], caller: &Caller) -> Result<(), Error> {
    if let Caller::Session { project } = caller {
        let cfg = config::load(&ctx.discovery())?.config;
        for f in files {
            crate::jobs::limits::file(f, project, &cfg.defaults)
                .map_err(|e| Error::Invalid(e.to_string()))?;
        }
    }
    Ok(())
}

/// Where relative file paths resolve for a caller.
fn base_dir(caller: &Caller) -> PathBuf {
    match caller {
        Caller::Session { project } => project.clone(),
        Caller::User => std::env::current_dir().unwrap_or_default(),
    }
}

/// `local_complete` / `localagents complete`: one answer, no session.
pub async fn local_complete(
    ctx: &Context,
    ask: crate::complete::Ask,
    model: Option<&str>,
    endpoint: Option<&str>,
    options: crate::complete::Options,
    caller: &Caller,
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
    .map_err(|e| Error::Invalid(e.to_string()))?;
    let dir = ctx.state_dir.join("complete");
    let out = crate::complete::run(&target, &dir, &ask, &files, &options, None).await;
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
    pub batch: Option<BatchReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// `local_batch` / `localagents batch`: check the items' files and start
/// the batch as a job.
pub async fn start_batch(
    m: &std::sync::Arc<Manager>,
    mut args: BatchArgs,
    caller: &Caller,
) -> Result<JobRecord, Error> {
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
                rec.id(),
                MAX_WAIT.as_secs()
            )
        }),
        job_id: rec.id().to_string(),
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
pub async fn local_review(m: &Manager, a: ReviewArgs) -> Result<Review, Error> {
    use crate::jobs::review;
    let (diff, brief, dir, paged) = match (&a.job_id, &a.diff) {
        (Some(id), None) => {
            let rec = m.record(id)?;
            if !rec.status().terminal() {
                return Err(Error::Invalid(format!(
                    "job {id} is still {}: review it when it has finished (wait_job)",
                    rec.status().as_str()
                )));
            }
            let page = job_diff(m, id, 100_000, 0).await?;
            if page.total_bytes == Some(0) {
                return Err(Error::Invalid(format!(
                    "job {id} changed nothing: there is no diff to review"
                )));
            }
            let brief = tokio::fs::read_to_string(JobDir::at(rec.log_dir()).task())
                .await
                .ok();
            let paged = page.next_offset.is_some().then_some(page.diff.len());
            (page.diff, brief, Some(rec.log_dir().to_path_buf()), paged)
        }
        (None, Some(d)) if !d.trim().is_empty() => (d.clone(), None, None, None),
        _ => {
            return Err(Error::Invalid(
                "pass job_id (a finished job) or diff (unified diff text), one of them".into(),
            ));
        }
    };
    let target = resolve_target(&m.ctx, a.model.as_deref(), a.endpoint.as_deref()).await?;
    crate::jobs::evict::check_load(m.store(), &target.probe, &target.resolved.served_id)
        .map_err(|e| Error::Invalid(e.to_string()))?;
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
    let c = crate::complete::run(&target, &log_dir, &ask, &[], &options, None)
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
