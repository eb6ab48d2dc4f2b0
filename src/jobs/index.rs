//! The jobs index (`<state>/index/`): what lists, `status`, the hooks,
//! `serve`'s start and the page read instead of every record, so that
//! each costs the same at 100,000 jobs as at 10.
//!
//! Two parts:
//! - `active/<id>`: an empty file for each job whose record must be read
//!   each time: queued and running ones, a lost one not yet reaped, and a
//!   record that does not read. A job gets it before its first record says
//!   it is queued (so the index always holds at least the jobs that are
//!   live), and loses it after its record and its line say it ended.
//! - `days/<YYYYMMDD>.jsonl`: a line ([`Entry`]) for each save of an ended
//!   job, in the file of the day its id names, and one more when its
//!   directory is removed; a job's last line counts. A list reads the
//!   newest days first and stops at its limit.
//!
//! It is never the only copy of anything: the records are. It is rebuilt
//! from them when it is missing, of another version, or a whole line of it
//! does not read, and when `jobs/` changed outside it (its modification
//! time is not the one the index last saw: an older localagents, a copy by
//! hand). A crash between a record's write and its line leaves the job's
//! `active/` file, and the next reader repairs the line from the record.
//! Every write holds `<state>/index.lock`, so two processes lose nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::book;
use super::daylog;
use super::dir::{JobDir, MAX_RECORD_BYTES, RecordBrief, valid_id};
use super::status::Status;
use crate::wire::Usage;

/// What the stamp says first: a change of the format rebuilds.
const VERSION: &str = "localagents-index 1";

/// An ended job, as the index keeps it: what the scans of many jobs read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub id: String,
    pub status: Status,
    /// Its directory was removed (retention, `cleanup_jobs`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
    #[serde(default)]
    pub created: String,
    #[serde(default)]
    pub finished: Option<String>,
    #[serde(default)]
    pub endpoint: String,
    #[serde(default)]
    pub served_id: String,
    #[serde(default)]
    pub origin_cwd: PathBuf,
    #[serde(default)]
    pub usage: Usage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    /// Turns that lost the slot's cache, and the tokens re-processed.
    #[serde(default)]
    pub slot_losses: u64,
    #[serde(default)]
    pub reprocessed_tokens: u64,
    /// The slot the job was pinned to (the chat wire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u64>,
    /// Answers the runaway guard cut off, and its sentence.
    #[serde(default)]
    pub runaways: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub runaway_why: String,
}

impl Entry {
    /// The entry of a record's brief, its usage as the record has it.
    pub fn of(b: &RecordBrief) -> Entry {
        let m = b.metrics.as_ref();
        let r = b.model_faults.as_ref().and_then(|f| f.runaway_output.as_ref());
        Entry {
            id: b.id.clone(),
            status: b.status,
            removed: false,
            created: b.created.clone(),
            finished: b.finished.clone(),
            endpoint: b.endpoint.clone(),
            served_id: b.served_id.clone(),
            origin_cwd: b.origin_cwd.clone(),
            usage: b.usage,
            tool_use_id: b.tool_use_id.clone(),
            slot_losses: m.map_or(0, |m| m.slot_losses),
            reprocessed_tokens: m.map_or(0, |m| m.reprocessed_tokens),
            slot: m.and_then(|m| m.slot),
            runaways: r.map_or(0, |r| r.count),
            runaway_why: r.map(|r| r.why.clone()).unwrap_or_default(),
        }
    }

    /// The entry with the usage the savings count: a record without any
    /// (a job lost before it wrote it) takes the sum of its request log,
    /// in `dir`.
    pub fn with_logged_usage(mut self, dir: &Path) -> Entry {
        if self.usage == Usage::default() {
            self.usage = logged_usage(dir);
        }
        self
    }
}

/// The tokens of a job's model turns, from its request log.
fn logged_usage(dir: &Path) -> Usage {
    let path = JobDir::at(dir).requests();
    let mut u = Usage::default();
    for r in crate::wire::read_requests(&path, crate::wire::READ_CAP).unwrap_or_default() {
        if r.is_messages() {
            u.input += r.usage.input;
            u.cache_read += r.usage.cache_read;
            u.output += r.usage.output;
        }
    }
    u
}

