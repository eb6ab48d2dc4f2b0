//! Where things live on disk: the XDG config and state dirs, and the
//! helpers every state file goes through.
//!
//! The state holds briefs, transcripts and whole request bodies, so it is
//! private: directories 0700, files 0600, files opened without following a
//! symlink, and the root checked at start (ours, a real directory). There
//! is no shared fallback under the temp dir: without a home or
//! `XDG_STATE_HOME` localagents says so and stops.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use etcetera::BaseStrategy;

/// `$XDG_CONFIG_HOME/localagents`, i.e. `~/.config/localagents`.
pub fn config_dir() -> Option<PathBuf> {
    etcetera::choose_base_strategy()
        .ok()
        .map(|s| s.config_dir().join("localagents"))
}

/// `$XDG_STATE_HOME/localagents`, i.e. `~/.local/state/localagents`;
/// `None` without a home directory or `XDG_STATE_HOME`.
pub fn default_state_dir() -> Option<PathBuf> {
    etcetera::choose_base_strategy()
        .ok()
        .and_then(|s| s.state_dir())
        .map(|d| d.join("localagents"))
}

/// Why the state root cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(
        "no state directory: there is no home directory and XDG_STATE_HOME is not set; set XDG_STATE_HOME or pass --state-dir"
    )]
    NoHome,
    #[error(
        "state directory {0} is a symlink: point --state-dir (or XDG_STATE_HOME) at a real directory of yours"
    )]
    Symlink(PathBuf),
    #[error("state directory {0} is not a directory: remove it or pass another --state-dir")]
    NotDir(PathBuf),
    #[error(
        "state directory {path} belongs to uid {owner}, not to you (uid {me}): pass a --state-dir of your own"
    )]
    NotOurs { path: PathBuf, owner: u32, me: u32 },
    #[error("cannot create or fix the state directory {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Create the state root if needed and check it: a real directory (not a
/// symlink), owned by us, mode 0700 (tightened if it was wider).
pub fn check_state_root(dir: &Path) -> Result<(), StateError> {
    let io = |source| StateError::Io {
        path: dir.to_path_buf(),
        source,
    };
    if std::fs::symlink_metadata(dir).is_err() {
        private_dir_all(dir).map_err(io)?;
    }
    let meta = std::fs::symlink_metadata(dir).map_err(io)?;
    if meta.file_type().is_symlink() {
        return Err(StateError::Symlink(dir.to_path_buf()));
    }
    if !meta.is_dir() {
        return Err(StateError::NotDir(dir.to_path_buf()));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(StateError::NotOurs {
            path: dir.to_path_buf(),
            owner: meta.uid(),
            me,
        });
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
    }
    Ok(())
}

/// `mkdir -p` with mode 0700 for every directory it creates.
pub fn private_dir_all(dir: &Path) -> std::io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Open a private file (0600) for appending, never through a symlink.
pub fn append_private(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Write a private file (0600) whole, never through a symlink.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display())))
}

/// Write a file so that readers see either the old or the new content:
/// a temp file (0600) in the same directory, fsync, rename over the
/// target, then fsync the directory so the rename survives a crash.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_bare(path, bytes)
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display())))
}

/// [`write_atomic`] whose errors are the system's, for a caller that
/// names the path itself.
pub fn write_atomic_bare(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    let dir = dir.unwrap_or_else(|| Path::new("."));
    private_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    match File::open(dir).and_then(|d| d.sync_all()) {
        // Some file systems cannot fsync a directory: the rename is done.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOTSUP)) => Ok(()),
        r => r,
    }
}

/// The bytes of the files under `dir`, every level down (a link is not
/// followed: its own size counts); what cannot be read counts nothing.
/// Blocking: a walk of the tree.
pub fn dir_bytes(dir: &Path) -> u64 {
    let mut bytes = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            } else {
                bytes = bytes.saturating_add(m.len());
            }
        }
    }
    bytes
}

/// The bytes free to this user and the size of the file system that
/// holds `dir` (`statvfs`).
pub fn disk_space(dir: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `c` is a valid NUL-terminated path and `st` a zeroed struct
    // statvfs fills; nothing else is passed.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let unit = st.f_frsize as u64;
    Ok((
        (st.f_bavail as u64).saturating_mul(unit),
        (st.f_blocks as u64).saturating_mul(unit),
    ))
}

