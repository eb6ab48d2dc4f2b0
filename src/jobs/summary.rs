//! What tools show of a record: the compact summary (`job_status`,
//! `run_agent`), the line of a list, and their parts. It reads the files
//! a job writes beside its record (a batch's report, a review).

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Serialize;

use super::accept;
use super::batch;
use super::faults;
use super::metrics;
use super::record::{Isolation, JobKind, JobRecord, Status};
use super::review;
use crate::wire::Usage;

/// A list of paths, cut to its first entries when long.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum PathList {
    All(Vec<String>),
    Cut { first: Vec<String>, total: usize },
}

impl PathList {
    fn of(v: &[String], n: usize) -> PathList {
        if v.len() > n {
            PathList::Cut {
                first: v[..n].to_vec(),
                total: v.len(),
            }
        } else {
            PathList::All(v.to_vec())
        }
    }
}

/// A worktree, as summaries show it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct WorktreeSummary {
    pub branch: String,
    pub path: PathBuf,
    pub kept: bool,
    pub diffstat: Option<String>,
    pub note: Option<String>,
}

/// The compact summary tools return (well under 2 KB for normal jobs).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct JobSummary {
    pub id: String,
    #[serde(skip_serializing_if = "JobKind::is_agent")]
    pub kind: JobKind,
    pub status: Status,
    /// The served id.
    pub model: String,
    pub endpoint: String,
    pub isolation: Isolation,
    pub cwd: PathBuf,
    pub elapsed_s: Option<f64>,
    pub num_turns: Option<u64>,
    pub tool_calls: u64,
    pub files_changed: PathList,
    pub files_touched: PathList,
    pub last_activity: Option<String>,
    pub result: Option<String>,
    pub error: Option<String>,
    pub log_dir: PathBuf,
    pub worktree: Option<WorktreeSummary>,
    /// Set when every slot was busy at start.
    pub queued: Option<String>,
    pub metrics: Option<metrics::MetricsShort>,
    /// "first turn: 226 new tokens, 4,259 from cache, 0.8 s"
    pub first_turn: Option<String>,
    /// "loaded gemma-3-270m in 1.7 s" when the job loaded its model first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loaded: Option<String>,
    /// "acceptance passed (cargo test -p foo, 2 rounds)"
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acceptance: Option<String>,
    /// The last acceptance run's output tail, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acceptance_output: Option<String>,
    /// Tokens the local server processed for this job (from the shim log).
    pub usage_local: Usage,
    /// What `usage_local` would have cost at the reference model's list
    /// prices: an equivalent, not a bill.
    pub equivalent_usd: Option<f64>,
    pub reference_model: Option<String>,
    /// A batch's items, in input order, once it has finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<batch::BatchReport>,
    /// The last `local_review` of this job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review: Option<review::Review>,
    /// The model's faults, when it had any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_faults: Option<faults::ModelFaults>,
    /// What the session did: tool calls, files changed, text only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<faults::Outcome>,
    /// "the model answered in text only: no tool called, no file changed"
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_note: Option<String>,
    /// "lost its cache on 6 of 7 turns: 15,900 tokens re-processed; …":
    /// another request took the job's slot, and the fix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_note: Option<String>,
    /// "ran as subagent test-writer (project); not offered (the config
    /// does not allow them): WebFetch; …" when it ran as one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Where the window went, when it was compacted or cleared: counts,
    /// tokens before and after each compaction, the largest tool result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<super::window::WindowUse>,
    /// The same in one line: "compacted 3 times (…), cleared old tool
    /// results twice (14 results), largest tool result 2,048 tokens (…)".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_note: Option<String>,
    /// Its nudges, and the work pending when it ended incomplete (a
    /// `failed` job that is no crash: the delegate stopped early).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ending: Option<super::pending::Ending>,
    /// The same in one line: "incomplete, pending: \"I'll now update the
    /// tests.\" (nudged once)", or "nudged once, and it went on".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ending_note: Option<String>,
}

