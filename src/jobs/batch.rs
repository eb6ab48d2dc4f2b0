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
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::args::StartError;
use super::dir::{JobDir, MAX_RECORD_BYTES};
use super::job::Progress;
use super::lease::{self, Lease};
use super::record::{BatchEnd, JobError, JobRecord, Status, new_job_id};
use super::runtime::Runtime;
use crate::complete::{self, Ask, Completion, Options};
use crate::registry::{self, Target};
use crate::shim::log::now_ts;
use crate::wire::Usage;

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
        let path = JobDir::at(dir).batch();
        let bytes = crate::paths::read_capped(&path, MAX_RECORD_BYTES).ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

/// How many requests an endpoint takes at once: its free slots, at least
/// one (a server whose slots are unknown or all busy still gets one, which
/// it queues).
pub fn lanes(t: &Target) -> usize {
    t.probe.slots.map(|s| s.free as usize).unwrap_or(1).max(1)
}

/// The lanes a batch may use on `t` and the slot leases it holds for them
/// ([`super::lease`]): one lease a lane, up to [`lanes`]. A slot a job has
/// leased is not the batch's even while that job's request is not sent
/// yet. With no lease to be had (every slot leased, or `queue` off, or the
/// endpoint's slots unknown) the batch still gets one lane, which the
/// server queues, as before leases.
fn leased_lanes(state_dir: &Path, t: &Target, id: &str, queue: bool) -> (usize, Vec<Lease>) {
    let want = lanes(t);
    let Some(total) = t.probe.slots.map(|s| s.total).filter(|n| *n > 0 && queue) else {
        return (want, Vec::new());
    };
    let mut held = Vec::new();
    while held.len() < want {
        match lease::try_lease(state_dir, &t.resolved.endpoint, total, id) {
            Ok(Some(l)) => held.push(l),
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(
                    "cannot take a slot lease on `{}` ({e})",
                    t.resolved.endpoint
                );
                return (want, Vec::new());
            }
        }
    }
    (held.len().max(1), held)
}

/// Start a batch as a job; it runs in this process (the manager's
/// `start_batch`).
pub(super) async fn start(rt: &Arc<Runtime>, args: BatchArgs) -> Result<JobRecord, StartError> {
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
        registry::resolve_targets(&rt.ctx, args.model.as_deref(), args.endpoint.as_deref()).await?;
    for t in &targets {
        if let Some(refusal) = crate::probe::window_refusal(
            t.backend,
            &t.resolved.endpoint,
            &t.resolved.served_id,
            t.resolved.context,
        ) {
            return Err(StartError::Invalid(refusal));
        }
        super::evict::check_load(&rt.store, &t.probe, &t.resolved.served_id)?;
    }
    let id = new_job_id().map_err(JobError::from)?;
    let dir = rt.store.create(&id)?;
    let rec = JobRecord::new_batch(
        &id,
        &dir,
        &targets[0],
        args.base.clone(),
        args.items.len(),
        args.model.clone(),
    );
    rt.store.save(&rec)?;
    let queue = targets[0].config.defaults.queue;
    let targets: Vec<(Target, usize, Vec<Lease>)> = targets
        .into_iter()
        .map(|t| {
            let (n, held) = leased_lanes(&rt.ctx.state_dir, &t, &id, queue);
            (t, n, held)
        })
        .collect();
    let (cancel, done, progress) = rt.track(&id);
    let me = rt.clone();
    let out = rec.clone();
    tokio::spawn(async move {
        let rec = run_batch(rec, targets, args, cancel, progress).await;
        me.store.save_or_log(&rec);
        me.untrack(rec.id(), &done);
    });
    Ok(out)
}

async fn run_batch(
    mut rec: JobRecord,
    targets: Vec<(Target, usize, Vec<Lease>)>,
    args: BatchArgs,
    cancel: watch::Receiver<bool>,
    progress: watch::Sender<Progress>,
) -> JobRecord {
    let started = Instant::now();
    let total = args.items.len();
    let config = targets[0].0.config.clone();
    let shared = Arc::new(Shared {
        log: rec.log_dir().to_path_buf(),
        base: args.base,
        options: args.options,
        next: AtomicUsize::new(0),
        done: AtomicU64::new(0),
        tokens: AtomicU64::new(0),
        results: Mutex::new(vec![None; total]),
        items: args.items,
    });
    let mut lanes_used = Vec::new();
    let mut workers = Vec::new();
    // Held until every worker is done.
    let mut leases = Vec::new();
    for (t, n, held) in targets {
        leases.extend(held);
        let n = n.min(total);
        lanes_used.push(format!("{}×{n}", t.resolved.endpoint));
        let t = Arc::new(t);
        for _ in 0..n {
            // Each lane is one session: behind a router its items stay on
            // one replica, where their shared prefix is cached.
            let lane = format!("{}-lane{}", rec.id(), workers.len() + 1);
            let w = worker(
                shared.clone(),
                t.clone(),
                lane,
                progress.clone(),
                cancel.clone(),
            );
            workers.push(tokio::spawn(w));
        }
    }
    for w in workers {
        let _ = w.await;
    }
    drop(leases);
    let cancelled = *cancel.borrow();
    let took = started.elapsed();
    let elapsed = took.as_secs_f64();
    let results = shared.results.lock().map(|r| r.clone()).unwrap_or_default();
    let report = BatchReport::of(results, elapsed, lanes_used);
    let mut lost = None;
    match serde_json::to_vec_pretty(&report) {
        Ok(bytes) => {
            let path = JobDir::at(rec.log_dir()).batch();
            if let Err(e) = crate::paths::write_atomic(&path, &bytes) {
                tracing::error!("{e}: the items' answers are lost");
                lost = Some(format!("{e}: free space there and run the batch again"));
            }
        }
        Err(e) => tracing::error!("cannot encode the batch report ({e})"),
    }
    rec.batch_ended(end_of(&report, cancelled, took, lost), &config);
    rec
}

