//! Files of JSON lines, one per day (`<dir>/<YYYYMMDD>.jsonl`, the UTC day
//! a job's id names): the jobs index ([`super::index`]) and the savings
//! book ([`super::book`]) keep their lines so.
//!
//! Why a file a day: a job id starts with its creation time, so what a
//! turn asks ("the jobs of the last two days", "the newest 20") reads the
//! newest files only, whatever the size of the history. Lines are only
//! appended, by one `write` under the caller's lock and synced before the
//! lock is let go; a line a crash cut short (no newline at its end) is
//! ignored by readers, and the next append starts on a line of its own.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// The largest day file read (a million jobs' lines a day fit).
pub const MAX_DAY_BYTES: u64 = 512 << 20;

/// The day (`YYYYMMDD`) a valid job id names.
pub fn day_of_id(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// A day's file under `dir`.
pub fn path(dir: &Path, day: &str) -> PathBuf {
    dir.join(format!("{day}.jsonl"))
}

/// Is `name` a day file's name (`YYYYMMDD.jsonl`)? Its day, when so.
fn day_of_name(name: &str) -> Option<&str> {
    let day = name.strip_suffix(".jsonl")?;
    (day.len() == 8 && day.bytes().all(|b| b.is_ascii_digit())).then_some(day)
}

/// Append `lines` (each one JSON value, no newline inside) to `day`'s file
/// under `dir`, and sync it. A file whose last line a crash cut short
/// gets a newline first, so that line stays the only one lost. The caller
/// holds the lock that serialises the writers of `dir`.
pub fn append(dir: &Path, day: &str, lines: &[Vec<u8>]) -> std::io::Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    crate::paths::private_dir_all(dir)?;
    let p = path(dir, day);
    let named = |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", p.display()));
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&p)
        .map_err(named)?;
    let len = f.metadata().map_err(named)?.len();
    let mut buf = Vec::with_capacity(lines.iter().map(|l| l.len() + 1).sum::<usize>() + 1);
    if len > 0 {
        let mut last = [0u8; 1];
        f.seek(SeekFrom::Start(len - 1)).map_err(named)?;
        f.read_exact(&mut last).map_err(named)?;
        if last[0] != b'\n' {
            buf.push(b'\n');
        }
    }
    for l in lines {
        buf.extend_from_slice(l);
        buf.push(b'\n');
    }
    #[cfg(debug_assertions)]
    cut_for_a_test(&mut f, dir, &buf);
    f.write_all(&buf).map_err(named)?;
    f.sync_data().map_err(named)
}

/// In a debug build only, with `LOCALAGENTS_TEST_CUT_INDEX_WRITE` set:
/// write half of an index line and wait to be killed, so that a test can
/// SIGKILL a process in the middle of the write (tests/it/history.rs).
#[cfg(debug_assertions)]
fn cut_for_a_test(f: &mut std::fs::File, dir: &Path, buf: &[u8]) {
    if std::env::var_os("LOCALAGENTS_TEST_CUT_INDEX_WRITE").is_none() || !dir.ends_with("days") {
        return;
    }
    let _ = f.write_all(&buf[..buf.len() / 2]);
    let _ = f.sync_data();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

/// What a day file holds: its lines that read, and whether a whole line
/// (one that ends with a newline) did not.
#[derive(Debug)]
pub struct Day<T> {
    pub lines: Vec<T>,
    pub bad: bool,
}

/// Read `day`'s file under `dir` (a missing file is no lines). The last
/// line, when nothing ends it, is a write still going on or one a crash
/// cut: it is left out and does not count as bad.
pub fn read<T: DeserializeOwned>(dir: &Path, day: &str) -> std::io::Result<Day<T>> {
    let bytes = match crate::paths::read_capped(&path(dir, day), MAX_DAY_BYTES) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Day {
                lines: Vec::new(),
                bad: false,
            });
        }
        Err(e) => return Err(e),
    };
    let whole = match bytes.iter().rposition(|b| *b == b'\n') {
        Some(i) => &bytes[..i],
        None => &[][..],
    };
    let mut out = Day {
        lines: Vec::new(),
        bad: false,
    };
    for l in whole.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice::<T>(l) {
            Ok(v) => out.lines.push(v),
            Err(_) => out.bad = true,
        }
    }
    Ok(out)
}

/// The days with a file under `dir`, newest first, those before `since`
/// (`YYYYMMDD`) left out.
pub fn days(dir: &Path, since: Option<&str>) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|n| day_of_name(&n).map(str::to_string))
        .filter(|d| since.is_none_or(|s| d.as_str() >= s))
        .collect();
    out.sort_unstable_by(|a, b| b.cmp(a));
    out
}

/// The day (`YYYYMMDD`) of a UTC time.
pub fn day_of_time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y%m%d").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_a_crash_cut_is_skipped_and_the_next_append_starts_a_line() {
        let dir = tempfile::tempdir().unwrap();
        append(dir.path(), "20261206", &[br#"{"a":1}"#.to_vec()]).unwrap();
        // A write cut in its middle.
        let p = path(dir.path(), "20261206");
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(br#"{"a":2,"b""#).unwrap();
        let d: Day<serde_json::Value> = read(dir.path(), "20261206").unwrap();
        assert_eq!(d.lines.len(), 1);
        assert!(!d.bad, "a cut last line is not bad");
        append(dir.path(), "20261206", &[br#"{"a":3}"#.to_vec()]).unwrap();
        let d: Day<serde_json::Value> = read(dir.path(), "20261206").unwrap();
        assert_eq!(d.lines.len(), 2, "{:?}", d.lines);
        assert!(d.bad, "the cut line is now a whole line that does not read");
        assert_eq!(d.lines[1]["a"], 3);
    }

    #[test]
    fn days_are_newest_first_and_only_day_files() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["20261201.jsonl", "20261205.jsonl", "x.jsonl", "2026120.jsonl"] {
            std::fs::write(dir.path().join(n), "").unwrap();
        }
        assert_eq!(days(dir.path(), None), ["20261205", "20261201"]);
        assert_eq!(days(dir.path(), Some("20261202")), ["20261205"]);
    }
}
