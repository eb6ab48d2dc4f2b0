//! Process groups, signals and process identity: the one place that calls
//! `setpgid`, `killpg`, `kill` and reads what the kernel says of a process
//! (its parent, start time and children): `/proc` on Linux, libproc and
//! sysctl on macOS (`macos.rs`).
//!
//! Every delegate runs under a [`guard`]: the supervisor starts
//! `localagents __guard claude ...` as the leader of a new process group,
//! with a lifeline pipe on its stdin. The guard ends every descendant of
//! the job when the delegate exits, on SIGTERM (cancel, timeout), or when
//! the lifeline closes (the supervisor died, even by SIGKILL). On macOS,
//! which has no subreaper, the job's processes are the guard's descendants
//! and the members of its process group (see [`guard`]).
//!
//! A pid in a job record is signalled only while it is still the process
//! we started: [`Identity`] records the boot id and the start time, and
//! [`Identity::is_current`] compares both before any signal (macOS: the
//! boot session uuid, and the start time from `proc_pidinfo`). Liveness
//! checks are signal 0 or `/proc` (libproc on macOS); reading a record
//! never signals anything.

#![allow(clippy::disallowed_methods)] // this module owns groups and signals
use std::time::Duration;

pub mod guard;
#[cfg(target_os = "macos")]
mod macos;

#[cfg(all(test, target_os = "macos"))]
use macos::parent_of;
#[cfg(target_os = "macos")]
pub use macos::{boot_id, descendants, start_time};

use std::ffi::OsString;

use process_wrap::tokio::{ChildWrapper, CommandWrap, ProcessGroup};
use serde::{Deserialize, Serialize};

/// How long a group gets between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(3);

/// A guard and its delegate: the child, plus the lifeline (the write end of
/// the guard's stdin) held apart from it. Tokio's `wait` closes a child's
/// stdin first, which would end the job the moment anyone waits for it; so
/// the lifeline lives here until this value is dropped.
pub struct Guarded {
    child: Box<dyn ChildWrapper>,
    _lifeline: Option<tokio::process::ChildStdin>,
}

impl std::ops::Deref for Guarded {
    type Target = dyn ChildWrapper;
    fn deref(&self) -> &Self::Target {
        &*self.child
    }
}

impl std::ops::DerefMut for Guarded {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut *self.child
    }
}

/// Make `cmd`'s process the leader of a new process group, detached from
/// ours (a Ctrl-C at our terminal does not reach it). For a program that
/// is meant to outlive the command that started it: a `bring_up` command
/// the user configured.
pub fn new_group(cmd: &mut tokio::process::Command) {
    #[cfg(unix)]
    cmd.process_group(0);
}

/// This program, to start again as a job's guard. A `cargo install` (or
/// a plugin update) while `serve` runs replaces the file: its path then
/// names nothing, or another version. On Linux `/proc/self/exe` is still
/// the running binary, so the guard is always this version.
fn self_exe() -> std::io::Result<std::path::PathBuf> {
    #[cfg(target_os = "linux")]
    {
        let proc_exe = std::path::Path::new("/proc/self/exe");
        if proc_exe.exists() {
            return Ok(proc_exe.to_path_buf());
        }
    }
    std::env::current_exe()
}

/// Spawn `program args` under a job guard that leads a new process group.
/// The guard's stdin is the lifeline: keep the returned value for as long
/// as the job runs. The program's stdin is the file `stdin` (a delegate's
/// prompt: no argv string may exceed 128 KiB), else `/dev/null`; the
/// guard opens it before it starts the program, and names it when it
/// cannot. `configure` sets cwd, env (inherited by the program) and
/// stdout/stderr.
pub fn spawn_guarded(
    program: &std::path::Path,
    args: &[String],
    stdin: Option<&std::path::Path>,
    configure: impl FnOnce(&mut tokio::process::Command),
) -> std::io::Result<Guarded> {
    let exe = self_exe()?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg(guard::ARG);
    if let Some(file) = stdin {
        cmd.arg(guard::STDIN_ARG).arg(file);
    }
    cmd.arg(program).args(args);
    configure(&mut cmd);
    // No kill_on_drop: dropping the lifeline makes the guard end the job
    // itself (a SIGKILL of the guard would leave its descendants).
    cmd.stdin(std::process::Stdio::piped());
    let mut wrap = CommandWrap::from(cmd);
    wrap.wrap(ProcessGroup::leader());
    let mut child = wrap.spawn()?;
    let lifeline = child.stdin().take();
    Ok(Guarded {
        child,
        _lifeline: lifeline,
    })
}

