//! The phases before a slot: the checkout of a new worktree (git writes
//! its files while the record says so) and the wait in the queue for a
//! slot ([`crate::jobs::admit`]), each ended at once by a cancel or the
//! job's deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::jobs::admit;
use crate::jobs::dir::JobDir;
use crate::jobs::job::{Halt, Progress};
use crate::jobs::lease::{Admission, Lease};
use crate::jobs::record::{Status, preparing_line};
use crate::jobs::run::JobRun;
use crate::probe;
use crate::worktree;

/// How a checkout phase ended short of a worktree.
#[derive(Debug)]
pub(super) enum Prepared {
    Cancelled,
    /// The job's deadline.
    Timeout,
    /// Git failed; what it made was removed.
    Failed(worktree::GitError),
}

impl JobRun<'_> {
    /// The admission phase: the job's lease on a slot (`None`: not
    /// leased), once it has one; or the stop that ended its wait.
    pub(super) async fn admitted(&mut self) -> Result<Option<Lease>, Halt> {
        let rt = self.rt;
        let JobRun {
            job,
            rec,
            cancel,
            progress,
            ..
        } = self;
        match job.admission.take() {
            Some(Admission::Go(l)) => Ok(l),
            Some(Admission::Wait(ticket)) => {
                let lease = admit::wait_for_slot(rt, job, rec, ticket, cancel, progress).await?;
                // What the server says now, not before the wait: its
                // slots, counters and the model's state.
                job.target.probe = probe::probe(&job.target.endpoint, job.probe_budget).await;
                rec.left_queue();
                Ok(lease)
            }
            None => Ok(None),
        }
    }

    /// A job cancelled or timed out while it waited for a slot.
    pub(super) async fn stop_while_queued(&mut self, stop: &Halt) {
        let (rt, started) = (self.rt, self.started);
        let JobRun { rec, .. } = self;
        let (status, error) = match stop {
            Halt::Cancelled => (
                Status::Cancelled,
                "cancelled while it waited for a slot".to_string(),
            ),
            Halt::Timeout => (
                Status::Timeout,
                format!(
                    "timed out after {} s (timeout_s) while it waited for a slot: raise timeout_s, run fewer jobs at once, or start the server with more --parallel slots",
                    rec.timeout_s()
                ),
            ),
            Halt::Refused(why) => (Status::Failed, why.clone()),
        };
        rec.stopped_in_queue(status, error, started);
        rt.keep_final(rec).await;
    }

    /// The checkout phase of a job with a new worktree: git writes the
    /// files on the blocking pool while the job's record says so, and a
    /// cancel or the job's deadline ends the job at once (git's checkout,
    /// which cannot be interrupted while it writes, removes the worktree
    /// and its branch when it returns).
    pub(super) async fn prepare(
        &mut self,
        c: &worktree::Checkout,
        deadline: tokio::time::Instant,
    ) -> Result<(), Prepared> {
        let rt = self.rt;
        let JobRun {
            rec,
            cancel,
            progress,
            ..
        } = self;
        let t0 = Instant::now();
        rec.checkout_started(c.files);
        rt.keep(rec);
        let _ = progress.send(Progress {
            last_activity: preparing_line(c.files),
            ..Progress::default()
        });
        let marker = JobDir::at(rec.log_dir()).cancel_marker();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let work = worktree::check_out(c, stop.clone());
        tokio::pin!(work);
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        let done = loop {
            tokio::select! {
                r = &mut work => break r.map_err(Prepared::Failed),
                _ = cancel.changed() => break Err(Prepared::Cancelled),
                _ = tokio::time::sleep_until(deadline) => break Err(Prepared::Timeout),
                _ = tick.tick() => {
                    if tokio::fs::try_exists(&marker).await.unwrap_or(false) {
                        break Err(Prepared::Cancelled);
                    }
                }
            }
        };
        if matches!(done, Err(Prepared::Cancelled | Prepared::Timeout)) {
            stop.store(true, Ordering::SeqCst);
        }
        rec.checkout_ended(t0);
        done
    }

    /// A job whose checkout failed, or that was cancelled or timed out
    /// while git checked out its worktree.
    pub(super) async fn stop_while_preparing(&mut self, why: Prepared, c: &worktree::Checkout) {
        let (rt, started) = (self.rt, self.started);
        let JobRun { rec, .. } = self;
        let files = crate::fmt::thousands(c.files as u64);
        let (status, error) = match why {
            Prepared::Cancelled => (
                Status::Cancelled,
                format!("cancelled while git checked out its worktree ({files} files)"),
            ),
            Prepared::Timeout => (
                Status::Timeout,
                format!(
                    "timed out after {} s (timeout_s) while git checked out its worktree ({files} files): raise timeout_s, or use isolation \"none\" for a tree this large",
                    rec.timeout_s()
                ),
            ),
            Prepared::Failed(e) => (
                Status::Failed,
                format!("could not create the job's worktree ({files} files): {e}"),
            ),
        };
        rec.stopped_in_checkout(status, error, started);
        rt.keep_final(rec).await;
    }
}
