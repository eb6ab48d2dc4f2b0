//! `localagents ui` (issue 25): the page over real jobs (the real Claude
//! Code CLI as the delegate, a fake llama-server as its model), opened in a
//! real headless Chromium: what each page must show, a live turn counter,
//! a cancel that asks first, text from a job rendered as text, and the
//! guard (token, Host, Origin).
//!
//! Set `LOCALAGENTS_UI_SHOTS=DIR` to keep the screenshots (docs/ui/ holds
//! the committed ones: `scripts/ui-screenshots.sh`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

use crate::jobs::{git_init, strict_fake_opts};
use crate::support::browser::{self, Browser};
use crate::support::harness::{Harness, localagents};
use crate::support::{fake_llama, http_client, script, until};

/// A running `localagents ui`: its URL's port and token.
struct Ui {
    _child: tokio::process::Child,
    port: u16,
    token: String,
}

impl Ui {
    async fn start(e: &Harness) -> Ui {
        let mut child = tokio::process::Command::from(e.command(["ui", "--port", "0"]))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let url = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("ui prints its URL")
            .unwrap()
            .expect("a URL line");
        // http://127.0.0.1:PORT/?token=HEX
        let rest = url.strip_prefix("http://127.0.0.1:").expect(&url);
        let (port, token) = rest.split_once("/?token=").expect(&url);
        assert_eq!(token.len(), 32, "{url}");
        assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{url}");
        Ui {
            _child: child,
            port: port.parse().unwrap(),
            token: token.to_string(),
        }
    }

    fn url(&self, path: &str) -> String {
        let sep = if path.contains('?') { '&' } else { '?' };
        format!(
            "http://127.0.0.1:{}{path}{sep}token={}",
            self.port, self.token
        )
    }
}

/// A job record as a running job writes it, owned by this test process,
/// with `requests` model requests in its log and `transcript` as its
/// transcript.
fn running_job(state: &Path, requests: usize, transcript: &str) -> String {
    let now = chrono::Utc::now();
    let id = format!("{}-{:08x}", now.format("%Y%m%d-%H%M%S"), std::process::id());
    let dir = state.join("jobs").join(&id);
    std::fs::create_dir_all(&dir).unwrap();
    let rec = json!({
        "id": id, "task": "Add a --json flag <b>now</b>", "model": "qwen3-coder", "served_id": "qwen3-coder",
        "endpoint": "box", "base_url": "http://127.0.0.1:9", "cwd": "/tmp", "origin_cwd": "/tmp",
        "isolation": "none", "status": "running", "created": now.to_rfc3339(), "started": now.to_rfc3339(),
        "finished": null, "elapsed_s": null, "session_id": null, "result": null, "error": null,
        "num_turns": null, "tool_calls": 3, "usage": {"input": 0, "cache_read": 0, "output": 0},
        "files_touched": [], "files_changed": [], "worktree": null, "last_activity": "[tool] Edit src/cli.rs",
        "log_dir": dir, "context": 32768, "metrics": null, "queued_note": null,
        "permission_mode": "acceptEdits", "max_turns": 60, "timeout_s": 1800, "allowed_tools": [],
        "disallowed_tools": [], "system_prompt_append": null, "resumed_from": null, "pid": null,
        "owner_pid": std::process::id()
    });
    std::fs::write(dir.join("job.json"), serde_json::to_vec(&rec).unwrap()).unwrap();
    std::fs::write(dir.join("task.txt"), "Add a --json flag <b>now</b>\n").unwrap();
    std::fs::write(dir.join("transcript.txt"), transcript).unwrap();
    let mut log = String::new();
    for i in 0..requests {
        log.push_str(&request_line(i));
    }
    std::fs::write(dir.join("requests.jsonl"), log).unwrap();
    id
}

/// A `requests.jsonl` line of the shim's shape.
fn request_line(i: usize) -> String {
    let mut v = json!({
        "ts": chrono::Utc::now().to_rfc3339(), "path": "/v1/messages", "upstream_status": 200,
        "status": 200, "ms": 900 + i, "ttft_ms": 300 + i * 7, "bytes_in": 40000, "bytes_out": 900,
        "model": "qwen3-coder", "messages": 2 * i + 1, "tools": 12, "stream": true, "folded_system": 0,
        "usage": {"input": 150 + i * 3, "cache_read": 4000 + i * 250, "output": 80},
        "stop_reason": "tool_use", "error": null, "translated": null
    })
    .to_string();
    v.push('\n');
    v
}

fn shots_dir() -> Option<PathBuf> {
    std::env::var_os("LOCALAGENTS_UI_SHOTS").map(PathBuf::from)
}

