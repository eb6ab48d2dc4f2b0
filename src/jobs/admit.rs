//! Admission: a job starts only when it holds a lease on a slot of an
//! endpoint that serves its model ([`super::lease`]), first come first
//! served across every localagents process of the user.
//!
//! The first look happens in [`super::manager::Manager::start`], so `run_agent`'s answer
//! already says where the job stands; the wait itself is the first phase of
//! the job's run, where cancel and `timeout_s` stop it like any other
//! phase. Another endpoint that serves the same model with a free slot
//! takes the job (failover) unless the call named an endpoint or resumes a
//! job (whose session is best continued where its cache is).

use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::args::deadline_in;
use super::dir::JobDir;
use super::job::{Halt, Job, Progress};
use super::lease::{self, Admission, Lease, Ticket};
use super::record::JobRecord;
use super::runtime::Runtime;
use crate::registry::Target;

/// How often a waiting job looks again (a lease is a local lock: cheap).
const POLL: Duration = Duration::from_millis(100);
/// How often it asks the registry for other endpoints serving its model.
const REFRESH: Duration = Duration::from_secs(2);

/// The queue a job waits in: its model's, or for a job bound to one
/// endpoint that model's on that endpoint (so it never waits behind a job
/// that waits for another endpoint).
fn queue_of(t: &Target, pinned: bool) -> String {
    if pinned {
        format!("{}@{}", t.resolved.served_id, t.resolved.endpoint)
    } else {
        t.resolved.served_id.clone()
    }
}

/// Slots of an endpoint, when it says.
fn slots_of(t: &Target) -> Option<u64> {
    t.probe.slots.map(|s| s.total).filter(|n| *n > 0)
}

/// What a look for a free slot found.
enum Found {
    /// A lease on a slot of `targets[i]`.
    Lease(Lease, usize),
    /// Leases cannot be taken at all (the state dir refuses the lock
    /// files): the job goes on without one, as with `queue: false`.
    Unleasable,
    Nothing,
}

/// A lease on a slot of the first of `targets` that has one free.
fn lease_any(state_dir: &std::path::Path, targets: &[Target], job: &str) -> Found {
    for (i, t) in targets.iter().enumerate() {
        let Some(total) = slots_of(t) else { continue };
        match lease::try_lease(state_dir, &t.resolved.endpoint, total, job) {
            Ok(Some(l)) => return Found::Lease(l, i),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(
                    "cannot take a slot lease on `{}` ({e}); the job starts without one",
                    t.resolved.endpoint
                );
                return Found::Unleasable;
            }
        }
    }
    Found::Nothing
}

/// "queued: 2nd for qwen3-coder on `gpu1`, behind 20261201-…".
fn waiting_line(place: &lease::Place, t: &Target, holders: &[String]) -> String {
    let behind = match &place.head {
        Some(h) => h.clone(),
        None => holders.join(", "),
    };
    let behind = if behind.is_empty() {
        String::new()
    } else {
        format!(", behind {behind}")
    };
    format!(
        "queued: {} for {} on `{}`{behind} (every slot is taken; it starts when one frees)",
        lease::ordinal(place.ahead + 1),
        t.resolved.served_id,
        t.resolved.endpoint,
    )
}

/// The targets after a refresh: the job's own endpoint first; an endpoint
/// whose fresh probe lost its slot count (a probe that timed out) keeps the
/// one it had, so the job can still be admitted there.
fn merge_targets(old: &[Target], mut fresh: Vec<Target>, own: &str) -> Vec<Target> {
    for t in &mut fresh {
        if t.probe.slots.is_none()
            && let Some(o) = old
                .iter()
                .find(|o| o.resolved.endpoint == t.resolved.endpoint)
        {
            t.probe.slots = o.probe.slots;
        }
    }
    if !fresh.iter().any(|t| t.resolved.endpoint == own)
        && let Some(o) = old.iter().find(|o| o.resolved.endpoint == own)
    {
        fresh.push(o.clone());
    }
    fresh.sort_by_key(|t| t.resolved.endpoint != own);
    fresh
}

