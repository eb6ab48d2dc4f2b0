//! The macOS twin of what Linux reads in `/proc`: a process's parent and
//! start time (`proc_pidinfo`), its children and a process group's members
//! (`proc_listchildpids`, `proc_listpgrppids`, Apple's libproc.h), and the
//! boot session id (`sysctlbyname("kern.bootsessionuuid")`).
//!
//! Every call answers `None` or an empty list when the process is gone or
//! the kernel refuses; pid buffers grow while an answer fills them, up to
//! [`MAX_PIDS`]. Nothing here signals: `super` and the guard do.

use std::collections::HashSet;
use std::mem::{MaybeUninit, size_of};

/// The most pids one listing (or one walk) takes. `kern.maxproc` is a few
/// thousand on macOS; 65 536 pids (256 KiB) is more than a machine runs.
const MAX_PIDS: usize = 1 << 16;
/// The first buffer: a process's children or a job's group are a handful.
const FIRST_PIDS: usize = 64;

/// The kernel's BSD view of a live (or zombie) process.
fn bsd_info(pid: u32) -> Option<libc::proc_bsdinfo> {
    let pid = super::as_pid(pid)?;
    let size = size_of::<libc::proc_bsdinfo>();
    let size_arg = libc::c_int::try_from(size).ok()?;
    let mut info = MaybeUninit::<libc::proc_bsdinfo>::zeroed();
    // SAFETY: `info` is a zeroed proc_bsdinfo of `size` bytes; proc_pidinfo
    // writes at most that many and returns how many it wrote (0 on error).
    let n = unsafe {
        libc::proc_pidinfo(
            pid,
            libc::PROC_PIDTBSDINFO,
            0,
            info.as_mut_ptr().cast(),
            size_arg,
        )
    };
    if usize::try_from(n).ok() != Some(size) {
        return None;
    }
    // SAFETY: a C struct of integers and char arrays, zeroed and then
    // filled whole by the kernel: every bit pattern is a valid value.
    Some(unsafe { info.assume_init() })
}

/// A process's start time in microseconds since the epoch
/// (`pbi_start_tvsec`, `pbi_start_tvusec`). `None` when it does not exist.
pub fn start_time(pid: u32) -> Option<u64> {
    let info = bsd_info(pid)?;
    info.pbi_start_tvsec
        .checked_mul(1_000_000)?
        .checked_add(info.pbi_start_tvusec)
}

/// A process's parent (`pbi_ppid`). Only the tests ask: the walk below
/// lists children directly.
#[cfg(test)]
pub(super) fn parent_of(pid: u32) -> Option<u32> {
    Some(bsd_info(pid)?.pbi_ppid)
}

/// The boot session id (`kern.bootsessionuuid`, a UUID string that changes
/// at every boot), so a pid recorded before a reboot is never taken for a
/// live process.
pub fn boot_id() -> Option<String> {
    let name = c"kern.bootsessionuuid";
    let mut buf = [0u8; 128];
    let mut len: libc::size_t = buf.len();
    // SAFETY: a NUL-terminated name and a buffer of `len` bytes; sysctl
    // writes at most `len` bytes and sets `len` to how many it wrote (it
    // fails with ENOMEM, writing nothing we read, if the value is longer).
    let r = unsafe {
        libc::sysctlbyname(
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    if r != 0 {
        return None;
    }
    let value = &buf[..len.min(buf.len())];
    let value = value.split(|b| *b == 0).next().unwrap_or_default();
    let id = std::str::from_utf8(value).ok()?.trim();
    (!id.is_empty()).then(|| id.to_string())
}

/// Which pids a libproc listing asks for.
#[derive(Clone, Copy)]
enum Listing {
    /// Processes whose parent is this pid (`proc_listchildpids`).
    ChildrenOf(libc::pid_t),
    /// Members of this process group (`proc_listpgrppids`).
    Group(libc::pid_t),
}

/// The pids of one listing. Both calls answer a count of pids (0 on
/// error); a count that fills the buffer may have been cut, so the buffer
/// doubles and the call is made again, up to [`MAX_PIDS`].
fn list(which: Listing) -> Vec<libc::pid_t> {
    let mut cap = FIRST_PIDS;
    loop {
        let mut buf: Vec<libc::pid_t> = vec![0; cap];
        let Ok(bytes) = libc::c_int::try_from(cap * size_of::<libc::pid_t>()) else {
            return Vec::new();
        };
        let ptr: *mut libc::c_void = buf.as_mut_ptr().cast();
        // SAFETY: `buf` holds `cap` pids, `bytes` bytes; libproc writes at
        // most `bytes` bytes into it and returns how many pids it wrote.
        let n = unsafe {
            match which {
                Listing::ChildrenOf(p) => libc::proc_listchildpids(p, ptr, bytes),
                Listing::Group(g) => libc::proc_listpgrppids(g, ptr, bytes),
            }
        };
        let n = usize::try_from(n).unwrap_or(0).min(cap);
        if n < cap || cap >= MAX_PIDS {
            buf.truncate(n);
            buf.retain(|p| *p > 0);
            return buf;
        }
        cap *= 2;
    }
}

/// Every descendant of `root` now: its children, theirs, and so on
/// (`proc_listchildpids`, walked). Zombies are included until reaped.
pub fn descendants(root: libc::pid_t) -> Vec<libc::pid_t> {
    let mut seen: HashSet<libc::pid_t> = HashSet::from([root]);
    let mut out: Vec<libc::pid_t> = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for child in list(Listing::ChildrenOf(p)) {
            if out.len() < MAX_PIDS && seen.insert(child) {
                out.push(child);
                frontier.push(child);
            }
        }
    }
    out
}

/// The members of process group `pgid` now (`proc_listpgrppids`), zombies
/// included until reaped; empty when there is no such group.
pub(super) fn group_members(pgid: libc::pid_t) -> Vec<libc::pid_t> {
    list(Listing::Group(pgid))
}
