//! The real vLLM router (`vllm-router`, PyPI 0.1.17, installed and cached
//! by `scripts/install-vllm-router.sh`), started in front of servers the
//! test runs. The binary comes from `LOCALAGENTS_VLLM_ROUTER`; without it
//! a test fails under CI on Linux and elsewhere records its skip where
//! `scripts/test.sh` reports it ([`router_or_skip`]). On macOS there is
//! nothing to install (PyPI has Linux wheels only), so there the skip is
//! recorded under CI too.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The variable naming the `vllm-router` launcher.
pub const VAR: &str = "LOCALAGENTS_VLLM_ROUTER";

/// Why the router's tests cannot run on macOS: `vllm-router` 0.1.17 ships
/// manylinux wheels only, and `scripts/install-vllm-router.sh` installs
/// nothing there.
pub const NO_MACOS_WHEEL: &str = "vllm-router 0.1.17 has no macOS wheel";

/// The router's launcher, or `None` (the skip said and recorded) when it
/// is not installed: outside CI, or on macOS (CI or not), where it cannot
/// be. Under CI on Linux its absence fails the test.
pub fn router_or_skip(test: &str) -> Option<PathBuf> {
    let bin = std::env::var_os(VAR)
        .map(PathBuf::from)
        .filter(|p| p.is_file());
    if bin.is_none() {
        let why = if cfg!(target_os = "macos") {
            NO_MACOS_WHEEL.to_string()
        } else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{test}: {VAR} is not set; scripts/test.sh installs vllm-router (scripts/install-vllm-router.sh)"
            );
            format!("{VAR} is unset (run scripts/install-vllm-router.sh)")
        };
        crate::skip(test, &why);
    }
    bin
}

/// How many times [`Router::start`] tries new ports when one was taken.
const ATTEMPTS: u32 = 5;

/// What starting the router came to.
enum Ready {
    Listed,
    PortTaken,
    Exited(std::process::ExitStatus),
    TimedOut,
}

/// The router's sentence when its port (its own or Prometheus's) was
/// bound by another process first.
fn port_taken(log: &str) -> bool {
    log.contains("Address already in use")
}

/// A running router; stopped when dropped.
pub struct Router {
    pub url: String,
    pub log: PathBuf,
    child: Child,
}

impl Router {
    /// `vllm-router --worker-urls WORKERS --policy POLICY EXTRA…` on a
    /// free loopback port, its log in `dir`; returns once it lists its
    /// workers (it first waits for each worker's `/health`).
    ///
    /// A port found free is released before the router binds it, so
    /// another test's process can take it first (CI saw `Address already
    /// in use (os error 98)` after `Router ready`). Then the router exits,
    /// and it is started again on new ports, up to [`ATTEMPTS`] times.
    pub fn start(bin: &Path, workers: &[&str], policy: &str, extra: &[&str], dir: &Path) -> Router {
        for attempt in 1..=ATTEMPTS {
            let mut r = Router::spawn(bin, workers, policy, extra, dir);
            match r.wait_ready() {
                Ready::Listed => return r,
                Ready::PortTaken if attempt < ATTEMPTS => continue,
                Ready::PortTaken => panic!(
                    "vllm-router lost its port to another process {ATTEMPTS} times: {}",
                    r.log_text()
                ),
                Ready::Exited(status) => {
                    panic!(
                        "vllm-router exited ({status}) before it listed its workers: {}",
                        r.log_text()
                    )
                }
                Ready::TimedOut => panic!(
                    "vllm-router did not list its workers in 120 s: {}",
                    r.log_text()
                ),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    fn spawn(bin: &Path, workers: &[&str], policy: &str, extra: &[&str], dir: &Path) -> Router {
        let port = crate::net::free_port();
        let log = dir.join(format!("vllm-router-{port}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let mut cmd = Command::new(bin);
        cmd.args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--worker-urls")
            .args(workers)
            .args(["--policy", policy])
            // Its own Prometheus listener would take a fixed port (29000).
            .args(["--prometheus-port", &crate::net::free_port().to_string()])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let child = cmd.spawn().expect("start vllm-router");
        Router {
            url: format!("http://127.0.0.1:{port}"),
            log,
            child,
        }
    }

    /// Waits until the router lists its workers, or exits, or 120 s pass.
    fn wait_ready(&mut self) -> Ready {
        let mut exited = None;
        let listed = crate::holds_within(Duration::from_secs(120), || {
            if let Ok(Some(status)) = self.child.try_wait() {
                exited = Some(status);
                return true;
            }
            Command::new("curl")
                .args(["-fsS", "-m", "2", &format!("{}/list_workers", self.url)])
                .output()
                .is_ok_and(|o| o.status.success())
        });
        match exited {
            Some(_) if port_taken(&self.log_text()) => Ready::PortTaken,
            Some(status) => Ready::Exited(status),
            None if listed => Ready::Listed,
            None => Ready::TimedOut,
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The router's consistent-hash decisions, in order: the hash key
    /// (`header:x-session-id:<id>`, or `request:<body>` when there was no
    /// session) and the worker it chose, from its log lines
    /// `Consistent hash routing: key='…' -> worker='…'`.
    pub fn decisions(&self) -> Vec<(String, String)> {
        self.log_text()
            .lines()
            .filter_map(|l| {
                let rest = l.split("Consistent hash routing: key='").nth(1)?;
                let (key, rest) = rest.split_once("' -> worker='")?;
                let worker = rest.split('\'').next()?;
                Some((key.to_string(), worker.to_string()))
            })
            .collect()
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        // One process: the launcher runs the router's Rust core in itself.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