/// An exclusive advisory lock (`flock`) on a lock file, held until it is
/// dropped or its process ends (however it ends: the kernel releases it).
#[derive(Debug)]
pub struct FileLock {
    _file: File,
}

/// The lock file that serialises read-modify-write of `path`:
/// `<path>.lock` beside it.
pub fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    path.with_file_name(name)
}

/// Wait for the exclusive lock on [`lock_path`]`(path)`, creating the lock
/// file (0600, never through a symlink) and its directory (0700). Every
/// writer that reads `path`, changes it and writes it back holds this
/// lock across the three steps, so no update is lost to another's.
pub fn lock_beside(path: &Path) -> std::io::Result<FileLock> {
    use std::os::fd::AsRawFd;
    let lock = lock_path(path);
    if let Some(dir) = lock.parent().filter(|p| !p.as_os_str().is_empty()) {
        private_dir_all(dir)?;
    }
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&lock)?;
    loop {
        // SAFETY: flock on a file descriptor we own; no memory is passed.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if r == 0 {
            return Ok(FileLock { _file: file });
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Open a file to read, never through a symlink, never blocking on a FIFO,
/// and only if it is a regular file; every refusal names the path.
fn open_regular(path: &Path) -> std::io::Result<(File, std::fs::Metadata)> {
    let named =
        |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{} is a symlink, and localagents reads no state file through a link: remove it",
                    path.display()
                ),
            ),
            _ => named(e),
        })?;
    let meta = f.metadata().map_err(named)?;
    if !meta.file_type().is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{} is not a regular file (a FIFO, a device or a directory): remove it",
                path.display()
            ),
        ));
    }
    Ok((f, meta))
}

/// The size of a chunk of a streaming read.
const CHUNK: usize = 64 * 1024;

/// Lines of a file read as a stream: how many there are (as
/// `str::lines` counts them) and its size, in constant memory, never
/// through a symlink or from anything but a regular file.
pub fn count_lines(path: &Path) -> std::io::Result<(usize, u64)> {
    let page = read_lines_from(path, usize::MAX, 0, 0, 0)?;
    Ok((page.total_lines, page.total_bytes))
}

/// A page of a file's lines, read forward as a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinePage {
    /// The lines from `offset` on (each cut to its first `max_line`
    /// bytes, the newline dropped), while they fit in `max_bytes`.
    pub lines: Vec<Vec<u8>>,
    /// Every line of the file, as `str::lines` counts them.
    pub total_lines: usize,
    pub total_bytes: u64,
}

/// Up to `max_lines` lines from line `offset` (0-based), at most
/// `max_bytes` of them (the first line always, cut to `max_line` bytes),
/// and the file's line count and size: one forward pass in 64 KiB chunks,
/// so memory stays bounded whatever the file's size or its longest line.
/// The same refusals as [`read_capped`].
pub fn read_lines_from(
    path: &Path,
    offset: usize,
    max_lines: usize,
    max_bytes: usize,
    max_line: usize,
) -> std::io::Result<LinePage> {
    use std::io::Read;
    let (mut f, _) = open_regular(path)?;
    let named =
        |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let mut buf = vec![0u8; CHUNK];
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut cur: Vec<u8> = Vec::new();
    let (mut line, mut used, mut total_bytes) = (0usize, 0usize, 0u64);
    let mut collecting = max_lines > 0;
    let mut last = b'\n';
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(named(e)),
        };
        total_bytes += n as u64;
        let chunk = &buf[..n];
        last = chunk[n - 1];
        if !collecting || line.saturating_add(memchr::memchr_iter(b'\n', chunk).count()) < offset {
            line += memchr::memchr_iter(b'\n', chunk).count();
            continue;
        }
        let mut at = 0;
        while at < n {
            let end = memchr::memchr(b'\n', &chunk[at..]).map(|i| at + i);
            let piece = &chunk[at..end.unwrap_or(n)];
            if collecting && line >= offset && cur.len() < max_line {
                let room = max_line - cur.len();
                cur.extend_from_slice(&piece[..piece.len().min(room)]);
            }
            let Some(end) = end else { break };
            if collecting && line >= offset {
                let l = std::mem::take(&mut cur);
                if !lines.is_empty() && used + l.len() + 1 > max_bytes {
                    collecting = false;
                } else {
                    used += l.len() + 1;
                    lines.push(l);
                    collecting = lines.len() < max_lines;
                }
            }
            line += 1;
            at = end + 1;
        }
    }
    // A last line without a newline is a line too.
    if last != b'\n' {
        if collecting && line >= offset && (lines.is_empty() || used + cur.len() < max_bytes) {
            lines.push(std::mem::take(&mut cur));
        }
        line += 1;
    }
    Ok(LinePage {
        lines,
        total_lines: line,
        total_bytes,
    })
}

