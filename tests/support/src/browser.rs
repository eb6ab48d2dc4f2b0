//! A real headless Chromium, driven over the DevTools protocol on a pipe
//! (`--remote-debugging-pipe`: Chromium reads commands on fd 3 and writes
//! answers on fd 4, each a JSON message ended by a NUL byte), so a test can
//! open a page and ask its live DOM, and wait for a condition there instead
//! of a clock. `--dump-dom` cannot: it dumps at load, before any live
//! update. Screenshots use Chromium's own `--screenshot`.
//!
//! Chromium comes from Debian's `chromium` package (.ci/run installs it).
//! Elsewhere `LOCALAGENTS_CHROMIUM` names it: on macOS, Google Chrome's
//! binary in its app bundle (.github/workflows/ci.yml sets it so).

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The Chromium binary, when there is one.
pub fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LOCALAGENTS_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|n| {
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
                .map(move |d| d.join(n))
                .collect::<Vec<_>>()
        })
        .find(|p| p.is_file())
}

/// The Chromium binary; under CI its absence fails the test, elsewhere the
/// test says it is skipped (`None`): on stderr, which nextest hides for a
/// passing test, and in the file `LOCALAGENTS_TEST_SKIPS` names, which
/// `scripts/test.sh` counts after the run so that the skip is said where
/// the runner's summary shows.
pub fn chromium_or_skip(test: &str) -> Option<PathBuf> {
    let c = chromium();
    if c.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: chromium is not installed; .ci/run installs Debian's chromium"
        );
        crate::skip(test, "no chromium on PATH (apt-get install chromium)");
    }
    c
}

/// The variable that names the file of skipped tests.
pub const SKIPS_VAR: &str = "LOCALAGENTS_TEST_SKIPS";

/// Append `test: why` to the skip file: one line each, `O_APPEND` so that
/// tests in parallel processes do not overwrite each other. A skip that
/// cannot be recorded fails the test: a silent pass is what this prevents.
pub fn record_skip(file: &Path, test: &str, why: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .unwrap_or_else(|e| panic!("{test}: cannot record the skip in {}: {e}", file.display()));
    f.write_all(format!("{test}: {why}\n").as_bytes())
        .unwrap_or_else(|e| panic!("{test}: cannot record the skip in {}: {e}", file.display()));
}

const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--hide-scrollbars",
    "--mute-audio",
];

