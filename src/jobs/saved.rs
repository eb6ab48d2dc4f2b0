//! Which saved slot file holds which job's conversation, per endpoint.
//!
//! A job pinned to a llama-server slot has its slot's cache saved on the
//! server when its session ends ([`crate::probe::saved`]), so that the job
//! resumed later (a resume, after another job used the slot) is restored
//! into whatever slot it gets and starts warm. A saved cache is the slot's
//! whole KV cache: gigabytes for a long conversation on a large model, on
//! the server's disk, which localagents cannot delete through the server.
//! So the files are a ring: at most [`PER_ENDPOINT`] names per endpoint,
//! `localagents-<install>-<k>.bin`, each new save taking the name written
//! longest ago. `<install>` is random per state dir, so two users of one
//! server never write each other's files.
//!
//! The ring's record is `<state>/saved/<endpoint>.json`, changed under its
//! lock by every localagents process of the user. It is only a cache of
//! where a conversation is: a missing or broken one is a fresh ring (a
//! resumed job then starts cold, as without it). Plain files and a lock:
//! call these from the blocking pool.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Saved files per endpoint: the server's disk holds at most this many of
/// localagents' slot caches.
pub const PER_ENDPOINT: usize = 8;

/// The most the ring's record may be.
const CAP: u64 = 64 * 1024;

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Ring {
    install: String,
    /// Name `k` is `files[k]`'s; written in the order of `at`.
    files: Vec<Entry>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Entry {
    job: String,
    /// When it was written (RFC 3339); the oldest is written over next.
    at: String,
}

fn record(state_dir: &Path, endpoint: &str) -> PathBuf {
    state_dir
        .join("saved")
        .join(format!("{}.json", super::lease::component(endpoint)))
}

fn read(path: &Path) -> Ring {
    crate::paths::read_capped(path, CAP)
        .ok()
        .and_then(|b| serde_json::from_slice::<Ring>(&b).ok())
        .filter(|r| !r.install.is_empty() && r.files.len() <= PER_ENDPOINT)
        .unwrap_or_default()
}

fn name(install: &str, k: usize) -> String {
    format!("localagents-{install}-{k}.bin")
}

fn fresh_install() -> String {
    let mut b = [0u8; 4];
    if getrandom::fill(&mut b).is_err() {
        let n = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        b = n.to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The file name `job`'s slot is saved under now: a free name, else the
/// one written longest ago (whose job can then no longer be restored).
pub fn place(state_dir: &Path, endpoint: &str, job: &str, now: &str) -> std::io::Result<String> {
    let path = record(state_dir, endpoint);
    let _lock = crate::paths::lock_beside(&path)?;
    let mut ring = read(&path);
    if ring.install.is_empty() {
        ring.install = fresh_install();
    }
    let k = match ring.files.iter().position(|e| e.job == job) {
        Some(k) => k,
        None if ring.files.len() < PER_ENDPOINT => {
            ring.files.push(Entry::default());
            ring.files.len() - 1
        }
        None => (0..ring.files.len())
            .min_by(|a, b| ring.files[*a].at.cmp(&ring.files[*b].at))
            .unwrap_or(0),
    };
    ring.files[k] = Entry {
        job: job.to_string(),
        at: now.to_string(),
    };
    let bytes = serde_json::to_vec(&ring).map_err(std::io::Error::other)?;
    crate::paths::write_atomic(&path, &bytes)?;
    Ok(name(&ring.install, k))
}

/// The file name `job`'s slot was saved under, if it is still there.
pub fn find(state_dir: &Path, endpoint: &str, job: &str) -> Option<String> {
    let ring = read(&record(state_dir, endpoint));
    let k = ring.files.iter().position(|e| e.job == job)?;
    Some(name(&ring.install, k))
}

/// Forget `job`'s file (its save failed): its name is free again.
pub fn forget(state_dir: &Path, endpoint: &str, job: &str) -> std::io::Result<()> {
    let path = record(state_dir, endpoint);
    let _lock = crate::paths::lock_beside(&path)?;
    let mut ring = read(&path);
    let Some(k) = ring.files.iter().position(|e| e.job == job) else {
        return Ok(());
    };
    ring.files[k] = Entry::default();
    let bytes = serde_json::to_vec(&ring).map_err(std::io::Error::other)?;
    crate::paths::write_atomic(&path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_reuses_the_oldest_name_and_a_job_keeps_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let names: Vec<String> = (0..PER_ENDPOINT)
            .map(|i| place(d, "gpu", &format!("j{i}"), &format!("2026-12-06T00:00:{i:02}Z")).unwrap())
            .collect();
        let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!(distinct.len(), PER_ENDPOINT);
        assert!(names[0].starts_with("localagents-") && names[0].ends_with("-0.bin"), "{}", names[0]);
        assert_eq!(find(d, "gpu", "j3").as_deref(), Some(names[3].as_str()));
        // j0's name is the oldest: the next job takes it, and j0 is gone.
        let next = place(d, "gpu", "new", "2026-12-06T00:01:00Z").unwrap();
        assert_eq!(next, names[0]);
        assert_eq!(find(d, "gpu", "j0"), None);
        // A job saved again keeps its name.
        assert_eq!(place(d, "gpu", "j5", "2026-12-06T00:02:00Z").unwrap(), names[5]);
        forget(d, "gpu", "j5").unwrap();
        assert_eq!(find(d, "gpu", "j5"), None);
        // Another endpoint has a ring of its own.
        let other = place(d, "cpu", "j0", "2026-12-06T00:03:00Z").unwrap();
        assert!(other.ends_with("-0.bin"), "{other}");
        assert_eq!(find(d, "gpu", "j1").as_deref(), Some(names[1].as_str()));
    }

    #[test]
    fn a_broken_record_is_a_fresh_ring() {
        let dir = tempfile::tempdir().unwrap();
        let path = record(dir.path(), "gpu");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"{not json").unwrap();
        assert_eq!(find(dir.path(), "gpu", "a"), None);
        let n = place(dir.path(), "gpu", "a", "2026-12-06T00:00:00Z").unwrap();
        assert_eq!(find(dir.path(), "gpu", "a"), Some(n));
    }
}
