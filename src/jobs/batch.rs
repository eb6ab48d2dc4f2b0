//! A batch of one-shot completions, fanned out over free slots.
//!
//! Many small independent answers (docstrings for 40 functions, test data)
//! fit a server with many small slots better than one session does. A
//! batch runs as a job (`kind: batch`) so that `wait_job`, `job_status`
//! and `cancel_job` work on it when it outlasts a tool call, and so that
//! its requests are logged in a job dir like any other. Concurrency per
//! endpoint is the slots free when it starts (at least one), and every
//! live endpoint serving the same model takes part. An item that fails
//! (too long, a backend error) fails alone; results keep the input order.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::manager::{Manager, Progress, StartError};
use super::{Isolation, JobError, JobKind, JobRecord, Status};
use crate::complete::{self, Ask, Completion, Options};
use crate::registry::{self, Target};
use crate::shim::log::now_ts;
use crate::shim::sse::Usage;

/// Most items one batch takes.
pub const MAX_ITEMS: usize = 1000;

/// What `local_batch` / `localagents batch` asks for.
#[derive(Debug, Clone, Default)]
pub struct BatchArgs {
    pub items: Vec<Ask>,
    pub model: Option<String>,
    pub endpoint: Option<String>,
    pub options: Options,
    /// Where relative file paths resolve.
    pub base: PathBuf,
}

/// One item's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ItemResult {
    /// Position in the input, from 0.
    pub index: usize,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[schemars(with = "serde_json::Value")]
    pub usage: Usage,
    pub ms: u64,
    /// When the item was sent and answered (RFC 3339, ms).
    pub started: String,
    pub finished: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
}

/// A finished batch (`batch.json` in its job dir).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BatchReport {
    pub total: usize,
    pub succeeded: usize,
    pub failed: usize,
    pub elapsed_s: f64,
    pub items_per_s: f64,
    /// `endpoint×concurrency` for each endpoint used.
    pub lanes: Vec<String>,
    pub results: Vec<ItemResult>,
}

impl BatchReport {
    /// Read `batch.json` from a job dir, if the batch has finished.
    pub fn read(dir: &Path) -> Option<BatchReport> {
        serde_json::from_slice(&std::fs::read(dir.join("batch.json")).ok()?).ok()
    }
}

/// How many requests an endpoint takes at once: its free slots, at least
/// one (a server whose slots are unknown or all busy still gets one, which
/// it queues).
pub fn lanes(t: &Target) -> usize {
    t.probe.slots.map(|s| s.free as usize).unwrap_or(1).max(1)
}

fn record(id: &str, dir: &Path, t: &Target, args: &BatchArgs) -> JobRecord {
    let d = &t.config.defaults;
    JobRecord {
        id: id.to_string(),
        kind: JobKind::Batch,
        task: format!("batch of {} items", args.items.len()),
        model: args
            .model
            .clone()
            .unwrap_or_else(|| t.resolved.requested.clone()),
        served_id: t.resolved.served_id.clone(),
        endpoint: t.resolved.endpoint.clone(),
        base_url: t.resolved.base_url.clone(),
        cwd: args.base.clone(),
        origin_cwd: args.base.clone(),
        isolation: Isolation::None,
        status: Status::Running,
        created: now_ts(),
        started: Some(now_ts()),
        finished: None,
        elapsed_s: None,
        session_id: None,
        result: None,
        error: None,
        num_turns: None,
        tool_calls: 0,
        usage: Usage::default(),
        files_touched: Vec::new(),
        files_changed: Vec::new(),
        worktree: None,
        last_activity: Some(format!("0 of {} items", args.items.len())),
        log_dir: dir.to_path_buf(),
        context: t.resolved.context,
        metrics: None,
        first_turn: None,
        queued_note: None,
        load_note: None,
        acceptance: None,
        equivalent_usd: None,
        reference_model: None,
        model_faults: None,
        outcome: None,
        model_note: None,
        permission_mode: d.permission_mode.clone(),
        max_turns: 0,
        timeout_s: d.timeout_s,
        allowed_tools: Vec::new(),
        disallowed_tools: Vec::new(),
        system_prompt_append: None,
        resumed_from: None,
        pid: None,
        guard: None,
        owner_pid: std::process::id(),
        owner: crate::process::Identity::of(std::process::id()),
        reaped: false,
    }
}

impl Manager {
    /// Start a batch as a job; it runs in this process.
    pub async fn start_batch(self: &Arc<Self>, args: BatchArgs) -> Result<JobRecord, StartError> {
        if args.items.is_empty() {
            return Err(StartError::Invalid(
                "the batch has no items: give at least one {\"prompt\": …}".into(),
            ));
        }
        if args.items.len() > MAX_ITEMS {
            return Err(StartError::Invalid(format!(
                "the batch has {} items; one batch takes at most {MAX_ITEMS}: split it",
                args.items.len()
            )));
        }
        let targets =
            registry::resolve_targets(&self.ctx, args.model.as_deref(), args.endpoint.as_deref())
                .await?;
        for t in &targets {
            super::evict::check_load(&self.store, &t.probe, &t.resolved.served_id)
                .map_err(StartError::Invalid)?;
        }
        let id = super::new_id().map_err(JobError::from)?;
        let dir = self.store.dir(&id)?;
        crate::paths::private_dir_all(&dir).map_err(JobError::from)?;
        let rec = record(&id, &dir, &targets[0], &args);
        self.store.save(&rec)?;
        let (cancel, done, progress) = self.track(&id);
        let me = self.clone();
        let out = rec.clone();
        tokio::spawn(async move {
            let rec = me.run_batch(rec, targets, args, cancel, progress).await;
            me.store.save_or_log(&rec);
            me.untrack(&rec.id, &done);
        });
        Ok(out)
    }