/// What the workers of one batch share: the items, the next one to take,
/// the counters and the results in input order.
struct Shared {
    log: PathBuf,
    base: PathBuf,
    options: Options,
    items: Vec<Ask>,
    next: AtomicUsize,
    done: AtomicU64,
    tokens: AtomicU64,
    results: Mutex<Vec<Option<ItemResult>>>,
}

/// One lane of an endpoint: take the next item, answer it, until none is
/// left or the batch is cancelled.
async fn worker(
    s: Arc<Shared>,
    t: Arc<Target>,
    lane: String,
    progress: watch::Sender<Progress>,
    mut cancel: watch::Receiver<bool>,
) {
    loop {
        let i = s.next.fetch_add(1, Ordering::SeqCst);
        if i >= s.items.len() || *cancel.borrow() {
            break;
        }
        let began = now_ts();
        let clock = Instant::now();
        let outcome = tokio::select! {
            r = one(&t, &s.log, &s.items[i], &s.base, &s.options, &lane) => r,
            _ = cancel.wait_for(|c| *c) => Err(complete::CompleteError::Invalid("cancelled".into())),
        };
        let r = item_result(i, outcome, began, clock, &t);
        s.tokens.fetch_add(
            r.usage.input + r.usage.cache_read + r.usage.output,
            Ordering::SeqCst,
        );
        if let Ok(mut all) = s.results.lock() {
            all[i] = Some(r);
        }
        let d = s.done.fetch_add(1, Ordering::SeqCst) + 1;
        let _ = progress.send(Progress {
            items: Some((d, s.items.len() as u64)),
            tokens: s.tokens.load(Ordering::SeqCst),
            ..Default::default()
        });
    }
}

impl BatchReport {
    /// The report of the results in input order (an item never sent was
    /// cancelled before it was), over `elapsed` seconds.
    fn of(results: Vec<Option<ItemResult>>, elapsed: f64, lanes: Vec<String>) -> BatchReport {
        let total = results.len();
        let results: Vec<ItemResult> = results
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
        let succeeded = results.iter().filter(|r| r.ok).count();
        BatchReport {
            total,
            succeeded,
            failed: total - succeeded,
            elapsed_s: (elapsed * 1000.0).round() / 1000.0,
            items_per_s: if elapsed > 0.0 {
                ((succeeded as f64 / elapsed) * 100.0).round() / 100.0
            } else {
                0.0
            },
            lanes,
            results,
        }
    }
}

/// The batch's end as its record says it: the summed usage, the status
/// (cancelled; failed when no item was answered), the one-line result,
/// and the error: the first item's when none was answered, else `lost`
/// (the report could not be written).
fn end_of(report: &BatchReport, cancelled: bool, took: Duration, lost: Option<String>) -> BatchEnd {
    let (total, succeeded) = (report.total, report.succeeded);
    let mut usage = Usage::default();
    for r in &report.results {
        usage.input += r.usage.input;
        usage.cache_read += r.usage.cache_read;
        usage.output += r.usage.output;
    }
    let status = if cancelled {
        Status::Cancelled
    } else if succeeded == 0 {
        Status::Failed
    } else {
        Status::Succeeded
    };
    let result = format!(
        "{total} items: {succeeded} answered, {} failed, in {:.1} s ({} items/s over {})",
        total - succeeded,
        took.as_secs_f64(),
        report.items_per_s,
        report.lanes.join(" + ")
    );
    let first_failure = (succeeded == 0)
        .then(|| report.results.iter().find_map(|r| r.error.clone()))
        .flatten()
        .map(|e| format!("every item failed; the first: {e}"));
    BatchEnd {
        status,
        result,
        error: first_failure.or(lost),
        done: report.results.len(),
        total,
        usage,
        elapsed: took,
    }
}

async fn one(
    t: &Target,
    log: &Path,
    ask: &Ask,
    base: &Path,
    o: &Options,
    lane: &str,
) -> Result<Completion, complete::CompleteError> {
    let files = complete::read_files(&ask.files, base)?;
    complete::run(t, log, ask, &files, o, Some(lane.to_string())).await
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
