//! Slot leases and the queue, shared by every localagents process of the
//! user (each MCP server, each `localagents run`).
//!
//! Two jobs on one llama-server slot evict each other's cache on every
//! turn, so a job takes a lease on one slot of its endpoint for its whole
//! life: an exclusive `flock` on `slots/<endpoint>/<n>.lock` under the state
//! dir. The kernel releases it when the holding process ends, however it
//! ends (SIGKILL included), so a lease can never outlive its job and there
//! is nothing to clean up. A lock file says which job holds it.
//!
//! When every slot is leased, the job waits in a first-come queue per
//! served model: a ticket `queue/<model>/<nanos>-<job>.lock`, locked by its
//! process while it waits. Only the oldest live ticket may take a slot; a
//! ticket whose lock nobody holds belongs to a process that died, and is
//! removed by whoever finds it. This is admission, not a scheduler: no
//! priorities, no preemption.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A name safe as one path component (endpoint and model names are checked
/// by the config, served ids come from a server).
pub(crate) fn component(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    if s.is_empty() || s.starts_with('.') {
        format!("_{s}")
    } else {
        s
    }
}

/// Open (create) a lock file: private, never through a symlink.
fn open_lock(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Take the exclusive lock without waiting: `false` when another open file
/// holds it.
fn try_lock(f: &File) -> std::io::Result<bool> {
    // SAFETY: flock on a file descriptor we own; no memory is passed.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// A job's lease on one slot; dropping it (or the process ending) frees it.
#[derive(Debug)]
pub struct Lease {
    _file: File,
    pub endpoint: String,
    pub slot: u64,
}

fn slots_dir(state_dir: &Path, endpoint: &str) -> PathBuf {
    state_dir.join("slots").join(component(endpoint))
}

/// Take a free slot of `endpoint` (of `total`) for `job`, if there is one.
pub fn try_lease(
    state_dir: &Path,
    endpoint: &str,
    total: u64,
    job: &str,
) -> std::io::Result<Option<Lease>> {
    let dir = slots_dir(state_dir, endpoint);
    crate::paths::private_dir_all(&dir)?;
    for slot in 0..total {
        let mut f = open_lock(&dir.join(format!("{slot}.lock")))?;
        if try_lock(&f)? {
            f.set_len(0)?;
            f.write_all(job.as_bytes())?;
            return Ok(Some(Lease {
                _file: f,
                endpoint: endpoint.to_string(),
                slot,
            }));
        }
    }
    Ok(None)
}

/// The jobs that hold leases on `endpoint` now (of `total` slots).
pub fn holders(state_dir: &Path, endpoint: &str, total: u64) -> Vec<String> {
    let dir = slots_dir(state_dir, endpoint);
    let mut out = Vec::new();
    for slot in 0..total {
        let path = dir.join(format!("{slot}.lock"));
        let Ok(mut f) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        else {
            continue;
        };
        // Locking it ourselves means nobody holds it (closing the file
        // below lets it go again).
        if try_lock(&f).unwrap_or(true) {
            continue;
        }
        let mut id = String::new();
        if (&mut f).take(64).read_to_string(&mut id).is_ok() && !id.is_empty() {
            out.push(id);
        }
    }
    out
}

/// A job's place in its model's queue, held while it waits.
#[derive(Debug)]
pub struct Ticket {
    _file: File,
    path: PathBuf,
    name: String,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Where a waiting job stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// Live tickets before this one.
    pub ahead: usize,
    /// The job first in the queue, when it is another one.
    pub head: Option<String>,
}

impl Ticket {
    /// Join the queue of `model` as `job`.
    pub fn take(state_dir: &Path, model: &str, job: &str) -> std::io::Result<Ticket> {
        let dir = state_dir.join("queue").join(component(model));
        crate::paths::private_dir_all(&dir)?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let name = format!("{nanos:024}-{}.lock", component(job));
        let path = dir.join(&name);
        // Locked under a name the queue does not read, then moved in: a
        // waiter never sees it unlocked (and takes it for a dead one).
        let staging = dir.join(format!("{name}.new"));
        let f = open_lock(&staging)?;
        if !try_lock(&f)? {
            return Err(std::io::Error::other(format!(
                "{} is locked by another process",
                staging.display()
            )));
        }
        std::fs::rename(&staging, &path)?;
        Ok(Ticket {
            _file: f,
            path,
            name,
        })
    }

    /// The live tickets before this one; a dead one (nobody holds its
    /// lock) is removed on the way.
    pub fn place(&self) -> Place {
        let Some(dir) = self.path.parent() else {
            return Place {
                ahead: 0,
                head: None,
            };
        };
        let mut older: Vec<String> = std::fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|n| n.ends_with(".lock") && *n < self.name)
                    .collect()
            })
            .unwrap_or_default();
        older.sort();
        let mut live = Vec::new();
        for n in older {
            let path = dir.join(&n);
            let Ok(f) = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
            else {
                continue;
            };
            match try_lock(&f) {
                Ok(true) => {
                    // Its process is gone.
                    let _ = std::fs::remove_file(&path);
                }
                Ok(false) => live.push(n),
                Err(_) => {}
            }
        }
        let head = live.first().map(|n| {
            n.trim_end_matches(".lock")
                .split_once('-')
                .map(|(_, id)| id.to_string())
                .unwrap_or_default()
        });
        Place {
            ahead: live.len(),
            head,
        }
    }
}

