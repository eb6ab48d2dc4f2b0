//! What the runs of this process share: the context and the store, the
//! records held in memory and their writer ([`super::keeper`]), the shim,
//! the jobs running (their cancel, done and progress channels) and which
//! jobs share an endpoint. [`super::manager::Manager`] holds one; each
//! job's run and batch hold it too, so they need nothing of the manager.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::job::Progress;
use super::keeper::Keeper;
use super::record::{JobError, JobRecord, Status};
use super::store::Store;
use crate::context::Context;
use crate::shim::Shim;

pub(super) struct Handle {
    pub(super) cancel: watch::Sender<bool>,
    pub(super) done: watch::Receiver<bool>,
    pub(super) progress: watch::Receiver<Progress>,
}

struct Active {
    id: String,
    shared: Arc<AtomicBool>,
}

/// The jobs of this process, as their runs see them.
pub(crate) struct Runtime {
    pub(crate) ctx: Context,
    pub(crate) store: Store,
    shim: tokio::sync::OnceCell<Shim>,
    pub(super) running: Mutex<HashMap<String, Handle>>,
    active: Mutex<HashMap<String, Vec<Active>>>,
    /// The latest record of each job this process runs, and of each that
    /// ended without its final record on disk (what `wait` and `record`
    /// answer from when the disk refuses a write), and their writer
    /// thread.
    keeper: Keeper,
}

/// How long to wait before each retry of a final record's write.
const WRITE_RETRIES: [Duration; 3] = [
    Duration::from_millis(20),
    Duration::from_millis(80),
    Duration::from_millis(320),
];

impl Runtime {
    pub(super) fn new(ctx: Context) -> Runtime {
        Runtime {
            store: Store::new(&ctx.state_dir),
            keeper: Keeper::new(Store::new(&ctx.state_dir)),
            ctx,
            shim: tokio::sync::OnceCell::new(),
            running: Mutex::new(HashMap::new()),
            active: Mutex::new(HashMap::new()),
        }
    }

    pub(super) async fn shim(&self) -> std::io::Result<&Shim> {
        self.shim.get_or_try_init(|| Shim::start(0)).await
    }

    /// A job's record: this process's own copy when it runs the job (or
    /// ran it and could not write its end), else the one on disk.
    pub(super) fn record(&self, id: &str) -> Result<JobRecord, JobError> {
        match self.keeper.get(id) {
            Some(r) => Ok(r),
            None => self.store.load(id),
        }
    }

    /// A new job's first record, on disk before the job is tracked (the
    /// caller answers an error).
    pub(super) async fn keep_first(&self, rec: &JobRecord) -> Result<(), JobError> {
        self.keeper.write(rec).await
    }

    /// The record this process holds of job `id` in memory, if any.
    pub(super) fn held(&self, id: &str) -> Option<JobRecord> {
        self.keeper.get(id)
    }

    /// Keep a running job's record: in memory at once, on disk by the
    /// record writer thread (never on an async worker); a failed write is
    /// logged with the record's directory and the reason, and the job goes
    /// on (its owner answers from memory).
    pub(super) fn keep(&self, rec: &JobRecord) {
        self.keeper.hold(rec);
        self.keeper.write_later(rec);
    }

    /// Keep a job's record from a place that cannot await (a run that
    /// unwound): written in order with the rest, this thread waiting.
    pub(super) fn keep_now(&self, rec: &JobRecord) {
        self.keeper.hold(rec);
        match self.keeper.write_now(rec) {
            Ok(()) => self.keeper.forget(rec.id()),
            Err(e) => tracing::error!("job {}: {e}; its owner keeps its record in memory", rec.id()),
        }
    }

    /// Keep a job's final record: written with a few short retries, each
    /// failure logged. When it cannot be written the job fails with the
    /// sentence that says so, kept in memory (and tried once more on
    /// disk), so a waiter gets the end instead of a record that cannot
    /// change.
    pub(super) async fn keep_final(&self, rec: &mut JobRecord) {
        self.keeper.hold(rec);
        let mut last = None;
        for (n, pause) in std::iter::once(Duration::ZERO)
            .chain(WRITE_RETRIES)
            .enumerate()
        {
            tokio::time::sleep(pause).await;
            match self.keeper.write(rec).await {
                Ok(()) => {
                    self.keeper.forget(rec.id());
                    return;
                }
                Err(e) => {
                    tracing::error!(
                        "job {}: {e} (try {} of {})",
                        rec.id(),
                        n + 1,
                        WRITE_RETRIES.len() + 1
                    );
                    last = Some(e);
                }
            }
        }
        if let Some(e) = last {
            let error = match rec.error() {
                Some(before) => format!("{e}; before that: {before}"),
                None => e.to_string(),
            };
            rec.end_outside(Status::Failed, error);
            self.keeper.hold(rec);
            if self.keeper.write(rec).await.is_ok() {
                self.keeper.forget(rec.id());
            }
        }
    }

    /// Wait until every record this process queued for the disk is
    /// written (at shutdown).
    pub(super) async fn flush_records(&self) {
        self.keeper.flush().await;
    }

    /// Jobs running in this process.
    pub(super) fn running_ids(&self) -> Vec<String> {
        self.running
            .lock()
            .map(|r| r.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub(super) fn progress(&self, id: &str) -> Option<watch::Receiver<Progress>> {
        self.running
            .lock()
            .ok()?
            .get(id)
            .map(|h| h.progress.clone())
    }

    /// Register a job of this process: its cancel, done and progress
    /// channels (what `wait`, `cancel` and progress read).
    pub(super) fn track(
        &self,
        id: &str,
    ) -> (
        watch::Receiver<bool>,
        watch::Sender<bool>,
        watch::Sender<Progress>,
    ) {
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let (done_tx, done_rx) = watch::channel(false);
        let (prog_tx, prog_rx) = watch::channel(Progress::default());
        if let Ok(mut r) = self.running.lock() {
            r.insert(
                id.to_string(),
                Handle {
                    cancel: cancel_tx,
                    done: done_rx,
                    progress: prog_rx,
                },
            );
        }
        (cancel_rx, done_tx, prog_tx)
    }

    /// The job has ended: drop its handle, wake its waiters.
    /// ([`Untrack`] calls it when a job's task ends.)
    pub(super) fn untrack(&self, id: &str, done: &watch::Sender<bool>) {
        if let Ok(mut r) = self.running.lock() {
            r.remove(id);
        }
        let _ = done.send(true);
    }

    pub(super) fn mark_active(&self, endpoint: &str, id: &str) -> Arc<AtomicBool> {
        let flag = Arc::new(AtomicBool::new(false));
        if let Ok(mut a) = self.active.lock() {
            let list = a.entry(endpoint.to_string()).or_default();
            if !list.is_empty() {
                flag.store(true, Ordering::SeqCst);
                for other in list.iter() {
                    other.shared.store(true, Ordering::SeqCst);
                }
            }
            list.push(Active {
                id: id.to_string(),
                shared: flag.clone(),
            });
        }
        flag
    }

    pub(super) fn unmark_active(&self, endpoint: &str, id: &str) {
        if let Ok(mut a) = self.active.lock()
            && let Some(list) = a.get_mut(endpoint)
        {
            list.retain(|x| x.id != id);
        }
    }
}

/// Calls [`Runtime::untrack`] when a job's task ends, however it ends.
pub(super) struct Untrack {
    pub(super) runtime: Arc<Runtime>,
    pub(super) id: String,
    pub(super) done: watch::Sender<bool>,
}

impl Drop for Untrack {
    fn drop(&mut self) {
        self.runtime.untrack(&self.id, &self.done);
    }
}