/// The first look, at start: a free slot now, or a place in the queue
/// (and the record says which).
pub(super) fn first_look(
    state: &std::path::Path,
    rec: &mut JobRecord,
    t: &Target,
    queue: bool,
    pinned: bool,
) -> Admission {
    let Some(total) = slots_of(t).filter(|_| queue) else {
        return Admission::Go(None);
    };
    let ticket = match Ticket::take(state, &queue_of(t, pinned), rec.id()) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!("cannot join the queue ({e}); the job starts without a lease");
            return Admission::Go(None);
        }
    };
    let place = ticket.place();
    if place.ahead == 0 {
        match lease_any(state, std::slice::from_ref(t), rec.id()) {
            Found::Lease(l, _) => return Admission::Go(Some(l)),
            Found::Unleasable => return Admission::Go(None),
            Found::Nothing => {}
        }
    }
    let holders = lease::holders(state, &t.resolved.endpoint, total);
    rec.waits(waiting_line(&place, t, &holders));
    Admission::Wait(ticket)
}

/// Wait in the queue until a slot of an endpoint serving the model is
/// free and no one is ahead; the job may move to that endpoint.
pub(super) async fn wait_for_slot(
    rt: &Runtime,
    job: &mut Job,
    rec: &mut JobRecord,
    ticket: Ticket,
    cancel: &mut watch::Receiver<bool>,
    progress: &watch::Sender<Progress>,
) -> Result<Option<Lease>, Halt> {
    let state = rt.ctx.state_dir.clone();
    let marker = JobDir::at(rec.log_dir()).cancel_marker();
    let deadline = deadline_in(Duration::from_secs(rec.timeout_s()));
    let mut targets = vec![job.target.clone()];
    let mut refreshed: Option<Instant> = None;
    loop {
        if !job.pinned && refreshed.is_none_or(|r| r.elapsed() >= REFRESH) {
            refreshed = Some(Instant::now());
            let served = job.target.resolved.served_id.clone();
            let refresh = crate::registry::resolve_targets(&rt.ctx, Some(&served), None);
            let fresh = tokio::select! {
                r = refresh => r.ok(),
                _ = cancel.changed() => return Err(Halt::Cancelled),
                _ = tokio::time::sleep_until(deadline) => return Err(Halt::Timeout),
            };
            if let Some(all) = fresh {
                targets = merge_targets(&targets, all, &job.target.resolved.endpoint);
            }
        }
        let place = ticket.place();
        if place.ahead == 0 {
            match lease_any(&state, &targets, rec.id()) {
                Found::Lease(l, i) => {
                    let t = &targets[i];
                    if t.resolved.endpoint != job.target.resolved.endpoint {
                        // A load there could swap out another job's model.
                        if !job.force
                            && let Err(why) =
                                super::evict::check_load(&rt.store, &t.probe, &t.resolved.served_id)
                        {
                            let skip = t.resolved.endpoint.clone();
                            tracing::info!("not moving job {} to `{skip}`: {why}", rec.id());
                            drop(l);
                            targets.retain(|x| x.resolved.endpoint != skip);
                            continue;
                        }
                        rec.move_to(&t.resolved);
                        job.target = t.clone();
                    }
                    rec.slot_free();
                    rt.store.save_or_log(rec);
                    return Ok(Some(l));
                }
                Found::Unleasable => return Ok(None),
                Found::Nothing => {}
            }
        }
        let total = slots_of(&job.target).unwrap_or(1);
        let holders = lease::holders(&state, &job.target.resolved.endpoint, total);
        let line = waiting_line(&place, &job.target, &holders);
        if rec.last_activity() != Some(line.as_str()) {
            rec.waits(line.clone());
            rt.store.save_or_log(rec);
            let _ = progress.send(Progress {
                last_activity: line,
                ..Default::default()
            });
        }
        tokio::select! {
            _ = cancel.changed() => return Err(Halt::Cancelled),
            _ = tokio::time::sleep_until(deadline) => return Err(Halt::Timeout),
            _ = tokio::time::sleep(POLL) => {}
        }
        if marker.exists() {
            return Err(Halt::Cancelled);
        }
    }
}
