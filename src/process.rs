//! Process groups and signals: the one place that calls `setpgid`,
//! `killpg` and `kill`.
//!
//! A delegate leads its own process group so that cancel, timeout and
//! shutdown reach everything it started in that group. Liveness checks are
//! signal 0 and nothing else; reading a record never signals anything.

use std::time::Duration;

use process_wrap::tokio::{ChildWrapper, CommandWrap, ProcessGroup};

/// How long a group gets between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(3);

/// Spawn `cmd` as the leader of a new process group.
pub fn spawn_group_leader(cmd: tokio::process::Command) -> std::io::Result<Box<dyn ChildWrapper>> {
    let mut wrap = CommandWrap::from(cmd);
    wrap.wrap(ProcessGroup::leader());
    wrap.spawn()
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

/// SIGKILL a whole process group at once (an orphaned delegate).
pub fn kill_group(pgid: u32) {
    if let Some(g) = as_pid(pgid) {
        // SAFETY: signalling a process group we started.
        unsafe { libc::killpg(g, libc::SIGKILL) };
    }
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