    async fn run_batch(
        &self,
        mut rec: JobRecord,
        targets: Vec<Target>,
        args: BatchArgs,
        cancel: watch::Receiver<bool>,
        progress: watch::Sender<Progress>,
    ) -> JobRecord {
        let started = Instant::now();
        let total = args.items.len();
        let log = Arc::new(rec.log_dir.clone());
        let next = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicU64::new(0));
        let tokens = Arc::new(AtomicU64::new(0));
        let results: Arc<Mutex<Vec<Option<ItemResult>>>> = Arc::new(Mutex::new(vec![None; total]));
        let items = Arc::new(args.items);
        let config = targets[0].config.clone();
        let mut lanes_used = Vec::new();
        let mut workers = Vec::new();
        for t in targets {
            let n = lanes(&t).min(total);
            lanes_used.push(format!("{}×{n}", t.resolved.endpoint));
            let t = Arc::new(t);
            for _ in 0..n {
                let (t, log, next, done, tokens, results, items) = (
                    t.clone(),
                    log.clone(),
                    next.clone(),
                    done.clone(),
                    tokens.clone(),
                    results.clone(),
                    items.clone(),
                );
                let (base, options, progress, mut cancel) = (
                    args.base.clone(),
                    args.options,
                    progress.clone(),
                    cancel.clone(),
                );
                workers.push(tokio::spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        if i >= items.len() || *cancel.borrow() {
                            break;
                        }
                        let ask = &items[i];
                        let began = now_ts();
                        let clock = Instant::now();
                        let outcome = tokio::select! {
                            r = one(&t, &log, ask, &base, &options) => r,
                            _ = cancel.wait_for(|c| *c) => Err(complete::CompleteError::Invalid("cancelled".into())),
                        };
                        let r = item_result(i, outcome, began, clock, &t);
                        tokens.fetch_add(
                            r.usage.input + r.usage.cache_read + r.usage.output,
                            Ordering::SeqCst,
                        );
                        if let Ok(mut all) = results.lock() {
                            all[i] = Some(r);
                        }
                        let d = done.fetch_add(1, Ordering::SeqCst) + 1;
                        let _ = progress.send(Progress {
                            items: Some((d, items.len() as u64)),
                            tokens: tokens.load(Ordering::SeqCst),
                            ..Default::default()
                        });
                    }
                }));
            }
        }
        for w in workers {
            let _ = w.await;
        }
        let cancelled = *cancel.borrow();
        let results: Vec<ItemResult> = results
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.unwrap_or_else(|| ItemResult {
                    index: i,
                    ok: false,
                    text: None,
                    error: Some("cancelled before it was sent".into()),
                    usage: Usage::default(),
                    ms: 0,
                    started: String::new(),
                    finished: String::new(),
                    endpoint: None,
                    stop_reason: None,
                })
            })
            .collect();
        let elapsed = started.elapsed().as_secs_f64();
        let succeeded = results.iter().filter(|r| r.ok).count();
        let report = BatchReport {
            total,
            succeeded,
            failed: total - succeeded,
            elapsed_s: (elapsed * 1000.0).round() / 1000.0,
            items_per_s: if elapsed > 0.0 {
                ((succeeded as f64 / elapsed) * 100.0).round() / 100.0
            } else {
                0.0
            },
            lanes: lanes_used,
            results,
        };
        for r in &report.results {
            rec.usage.input += r.usage.input;
            rec.usage.cache_read += r.usage.cache_read;
            rec.usage.output += r.usage.output;
        }
        rec.equivalent_usd =
            config.equivalent_usd(rec.usage.input, rec.usage.cache_read, rec.usage.output);
        rec.reference_model = Some(config.defaults.reference_model.clone());
        if let Ok(bytes) = serde_json::to_vec_pretty(&report) {
            let _ = crate::paths::write_private(&rec.log_dir.join("batch.json"), &bytes);
        }
        rec.status = if cancelled {
            Status::Cancelled
        } else if succeeded == 0 {
            Status::Failed
        } else {
            Status::Succeeded
        };
        rec.result = Some(format!(
            "{total} items: {succeeded} answered, {} failed, in {:.1} s ({} items/s over {})",
            total - succeeded,
            elapsed,
            report.items_per_s,
            report.lanes.join(" + ")
        ));
        if succeeded == 0 {
            rec.error = report
                .results
                .iter()
                .find_map(|r| r.error.clone())
                .map(|e| format!("every item failed; the first: {e}"));
        }
        rec.last_activity = Some(format!("{} of {total} items", report.results.len()));
        rec.finished = Some(now_ts());
        rec.elapsed_s = Some(elapsed);
        rec
    }
}

async fn one(
    t: &Target,
    log: &Path,
    ask: &Ask,
    base: &Path,
    o: &Options,
) -> Result<Completion, complete::CompleteError> {
    let files = complete::read_files(&ask.files, base)?;
    complete::run(t, log, ask, &files, o).await
}

fn item_result(
    index: usize,
    outcome: Result<Completion, complete::CompleteError>,
    started: String,
    clock: Instant,
    t: &Target,
) -> ItemResult {
    let ms = clock.elapsed().as_millis() as u64;
    match outcome {
        Ok(c) => ItemResult {
            index,
            ok: true,
            text: Some(c.text),
            error: None,
            usage: c.usage,
            ms,
            started,
            finished: now_ts(),
            endpoint: Some(c.endpoint),
            stop_reason: c.stop_reason,
        },
        Err(e) => ItemResult {
            index,
            ok: false,
            text: None,
            error: Some(e.to_string()),
            usage: Usage::default(),
            ms,
            started,
            finished: now_ts(),
            endpoint: Some(t.resolved.endpoint.clone()),
            stop_reason: None,
        },
    }
}