/// The last `max` bytes of a file (all of it when smaller), cut to start on
/// a whole line, and the file's size: a log page without reading the whole
/// log. The same refusals as [`read_capped`].
pub fn read_tail(path: &Path, max: u64) -> std::io::Result<(Vec<u8>, u64)> {
    use std::io::{Read, Seek, SeekFrom};
    let (mut f, meta) = open_regular(path)?;
    let len = meta.len();
    let start = len.saturating_sub(max);
    f.seek(SeekFrom::Start(start))
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let mut out = Vec::with_capacity((len - start) as usize);
    f.take(max)
        .read_to_end(&mut out)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    if start > 0 {
        // The first line is a piece of one: drop it.
        let cut = memchr::memchr(b'\n', &out).map_or(out.len(), |i| i + 1);
        out.drain(..cut);
    }
    Ok((out, len))
}

/// Read a whole file of at most `cap` bytes, never through a symlink and
/// never from anything but a regular file (a FIFO would block, a device
/// would never end). Each refusal names the path.
pub fn read_capped(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let named =
        |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let (f, meta) = open_regular(path)?;
    if meta.len() > cap {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{} is {} bytes, over the {cap}-byte cap",
                path.display(),
                meta.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    f.take(cap + 1).read_to_end(&mut out).map_err(named)?;
    if out.len() as u64 > cap {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} grew over the {cap}-byte cap", path.display()),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_starts_on_a_whole_line_and_refuses_links_and_fifos() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("log");
        std::fs::write(&f, "one\ntwo\nthree\n").unwrap();
        assert_eq!(
            read_tail(&f, 100).unwrap(),
            (b"one\ntwo\nthree\n".to_vec(), 14)
        );
        assert_eq!(read_tail(&f, 8).unwrap(), (b"three\n".to_vec(), 14));
        let link = d.path().join("link");
        std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
        assert!(read_tail(&link, 100).is_err());
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_tail(&fifo, 100).unwrap_err();
        assert!(e.to_string().contains("is not a regular file"), "{e}");
    }

    #[test]
    fn a_page_of_a_large_log_is_read_in_bounded_memory() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("events.jsonl");
        let line = format!("{}\n", "x".repeat(99));
        let mut w = std::io::BufWriter::new(File::create(&f).unwrap());
        for _ in 0..500_000 {
            w.write_all(line.as_bytes()).unwrap();
        }
        w.write_all(b"the end\n").unwrap();
        drop(w);
        // 50 MB: the tail reads only its window.
        let (tail, len) = read_tail(&f, 1000).unwrap();
        assert_eq!(len, 50_000_008);
        assert!(tail.len() <= 1000 && tail.ends_with(b"the end\n"));
        // A forward page keeps only its lines, and counts them all.
        let p = read_lines_from(&f, 499_999, 10, 20_000, 8000).unwrap();
        assert_eq!(p.total_lines, 500_001);
        assert_eq!(p.total_bytes, 50_000_008);
        assert_eq!(p.lines, vec![b"x".repeat(99), b"the end".to_vec()]);
        // The byte cap keeps the first line, cut, and stops there.
        let p = read_lines_from(&f, 0, 1000, 150, 10).unwrap();
        assert_eq!(p.lines.len(), 13, "{:?}", p.lines.len());
        assert!(p.lines.iter().all(|l| l.len() == 10));
        // A last line without its newline is counted and read.
        std::fs::write(&f, "a\nb").unwrap();
        let p = read_lines_from(&f, 1, 5, 100, 100).unwrap();
        assert_eq!((p.lines, p.total_lines), (vec![b"b".to_vec()], 2));
        assert_eq!(count_lines(&f).unwrap(), (2, 3));
        let link = d.path().join("link");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let e = read_lines_from(&link, 0, 5, 100, 100).unwrap_err();
        assert!(e.to_string().contains("is a symlink"), "{e}");
    }
}
