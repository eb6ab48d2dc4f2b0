//! Acceptance: the command that says whether a job is done, run by us.
//!
//! A delegate's "done" is a claim; local models stop early or report a test
//! as passing without running it. When a job has an acceptance command, we
//! run it ourselves in the job's tree after the delegate's session ends. If
//! it fails and fix rounds remain, the same session is resumed with a short
//! brief ([`fix_brief`]) and the command runs again. The job succeeds only
//! if the command passed.
//!
//! The command runs under `sh -c` in its own job guard
//! ([`crate::process::guard`]), so cancel and timeout stop it and whatever
//! it started. Its combined output is appended to `acceptance.txt` in the
//! job dir; the record keeps the last ~4 KB of the last run.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// How much of the output the record and the fix brief keep.
pub const TAIL_BYTES: usize = 4096;
/// Fix rounds a caller may ask for at most.
pub const MAX_FIX_ROUNDS: u32 = 10;

/// `job.json`'s `acceptance`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Acceptance {
    pub command: String,
    pub passed: bool,
    /// `None`: killed (timeout, cancel) or not run yet.
    pub exit_code: Option<i32>,
    /// How many times the command ran.
    pub rounds: u32,
    /// The last ~4 KB of the last run's combined output.
    pub output_tail: String,
    /// The last run's wall time.
    pub elapsed_s: f64,
    /// Set when the last run did not finish by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

impl Acceptance {
    /// "acceptance passed (cargo test -p foo, 2 rounds)".
    pub fn line(&self) -> String {
        let rounds = if self.rounds == 1 {
            "1 round".to_string()
        } else {
            format!("{} rounds", self.rounds)
        };
        let verdict = if self.passed { "passed" } else { "failed" };
        format!("acceptance {verdict} ({}, {rounds})", short(&self.command))
    }

    /// The job error when it did not pass.
    pub fn failure(&self) -> String {
        let how = match (&self.stopped, self.exit_code) {
            (Some(why), _) => why.clone(),
            (None, Some(c)) => format!("exit {c}"),
            (None, None) => "killed by a signal".into(),
        };
        let rounds = if self.rounds == 1 { "round" } else { "rounds" };
        format!(
            "acceptance failed after {} {rounds}: {how} (`{}`); its output is in acceptance.txt (job_log), the delegate's report is in result",
            self.rounds,
            short(&self.command)
        )
    }
}

fn short(cmd: &str) -> String {
    crate::fmt::one_line(cmd, 80)
}

/// The brief for a fix round, sent into the same session.
pub fn fix_brief(a: &Acceptance) -> String {
    let code = match a.exit_code {
        Some(c) => format!("exit code {c}"),
        None => a.stopped.clone().unwrap_or_else(|| "killed".into()),
    };
    let tail = crate::fmt::last_chars(&a.output_tail, 2000);
    format!(
        "The acceptance command `{}` failed ({code}). The end of its output:\n```\n{tail}\n```\nMake this command pass. Do not change the command, and do not weaken, skip or delete tests to make it pass. When it passes, report what you changed.",
        a.command
    )
}

/// One run of the command.
#[derive(Debug)]
pub struct Run {
    pub exit_code: Option<i32>,
    pub output_tail: String,
    pub elapsed: Duration,
    /// Why it did not end by itself: timeout or cancel.
    pub stopped: Option<Stop>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Timeout,
    Cancelled,
}

/// What the command runs with.
pub struct Spec<'a> {
    pub command: &'a str,
    pub cwd: &'a Path,
    /// `acceptance.txt` in the job dir (appended).
    pub output: PathBuf,
    /// Environment to remove (keys, provider switches) and to set.
    pub env_remove: &'a [String],
    pub env: &'a [(String, String)],
    pub timeout: Duration,
    /// A cancel from another localagents process (`cancel_requested`).
    pub cancel_marker: PathBuf,
}

