//! Durable job records: ids, `job.json`, and the per-job directory.
//!
//! A job outlives the process that started it: every tool in every
//! localagents process (and the prompt hook) reads the same files under
//! `<state>/jobs/<id>/`. `job.json` is written atomically (temp file and
//! rename). A record that says `running` whose owning process is gone is
//! reported as `lost`, with the reason.

pub mod manager;
pub mod metrics;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::shim::sse::Usage;
use crate::worktree::WorktreeInfo;

/// A job's lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Timeout,
    Lost,
}

impl Status {
    pub fn terminal(self) -> bool {
        !matches!(self, Status::Queued | Status::Running)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Running => "running",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
            Status::Timeout => "timeout",
            Status::Lost => "lost",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        Some(match s {
            "queued" => Status::Queued,
            "running" => Status::Running,
            "succeeded" => Status::Succeeded,
            "failed" => Status::Failed,
            "cancelled" => Status::Cancelled,
            "timeout" => Status::Timeout,
            "lost" => Status::Lost,
            _ => return None,
        })
    }
}

/// A bad job id or a missing job, with what to do.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(
        "`{0}` is not a job id (they look like 20261130-061500-1a2b3c4d); list_jobs shows them"
    )]
    BadId(String),
    #[error("no job {0}: list_jobs shows the jobs there are")]
    NotFound(String),
    #[error("job {id}: cannot read its record ({why}); its directory is {dir}")]
    Unreadable {
        id: String,
        why: String,
        dir: PathBuf,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A new id: sortable UTC time plus 32 random bits.
pub fn new_id() -> std::io::Result<String> {
    let mut b = [0u8; 4];
    getrandom::fill(&mut b).map_err(|e| std::io::Error::other(format!("no randomness: {e}")))?;
    let t = chrono::Utc::now().format("%Y%m%d-%H%M%S");
    Ok(format!(
        "{t}-{:02x}{:02x}{:02x}{:02x}",
        b[0], b[1], b[2], b[3]
    ))
}

/// Ids are `YYYYMMDD-HHMMSS-xxxxxxxx`; nothing else reaches the filesystem.
pub fn valid_id(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 24
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[8] == b'-'
        && b[9..15].iter().all(u8::is_ascii_digit)
        && b[15] == b'-'
        && b[16..]
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// How a job was isolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    None,
    Worktree,
}

/// Per-job figures (see [`metrics`]).
pub use metrics::JobMetrics;

/// `job.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: String,
    /// The first 300 characters; the whole task is in `task.txt`.
    pub task: String,
    /// The name asked for.
    pub model: String,
    pub served_id: String,
    pub endpoint: String,
    pub base_url: String,
    /// Where the delegate ran (inside the worktree for worktree jobs).
    pub cwd: PathBuf,
    /// The caller's directory.
    pub origin_cwd: PathBuf,
    pub isolation: Isolation,
    pub status: Status,
    pub created: String,
    pub started: Option<String>,
    pub finished: Option<String>,
    pub elapsed_s: Option<f64>,
    pub session_id: Option<String>,
    pub result: Option<String>,
    pub error: Option<String>,
    pub num_turns: Option<u64>,
    pub tool_calls: u64,
    pub usage: Usage,
    pub files_touched: Vec<String>,
    pub files_changed: Vec<String>,
    pub worktree: Option<WorktreeInfo>,
    pub last_activity: Option<String>,
    pub log_dir: PathBuf,
    /// The per-slot window the session was told.
    pub context: Option<u64>,
    pub metrics: Option<JobMetrics>,
    /// What the first request cost: prompt tokens, cached, time.
    #[serde(default)]
    pub first_turn: Option<metrics::FirstTurn>,
    /// Set when every slot was busy at start.
    pub queued_note: Option<String>,
    // What a resume needs to run the same way.
    pub permission_mode: String,
    pub max_turns: u32,
    pub timeout_s: u64,
    pub allowed_tools: Vec<String>,
    pub disallowed_tools: Vec<String>,
    pub system_prompt_append: Option<String>,
    pub resumed_from: Option<String>,
    /// The delegate's pid (= its process group).
    pub pid: Option<u32>,
    /// The localagents process that runs it.
    pub owner_pid: u32,
}

