//! The job guard: a small process between a supervisor and its delegate
//! that makes sure nothing the delegate started outlives the job.
//!
//! Why a process of its own: a supervisor (`localagents run`, `serve`) can
//! be SIGKILLed, and then it cannot clean up anything. Claude Code starts
//! its Bash tool commands in their own session, so killing the delegate's
//! process group does not reach them either. The guard closes both holes:
//!
//! - It is a *child subreaper* (Linux `PR_SET_CHILD_SUBREAPER`): whatever
//!   the delegate starts, in any session or group, stays its descendant,
//!   even after an intermediate parent exits. So one walk of `/proc` from
//!   the guard finds every process of the job.
//! - Its stdin is a *lifeline*: a pipe whose write end only the supervisor
//!   holds. When the supervisor ends for any reason, SIGKILL included, the
//!   kernel closes it and the guard sees EOF at once. This does not depend
//!   on which thread forked (unlike `PR_SET_PDEATHSIG`), nor on cgroups
//!   (not writable in many containers, v1 on some machines).
//! - SIGTERM, SIGINT or SIGHUP (cancel and timeout from any localagents
//!   process) and the delegate's own exit end the job the same way: every
//!   descendant gets SIGTERM, then SIGKILL after [`GUARD_GRACE`], repeated
//!   until none is left; then the guard exits with the delegate's status.
//!
//! On macOS there is no subreaper, and no /proc: the job's processes are
//! the guard's descendants (libproc's `proc_listchildpids`, walked) and the
//! members of the group it leads (`proc_listpgrppids`), each signalled by
//! pid with the guard itself left out: the guard is in that group, so a
//! `killpg` with SIGKILL would end it before its sweep is done. The group
//! holds the delegate and whatever stayed in it, also after its parent
//! exited and launchd took it over. What still escapes: a command that
//! left the group (Claude Code's Bash commands run in their own session)
//! *and* was reparented to launchd when its parent exited is neither a
//! descendant nor a member, and is not found (documented in docs/guide.md).
//! Only `job_processes` differs per OS; the sweep is one.
//!
//! The guard runs before any runtime or logging is set up (see `main`), so
//! it stays a single thread that only polls, reaps and signals.

use std::ffi::OsString;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// The hidden first argument that turns the binary into a guard.
pub const ARG: &str = "__guard";
/// `__guard --stdin FILE PROGRAM ...`: the program's stdin is FILE.
pub const STDIN_ARG: &str = "--stdin";

/// Between SIGTERM and SIGKILL for the job's processes. Shorter than the
/// supervisor's [`super::GRACE`], so the guard finishes its sweep before
/// anyone SIGKILLs the guard itself.
pub const GUARD_GRACE: Duration = Duration::from_millis(1500);

static SIGNALLED: AtomicI32 = AtomicI32::new(0);
/// The write end of the self-pipe that wakes [`watch`] at once on a signal
/// or a child's exit (-1 until it exists).
static WAKE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    if sig != libc::SIGCHLD {
        SIGNALLED.store(sig, Ordering::SeqCst);
    }
    let fd = WAKE.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: write(2) is async-signal-safe; a full pipe already wakes us.
        unsafe { libc::write(fd, [1u8].as_ptr().cast(), 1) };
    }
}

/// A non-blocking, close-on-exec self-pipe; its read end, or -1.
fn wake_pipe() -> libc::c_int {
    let mut fds = [-1; 2];
    if make_pipe(&mut fds) != 0 {
        return -1;
    }
    WAKE.store(fds[1], Ordering::SeqCst);
    fds[0]
}

#[cfg(target_os = "linux")]
fn make_pipe(fds: &mut [libc::c_int; 2]) -> libc::c_int {
    // SAFETY: a two-element array for pipe2.
    unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) }
}

#[cfg(not(target_os = "linux"))]
fn make_pipe(fds: &mut [libc::c_int; 2]) -> libc::c_int {
    // SAFETY: pipe(2), then flags on the two fds it returned (macOS has no
    // pipe2; nothing else runs in the guard yet, so no fd can leak).
    unsafe {
        if libc::pipe(fds.as_mut_ptr()) != 0 {
            return -1;
        }
        for fd in *fds {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK);
        }
    }
    0
}