/// Run the guard if this process was started as one (`localagents
/// __guard ...`): `Some(exit code)`, else `None`. Called first in `main`.
pub fn guard_entry() -> Option<i32> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != guard::ARG {
        return None;
    }
    Some(guard::main(args.collect::<Vec<OsString>>()))
}

/// The boot id of this machine (Linux), so a pid recorded before a reboot
/// is never taken for a live process. macOS: `macos::boot_id`.
#[cfg(not(target_os = "macos"))]
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
}

/// A process's start time in clock ticks since boot (`/proc/PID/stat`
/// field 22). `None` when the process does not exist or there is no /proc.
/// macOS: microseconds since the epoch, `macos::start_time`.
#[cfg(not(target_os = "macos"))]
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and ')': fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    // rest starts at field 3 (state); field 22 is index 19 here.
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(not(target_os = "macos"))]
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Every descendant of `root` now, found by parent links in `/proc`
/// (empty where there is no /proc). Zombies are included until reaped.
/// macOS: `proc_listchildpids`, walked, `macos::descendants`.
#[cfg(not(target_os = "macos"))]
pub fn descendants(root: libc::pid_t) -> Vec<libc::pid_t> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let links: Vec<(u32, u32)> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, parent_of(pid)?)))
        .collect();
    let mut out: Vec<libc::pid_t> = Vec::new();
    let mut frontier = vec![root as u32];
    while let Some(p) = frontier.pop() {
        for (child, _) in links.iter().filter(|(_, parent)| *parent == p) {
            if let Some(c) = as_pid(*child) {
                out.push(c);
                frontier.push(*child);
            }
        }
    }
    out
}

/// Who a recorded pid was: enough to tell it from a later process that got
/// the same number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub pid: u32,
    /// When the process started, in a unit that differs per OS: Linux,
    /// clock ticks since boot (`/proc/PID/stat` field 22); macOS,
    /// microseconds since the epoch (`proc_pidinfo`'s `pbi_start_tvsec` and
    /// `pbi_start_tvusec`). Only compared with a value read on the same
    /// machine and boot (`boot_id` first), so the two never meet.
    pub start: u64,
    pub boot_id: String,
}

impl Identity {
    /// The identity of a live process now (`None` when it is gone, or on a
    /// system with neither /proc nor libproc).
    pub fn of(pid: u32) -> Option<Identity> {
        Some(Identity {
            pid,
            start: start_time(pid)?,
            boot_id: boot_id()?,
        })
    }

    /// Is this pid still the process we recorded? Same boot, same start
    /// time, and alive. The only test before a recorded pid is signalled.
    pub fn is_current(&self) -> bool {
        boot_id().as_deref() == Some(self.boot_id.as_str())
            && start_time(self.pid) == Some(self.start)
    }
}

fn as_pid(id: u32) -> Option<i32> {
    (id != 0 && id <= i32::MAX as u32).then_some(id as i32)
}

/// Stop a process group: SIGTERM, then SIGKILL after `grace`.
pub async fn stop_group(pgid: u32, grace: Duration) {
    let Some(g) = as_pid(pgid) else { return };
    // SAFETY: signalling the process group we created for the delegate.
    if unsafe { libc::killpg(g, libc::SIGTERM) } != 0 {
        return; // already gone
    }
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        // SAFETY: signal 0 only checks whether the group still exists.
        if unsafe { libc::killpg(g, 0) } != 0 {
            return;
        }
    }
    // SAFETY: as above.
    unsafe { libc::killpg(g, libc::SIGKILL) };
}

