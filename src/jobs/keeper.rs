//! The records of the jobs this process runs: the latest of each in
//! memory, and one writer thread that puts them on disk in order.
//!
//! A record is written atomically with two fsyncs (the file, then its
//! directory). On a disk busy with another job's 60,000-file checkout one
//! fsync can take a second, and a running job keeps its record every half
//! second: on an async worker that would stall every other job's relay and
//! every MCP answer sharing the worker. So writes go to a thread of their
//! own, in the order they were asked for. A step of a job does not wait
//! for its write (a failure is logged with the record's directory); a
//! final record does, since its owner must know whether it landed. A step
//! overtaken by a newer record of the same job before the thread got to
//! it is not written: the newer one is.

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use tokio::sync::oneshot;

use super::record::{JobError, JobRecord};
use super::store::Store;

/// What the thread is asked to do.
enum Write {
    /// Put a record on disk; `done` gets the result (`None`: a step, a
    /// failure is logged).
    Save {
        rec: Box<JobRecord>,
        done: Option<Done>,
    },
    /// Answer once everything queued before it is written.
    Barrier(oneshot::Sender<()>),
}

/// Where a write's result goes.
type Done = Box<dyn FnOnce(Result<(), JobError>) + Send>;

/// The latest record of each job this process runs, and their writer.
pub(super) struct Keeper {
    store: Store,
    /// The latest record of each job this process runs, and of each that
    /// ended without its final record on disk.
    records: Mutex<HashMap<String, JobRecord>>,
    /// The writer thread's queue, started with the first write.
    tx: OnceLock<Mutex<mpsc::Sender<Write>>>,
}

impl Keeper {
    pub(super) fn new(store: Store) -> Keeper {
        Keeper {
            store,
            records: Mutex::new(HashMap::new()),
            tx: OnceLock::new(),
        }
    }

    /// This process's copy of a job's record, if it keeps one.
    pub(super) fn get(&self, id: &str) -> Option<JobRecord> {
        self.records.lock().ok().and_then(|r| r.get(id).cloned())
    }

    /// Hold `rec` as the job's latest record in memory.
    pub(super) fn hold(&self, rec: &JobRecord) {
        if let Ok(mut r) = self.records.lock() {
            r.insert(rec.id().to_string(), rec.clone());
        }
    }

    /// Forget the in-memory copy (the disk has the latest).
    pub(super) fn forget(&self, id: &str) {
        if let Ok(mut r) = self.records.lock() {
            r.remove(id);
        }
    }

    /// Queue a step's record for the disk; it does not wait.
    pub(super) fn write_later(&self, rec: &JobRecord) {
        self.send(Write::Save {
            rec: Box::new(rec.clone()),
            done: None,
        });
    }

    /// Write `rec` after every write queued before it, off the async
    /// workers, and say whether it landed.
    pub(super) async fn write(&self, rec: &JobRecord) -> Result<(), JobError> {
        let (tx, rx) = oneshot::channel();
        self.send(Write::Save {
            rec: Box::new(rec.clone()),
            done: Some(Box::new(move |r| {
                let _ = tx.send(r);
            })),
        });
        match rx.await {
            Ok(r) => r,
            // The thread dropped it (it could not start): write here, on
            // the blocking pool.
            Err(_) => {
                let (store, rec) = (self.store.clone(), rec.clone());
                tokio::task::spawn_blocking(move || store.save(&rec))
                    .await
                    .unwrap_or_else(|e| Err(JobError::Io(std::io::Error::other(e.to_string()))))
            }
        }
    }

    /// Write `rec` after every write queued before it and wait for it
    /// here, blocking the thread: for a record finished where nothing can
    /// be awaited (a run that unwound), never on a job's normal path.
    pub(super) fn write_now(&self, rec: &JobRecord) -> Result<(), JobError> {
        let (tx, rx) = mpsc::channel();
        self.send(Write::Save {
            rec: Box::new(rec.clone()),
            done: Some(Box::new(move |r| {
                let _ = tx.send(r);
            })),
        });
        rx.recv().unwrap_or_else(|_| self.store.save(rec))
    }

    /// Wait until every write queued so far is done.
    pub(super) async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        self.send(Write::Barrier(tx));
        let _ = rx.await;
    }

    fn send(&self, w: Write) {
        let tx = self
            .tx
            .get_or_init(|| Mutex::new(spawn_writer(self.store.clone())));
        let sent = match tx.lock() {
            Ok(tx) => tx.send(w).map_err(|e| e.0),
            Err(_) => Err(w),
        };
        // No thread: do it here, so nothing is lost.
        if let Err(w) = sent {
            run(&self.store, w);
        }
    }
}

/// Do one write and answer it: to its waiter, or to the log.
fn run(store: &Store, w: Write) {
    match w {
        Write::Barrier(done) => {
            let _ = done.send(());
        }
        Write::Save { rec, done } => {
            let r = store.save(&rec);
            match done {
                Some(done) => done(r),
                None => {
                    if let Err(e) = r {
                        tracing::error!(
                            "job {}: {e}; the job goes on, its owner keeps its record in memory",
                            rec.id()
                        );
                    }
                }
            }
        }
    }
}

/// The writer thread: takes what is queued, skips a step that a newer
/// record of the same job overtook, writes the rest in order.
fn spawn_writer(store: Store) -> mpsc::Sender<Write> {
    let (tx, rx) = mpsc::channel::<Write>();
    let spawned = std::thread::Builder::new()
        .name("localagents-records".into())
        .spawn(move || {
            while let Ok(first) = rx.recv() {
                let mut batch = vec![first];
                batch.extend(rx.try_iter());
                let mut latest: HashMap<String, usize> = HashMap::new();
                for (i, w) in batch.iter().enumerate() {
                    if let Write::Save { rec, .. } = w {
                        latest.insert(rec.id().to_string(), i);
                    }
                }
                for (i, w) in batch.into_iter().enumerate() {
                    let overtaken = matches!(&w, Write::Save { rec, done: None }
                        if latest.get(rec.id()).is_some_and(|&l| l > i));
                    if !overtaken {
                        run(&store, w);
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!(
            "cannot start the record writer thread ({e}); records are written in place"
        );
    }
    tx
}