impl JobRecord {
    /// The compact summary tools return (well under 2 KB for normal jobs).
    pub fn summary(&self) -> Value {
        let cut = |s: &Option<String>, n: usize| {
            s.as_ref().map(|t| {
                if t.chars().count() > n {
                    let c: String = t.chars().take(n).collect();
                    format!("{c}… (job_log {} for all)", self.id)
                } else {
                    t.clone()
                }
            })
        };
        let list = |v: &[String], n: usize| -> Value {
            if v.len() > n {
                json!({"first": &v[..n], "total": v.len()})
            } else {
                json!(v)
            }
        };
        let mut s = json!({
            "id": self.id,
            "status": self.status.as_str(),
            "model": self.served_id,
            "endpoint": self.endpoint,
            "isolation": self.isolation,
            "cwd": self.cwd,
            "elapsed_s": self.elapsed_s.map(|e| (e * 10.0).round() / 10.0),
            "num_turns": self.num_turns,
            "tool_calls": self.tool_calls,
            "files_changed": list(&self.files_changed, 20),
            "files_touched": list(&self.files_touched, 20),
            "last_activity": cut(&self.last_activity, 160),
            "result": cut(&self.result, 900),
            "error": cut(&self.error, 400),
            "log_dir": self.log_dir,
        });
        if let Value::Object(m) = &mut s {
            if let Some(w) = &self.worktree {
                m.insert(
                    "worktree".into(),
                    json!({"branch": w.branch, "path": w.path, "kept": w.kept, "diffstat": w.diffstat, "note": w.note}),
                );
            }
            if let Some(q) = &self.queued_note {
                m.insert("queued".into(), json!(q));
            }
            if let Some(mt) = &self.metrics {
                m.insert("metrics".into(), mt.short());
            }
            if let Some(f) = &self.first_turn {
                m.insert("first_turn".into(), json!(f.line()));
            }
            if self.usage != Usage::default() {
                m.insert("usage".into(), json!(self.usage));
            }
            m.retain(|_, v| !v.is_null());
        }
        s
    }

    /// One line for lists.
    pub fn list_item(&self) -> Value {
        json!({
            "id": self.id,
            "status": self.status.as_str(),
            "model": self.served_id,
            "created": self.created,
            "elapsed_s": self.elapsed_s.map(|e| e.round()),
            "files_changed": self.files_changed.len(),
            "task": self.task.chars().take(80).collect::<String>(),
        })
    }
}

/// The job directories under a state dir.
#[derive(Debug, Clone)]
pub struct Store {
    pub root: PathBuf,
}

/// Is a process alive? (signal 0)
pub fn alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid as i32, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

impl Store {
    pub fn new(state_dir: &Path) -> Store {
        Store {
            root: state_dir.join("jobs"),
        }
    }

    pub fn dir(&self, id: &str) -> Result<PathBuf, JobError> {
        if !valid_id(id) {
            return Err(JobError::BadId(id.chars().take(64).collect()));
        }
        Ok(self.root.join(id))
    }

    pub fn save(&self, rec: &JobRecord) -> Result<(), JobError> {
        let dir = self.dir(&rec.id)?;
        let bytes = serde_json::to_vec_pretty(rec).map_err(std::io::Error::other)?;
        crate::paths::write_atomic(&dir.join("job.json"), &bytes)?;
        Ok(())
    }

    /// Load a record as stored, without the lost check.
    pub fn load_raw(&self, id: &str) -> Result<JobRecord, JobError> {
        let dir = self.dir(id)?;
        let path = dir.join("job.json");
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(JobError::NotFound(id.to_string()));
            }
            Err(e) => return Err(e.into()),
        };
        serde_json::from_slice(&bytes).map_err(|e| JobError::Unreadable {
            id: id.to_string(),
            why: e.to_string(),
            dir,
        })
    }

    /// Load a record; a running job whose owner process is gone becomes
    /// `lost` (and is saved so).
    pub fn load(&self, id: &str) -> Result<JobRecord, JobError> {
        let mut rec = self.load_raw(id)?;
        if !rec.status.terminal() && rec.owner_pid != std::process::id() && !alive(rec.owner_pid) {
            let delegate = rec.pid.filter(|p| alive(*p));
            if let Some(pgid) = delegate {
                // Nobody reads its output any more: stop it.
                // SAFETY: signalling a process group we started.
                unsafe { libc::killpg(pgid as i32, libc::SIGKILL) };
            }
            rec.status = Status::Lost;
            rec.error = Some(format!(
                "the localagents process that ran this job (pid {}) is gone, so its delegate{} was lost; run it again, or resume_job to continue its session",
                rec.owner_pid,
                match delegate {
                    Some(p) => format!(" (pid {p}, now stopped)"),
                    None => String::new(),
                }
            ));
            rec.finished.get_or_insert_with(crate::shim::log::now_ts);
            let _ = self.save(&rec);
        }
        Ok(rec)
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

    /// Records, newest first (unreadable ones skipped).
    pub fn list(&self, status: Option<Status>, limit: usize) -> Vec<JobRecord> {
        let mut out = Vec::new();
        for id in self.ids() {
            if let Ok(r) = self.load(&id)
                && status.is_none_or(|s| r.status == s)
            {
                out.push(r);
                if out.len() >= limit {
                    break;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_sortable_and_validated() {
        let a = new_id().unwrap();
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
