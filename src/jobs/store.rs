//! The job directories on disk (`<state>/jobs/<id>/`): every read and
//! write of a `job.json`, for this process's jobs, other processes' jobs
//! and the prompt hook alike. A record that says `running` whose owning
//! process is gone is reported as `lost`, with the reason.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Serialize;

use super::dir::{self, JobDir, MAX_RECORD_BYTES, RecordBrief};
use super::dir::valid_id;
use super::index::{self, Entry, Index};
use super::record::{JobError, JobRecord, Status};
use crate::process;

/// Is the process that owns a running job still there? By identity when it
/// was recorded (a reused pid is not the owner), else by signal 0.
fn owner_alive(rec: &JobRecord) -> bool {
    match rec.owner() {
        Some(who) => who.is_current(),
        None => process::alive(rec.owner_pid()),
    }
}

/// A record that does not read, as lists show it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct UnreadableJob {
    /// The name of its directory.
    pub id: String,
    /// Always `unreadable`.
    pub status: String,
    /// Its `job.json`.
    pub path: PathBuf,
    /// Why it does not read, and what to do.
    pub error: String,
}

/// The job directories under a state dir, and their index.
#[derive(Debug, Clone)]
pub struct Store {
    pub root: PathBuf,
    index: Index,
}

impl Store {
    pub fn new(state_dir: &Path) -> Store {
        Store {
            root: state_dir.join("jobs"),
            index: Index::new(state_dir),
        }
    }

    /// Make a new job's directory (the index sees it made).
    pub fn create(&self, id: &str) -> Result<PathBuf, JobError> {
        let dir = self.dir(id)?;
        self.index.create(id).map_err(|source| JobError::Write { dir, source })
    }

    pub fn dir(&self, id: &str) -> Result<PathBuf, JobError> {
        Ok(self.job_dir(id)?.path().to_path_buf())
    }

    /// Write a record. A live job has its place in the index before its
    /// record says so; an ended one's line (and its line in the savings
    /// book) follows its record.
    pub fn save(&self, rec: &JobRecord) -> Result<(), JobError> {
        let dir = self.job_dir(rec.id())?;
        let failed = |source| JobError::Write {
            dir: dir.path().to_path_buf(),
            source,
        };
        let active = index::stays_active(rec.status(), rec.reaped());
        if active {
            self.index.activate(rec.id()).map_err(failed)?;
        }
        let bytes = serde_json::to_vec_pretty(rec).map_err(std::io::Error::other)?;
        crate::paths::write_atomic_bare(&dir.record(), &bytes).map_err(failed)?;
        if rec.status().terminal() {
            let brief: RecordBrief = serde_json::from_slice(&bytes).map_err(std::io::Error::other)?;
            let entry = Entry::of(&brief).with_logged_usage(dir.path());
            self.index
                .settle(&entry, &index::book_line(&entry), active)
                .map_err(failed)?;
        }
        Ok(())
    }

    /// [`Store::save`] where the job goes on whatever happens (a progress
    /// note, a step of a running job): a failed write is not dropped but
    /// logged, with the record's path and the reason (a full disk, a
    /// read-only state dir).
    pub fn save_or_log(&self, rec: &JobRecord) {
        if let Err(e) = self.save(rec) {
            tracing::error!(
                "cannot write the record of job {} ({}): {e}; the job goes on, but what it did may be missing from its record",
                rec.id(),
                dir::JobDir::at(&self.root.join(rec.id())).record().display()
            );
        }
    }

