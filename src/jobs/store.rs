//! The job directories on disk (`<state>/jobs/<id>/`): every read and
//! write of a `job.json`, for this process's jobs, other processes' jobs
//! and the prompt hook alike. A record that says `running` whose owning
//! process is gone is reported as `lost`, with the reason.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Serialize;

use super::dir::{self, JobDir, MAX_RECORD_BYTES, RecordBrief};
use super::record::{JobError, JobRecord, Status, valid_id};
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

/// The job directories under a state dir.
#[derive(Debug, Clone)]
pub struct Store {
    pub root: PathBuf,
}

impl Store {
    pub fn new(state_dir: &Path) -> Store {
        Store {
            root: state_dir.join("jobs"),
        }
    }

    pub fn dir(&self, id: &str) -> Result<PathBuf, JobError> {
        Ok(self.job_dir(id)?.path().to_path_buf())
    }

    pub fn save(&self, rec: &JobRecord) -> Result<(), JobError> {
        let dir = self.job_dir(rec.id())?;
        let bytes = serde_json::to_vec_pretty(rec).map_err(std::io::Error::other)?;
        crate::paths::write_atomic_bare(&dir.record(), &bytes).map_err(|source| JobError::Write {
            dir: dir.path().to_path_buf(),
            source,
        })
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
            me.ids()
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

    /// Every job id, newest first.
    pub fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| valid_id(n))
            .collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        ids
    }

    /// The ids of jobs created at or after `since` (all, with `None`),
    /// newest first. Ids start with their UTC creation time, so older ones
    /// are never read.
    pub fn ids_since(&self, since: Option<chrono::DateTime<chrono::Utc>>) -> Vec<String> {
        let mut ids = self.ids();
        if let Some(since) = since {
            let oldest = since.format("%Y%m%d-%H%M%S").to_string();
            ids.retain(|id| id.as_str() >= oldest.as_str());
        }
        ids
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
    /// on disk (the records a process holds in memory).
    pub fn scan_through(
        &self,
        status: Option<Status>,
        limit: usize,
        held: impl Fn(&str) -> Option<JobRecord>,
    ) -> (Vec<JobRecord>, Vec<UnreadableJob>) {
        let (mut out, mut bad) = (Vec::new(), Vec::new());
        for id in self.ids() {
            match held(&id).map_or_else(|| self.load(&id), Ok) {
                Ok(r) if status.is_none_or(|s| r.status() == s) => {
                    out.push(r);
                    if out.len() >= limit {
                        break;
                    }
                }
                Ok(_) | Err(JobError::NotFound(_)) => {}
                Err(e) if bad.len() < limit => bad.push(UnreadableJob {
                    path: self.root.join(&id).join("job.json"),
                    id,
                    status: "unreadable".into(),
                    error: e.to_string(),
                }),
                Err(_) => {}
            }
        }
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

impl dir::Briefs for Store {
    fn ids_since(&self, since: Option<chrono::DateTime<chrono::Utc>>) -> Vec<String> {
        Store::ids_since(self, since)
    }

    fn brief(&self, id: &str) -> Option<RecordBrief> {
        Store::brief(self, id)
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
}
