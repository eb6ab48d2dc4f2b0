//! A job's directory and the names of its files, in one place.
//!
//! Every module that reads or writes a job's files (the job's run, the
//! acceptance command, the API's log pages, the prompt hook, the ledger)
//! names them through [`JobDir`], so a file can be renamed or moved in one
//! line, and a scan over many jobs reads records through [`super::store::Store::brief`]
//! instead of opening `job.json` itself.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::status::Status;

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

/// Largest `job.json` read (a record lists its files: generous).
pub const MAX_RECORD_BYTES: u64 = 16 * 1024 * 1024;

/// A job's directory under the state dir's `jobs/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobDir(PathBuf);

impl JobDir {
    /// The directory `path` as a job's (the record's `log_dir`).
    pub fn at(path: &Path) -> JobDir {
        JobDir(path.to_path_buf())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The record (`job.json`), written atomically on every change.
    pub fn record(&self) -> PathBuf {
        self.0.join("job.json")
    }

    /// The whole brief (`task.txt`); the record keeps its start.
    pub fn task(&self) -> PathBuf {
        self.0.join("task.txt")
    }

    /// The prompt of the delegate's current session (the brief, or a fix
    /// round's), its stdin.
    pub fn prompt(&self) -> PathBuf {
        self.0.join("prompt.txt")
    }

    /// The subagent the delegate runs as, as `--agents` JSON.
    pub fn agents(&self) -> PathBuf {
        self.0.join("agents.json")
    }

    /// The delegate's stream-json events, as they came.
    pub fn events(&self) -> PathBuf {
        self.0.join("events.jsonl")
    }

    /// What the delegate said and did, a line each.
    pub fn transcript(&self) -> PathBuf {
        self.0.join("transcript.txt")
    }

    /// Every backend request, written by the shim's request log.
    pub fn requests(&self) -> PathBuf {
        self.0.join(crate::wire::REQUESTS)
    }

    /// The end of the delegate's stderr, when it wrote any.
    pub fn stderr(&self) -> PathBuf {
        self.0.join("stderr.txt")
    }

    /// The delegate's whole answer, when it is over
    /// [`super::MAX_RESULT_BYTES`] (the record keeps its start).
    pub fn result(&self) -> PathBuf {
        self.0.join("result.txt")
    }

    /// The acceptance command's output.
    pub fn acceptance(&self) -> PathBuf {
        self.0.join("acceptance.txt")
    }

    /// Written by a process that cancels a job another process runs.
    pub fn cancel_marker(&self) -> PathBuf {
        self.0.join("cancel_requested")
    }

    /// A batch's items and answers.
    pub fn batch(&self) -> PathBuf {
        self.0.join("batch.json")
    }

    /// A review's findings.
    pub fn review(&self) -> PathBuf {
        self.0.join("review.json")
    }
}

/// The record fields a scan over many jobs reads (the prompt hook, the
/// ledger): cheaper than the whole record, and a record of an older
/// version with fields missing still reads.
/// The subagent of a [`RecordBrief`].
#[derive(Debug, Clone, Deserialize)]
pub struct BriefAgent {
    pub name: String,
}

#[derive(Debug, Deserialize)]
pub struct RecordBrief {
    pub id: String,
    pub served_id: String,
    /// Empty in a record that has none (the ledger skips it).
    #[serde(default)]
    pub endpoint: String,
    pub status: Status,
    #[serde(default)]
    pub created: String,
    pub finished: Option<String>,
    pub elapsed_s: Option<f64>,
    pub origin_cwd: PathBuf,
    #[serde(default)]
    pub files_changed: Vec<String>,
    pub worktree: Option<BriefWorktree>,
    #[serde(default)]
    pub acceptance: Option<super::accept::Acceptance>,
    #[serde(default)]
    pub usage: crate::wire::Usage,
    #[serde(default)]
    pub equivalent_usd: Option<f64>,
    #[serde(default)]
    pub reference_model: Option<String>,
    #[serde(default)]
    pub model_note: Option<String>,
    #[serde(default)]
    pub cache_note: Option<String>,
    /// Where the job's window went.
    #[serde(default)]
    pub window: Option<super::window::WindowUse>,
    /// The subagent profile the job ran as (its name).
    #[serde(default)]
    pub agent: Option<BriefAgent>,
    /// Its nudges, and the work pending when it ended incomplete.
    #[serde(default)]
    pub ending: Option<super::pending::Ending>,
    #[serde(default)]
    pub metrics: Option<BriefMetrics>,
    #[serde(default)]
    pub tool_use_id: Option<String>,
    /// A lost job's delegate was looked for and stopped.
    #[serde(default)]
    pub reaped: bool,
    #[serde(default)]
    pub model_faults: Option<BriefFaults>,
}

/// The model faults a scan reads of a record: its runaways.
#[derive(Debug, Default, Deserialize)]
pub struct BriefFaults {
    #[serde(default)]
    pub runaway_output: Option<BriefRunaway>,
}

/// A record's runaways: how many, and the sentence with the fix.
#[derive(Debug, Default, Deserialize)]
pub struct BriefRunaway {
    #[serde(default)]
    pub count: u64,
    #[serde(default)]
    pub why: String,
}

/// The figures a scan reads of a record's metrics.
#[derive(Debug, Default, Deserialize)]
pub struct BriefMetrics {
    #[serde(default)]
    pub slot_losses: u64,
    #[serde(default)]
    pub reprocessed_tokens: u64,
    /// The slot the job was pinned to (the chat wire).
    #[serde(default)]
    pub slot: Option<u64>,
}

/// A worktree, as a scan reads it.
#[derive(Debug, Deserialize)]
pub struct BriefWorktree {
    pub branch: String,
    pub kept: bool,
}