    /// Load a record as stored, without the lost check.
    pub fn load_raw(&self, id: &str) -> Result<JobRecord, JobError> {
        let jd = self.job_dir(id)?;
        let dir = jd.path().to_path_buf();
        if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(JobError::Unreadable {
                id: id.to_string(),
                why: format!(
                    "{} is a symlink, and a job's directory is never one: remove the link",
                    dir.display()
                ),
                dir,
            });
        }
        let bytes = match crate::paths::read_capped(&jd.record(), dir::MAX_RECORD_BYTES) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(JobError::NotFound(id.to_string()));
            }
            Err(e) => return Err(e.into()),
        };
        let rec: JobRecord = serde_json::from_slice(&bytes).map_err(|e| JobError::Unreadable {
            id: id.to_string(),
            why: format!("{}: {e}", jd.record().display()),
            dir: dir.clone(),
        })?;
        if rec.id() != id {
            return Err(JobError::Unreadable {
                id: id.to_string(),
                why: format!(
                    "{} names job {}, not {id}: a record is never copied or moved between job directories; remove it",
                    jd.record().display(),
                    crate::fmt::first_chars(rec.id(), 64)
                ),
                dir,
            });
        }
        Ok(rec)
    }

    /// Load a record; a running job whose owner process is gone becomes
    /// `lost` (and is saved so). Reading never signals anything: an
    /// orphaned delegate is stopped by [`Store::reap_lost`].
    pub fn load(&self, id: &str) -> Result<JobRecord, JobError> {
        let mut rec = self.load_raw(id)?;
        if !rec.status().terminal() && rec.owner_pid() != std::process::id() && !owner_alive(&rec) {
            let error = format!(
                "the localagents process that ran this job (pid {}) is gone, so its delegate was lost; run it again, or resume_job to continue its session",
                rec.owner_pid(),
            );
            rec.end_outside(Status::Lost, error);
            self.save_or_log(&rec);
        }
        Ok(rec)
    }

    /// The reaping step: stop the guards of lost jobs that are somehow still
    /// running (a guard ends its job by itself when its owner dies, so this
    /// is a second line). A recorded pid is signalled only while it is
    /// still the guard we started ([`process::Identity::is_current`]).
    /// Returns the ids of the jobs whose guard was stopped.
    pub async fn reap_lost(&self) -> Vec<String> {
        // Every record is read (and a lost one saved): on the blocking
        // pool, never on an async worker.
        let me = self.clone();
        let lost = tokio::task::spawn_blocking(move || {
            me.index
                .active()
                .into_iter()
                .filter_map(|id| me.load(&id).ok())
                .filter(|r| r.status() == Status::Lost && !r.reaped())
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        let mut reaped = Vec::new();
        for mut rec in lost {
            if let Some(guard) = rec.guard()
                && process::stop_recorded(guard, process::GRACE).await
            {
                reaped.push(rec.id().to_string());
            }
            rec.mark_reaped();
            let me = self.clone();
            let _ = tokio::task::spawn_blocking(move || me.save_or_log(&rec)).await;
        }
        reaped
    }

    /// The records of the jobs the index keeps active (live, lost and
    /// not reaped, or not readable), newest first, each as it loads. One
    /// whose record ended (a crash came between its record and its line)
    /// gets its line now; one whose directory is gone is forgotten.
    pub fn active(&self) -> Vec<(String, Result<JobRecord, JobError>)> {
        self.active_through(&|_| None)
    }

    fn active_through(
        &self,
        held: &dyn Fn(&str) -> Option<JobRecord>,
    ) -> Vec<(String, Result<JobRecord, JobError>)> {
        let mut out = Vec::new();
        for id in self.index.active() {
            let r = held(&id).map_or_else(|| self.load(&id), Ok);
            match &r {
                Ok(rec) if !index::stays_active(rec.status(), rec.reaped()) => {
                    // Its end was written but not its line: saved again,
                    // which writes the line and ends its active file.
                    self.save_or_log(rec);
                }
                Err(JobError::NotFound(_)) if !self.root.join(&id).exists() => {
                    if let Err(e) = self.index.forget(&id) {
                        tracing::warn!("cannot update the jobs index: {e}");
                    }
                    continue;
                }
                _ => {}
            }
            out.push((id, r));
        }
        out
    }

    /// The jobs made at or after `since` (all with `None`), newest first,
    /// as the index keeps them: the ended ones by their last line, the
    /// active ones from their records.
    pub fn recent(&self, since: Option<chrono::DateTime<chrono::Utc>>) -> Vec<Entry> {
        let oldest = since.map(|t| t.format("%Y%m%d-%H%M%S").to_string());
        let young = |id: &str| oldest.as_deref().is_none_or(|o| id >= o);
        let mut out: Vec<Entry> = self
            .index
            .active()
            .into_iter()
            .filter(|id| young(id))
            .filter_map(|id| {
                let b = self.brief(&id)?;
                Some(Entry::of(&b))
            })
            .collect();
        let live: std::collections::HashSet<String> = out.iter().map(|e| e.id.clone()).collect();
        out.extend(
            self.index
                .since(since)
                .into_iter()
                .filter(|e| young(&e.id) && !live.contains(&e.id)),
        );
        out.sort_unstable_by(|a, b| b.id.cmp(&a.id));
        out
    }

    /// What the savings add up for the jobs made at or after `since`: the
    /// savings book's line of each ended job (which outlives its record),
    /// and each live job's figures as its record has them now.
    pub fn kept(&self, since: Option<chrono::DateTime<chrono::Utc>>) -> Vec<super::book::Line> {
        let state = self.root.parent().unwrap_or(&self.root);
        // The index first: a rebuild gives the book the lines of the jobs
        // that ended before it existed.
        let active = self.index.active();
        let mut by_id: std::collections::BTreeMap<String, super::book::Line> =
            super::book::since(state, since)
                .into_iter()
                .map(|l| (l.id.clone(), l))
                .collect();
        for id in active {
            if let Some(b) = self.brief(&id) {
                let e = Entry::of(&b).with_logged_usage(&self.root.join(&id));
                by_id.insert(id, index::book_line(&e));
            }
        }
        by_id.into_values().rev().collect()
    }

    /// The ended jobs made before `before`, oldest first, by their last
    /// line in the index (what retention and `cleanup_jobs` look at).
    pub fn ended_before(&self, before: chrono::DateTime<chrono::Utc>) -> Vec<Entry> {
        let oldest = before.format("%Y%m%d-%H%M%S").to_string();
        let mut out = Vec::new();
        self.index.walk(None, |e| {
            if e.id < oldest {
                out.push(e);
            }
            true
        });
        out.reverse();
        out
    }

    /// Remove an ended job's directory, its line in the savings book made
    /// sure of first (the index's part, [`Index::remove`]).
    pub fn remove(&self, rec: &JobRecord) -> Result<(), JobError> {
        let dir = self.dir(rec.id())?;
        let bytes = serde_json::to_vec(rec).map_err(std::io::Error::other)?;
        let brief: RecordBrief = serde_json::from_slice(&bytes).map_err(std::io::Error::other)?;
        let entry = Entry::of(&brief).with_logged_usage(&dir);
        self.index
            .remove(&entry, &index::book_line(&entry))
            .map_err(|source| JobError::Write { dir, source })
    }

    /// Records, newest first (unreadable ones skipped: [`Store::scan`]
    /// lists them).
    pub fn list(&self, status: Option<Status>, limit: usize) -> Vec<JobRecord> {
        self.scan(status, limit).0
    }

    /// Records, newest first, and the records met on the way that do not
    /// read (at most `limit` of each), with their path and the reason. A
    /// directory without a record yet (a job being made) is neither.
    pub fn scan(
        &self,
        status: Option<Status>,
        limit: usize,
    ) -> (Vec<JobRecord>, Vec<UnreadableJob>) {
        self.scan_through(status, limit, |_| None)
    }

    /// [`Store::scan`], where `held` answers for a job before its record
    /// on disk (the records a process holds in memory). The active jobs
    /// are read from their records; the ended ones come from the index,
    /// newest day first, until `limit` of them match.
    pub fn scan_through(
        &self,
        status: Option<Status>,
        limit: usize,
        held: impl Fn(&str) -> Option<JobRecord>,
    ) -> (Vec<JobRecord>, Vec<UnreadableJob>) {
        let (mut out, mut bad) = (Vec::new(), Vec::new());
        let mut keep = |id: String, r: Result<JobRecord, JobError>, out: &mut Vec<JobRecord>| {
            match r {
                Ok(r) if status.is_none_or(|s| r.status() == s) => out.push(r),
                Ok(_) | Err(JobError::NotFound(_)) => {}
                Err(e) => bad.push(UnreadableJob {
                    path: self.root.join(&id).join("job.json"),
                    id,
                    status: "unreadable".into(),
                    error: e.to_string(),
                }),
            }
        };
        let active = self.active_through(&held);
        let seen: std::collections::HashSet<String> =
            active.iter().map(|(id, _)| id.clone()).collect();
        for (id, r) in active {
            keep(id, r, &mut out);
        }
        let live_only = status.is_some_and(|s| !s.terminal());
        let mut ended = Vec::new();
        if !live_only {
            self.index.walk(None, |e| {
                if seen.contains(&e.id) || status.is_some_and(|s| e.status != s) {
                    return true;
                }
                let r = held(&e.id).map_or_else(|| self.load(&e.id), Ok);
                keep(e.id, r, &mut ended);
                ended.len() < limit
            });
        }
        out.extend(ended);
        out.sort_unstable_by(|a, b| b.id().cmp(a.id()));
        out.truncate(limit);
        bad.sort_unstable_by(|a, b| b.id.cmp(&a.id));
        bad.truncate(limit);
        (out, bad)
    }
}

impl Store {
    /// The directory of job `id` (a checked id: nothing else reaches the
    /// file system).
    pub fn job_dir(&self, id: &str) -> Result<JobDir, JobError> {
        if !valid_id(id) {
            return Err(JobError::BadId(crate::fmt::first_chars(id, 64)));
        }
        Ok(JobDir::at(&self.root.join(id)))
    }

    /// The brief of job `id`'s record; `None` when it is no job id, has
    /// no record, or its record does not read (a scan skips it).
    pub fn brief(&self, id: &str) -> Option<RecordBrief> {
        let dir = self.job_dir(id).ok()?;
        let bytes = crate::paths::read_capped(&dir.record(), MAX_RECORD_BYTES).ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::record::new_job_id;

    #[test]
    fn ids_are_sortable_and_validated() {
        let a = new_job_id().unwrap();
        assert!(valid_id(&a), "{a}");
        for bad in [
            "../x",
            "nope",
            "",
            "20261130-061500-1a2b3c4",
            "20261130-061500-1a2b3c4G",
            "20261130/061500-1a2b3c4d",
            "20261130-061500-../../..",
        ] {
            assert!(!valid_id(bad), "{bad}");
        }
        let store = Store::new(Path::new("/tmp/x"));
        assert!(matches!(store.dir("../x"), Err(JobError::BadId(_))));
        assert!(matches!(store.load("nope"), Err(JobError::BadId(_))));
    }

    /// One job made, started and ended by this process.
    fn write_one(store: &Store) {
        let id = new_job_id().unwrap();
        let dir = store.create(&id).unwrap();
        let mut v: serde_json::Value =
            serde_json::from_str(include_str!("job-fresh.json")).unwrap();
        v["id"] = serde_json::json!(id);
        v["log_dir"] = serde_json::json!(dir);
        v["status"] = serde_json::json!("running");
        store.save(&serde_json::from_value(v.clone()).unwrap()).unwrap();
        v["status"] = serde_json::json!("succeeded");
        store.save(&serde_json::from_value(v).unwrap()).unwrap();
    }

    /// Issue 55: two processes writing jobs at once lose none, in the
    /// index (kept current: nothing had to be rebuilt) or in the savings
    /// book. The test binary runs itself twice as the writers.
    #[test]
    fn two_processes_writing_jobs_at_once_lose_none() {
        const JOBS: usize = 150;
        if let Some(dir) = std::env::var_os("LOCALAGENTS_TEST_WRITER") {
            let store = Store::new(Path::new(&dir));
            for _ in 0..JOBS {
                write_one(&store);
            }
            return;
        }
        let state = tempfile::tempdir().unwrap();
        // The index is current before the writers start (a reader built it).
        Index::new(state.path()).rebuild().unwrap();
        let me = std::env::current_exe().unwrap();
        let writers: Vec<_> = (0..2)
            .map(|_| {
                std::process::Command::new(&me)
                    .args([
                        "--exact",
                        "jobs::store::tests::two_processes_writing_jobs_at_once_lose_none",
                        "--nocapture",
                    ])
                    .env("LOCALAGENTS_TEST_WRITER", state.path())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for w in writers {
            let out = w.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let index = Index::new(state.path());
        assert!(index.fresh(), "the writers kept the index current");
        let ended = index.since(None);
        assert_eq!(ended.len(), 2 * JOBS, "ended jobs in the index");
        assert!(ended.iter().all(|e| e.status == Status::Succeeded));
        assert!(index.active().is_empty(), "{:?}", index.active());
        assert_eq!(
            super::super::book::since(state.path(), None).len(),
            2 * JOBS,
            "jobs in the savings book"
        );
        let store = Store::new(state.path());
        assert_eq!(store.list(None, 1000).len(), 2 * JOBS);
    }
}
