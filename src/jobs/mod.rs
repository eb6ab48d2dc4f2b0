//! Durable job records: ids, `job.json`, and the per-job directory.
//!
//! A job outlives the process that started it: every tool in every
//! localagents process (and the prompt hook) reads the same files under
//! `<state>/jobs/<id>/`. `job.json` is written atomically (temp file and
//! rename). A record that says `running` whose owning process is gone is
//! reported as `lost`, with the reason.
//!
//! This file is the facade: the module list and the re-exports outside
//! users name (`crate::jobs::JobRecord`, …). No file of `jobs` imports
//! from it; each names the module that defines an item.

pub mod accept;
pub mod admit;
pub mod args;
pub mod batch;
pub mod book;
pub mod daylog;
pub mod dir;
pub mod evict;
pub mod faults;
pub mod index;
pub mod job;
mod keeper;
pub mod lease;
pub mod limits;
pub mod manager;
pub mod metrics;
pub mod pending;
pub mod plan;
pub mod policy;
pub mod prewarm;
pub mod record;
pub mod review;
pub mod run;
pub mod saved;
mod runtime;
pub mod status;
pub mod store;
pub mod summary;
pub mod window;

/// Per-job figures (see [`metrics`]).
pub use metrics::JobMetrics;
pub use record::{
    Isolation, JobError, JobKind, JobRecord, MAX_RESULT_BYTES, Prepare, Status, new_job_id,
    preparing_line,
};
pub use dir::valid_id;
pub use store::{Store, UnreadableJob};
pub use summary::{JobListItem, JobSummary, PathList, WorktreeSummary};

#[cfg(test)]
mod tests {
    // What outside users see of a record: pinned at the facade.
    use super::*;

    #[test]
    fn the_job_summary_key_set_is_pinned() {
        // A job that has just been queued: every key a client may rely on
        // is there (null when unknown); the rest appear only when they say
        // something (kind beside agent, a load, acceptance, a batch, a
        // review, model faults, an outcome, a model note). docs/guide.md's
        // MCP tools section says the same.
        let rec: JobRecord = serde_json::from_value(serde_json::json!({
            "id": "20261201-000000-00000000", "task": "t", "model": "m",
            "served_id": "m", "endpoint": "box", "base_url": "http://127.0.0.1:9",
            "cwd": "/tmp", "origin_cwd": "/tmp", "isolation": "none",
            "status": "queued", "created": "2026-12-01T00:00:00Z", "tool_calls": 0,
            "usage": {"input": 0, "cache_read": 0, "output": 0}, "files_touched": [], "files_changed": [], "log_dir": "/tmp/l",
            "permission_mode": "acceptEdits", "max_turns": 10, "timeout_s": 60,
            "allowed_tools": [], "disallowed_tools": [], "owner_pid": 1
        }))
        .unwrap();
        let v = serde_json::to_value(rec.summary()).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "id",
                "status",
                "model",
                "endpoint",
                "isolation",
                "cwd",
                "elapsed_s",
                "num_turns",
                "tool_calls",
                "files_changed",
                "files_touched",
                "last_activity",
                "result",
                "error",
                "log_dir",
                "worktree",
                "queued",
                "metrics",
                "first_turn",
                "usage_local",
                "equivalent_usd",
                "reference_model",
            ]
        );
    }
}