/// Run the command once: `sh -c`, under a job guard, output appended to
/// the spec's file. Stops on timeout or when `cancel` turns true.
pub async fn run_once(
    spec: &Spec<'_>,
    round: u32,
    cancel: &mut watch::Receiver<bool>,
) -> std::io::Result<Run> {
    use std::io::{Seek, Write};
    let mut file = crate::paths::append_private(&spec.output)?;
    writeln!(
        file,
        "== round {round}: {} (in {})",
        spec.command,
        spec.cwd.display()
    )?;
    let start_at = file.seek(std::io::SeekFrom::End(0))?;
    let out = file.try_clone()?;
    let err = file.try_clone()?;
    let started = Instant::now();
    let mut child = crate::process::spawn_guarded(
        Path::new("/bin/sh"),
        &["-c".to_string(), spec.command.to_string()],
        None,
        |cmd| {
            cmd.current_dir(spec.cwd)
                .stdout(std::process::Stdio::from(out))
                .stderr(std::process::Stdio::from(err));
            for k in spec.env_remove {
                cmd.env_remove(k);
            }
            for (k, v) in spec.env {
                cmd.env(k, v);
            }
        },
    )?;
    let pgid = child.id().unwrap_or(0);
    let stopped = tokio::select! {
        s = child.inner_mut().wait() => {
            let elapsed = started.elapsed();
            let status = s?;
            let tail = read_tail(&spec.output, start_at);
            writeln!(file, "== exit {:?} after {:.2} s", status.code(), elapsed.as_secs_f64())?;
            return Ok(Run { exit_code: status.code(), output_tail: tail, elapsed, stopped: None });
        }
        _ = tokio::time::sleep(spec.timeout) => Stop::Timeout,
        _ = cancel.wait_for(|c| *c) => Stop::Cancelled,
        _ = async {
            while !spec.cancel_marker.exists() {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        } => Stop::Cancelled,
    };
    crate::process::stop_group(pgid, crate::process::GRACE).await;
    let _ = child.inner_mut().wait().await;
    let elapsed = started.elapsed();
    let tail = read_tail(&spec.output, start_at);
    writeln!(
        file,
        "== stopped ({stopped:?}) after {:.2} s",
        elapsed.as_secs_f64()
    )?;
    Ok(Run {
        exit_code: None,
        output_tail: tail,
        elapsed,
        stopped: Some(stopped),
    })
}

/// The last [`TAIL_BYTES`] written after `from`, on a char boundary.
/// Only those bytes are read, however long the output grew.
fn read_tail(path: &Path, from: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = from.min(len).max(len.saturating_sub(TAIL_BYTES as u64));
    if f.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = f.take(TAIL_BYTES as u64).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(passed: bool, code: Option<i32>, rounds: u32) -> Acceptance {
        Acceptance {
            command: "cargo test -p foo".into(),
            passed,
            exit_code: code,
            rounds,
            output_tail: "test result: FAILED. expected 3, got 4".into(),
            elapsed_s: 1.0,
            stopped: None,
        }
    }

    #[test]
    fn lines_and_briefs() {
        assert_eq!(
            acc(true, Some(0), 2).line(),
            "acceptance passed (cargo test -p foo, 2 rounds)"
        );
        assert_eq!(
            acc(true, Some(0), 1).line(),
            "acceptance passed (cargo test -p foo, 1 round)"
        );
        let f = acc(false, Some(101), 3).failure();
        assert!(
            f.starts_with("acceptance failed after 3 rounds: exit 101 (`cargo test -p foo`)"),
            "{f}"
        );
        let b = fix_brief(&acc(false, Some(101), 1));
        assert!(
            b.contains("`cargo test -p foo` failed (exit code 101)"),
            "{b}"
        );
        assert!(b.contains("expected 3, got 4"), "{b}");
        assert!(b.contains("do not weaken, skip or delete tests"), "{b}");
    }
}