/// One line of `list_jobs`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct JobListItem {
    pub id: String,
    pub status: Status,
    pub model: String,
    pub created: String,
    pub elapsed_s: Option<f64>,
    /// How many files changed.
    pub files_changed: usize,
    /// The first 80 characters of the task.
    pub task: String,
    /// It called no tool and changed no file.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub text_only: bool,
    /// The sentence about the model, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_note: Option<String>,
    /// It ended with work pending (failed, but no crash): what was pending.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
    /// A job not running yet: where it stands ("queued: 2nd for
    /// qwen3-coder on `gpu1`, behind …", or "preparing: creating the
    /// worktree (60,112 files)").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}

impl JobRecord {
    /// The compact summary tools return.
    pub fn summary(&self) -> JobSummary {
        let cut = |s: Option<&str>, n: usize| {
            s.map(|t| {
                if t.chars().count() > n {
                    format!("{} (job_log {} for all)", crate::fmt::cut(t, n), self.id())
                } else {
                    t.to_string()
                }
            })
        };
        JobSummary {
            id: self.id().to_string(),
            kind: self.kind(),
            status: self.status(),
            model: self.served_id().to_string(),
            endpoint: self.endpoint().to_string(),
            isolation: self.isolation(),
            cwd: self.cwd().to_path_buf(),
            elapsed_s: self.elapsed_s().map(|e| (e * 10.0).round() / 10.0),
            num_turns: self.num_turns(),
            tool_calls: self.tool_calls(),
            files_changed: PathList::of(self.files_changed(), 20),
            files_touched: PathList::of(self.files_touched(), 20),
            last_activity: cut(self.last_activity(), 160),
            result: cut(self.result(), 900),
            error: cut(self.error(), 400),
            log_dir: self.log_dir().to_path_buf(),
            worktree: self.worktree().map(|w| WorktreeSummary {
                branch: w.branch.clone(),
                path: w.path.clone(),
                kept: w.kept,
                diffstat: w.diffstat.clone(),
                note: w.note.clone(),
            }),
            queued: self.queued_note().map(str::to_string),
            metrics: self.metrics().map(|m| m.short()),
            first_turn: self.first_turn().map(|f| f.line()),
            loaded: self.load_note().map(str::to_string),
            acceptance: self.acceptance().map(accept::Acceptance::line),
            acceptance_output: self
                .acceptance()
                .as_ref()
                .filter(|a| !a.passed)
                .map(|a| crate::fmt::last_chars(&a.output_tail, 800)),
            usage_local: self.usage(),
            equivalent_usd: self.equivalent_usd(),
            reference_model: self.reference_model().map(str::to_string),
            batch: (self.kind() == JobKind::Batch)
                .then(|| batch::BatchReport::read(self.log_dir()))
                .flatten(),
            review: review::Review::read(self.log_dir()),
            model_faults: self.model_faults().cloned().filter(faults::ModelFaults::any),
            outcome: self.outcome(),
            model_note: self.model_note().map(str::to_string),
            cache_note: self.cache_note().map(str::to_string),
            agent: self.agent().map(super::record::AgentUse::line),
            window: (!self.window().is_empty()).then(|| self.window().clone()),
            window_note: self.window().line(),
            ending: (!self.ending().is_empty()).then(|| self.ending().clone()),
            ending_note: self.ending().line(),
        }
    }

    /// One line for lists.
    pub fn list_item(&self) -> JobListItem {
        JobListItem {
            id: self.id().to_string(),
            status: self.status(),
            model: self.served_id().to_string(),
            created: self.created().to_string(),
            elapsed_s: self.elapsed_s().map(|e| e.round()),
            files_changed: self.files_changed().len(),
            task: crate::fmt::first_chars(self.task(), 80),
            text_only: self.outcome().is_some_and(|o| o.text_only),
            model_note: self.model_note().map(str::to_string),
            incomplete: self
                .ending()
                .incomplete
                .as_ref()
                .and_then(|_| self.ending().line()),
            waiting: (self.status() == Status::Queued)
                .then(|| self.last_activity().map(str::to_string))
                .flatten()
                .filter(|a| a.starts_with("queued: ") || a.starts_with("preparing: ")),
        }
    }
}