/// Stop the group of a recorded guard, only if the pid is still that
/// guard. Returns false (and signals nothing) when it is not.
pub async fn stop_recorded(who: &Identity, grace: Duration) -> bool {
    if !who.is_current() {
        return false;
    }
    stop_group(who.pid, grace).await;
    true
}

/// Is any process of the group alive?
pub fn group_alive(pgid: u32) -> bool {
    // SAFETY: signal 0 only checks existence.
    as_pid(pgid).is_some_and(|g| unsafe { libc::killpg(g, 0) } == 0)
}

/// Is a process alive? (signal 0)
pub fn alive(pid: u32) -> bool {
    let Some(p) = as_pid(pid) else { return false };
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(p, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_parses_names_with_spaces_and_parens() {
        let me = std::process::id();
        let a = start_time(me).expect("our own start time");
        assert_eq!(start_time(me), Some(a));
        assert_eq!(parent_of(me), Some(std::os::unix::process::parent_id()));
        #[cfg(target_os = "macos")]
        {
            // Microseconds since the epoch: this test process started
            // within the last day, and not in the future.
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_micros() as u64;
            assert!(a <= now && now - a < 86_400_000_000, "start {a}, now {now}");
        }
    }

    #[test]
    fn the_boot_id_is_read_and_stable() {
        let id = boot_id().expect("a boot id");
        assert!(!id.is_empty() && !id.contains('\0'), "{id:?}");
        assert_eq!(boot_id(), Some(id.clone()));
        assert_eq!(Identity::of(std::process::id()).unwrap().boot_id, id);
    }

    #[tokio::test]
    async fn a_reused_pid_is_never_signalled() {
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = other.id();
        let real = Identity::of(pid).unwrap();
        assert!(real.is_current());
        // The record says the pid started at another time: it is not ours.
        let recorded = Identity {
            start: real.start + 1,
            ..real.clone()
        };
        assert!(!recorded.is_current());
        assert!(!stop_recorded(&recorded, Duration::from_millis(100)).await);
        let other_boot = Identity {
            boot_id: "another-boot".into(),
            ..real.clone()
        };
        assert!(!stop_recorded(&other_boot, Duration::from_millis(100)).await);
        assert!(
            other.try_wait().unwrap().is_none(),
            "the unrelated process was signalled"
        );
        other.kill().unwrap();
        other.wait().unwrap();
    }

    #[test]
    fn descendants_are_found_through_parent_links() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
            .unwrap();
        let t = std::time::Instant::now();
        let sh = child.id() as libc::pid_t;
        let mut found = Vec::new();
        while t.elapsed() < Duration::from_secs(5) {
            found = descendants(sh);
            if !found.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(found.len(), 1, "the sleep under sh: {found:?}");
        assert!(descendants(std::process::id() as libc::pid_t).contains(&sh));
        assert!(descendants(std::process::id() as libc::pid_t).contains(&found[0]));
        for p in found.into_iter().chain([sh]) {
            // SAFETY: the sh this test started and its sleep.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        child.wait().unwrap();
    }

    /// macOS has no subreaper: a background command whose shell exited is
    /// reparented to launchd, out of the walk, and found only as a member
    /// of the job's process group.
    #[cfg(target_os = "macos")]
    #[test]
    fn an_orphan_left_in_the_group_is_found_as_a_member() {
        use std::io::BufRead;
        use std::os::unix::process::CommandExt;
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & echo $!"])
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let group = sh.id() as libc::pid_t;
        // One line only: the sleep keeps the pipe open.
        let mut line = String::new();
        std::io::BufReader::new(sh.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let sleep: libc::pid_t = line.trim().parse().unwrap();
        assert!(sh.wait().unwrap().success());
        assert_eq!(macos::group_members(group), vec![sleep]);
        assert!(!descendants(std::process::id() as libc::pid_t).contains(&sleep));
        // SAFETY: the sleep this test started.
        unsafe { libc::kill(sleep, libc::SIGKILL) };
        // launchd reaps it; then the group is gone.
        let t = std::time::Instant::now();
        while !macos::group_members(group).is_empty() && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(macos::group_members(group), Vec::<libc::pid_t>::new());
    }
}