/// `chromium --screenshot` of `url`, `width`×`height`, into `png`.
pub fn screenshot(bin: &Path, url: &str, png: &Path, width: u32, height: u32) {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(bin)
        .args(FLAGS)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--window-size={width},{height}"))
        .arg(format!("--screenshot={}", png.display()))
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success() && png.is_file(),
        "chromium --screenshot {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One Chromium with one page open.
pub struct Browser {
    child: Child,
    to: std::fs::File,
    from: mpsc::Receiver<Value>,
    next_id: u64,
    session: String,
    _profile: tempfile::TempDir,
}

/// A pipe, both ends close-on-exec (`std::io::pipe`: `pipe2` with
/// `O_CLOEXEC` on Linux; macOS has no `pipe2`).
fn pipe() -> (OwnedFd, OwnedFd) {
    let (r, w) = std::io::pipe().expect("a pipe");
    (OwnedFd::from(r), OwnedFd::from(w))
}

/// How many times a Chromium that exits before it opens the page is started
/// again. Under a loaded CI run Chromium has once exited at start with the
/// page unopened (the test then failed on a closed pipe); a start that fails
/// every time still fails the test, with each start's stderr.
const STARTS: usize = 3;

impl Browser {
    /// Start Chromium and open `url`.
    pub fn open(bin: &Path, url: &str) -> Browser {
        let mut failures = Vec::new();
        for _ in 0..STARTS {
            match Browser::start(bin, url) {
                Ok(b) => {
                    for f in &failures {
                        eprintln!("chromium exited at start and was started again: {f}");
                    }
                    return b;
                }
                Err(e) => failures.push(e),
            }
        }
        panic!("chromium did not open {url} in {STARTS} starts: {failures:#?}")
    }

    /// One start: Chromium on the pipe, `url` opened and attached. `Err`
    /// when Chromium exited before it answered, with its status and stderr.
    fn start(bin: &Path, url: &str) -> Result<Browser, String> {
        use std::os::fd::AsRawFd;
        let profile = tempfile::tempdir().unwrap();
        let log = profile.path().join("stderr.log");
        let (cmd_r, cmd_w) = pipe(); // we write commands, Chromium reads fd 3
        let (ans_r, ans_w) = pipe(); // Chromium writes fd 4, we read
        let (r3, w4) = (cmd_r.as_raw_fd(), ans_w.as_raw_fd());
        let mut c = Command::new(bin);
        c.args(FLAGS)
            .arg("--remote-debugging-pipe")
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("chromium's stderr file"));
        // SAFETY: fcntl and dup2 are async-signal-safe. Both ends are first
        // copied above fd 9, so that neither is overwritten when the other
        // lands on 3 or 4 (a pipe end may itself be fd 3 or 4); dup2 then
        // puts them on the fds the protocol names, without close-on-exec.
        unsafe {
            c.pre_exec(move || {
                let a = libc::fcntl(r3, libc::F_DUPFD_CLOEXEC, 10);
                let b = libc::fcntl(w4, libc::F_DUPFD_CLOEXEC, 10);
                if a < 0 || b < 0 || libc::dup2(a, 3) < 0 || libc::dup2(b, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = c.spawn().expect("start chromium");
        drop((cmd_r, ans_w));
        let mut b = Browser {
            child,
            to: std::fs::File::from(cmd_w),
            from: read_messages(std::fs::File::from(ans_r)),
            next_id: 0,
            session: String::new(),
            _profile: profile,
        };
        let exited = |b: &mut Browser, e: String| {
            let status = b.child.try_wait();
            let stderr = std::fs::read_to_string(&log).unwrap_or_default();
            format!("{e}; exit status {status:?}; stderr: {stderr}")
        };
        let target = match b.try_call(None, "Target.createTarget", json!({"url": url})) {
            Ok(t) => t,
            Err(e) => return Err(exited(&mut b, e)),
        };
        let target_id = target["targetId"]
            .as_str()
            .expect("a target id")
            .to_string();
        let attached = b.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target_id, "flatten": true}),
        );
        b.session = attached["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string();
        Ok(b)
    }

    /// Send a command and wait for its answer (60 s at most).
    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.try_call(session, method, params)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Browser::call`], with `Err` when Chromium is gone or silent.
    fn try_call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to
            .write_all(&bytes)
            .map_err(|e| format!("chromium: cannot send {method}: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .from
                .recv_timeout(left)
                .map_err(|e| format!("chromium: no answer to {method}: {e}"))?;
            if v["id"] == id {
                assert!(v["error"].is_null(), "chromium: {method}: {v}");
                return Ok(v["result"].clone());
            }
        }
    }

    /// The value of a JavaScript expression in the page.
    pub fn eval(&mut self, expr: &str) -> Value {
        let session = self.session.clone();
        let r = self.call(
            Some(&session),
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true}),
        );
        r["result"]["value"].clone()
    }

    /// Wait until `expr` is true in the page; panics naming `what` after
    /// `limit`.
    pub fn wait_for(&mut self, what: &str, expr: &str, limit: Duration) {
        crate::until_blocking(what, limit, || self.eval(expr) == json!(true));
    }
}

/// A thread that reads Chromium's NUL-ended messages into a channel; the
/// channel closes when Chromium closes its end.
fn read_messages(mut reader: std::fs::File) -> mpsc::Receiver<Value> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 65536];
        loop {
            let n = match reader.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            buf.extend_from_slice(&chunk[..n]);
            while let Some(i) = buf.iter().position(|b| *b == 0) {
                let msg: Vec<u8> = buf.drain(..=i).collect();
                if let Ok(v) = serde_json::from_slice::<Value>(&msg[..msg.len() - 1])
                    && tx.send(v).is_err()
                {
                    return;
                }
            }
        }
    });
    rx
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