async fn get(ui: &Ui, url: &str, headers: &[(&str, String)]) -> (u16, String) {
    let mut r = http_client().get(url);
    for (k, v) in headers {
        r = r.header(*k, v);
    }
    let res = r.send().await.unwrap();
    let status = res.status().as_u16();
    let _ = ui;
    (status, res.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_refuses_a_request_without_its_token_or_from_a_foreign_host() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let e = Harness::with_fake(fake.url());
    let ui = Ui::start(&e).await;
    let bare = format!("http://127.0.0.1:{}/", ui.port);
    let (s, body) = get(&ui, &bare, &[]).await;
    assert_eq!(s, 403, "{body}");
    assert!(body.contains("needs the token"), "{body}");
    let (s, _) = get(
        &ui,
        &format!("{bare}?token=00000000000000000000000000000000"),
        &[],
    )
    .await;
    assert_eq!(s, 403);
    let (s, _) = get(
        &ui,
        &format!("http://127.0.0.1:{}/static/app.js", ui.port),
        &[],
    )
    .await;
    assert_eq!(s, 403, "static files need the token too");
    // DNS rebinding: the page of a foreign name that now resolves here.
    let (s, body) = get(
        &ui,
        &ui.url("/"),
        &[("host", format!("evil.example:{}", ui.port))],
    )
    .await;
    assert_eq!(s, 403, "{body}");
    assert!(body.contains("127.0.0.1"), "{body}");
    let (s, _) = get(
        &ui,
        &ui.url("/"),
        &[("origin", "http://evil.example".into())],
    )
    .await;
    assert_eq!(s, 403);
    // The right token, from the page itself.
    let res = http_client()
        .get(ui.url("/"))
        .header("origin", format!("http://127.0.0.1:{}", ui.port))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let csp = res.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    let body = res.text().await.unwrap();
    assert!(body.contains(r#"data-name="box""#), "the endpoint: {body}");
    // No inline script: the one <script> is the static file.
    assert_eq!(body.matches("<script").count(), 1, "{body}");
    assert!(
        body.contains(r#"<script src="/static/app.js?token="#),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_pages_show_a_real_job_its_requests_and_the_savings_in_a_real_browser() {
    let Some(chromium) = browser::chromium_or_skip("ui pages") else {
        return;
    };
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        slots: 4,
        ..strict_fake_opts()
    })
    .await;
    fake.set_script(script::write_then_report("notes.txt", "one\ntwo\n"));
    let e = Harness::with_fake(fake.url());
    git_init(e.work());
    let out = localagents(
        &e,
        &[
            "run",
            "--model",
            "gemma-3-270m",
            "--json",
            "Create notes.txt",
        ],
    )
    .await;
    let rec: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(rec["status"], "succeeded", "{rec}");
    let id = rec["id"].as_str().unwrap().to_string();
    let served = rec["served_id"].as_str().unwrap().to_string();
    let log = std::fs::read_to_string(e.state_dir().join("jobs").join(&id).join("requests.jsonl"))
        .unwrap();
    let requests = log
        .lines()
        .filter(|l| serde_json::from_str::<Value>(l).unwrap()["path"] == "/v1/messages")
        .count();
    assert!(requests >= 2, "{log}");
    // And one running beside it, with a long history.
    let running = running_job(
        e.state_dir(),
        40,
        "[assistant] Looking at the CLI.\n[tool] Read src/cli.rs\n",
    );

    let ui = Ui::start(&e).await;
    let shots = shots_dir();
    let dir = shots.clone().unwrap_or_else(|| e.dir().join("shots"));
    std::fs::create_dir_all(&dir).unwrap();

    // The overview: the endpoint with its 4 slots, the running job with
    // its progress, the finished one among the recent.
    let mut b = Browser::open(&chromium, &ui.url("/"));
    b.wait_for(
        "the overview",
        "document.querySelector('tr.endpoint') !== null",
        Duration::from_secs(30),
    );
    assert_eq!(
        b.eval("document.querySelectorAll('tr.endpoint[data-name=box] .slot').length"),
        json!(4)
    );
    assert_eq!(
        b.eval(&format!(
            "document.querySelector('table.active tr[data-id=\"{running}\"] .turns').textContent"
        )),
        json!("40")
    );
    assert_eq!(
        b.eval(&format!(
            "[...document.querySelectorAll('table.recent a')].some(a => a.textContent === '{id}')"
        )),
        json!(true)
    );
    drop(b);
    browser::screenshot(
        &chromium,
        &ui.url("/"),
        &dir.join("overview.png"),
        1280,
        900,
    );

    // The real job's page: one bar pair per request in requests.jsonl,
    // the brief, the timeline with the Write call, the diff.
    let mut b = Browser::open(&chromium, &ui.url(&format!("/jobs/{id}")));
    b.wait_for(
        "the job page",
        "document.querySelector('.requests svg') !== null",
        Duration::from_secs(30),
    );
    assert_eq!(
        b.eval("document.querySelectorAll('.requests svg g.group').length"),
        json!(requests)
    );
    assert_eq!(
        b.eval("document.querySelectorAll('.requests svg g.group rect.new').length"),
        json!(requests)
    );
    assert_eq!(
        b.eval("document.querySelectorAll('.requests svg g.group rect.cached').length"),
        json!(requests)
    );
    assert_eq!(
        b.eval("document.querySelector('pre.brief').textContent.trim()"),
        json!("Create notes.txt")
    );
    assert_eq!(
        b.eval("[...document.querySelectorAll('.timeline li.tool pre')].some(p => p.textContent.startsWith('Write'))"),
        json!(true)
    );
    assert_eq!(
        b.eval("[...document.querySelectorAll('pre.diff .add')].map(s => s.textContent).join('|')"),
        json!("+one|+two")
    );
    assert_eq!(
        b.eval("document.querySelector('dd.status').textContent"),
        json!("succeeded")
    );
    drop(b);
    browser::screenshot(
        &chromium,
        &ui.url(&format!("/jobs/{id}")),
        &dir.join("job.png"),
        1280,
        1400,
    );
    // The long running job's chart: 40 pairs.
    let mut b = Browser::open(&chromium, &ui.url(&format!("/jobs/{running}")));
    b.wait_for(
        "the running job",
        "document.querySelector('.requests svg') !== null",
        Duration::from_secs(30),
    );
    assert_eq!(
        b.eval("document.querySelectorAll('.requests svg g.group').length"),
        json!(40)
    );
    drop(b);
    browser::screenshot(
        &chromium,
        &ui.url(&format!("/jobs/{running}")),
        &dir.join("job-running.png"),
        1280,
        1000,
    );

    // Savings: a bar pair for each of the last 30 days, the model's row.
    let mut b = Browser::open(&chromium, &ui.url("/savings"));
    b.wait_for(
        "the savings page",
        "document.querySelector('.savings-chart svg') !== null",
        Duration::from_secs(30),
    );
    assert_eq!(
        b.eval("document.querySelectorAll('.savings-chart svg g.group').length"),
        json!(30)
    );
    assert_eq!(
        b.eval("document.querySelectorAll('.savings-chart svg g.group rect.gross').length"),
        json!(30)
    );
    let cells =
        b.eval("[...document.querySelectorAll('table.by-model td')].map(t => t.textContent)");
    assert!(
        cells
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == &json!(served)),
        "{served} in {cells}"
    );
    drop(b);
    browser::screenshot(
        &chromium,
        &ui.url("/savings"),
        &dir.join("savings.png"),
        1280,
        1000,
    );

    // Models: the served model and its eval line.
    let mut b = Browser::open(&chromium, &ui.url("/models"));
    b.wait_for(
        "the models page",
        "document.querySelector('table.models tr.model') !== null",
        Duration::from_secs(30),
    );
    assert_eq!(
        b.eval("document.querySelector('table.models tr.model td.eval').textContent.startsWith('never evaluated')"),
        json!(true)
    );
    drop(b);
    for png in ["overview.png", "job.png", "savings.png"] {
        let bytes = std::fs::read(dir.join(png)).unwrap();
        assert!(
            bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
            "{png}: {} bytes",
            bytes.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_a_transcript_with_a_script_tag_renders_as_text() {
    let Some(chromium) = browser::chromium_or_skip("ui escaping") else {
        return;
    };
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let e = Harness::with_fake(fake.url());
    let evil = "<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\">";
    let id = running_job(
        e.state_dir(),
        1,
        &format!("[assistant] {evil}\n[tool] Bash echo '{evil}'\n"),
    );
    let ui = Ui::start(&e).await;
    let mut b = Browser::open(&chromium, &ui.url(&format!("/jobs/{id}")));
    b.wait_for(
        "the job page",
        "document.querySelector('.timeline') !== null",
        Duration::from_secs(30),
    );
    assert_eq!(b.eval("typeof window.pwned"), json!("undefined"));
    assert_eq!(
        b.eval("document.querySelectorAll('script').length"),
        json!(1)
    );
    assert_eq!(
        b.eval("document.querySelectorAll('main img').length"),
        json!(0)
    );
    assert_eq!(
        b.eval("document.querySelector('.timeline li.assistant pre').textContent"),
        json!(evil)
    );
    assert_eq!(
        b.eval("document.querySelector('pre.brief').textContent.trim()"),
        json!("Add a --json flag <b>now</b>")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_a_live_jobs_turn_counter_advances_and_cancel_asks_first() {
    let Some(chromium) = browser::chromium_or_skip("ui live") else {
        return;
    };
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let e = Harness::with_fake(fake.url());
    git_init(e.work());
    // A real job whose tool calls wait for the test: turn 1 waits for
    // go1, turn 2 for go2 (which never comes: the page cancels it).
    let wait = |f: &str| {
        (
            "Bash",
            json!({"command": format!("while [ ! -e {f} ]; do sleep 0.1; done"), "description": "wait"}),
        )
    };
    fake.set_script(script::tools_then_text(
        vec![wait("go1"), wait("go2")],
        "done",
    ));
    let mut run = tokio::process::Command::from(e.cmd())
        .args(["run", "--model", "gemma-3-270m", "--json", "Wait twice"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let jobs = e.state_dir().join("jobs");
    let requests = |jobs: &Path| -> usize {
        std::fs::read_dir(jobs)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|d| std::fs::read_to_string(d.path().join("requests.jsonl")).ok())
            .map(|t| t.lines().filter(|l| l.contains("\"/v1/messages\"")).count())
            .sum()
    };
    until("the job's first turn", Duration::from_secs(120), || {
        requests(&jobs) >= 1
    })
    .await;
    let id = std::fs::read_dir(&jobs)
        .unwrap()
        .flatten()
        .map(|d| d.file_name().into_string().unwrap())
        .next()
        .unwrap();

    let ui = Ui::start(&e).await;
    let mut b = Browser::open(&chromium, &ui.url(&format!("/jobs/{id}")));
    b.wait_for(
        "the job page",
        "document.getElementById('turns') !== null",
        Duration::from_secs(30),
    );
    assert_eq!(
        b.eval("document.getElementById('turns').textContent"),
        json!("1")
    );
    // A mark that a reload would wipe.
    b.eval("window.notReloaded = true");
    std::fs::write(e.work().join("go1"), "").unwrap();
    b.wait_for(
        "turn 2 on the page without a reload",
        "document.getElementById('turns').textContent === '2'",
        Duration::from_secs(120),
    );
    assert_eq!(b.eval("window.notReloaded === true"), json!(true));
    assert_eq!(
        b.eval("document.querySelector('dd.status').textContent"),
        json!("running")
    );

    // Cancel: the button leads to a confirmation, and only its form's POST
    // cancels.
    let href = b.eval("document.querySelector('a.button.danger').getAttribute('href')");
    let href = href.as_str().unwrap().to_string();
    let (s, body) = get(&ui, &format!("http://127.0.0.1:{}{href}", ui.port), &[]).await;
    assert_eq!(s, 200, "{body}");
    assert!(
        body.contains("Cancel job") && body.contains(r#"<form method="post""#),
        "{body}"
    );
    let rec: Value =
        serde_json::from_slice(&std::fs::read(jobs.join(&id).join("job.json")).unwrap()).unwrap();
    assert_eq!(rec["status"], "running", "a GET cancels nothing");
    // Submit the form in the browser itself (its Origin and all).
    b.eval(&format!(
        "window.location.href = 'http://127.0.0.1:{}{href}'",
        ui.port
    ));
    b.wait_for(
        "the confirmation",
        "document.querySelector('form button.danger') !== null",
        Duration::from_secs(30),
    );
    b.eval("document.querySelector('form button.danger').click()");
    b.wait_for(
        "the job cancelled",
        "document.querySelector('dd.status') !== null && document.querySelector('dd.status').textContent === 'cancelled'",
        Duration::from_secs(60),
    );
    let out = tokio::time::timeout(Duration::from_secs(60), run.wait())
        .await
        .expect("run ends after the cancel")
        .unwrap();
    let _ = out;
    let rec: Value =
        serde_json::from_slice(&std::fs::read(jobs.join(&id).join("job.json")).unwrap()).unwrap();
    assert_eq!(rec["status"], "cancelled", "{rec}");
}

/// A page test without Chromium, outside CI, does not pass silently: it
/// writes its skip to the file `scripts/test.sh` counts after the run. This
/// runs one page test in a child of this test binary with a `PATH` that
/// holds no Chromium.
#[test]
fn a_page_test_without_chromium_records_its_skip_for_the_runner() {
    let tmp = tempfile::tempdir().unwrap();
    let skips = tmp.path().join("skips");
    let name = "ui::ui_a_transcript_with_a_script_tag_renders_as_text";
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture"])
        .env("PATH", tmp.path())
        .env_remove("LOCALAGENTS_CHROMIUM")
        .env_remove("CI")
        .env(browser::SKIPS_VAR, &skips)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("1 passed"),
        "the child ran the test: {stdout}"
    );
    let recorded = std::fs::read_to_string(&skips).unwrap_or_default();
    assert_eq!(
        recorded, "ui escaping: no chromium on PATH (apt-get install chromium)\n",
        "{stdout}"
    );
}
