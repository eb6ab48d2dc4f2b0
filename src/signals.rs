//! The one place that listens for the signals that end a command: SIGINT
//! (Ctrl-C), SIGTERM (`kill`, a service manager) and SIGHUP (the terminal
//! or the client went away). `serve`, the page and the shim wait for one
//! to shut down; `run`, `complete`, `batch`, `review` and `eval` stop their
//! work on one and exit with its code. It lives at the bottom so the MCP
//! server and the CLI both reach it.
//!
//! Why every command that starts a job listens for all three: a signal's
//! default action ends the process at once, and then nothing writes the
//! job's record (it stays `running`, read as `lost`) while the job guard,
//! seeing its lifeline close, stops the job's processes behind its back.
//! The guard leads a process group of its own, so a signal sent to the
//! `localagents` process alone (and the terminal's, which goes to the
//! foreground group) never reaches the delegate: the supervisor has to
//! listen, cancel the job, write its record, and only then exit.
//!
//! Listening starts when a [`Stops`] is made, not when it is awaited: a
//! signal that comes while a job is still starting is kept, and stops the
//! job once there is one. Listening replaces each signal's default action
//! for the rest of the process, so a command makes its [`Stops`] only once
//! it can act on one (after a blocking read of stdin, say).

use tokio::signal::unix::{Signal, SignalKind, signal};

/// Which signal asked a command to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGINT: Ctrl-C.
    Interrupt,
    /// SIGTERM: `kill`, a service manager, `timeout`.
    Terminate,
    /// SIGHUP: the terminal closed.
    Hangup,
}

impl Stop {
    /// The exit code of a command it stopped: 128 + the signal's number,
    /// what a shell reports for a process the signal ended (130, 143, 129).
    pub fn exit_code(self) -> u8 {
        128 + self.number() as u8
    }

    /// The signal's number.
    pub fn number(self) -> i32 {
        match self {
            Stop::Interrupt => libc::SIGINT,
            Stop::Terminate => libc::SIGTERM,
            Stop::Hangup => libc::SIGHUP,
        }
    }
}

/// Listening for SIGINT, SIGTERM and SIGHUP, from the moment it is made.
/// Make it inside the runtime.
pub struct Stops {
    interrupt: Option<Signal>,
    terminate: Option<Signal>,
    hangup: Option<Signal>,
}

impl Stops {
    /// Start listening. A signal that cannot be listened for (the OS
    /// refused the handler) keeps its default action and never comes here.
    pub fn listen() -> Stops {
        let one = |kind: SignalKind| match signal(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!("cannot listen for signal {kind:?}: {e}");
                None
            }
        };
        Stops {
            interrupt: one(SignalKind::interrupt()),
            terminate: one(SignalKind::terminate()),
            hangup: one(SignalKind::hangup()),
        }
    }

    /// The next signal of the three (also one that came before this call,
    /// after [`Stops::listen`]).
    pub async fn next(&mut self) -> Stop {
        async fn recv(s: &mut Option<Signal>) {
            match s {
                Some(s) => {
                    // None only when the runtime shuts down: wait no more.
                    if s.recv().await.is_none() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            _ = recv(&mut self.interrupt) => Stop::Interrupt,
            _ = recv(&mut self.terminate) => Stop::Terminate,
            _ = recv(&mut self.hangup) => Stop::Hangup,
        }
    }
}

/// The first of SIGINT, SIGTERM or SIGHUP from now on: for `serve`, the
/// page and the shim, which shut down on any. Listening replaces SIGHUP's
/// default (the process dies at once, its jobs' records left `running`,
/// read as `lost`), so the caller stops its jobs first.
pub async fn wait_for_shutdown() -> Stop {
    Stops::listen().next().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_codes_are_128_and_the_signal() {
        assert_eq!(
            [Stop::Interrupt, Stop::Terminate, Stop::Hangup].map(Stop::exit_code),
            [130, 143, 129]
        );
    }
}