/// "1st", "2nd", "3rd", "4th", … "11th", "12th", "13th", "21st".
pub fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// Where a job stands on admission.
#[derive(Debug)]
pub enum Admission {
    /// It may start: with a lease (`None`: the endpoint's slots are not
    /// known, or `defaults.queue` is off).
    Go(Option<Lease>),
    /// It waits, holding its place.
    Wait(Ticket),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_leased_once_and_freed_with_its_lease() {
        let tmp = tempfile::tempdir().unwrap();
        let a = try_lease(tmp.path(), "box", 2, "job-a").unwrap().unwrap();
        let b = try_lease(tmp.path(), "box", 2, "job-b").unwrap().unwrap();
        assert_eq!((a.slot, b.slot), (0, 1));
        assert!(try_lease(tmp.path(), "box", 2, "job-c").unwrap().is_none());
        let mut held = holders(tmp.path(), "box", 2);
        held.sort();
        assert_eq!(held, ["job-a", "job-b"]);
        drop(a);
        let c = try_lease(tmp.path(), "box", 2, "job-c").unwrap().unwrap();
        assert_eq!(c.slot, 0);
        assert_eq!(holders(tmp.path(), "box", 2).len(), 2);
        // Another endpoint has slots of its own.
        assert!(try_lease(tmp.path(), "gpu2", 1, "job-d").unwrap().is_some());
    }

    #[test]
    fn the_queue_is_first_come_and_a_dead_ticket_is_passed_over() {
        let tmp = tempfile::tempdir().unwrap();
        let first = Ticket::take(tmp.path(), "qwen3-coder", "job-1").unwrap();
        let second = Ticket::take(tmp.path(), "qwen3-coder", "job-2").unwrap();
        let third = Ticket::take(tmp.path(), "qwen3-coder", "job-3").unwrap();
        assert_eq!(first.place().ahead, 0);
        assert_eq!(
            third.place(),
            Place {
                ahead: 2,
                head: Some("job-1".into())
            }
        );
        // A ticket file nobody holds (its process died) does not count.
        let stale = tmp
            .path()
            .join("queue/qwen3-coder/000000000000000000000001-job-0.lock");
        std::fs::write(&stale, "").unwrap();
        assert_eq!(second.place().ahead, 1);
        assert!(!stale.exists(), "removed on the way");
        // A ticket still being made (locked under its staging name, then
        // renamed in) is neither counted nor removed.
        let making = tmp
            .path()
            .join("queue/qwen3-coder/000000000000000000000002-job-x.lock.new");
        std::fs::write(&making, "").unwrap();
        assert_eq!(second.place().ahead, 1);
        assert!(making.exists());
        drop(first);
        assert_eq!(
            third.place(),
            Place {
                ahead: 1,
                head: Some("job-2".into())
            }
        );
        assert_eq!(ordinal(1), "1st");
        assert_eq!(ordinal(2), "2nd");
        assert_eq!(ordinal(12), "12th");
        assert_eq!(ordinal(23), "23rd");
    }

    #[test]
    fn names_cannot_leave_their_directory() {
        assert_eq!(component("../etc"), "_.._etc");
        assert_eq!(component(""), "_");
        assert_eq!(component("gpu-1.lan"), "gpu-1.lan");
    }
}