/// Why the job ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The delegate exited on its own: raw wait status.
    Exited(libc::c_int),
    /// The supervisor is gone (lifeline EOF).
    Lifeline,
    /// SIGTERM, SIGINT or SIGHUP.
    Signal(libc::c_int),
}

/// `localagents __guard [--stdin FILE] PROGRAM ARGS...`: run PROGRAM (its
/// stdin FILE, else `/dev/null`) and keep the job together. Returns the
/// exit code for the guard process (after it may have re-raised the
/// delegate's terminating signal on itself).
pub fn main(args: Vec<OsString>) -> i32 {
    let (stdin, args) = match args.split_first() {
        Some((flag, rest)) if flag == STDIN_ARG => match rest.split_first() {
            Some((file, rest)) => (Some(std::path::PathBuf::from(file)), rest),
            None => {
                eprintln!("localagents {ARG}: {STDIN_ARG} names no file");
                return 2;
            }
        },
        _ => (None, &args[..]),
    };
    let Some((program, rest)) = args.split_first() else {
        eprintln!("localagents {ARG}: no program to run");
        return 2;
    };
    let stdin = match &stdin {
        None => Stdio::null(),
        Some(file) => match std::fs::File::open(file) {
            Ok(f) => Stdio::from(f),
            Err(e) => {
                eprintln!(
                    "cannot open the prompt file {} ({e}) for {}",
                    file.display(),
                    program.to_string_lossy()
                );
                return 127;
            }
        },
    };
    become_subreaper();
    let wake = wake_pipe();
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD] {
        // SAFETY: the handler only stores into an atomic.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
    let child = match Command::new(program).args(rest).stdin(stdin).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cannot start {}: {e}", program.to_string_lossy());
            return 127;
        }
    };
    let child_pid = child.id() as libc::pid_t;
    let end = watch(child_pid, wake);
    // After the delegate's own exit this ends its leftovers (background
    // commands); otherwise it ends the delegate too.
    let status = match end {
        End::Exited(status) => sweep(child_pid, Some(status)),
        End::Lifeline | End::Signal(_) => sweep(child_pid, None),
    };
    finish(status, end)
}

/// Poll the lifeline, the signal flag and the delegate until one ends the
/// job. Reaps every child that exits meanwhile (orphans reparented to us).
/// SIGCHLD and the stop signals write to the self-pipe `wake`, so an exit is
/// seen at once, not at the next tick.
fn watch(child: libc::pid_t, wake: libc::c_int) -> End {
    let mut stdin_open = true;
    loop {
        if let Some(status) = reap_all(child) {
            return End::Exited(status);
        }
        let sig = SIGNALLED.load(Ordering::SeqCst);
        if sig != 0 {
            return End::Signal(sig);
        }
        match wait_event(stdin_open, wake, 1000) {
            Lifeline::Open => {}
            Lifeline::Closed => return End::Lifeline,
            // Not a pipe we can poll (started by hand): no lifeline.
            Lifeline::Unusable => stdin_open = false,
        }
    }
}

enum Lifeline {
    Open,
    Closed,
    Unusable,
}

/// Wait for the lifeline (stdin) or the self-pipe, at most `timeout_ms`.
fn wait_event(stdin_open: bool, wake: libc::c_int, timeout_ms: i32) -> Lifeline {
    let mut fds = [
        libc::pollfd {
            fd: if stdin_open { 0 } else { -1 },
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: wake,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: two valid pollfds (a negative fd is ignored by poll).
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms) };
    if n <= 0 {
        return Lifeline::Open; // Timeout or EINTR: the caller looks again.
    }
    if fds[1].revents & libc::POLLIN != 0 {
        let mut sink = [0u8; 64];
        // SAFETY: draining our own non-blocking pipe into a local buffer.
        while unsafe { libc::read(wake, sink.as_mut_ptr().cast(), sink.len()) } > 0 {}
    }
    let lifeline = fds[0].revents;
    if lifeline & libc::POLLNVAL != 0 {
        return Lifeline::Unusable;
    }
    if lifeline & (libc::POLLHUP | libc::POLLERR) != 0 {
        return Lifeline::Closed;
    }
    if lifeline & libc::POLLIN != 0 {
        let mut buf = [0u8; 256];
        // SAFETY: reading into a local buffer.
        let r = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
        if r == 0 {
            return Lifeline::Closed;
        }
    }
    // The supervisor never writes; whatever came is ignored.
    Lifeline::Open
}

