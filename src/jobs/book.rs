//! The savings book (`<state>/ledger/<YYYYMMDD>.jsonl`): a line for each
//! job that ended, with the tokens it kept on the user's server. It is
//! what `savings`, the status line and the page add up, and it outlives
//! the jobs: retention and `cleanup_jobs` remove a job's directory, never
//! its line here (a job that ended before the book existed gets its line
//! before its directory goes).
//!
//! Only appended, never rewritten, by the holders of the index's lock
//! ([`super::index`]); a job saved more than once after its end (its
//! figures, its reaping) has a line each time, and the last one counts.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::daylog;
use crate::wire::Usage;

/// One ended job, as the book keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    pub id: String,
    /// RFC 3339, when the job was made.
    #[serde(default)]
    pub created: String,
    #[serde(default)]
    pub endpoint: String,
    /// The model as its server named it.
    #[serde(default)]
    pub served_id: String,
    #[serde(default)]
    pub usage: Usage,
    /// The tool call that started it, to find its delegating session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
}

/// The book's directory under a state dir.
pub fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("ledger")
}

fn bytes(l: &Line) -> std::io::Result<Vec<u8>> {
    serde_json::to_vec(l).map_err(std::io::Error::other)
}

/// Write `line` (the caller holds the index's lock).
pub fn write(state_dir: &Path, line: &Line) -> std::io::Result<()> {
    daylog::append(
        &dir(state_dir),
        daylog::day_of_id(&line.id),
        &[bytes(line)?],
    )
}

/// Write the lines of `lines` whose job has none yet (the caller holds
/// the index's lock): what a job that ended before the book existed
/// needs before its directory is removed.
pub fn ensure(state_dir: &Path, lines: &[Line]) -> std::io::Result<()> {
    let mut by_day: HashMap<&str, Vec<&Line>> = HashMap::new();
    for l in lines {
        by_day
            .entry(daylog::day_of_id(&l.id))
            .or_default()
            .push(l);
    }
    let d = dir(state_dir);
    for (day, ls) in by_day {
        let have: std::collections::HashSet<String> = daylog::read::<Line>(&d, day)?
            .lines
            .into_iter()
            .map(|l| l.id)
            .collect();
        let missing = ls
            .into_iter()
            .filter(|l| !have.contains(&l.id))
            .map(bytes)
            .collect::<std::io::Result<Vec<_>>>()?;
        daylog::append(&d, day, &missing)?;
    }
    Ok(())
}

/// The jobs made at or after `since` (every one with `None`), each by its
/// last line. Files that do not read are skipped, and their lines with
/// them: the book is never the reason a command fails.
pub fn since(state_dir: &Path, since: Option<chrono::DateTime<chrono::Utc>>) -> Vec<Line> {
    let d = dir(state_dir);
    let first = since.map(daylog::day_of_time);
    let mut out: HashMap<String, Line> = HashMap::new();
    for day in daylog::days(&d, first.as_deref()) {
        let Ok(read) = daylog::read::<Line>(&d, &day) else {
            tracing::warn!("the savings book's {day} does not read; its jobs are left out");
            continue;
        };
        for l in read.lines {
            out.insert(l.id.clone(), l);
        }
    }
    let mut v: Vec<Line> = out
        .into_values()
        .filter(|l| match since {
            None => true,
            Some(c) => chrono::DateTime::parse_from_rfc3339(&l.created).is_ok_and(|t| t >= c),
        })
        .collect();
    v.sort_unstable_by(|a, b| b.id.cmp(&a.id));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(id: &str, input: u64) -> Line {
        Line {
            id: id.into(),
            created: "2026-12-01T00:00:00.000Z".into(),
            endpoint: "box".into(),
            served_id: "m".into(),
            usage: Usage {
                input,
                cache_read: 0,
                output: 1,
            },
            tool_use_id: None,
        }
    }

    #[test]
    fn the_last_line_of_a_job_counts_and_ensure_adds_only_the_missing() {
        let state = tempfile::tempdir().unwrap();
        let (a, b) = ("20261201-000000-0000000a", "20261201-000000-0000000b");
        write(state.path(), &line(a, 1)).unwrap();
        write(state.path(), &line(a, 5)).unwrap();
        ensure(state.path(), &[line(a, 99), line(b, 7)]).unwrap();
        let all = since(state.path(), None);
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(all[0].id, b);
        assert_eq!(all[1].usage.input, 5, "ensure left a's own line alone");
    }
}