/// Does a job with this status stay in `active/`? Live jobs do, and a lost
/// one until its delegate was looked for ([`super::store::Store::reap_lost`]).
pub fn stays_active(status: Status, reaped: bool) -> bool {
    !status.terminal() || (status == Status::Lost && !reaped)
}

/// The index under one state dir.
#[derive(Debug, Clone)]
pub struct Index {
    state: PathBuf,
}

/// What a scan of every record finds: the ids to keep in `active/`, and
/// each day's entries.
#[derive(Debug, Default)]
struct Scan {
    active: Vec<String>,
    days: BTreeMap<String, Vec<Entry>>,
}

/// What a rebuild did, for the log and the tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rebuilt {
    pub active: usize,
    pub ended: usize,
}

fn io_named(path: &Path) -> impl Fn(std::io::Error) -> std::io::Error + '_ {
    move |e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

impl Index {
    pub fn new(state_dir: &Path) -> Index {
        Index {
            state: state_dir.to_path_buf(),
        }
    }

    fn dir(&self) -> PathBuf {
        self.state.join("index")
    }

    fn jobs(&self) -> PathBuf {
        self.state.join("jobs")
    }

    fn active_dir(&self) -> PathBuf {
        self.dir().join("active")
    }

    fn days_dir(&self) -> PathBuf {
        self.dir().join("days")
    }

    fn marker(&self, id: &str) -> PathBuf {
        self.active_dir().join(id)
    }

    fn lock(&self) -> std::io::Result<crate::paths::FileLock> {
        crate::paths::lock_beside(&self.dir())
    }

    /// What the stamp says when the index is current: its version and
    /// `jobs/`'s modification time.
    fn expected_stamp(&self) -> String {
        let when = std::fs::symlink_metadata(self.jobs())
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or("none".to_string(), |d| {
                format!("{}.{:09}", d.as_secs(), d.subsec_nanos())
            });
        format!("{VERSION}\n{when}\n")
    }

    /// Is the index there, of this version, and has `jobs/` not changed
    /// since it last looked?
    pub fn fresh(&self) -> bool {
        crate::paths::read_capped(&self.dir().join("stamp"), 4096)
            .is_ok_and(|s| s == self.expected_stamp().as_bytes())
    }

    /// Say that the index has seen `jobs/` as it is now (the lock held).
    fn restamp(&self) -> std::io::Result<()> {
        crate::paths::write_atomic(&self.dir().join("stamp"), self.expected_stamp().as_bytes())
    }

    /// Make job `id`'s directory, and its `active/` file, under the lock:
    /// the index sees the change of `jobs/` its own.
    pub fn create(&self, id: &str) -> std::io::Result<PathBuf> {
        let _lock = self.lock()?;
        let was_fresh = self.fresh();
        let dir = self.jobs().join(id);
        crate::paths::private_dir_all(&dir).map_err(io_named(&dir))?;
        self.touch_marker(id)?;
        if was_fresh {
            self.restamp()?;
        }
        Ok(dir)
    }

    fn touch_marker(&self, id: &str) -> std::io::Result<()> {
        let d = self.active_dir();
        crate::paths::private_dir_all(&d).map_err(io_named(&d))?;
        crate::paths::write_private(&self.marker(id), b"")
    }

    /// Job `id` is live (or must be read each time): give it its `active/`
    /// file before its record says so.
    pub fn activate(&self, id: &str) -> std::io::Result<()> {
        if std::fs::symlink_metadata(self.marker(id)).is_ok() {
            return Ok(());
        }
        let _lock = self.lock()?;
        self.touch_marker(id)
    }