/// Reap every exited child; the delegate's wait status if it was among them.
fn reap_all(delegate: libc::pid_t) -> Option<libc::c_int> {
    let mut found = None;
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our own children, non-blocking.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return found;
        }
        if pid == delegate {
            found = Some(status);
        }
    }
}

/// The job's processes now, never the guard itself. Linux: every
/// descendant of the guard, a subreaper (one walk of `/proc`).
#[cfg(not(target_os = "macos"))]
fn job_processes(me: libc::pid_t) -> Vec<libc::pid_t> {
    super::descendants(me)
}

/// The job's processes now, never the guard itself. macOS: the guard's
/// descendants, and the members of its process group when it leads one
/// (as [`super::spawn_guarded`] starts it; a guard started by hand in a
/// shell's job group leaves that group alone).
#[cfg(target_os = "macos")]
fn job_processes(me: libc::pid_t) -> Vec<libc::pid_t> {
    let mut all = super::descendants(me);
    // SAFETY: getpgrp(2) takes nothing and cannot fail.
    let group = unsafe { libc::getpgrp() };
    if group == me {
        all.extend(super::macos::group_members(group));
        all.sort_unstable();
        all.dedup();
    }
    all.retain(|p| *p != me && *p > 0);
    all
}

/// End every process of the job: SIGTERM, then SIGKILL after the grace,
/// until none is left. Returns the delegate's wait status if it was reaped
/// here.
fn sweep(delegate: libc::pid_t, mut status: Option<libc::c_int>) -> Option<libc::c_int> {
    let me = std::process::id() as libc::pid_t;
    let first = job_processes(me);
    for pid in &first {
        // SAFETY: a process of this job, found now (a descendant of this
        // guard; on macOS also a member of the group it leads), never the
        // guard itself.
        unsafe { libc::kill(*pid, libc::SIGTERM) };
    }
    if status.is_none() {
        // Unreaped, so the pid is still the delegate's (also should the
        // listing have missed it).
        // SAFETY: our own child, not yet waited for.
        unsafe { libc::kill(delegate, libc::SIGTERM) };
    }
    let deadline = Instant::now() + GUARD_GRACE;
    loop {
        if let Some(s) = reap_all(delegate) {
            status = Some(s);
        }
        let left = job_processes(me);
        if left.is_empty() && status.is_some() {
            return status;
        }
        if Instant::now() >= deadline + Duration::from_secs(5) {
            // Only a process stuck in the kernel survives SIGKILL this long.
            eprintln!("localagents {ARG}: processes {left:?} do not die; giving up");
            return status;
        }
        if Instant::now() >= deadline {
            for pid in &left {
                // SAFETY: as above; SIGKILL also stops further forks.
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
            if status.is_none() {
                // SAFETY: our own child, not yet waited for.
                unsafe { libc::kill(delegate, libc::SIGKILL) };
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Exit like the delegate did: its code, or its terminating signal.
fn finish(status: Option<libc::c_int>, end: End) -> i32 {
    match (status, end) {
        (Some(s), _) if libc::WIFEXITED(s) => libc::WEXITSTATUS(s),
        (Some(s), _) if libc::WIFSIGNALED(s) => reraise(libc::WTERMSIG(s)),
        (_, End::Signal(sig)) => reraise(sig),
        _ => reraise(libc::SIGTERM),
    }
}

fn reraise(sig: libc::c_int) -> i32 {
    // SAFETY: restore the default action and signal ourselves.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::kill(libc::getpid(), sig);
    }
    128 + sig
}

#[cfg(target_os = "linux")]
fn become_subreaper() {
    // SAFETY: prctl with an integer argument.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if r != 0 {
        eprintln!(
            "localagents {ARG}: cannot become a subreaper ({}); commands that leave the delegate's session may outlive the job",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn become_subreaper() {}