    /// An ended job's record was written: its line, its line in the
    /// savings book, and, when it no longer stays active, the end of its
    /// `active/` file, in that order.
    pub fn settle(&self, entry: &Entry, line: &book::Line, active: bool) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(entry).map_err(std::io::Error::other)?;
        let _lock = self.lock()?;
        daylog::append(&self.days_dir(), daylog::day_of_id(&entry.id), &[bytes])?;
        book::write(&self.state, line)?;
        if !active {
            self.unmark(&entry.id)?;
        }
        Ok(())
    }

    fn unmark(&self, id: &str) -> std::io::Result<()> {
        match std::fs::remove_file(self.marker(id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_named(&self.marker(id))(e)),
            _ => Ok(()),
        }
    }

    /// Remove an ended job's directory: its line in the savings book is
    /// made sure of first, then the directory goes, then the index says
    /// so. Under the lock, so a list never sees it half gone.
    pub fn remove(&self, entry: &Entry, line: &book::Line) -> std::io::Result<()> {
        let mut gone = entry.clone();
        gone.removed = true;
        let bytes = serde_json::to_vec(&gone).map_err(std::io::Error::other)?;
        let _lock = self.lock()?;
        let was_fresh = self.fresh();
        book::ensure(&self.state, std::slice::from_ref(line))?;
        // Moved out of `jobs/` in one step, then deleted: a process stopped
        // in the middle leaves a whole job or none, and the rest of it in
        // `trash/`, which the next removal empties.
        let dir = self.jobs().join(&entry.id);
        let trash = self.state.join("trash");
        crate::paths::private_dir_all(&trash).map_err(io_named(&trash))?;
        let binned = trash.join(&entry.id);
        let _ = std::fs::remove_dir_all(&binned);
        match std::fs::rename(&dir, &binned) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_named(&dir)(e)),
            _ => {}
        }
        daylog::append(&self.days_dir(), daylog::day_of_id(&entry.id), &[bytes])?;
        self.unmark(&entry.id)?;
        if was_fresh {
            self.restamp()?;
        }
        drop(_lock);
        empty_trash(&trash)
    }

    /// Job `id`'s `active/` file was stale (its record ended and its line
    /// is written, or its directory is gone): drop it.
    pub fn forget(&self, id: &str) -> std::io::Result<()> {
        let _lock = self.lock()?;
        self.unmark(id)
    }

    /// Rebuild the index first when it is not current. A rebuild that
    /// cannot write (a read-only or full disk) is said, and the scan it
    /// made answers instead.
    fn ready(&self) -> Option<Scan> {
        if self.fresh() {
            return None;
        }
        match self.rebuild() {
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(
                    "the jobs index under {} cannot be rebuilt ({e}); every record is read instead",
                    self.dir().display()
                );
                Some(self.scan())
            }
        }
    }

    /// The jobs in `active/`, newest first.
    pub fn active(&self) -> Vec<String> {
        if let Some(s) = self.ready() {
            let mut a = s.active;
            a.sort_unstable_by(|x, y| y.cmp(x));
            return a;
        }
        let mut ids: Vec<String> = std::fs::read_dir(self.active_dir())
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| valid_id(n))
            .collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        ids
    }

    /// The ended jobs whose directory is there, newest first, from the
    /// day `since` (`YYYYMMDD`, every day with `None`) on, each by its
    /// last line, handed to `f` until it returns `false`.
    pub fn walk(&self, since: Option<&str>, mut f: impl FnMut(Entry) -> bool) {
        if let Some(s) = self.ready() {
            for (day, es) in s.days.into_iter().rev() {
                if since.is_some_and(|x| day.as_str() < x) {
                    break;
                }
                for e in es.into_iter().rev() {
                    if !f(e) {
                        return;
                    }
                }
            }
            return;
        }
        let dir = self.days_dir();
        let mut rebuilt = false;
        for day in daylog::days(&dir, since) {
            let es = match self.day(&dir, &day) {
                Some(es) => es,
                // A whole line that does not read: the index is rebuilt
                // from the records (once), and this day read again.
                None if !rebuilt => {
                    rebuilt = true;
                    tracing::warn!(
                        "the jobs index's {day} has a line that does not read; rebuilding it from the records"
                    );
                    if let Err(e) = self.rebuild_now() {
                        tracing::warn!("the jobs index cannot be rebuilt ({e})");
                    }
                    self.day(&dir, &day).unwrap_or_default()
                }
                None => Vec::new(),
            };
            for e in es {
                if !f(e) {
                    return;
                }
            }
        }
    }

    /// One day's entries, newest first, each job by its last line and the
    /// removed left out; `None` when a whole line does not read.
    fn day(&self, dir: &Path, day: &str) -> Option<Vec<Entry>> {
        let read = daylog::read::<Entry>(dir, day).ok()?;
        if read.bad {
            return None;
        }
        let mut last: BTreeMap<String, Entry> = BTreeMap::new();
        for e in read.lines {
            last.insert(e.id.clone(), e);
        }
        Some(last.into_values().rev().filter(|e| !e.removed).collect())
    }

    /// The ended jobs made on or after `since`'s day, newest first.
    pub fn since(&self, since: Option<chrono::DateTime<chrono::Utc>>) -> Vec<Entry> {
        let day = since.map(daylog::day_of_time);
        let mut out = Vec::new();
        self.walk(day.as_deref(), |e| {
            out.push(e);
            true
        });
        out
    }

    /// Read every record: which stay active, and each ended one's entry.
    fn scan(&self) -> Scan {
        let mut s = Scan::default();
        for id in std::fs::read_dir(self.jobs())
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| valid_id(n))
        {
            let dir = self.jobs().join(&id);
            let record = JobDir::at(&dir).record();
            let brief = crate::paths::read_capped(&record, MAX_RECORD_BYTES)
                .ok()
                .and_then(|b| serde_json::from_slice::<RecordBrief>(&b).ok())
                .filter(|b| b.id == id);
            match brief {
                Some(b) if !stays_active(b.status, b.reaped) => s
                    .days
                    .entry(daylog::day_of_id(&id).to_string())
                    .or_default()
                    .push(Entry::of(&b).with_logged_usage(&dir)),
                // Live, or a record that does not read (yet): read each time.
                _ => s.active.push(id),
            }
        }
        for es in s.days.values_mut() {
            es.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        }
        s
    }

    /// Rebuild when the index is not current (another process may have
    /// just done it).
    pub fn rebuild(&self) -> std::io::Result<Option<Rebuilt>> {
        let _lock = self.lock()?;
        if self.fresh() {
            return Ok(None);
        }
        self.rebuild_locked().map(Some)
    }

    /// Rebuild whatever the stamp says (a line did not read).
    pub fn rebuild_now(&self) -> std::io::Result<Rebuilt> {
        let _lock = self.lock()?;
        self.rebuild_locked()
    }

    /// Write the index anew from the records, beside the old one, then
    /// put it in its place; and give the savings book a line for each
    /// ended job it has none for (jobs from before the book).
    fn rebuild_locked(&self) -> std::io::Result<Rebuilt> {
        // The time is taken before the records are read: a change during
        // the read makes the next reader rebuild again.
        let stamp = self.expected_stamp();
        let scan = self.scan();
        let new = self.state.join("index.new");
        let _ = std::fs::remove_dir_all(&new);
        let (active, days) = (new.join("active"), new.join("days"));
        for d in [&active, &days] {
            crate::paths::private_dir_all(d).map_err(io_named(d))?;
        }
        for id in &scan.active {
            crate::paths::write_private(&active.join(id), b"")?;
        }
        let mut lines = Vec::new();
        for (day, es) in &scan.days {
            let mut bytes = Vec::new();
            for e in es {
                bytes.extend(serde_json::to_vec(e).map_err(std::io::Error::other)?);
                bytes.push(b'\n');
                lines.push(book_line(e));
            }
            crate::paths::write_atomic(&daylog::path(&days, day), &bytes)?;
        }
        book::ensure(&self.state, &lines)?;
        crate::paths::write_atomic(&new.join("stamp"), stamp.as_bytes())?;
        let old = self.state.join("index.old");
        let _ = std::fs::remove_dir_all(&old);
        let dir = self.dir();
        match std::fs::rename(&dir, &old) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_named(&dir)(e)),
            _ => {}
        }
        std::fs::rename(&new, &dir).map_err(io_named(&dir))?;
        let _ = std::fs::remove_dir_all(&old);
        let built = Rebuilt {
            active: scan.active.len(),
            ended: lines.len(),
        };
        tracing::info!(
            "rebuilt the jobs index from the records: {} ended, {} active",
            built.ended,
            built.active
        );
        Ok(built)
    }
}

/// Delete what `trash/` holds (jobs already out of `jobs/`).
fn empty_trash(trash: &Path) -> std::io::Result<()> {
    for e in std::fs::read_dir(trash).map_err(io_named(trash))?.flatten() {
        let p = e.path();
        match std::fs::remove_dir_all(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_named(&p)(e)),
            _ => {}
        }
    }
    Ok(())
}

/// The savings book's line of an entry.
pub fn book_line(e: &Entry) -> book::Line {
    book::Line {
        id: e.id.clone(),
        created: e.created.clone(),
        endpoint: e.endpoint.clone(),
        served_id: e.served_id.clone(),
        usage: e.usage,
        tool_use_id: e.tool_use_id.clone(),
    }
}
