//! Issue 55, a year of use: retention by default (old ended jobs go, work
//! not merged and live jobs stay, and `status` says so), savings that
//! outlive their records, and the jobs index surviving its deletion, its
//! corruption and a SIGKILL in the middle of its write.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::fake_llama;
use crate::support::git;
use crate::support::harness::{Harness, call, localagents, localagents_json, serve};

/// An id made `days_ago` days ago, numbered `n`.
fn old_id(days_ago: i64, n: u32) -> String {
    let t = chrono::Utc::now() - chrono::Duration::days(days_ago);
    format!("{}-{n:08x}", t.format("%Y%m%d-%H%M%S"))
}

/// A record of job `id` written by hand: `status`, some tokens, `extra`
/// fields over the rest.
fn record(state: &Path, id: &str, status: &str, extra: Value) {
    let created = chrono::NaiveDateTime::parse_from_str(&id[..15], "%Y%m%d-%H%M%S")
        .unwrap()
        .and_utc()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string();
    let mut fields = json!({
        "status": status, "created": created, "started": created,
        "finished": if status == "running" || status == "queued" { Value::Null } else { json!(created) },
        "usage": {"input": 1000, "cache_read": 20000, "output": 300},
        "owner_pid": std::process::id()
    });
    for (k, v) in extra.as_object().unwrap() {
        fields[k] = v.clone();
    }
    crate::support::write_job_record_with(state, id, fields);
}

/// A worktree of `repo` on job `id`'s branch, as a kept job leaves it.
fn worktree(state: &Path, repo: &Path, id: &str) -> (PathBuf, Value) {
    let path = state.join("worktrees").join(id);
    let branch = format!("local-agent/{id}");
    let base = String::from_utf8(
        std::process::Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(repo)
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    git::git(
        repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            &branch,
            path.to_str().unwrap(),
        ],
    );
    let info = json!({"path": path, "branch": branch, "base": base, "repo": repo,
        "kept": true, "diffstat": null, "files": [], "note": null});
    (path, info)
}

/// The totals `savings --json --since all` prints.
fn totals(v: &Value) -> Value {
    json!({"jobs": v["jobs"], "tokens": v["tokens"], "equivalent_usd": v["equivalent_usd"],
        "by_model": v["by_model"], "by_week": v["by_week"]})
}

fn ids(v: &Value) -> Vec<String> {
    v["jobs"]
        .as_array()
        .unwrap_or_else(|| panic!("{v:#}"))
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect()
}

/// Retention in `serve`'s background with the default `keep_days` (30):
/// the old ended jobs go; an old one with commits not merged and one with
/// files not committed stay, and say why; old running and queued jobs stay
/// whatever their age; `status` says what it did; `savings` gives the same
/// totals before and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_removes_old_ended_jobs_and_keeps_work_not_merged_live_jobs_and_the_savings() {
    let e = Harness::with_fake("http://127.0.0.1:9");
    let state = e.state_dir().to_path_buf();
    let repo = e.work().join("repo");
    git::repo(&repo);
    let (plain, failed) = (old_id(40, 1), old_id(41, 2));
    let (unmerged, dirty) = (old_id(42, 3), old_id(43, 4));
    let (running, queued, young) = (old_id(50, 5), old_id(51, 6), old_id(1, 7));
    record(&state, &plain, "succeeded", json!({}));
    record(&state, &failed, "failed", json!({}));
    let (wt, info) = worktree(&state, &repo, &unmerged);
    std::fs::write(wt.join("work.txt"), "the job's work\n").unwrap();
    git::git(&wt, &["add", "-A"]);
    git::git(&wt, &["commit", "-qm", "job work"]);
    record(
        &state,
        &unmerged,
        "succeeded",
        json!({"worktree": info, "isolation": "worktree"}),
    );
    let (wt2, info2) = worktree(&state, &repo, &dirty);
    std::fs::write(wt2.join("draft.txt"), "not committed\n").unwrap();
    record(
        &state,
        &dirty,
        "succeeded",
        json!({"worktree": info2, "isolation": "worktree"}),
    );
    record(&state, &running, "running", json!({}));
    record(&state, &queued, "queued", json!({}));
    record(&state, &young, "succeeded", json!({}));

    let before = localagents_json(&e, &["savings", "--since", "all", "--json"]).await;
    assert_eq!(before["jobs"], 7, "{before:#}");
    let c = serve(&e, Some(Path::new("/bin/true"))).await;
    let report = state.join("retention.json");
    crate::support::until("retention's first run", Duration::from_secs(90), || {
        report.exists()
    })
    .await;
    let jobs = state.join("jobs");
    for gone in [&plain, &failed] {
        assert!(!jobs.join(gone).exists(), "{gone} is still there");
    }
    for kept in [&unmerged, &dirty, &running, &queued, &young] {
        assert!(
            jobs.join(kept).join("job.json").is_file(),
            "{kept} was removed"
        );
    }
    assert!(wt.join("work.txt").is_file() && wt2.join("draft.txt").is_file());

    let st = localagents_json(&e, &["status", "--json"]).await;
    let r = &st["retention"];
    assert_eq!(r["keep_days"], 30, "{r:#}");
    assert_eq!(r["removed"], 2, "{r:#}");
    assert_eq!(r["kept_total"], 2, "{r:#}");
    let why = |id: &str| {
        r["kept"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["job_id"] == id)
            .unwrap_or_else(|| panic!("{id} not said kept: {r:#}"))["reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(why(&unmerged).contains("not merged"), "{r:#}");
    assert!(why(&dirty).contains("uncommitted"), "{r:#}");
    let line = st["retention_line"].as_str().unwrap();
    assert!(
        line.contains("removed 2 jobs")
            && line.contains("kept 2")
            && line.contains("state dir holds"),
        "{line}"
    );
    let text = String::from_utf8_lossy(&localagents(&e, &["status"]).await.stdout).into_owned();
    assert!(text.contains("retention (jobs kept 30 days)"), "{text}");

    let after = localagents_json(&e, &["savings", "--since", "all", "--json"]).await;
    assert_eq!(
        totals(&after),
        totals(&before),
        "the savings changed with retention"
    );
    let listed = ids(&localagents_json(&e, &["jobs", "--json"]).await);
    assert!(
        !listed.contains(&plain) && listed.contains(&young),
        "{listed:?}"
    );
    c.cancel().await.unwrap();
}

/// `localagents run` removes old ended jobs in its background too, and
/// its job is the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_runs_in_the_background_of_run() {
    let fake = fake_llama::spawn(crate::jobs::strict_fake_opts()).await;
    let e = Harness::with_fake(fake.url());
    let old = old_id(40, 1);
    record(e.state_dir(), &old, "succeeded", json!({}));
    let v = localagents_json(&e, &["run", "--model", "gemma3-270m", "--json", "Say ok."]).await;
    assert_eq!(v["status"], "succeeded", "{v:#}");
    assert!(!e.state_dir().join("jobs").join(&old).exists());
    let r: Value =
        serde_json::from_slice(&std::fs::read(e.state_dir().join("retention.json")).unwrap())
            .unwrap();
    assert_eq!(r["removed"], 1, "{r:#}");
    let s = localagents_json(&e, &["savings", "--since", "all", "--json"]).await;
    assert_eq!(s["jobs"], 2, "the removed job still counts: {s:#}");
}

/// The index is never the only copy: deleted, corrupted, or cut by a
/// SIGKILL in the middle of its write, `jobs`, `status` and `list_jobs`
/// answer as the records say, and it is rebuilt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_survives_deletion_corruption_and_a_sigkill_in_its_write() {
    let fake = fake_llama::spawn(crate::jobs::strict_fake_opts()).await;
    let e = Harness::with_fake(fake.url());
    let state = e.state_dir().to_path_buf();
    let older = old_id(3, 1);
    record(&state, &older, "succeeded", json!({}));
    // The index is current before the job starts.
    assert_eq!(
        ids(&localagents_json(&e, &["jobs", "--json"]).await),
        [older.as_str()]
    );
    assert!(state.join("index/stamp").is_file());

    // A job whose process is killed in the middle of its line's write.
    let mut child = tokio::process::Command::from(
        e.clone()
            .env("LOCALAGENTS_TEST_CUT_INDEX_WRITE", "1")
            .command(["run", "--model", "gemma3-270m", "--json", "Say ok."]),
    )
    .current_dir(e.work())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .kill_on_drop(true)
    .spawn()
    .unwrap();
    let days = state.join("index/days");
    let cut = |d: &Path| -> Option<PathBuf> {
        std::fs::read_dir(d)
            .ok()?
            .flatten()
            .map(|f| f.path())
            .find(|p| std::fs::read(p).is_ok_and(|b| !b.is_empty() && !b.ends_with(b"\n")))
    };
    crate::support::until("a line cut in the middle", Duration::from_secs(120), || {
        cut(&days).is_some()
    })
    .await;
    let day_file = cut(&days).unwrap();
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let id = std::fs::read_dir(state.join("index/active"))
        .unwrap()
        .flatten()
        .map(|f| f.file_name().into_string().unwrap())
        .next()
        .expect("the killed job keeps its active file");
    let on_disk: Value = serde_json::from_slice(
        &std::fs::read(state.join("jobs").join(&id).join("job.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        on_disk["status"], "succeeded",
        "the record was written first"
    );

    let check = |v: &Value, what: &str| {
        let jobs = v["jobs"]
            .as_array()
            .unwrap_or_else(|| panic!("{what}: {v:#}"));
        let got: Vec<(&str, &str)> = jobs
            .iter()
            .map(|j| (j["id"].as_str().unwrap(), j["status"].as_str().unwrap()))
            .collect();
        assert_eq!(
            got,
            [(id.as_str(), "succeeded"), (older.as_str(), "succeeded")],
            "{what}"
        );
    };
    check(
        &localagents_json(&e, &["jobs", "--json"]).await,
        "after the SIGKILL",
    );
    assert!(
        !state.join("index/active").join(&id).exists(),
        "the reader repaired the line and ended the active file"
    );
    let running = localagents_json(&e, &["jobs", "--status", "running", "--json"]).await;
    assert_eq!(running["jobs"], json!([]), "{running:#}");
    // The cut line is now a whole line that does not read: the next read
    // rebuilds, and every line of the day reads.
    check(
        &localagents_json(&e, &["jobs", "--json"]).await,
        "with the cut line",
    );
    let text = std::fs::read_to_string(&day_file).unwrap();
    assert!(
        text.lines()
            .all(|l| serde_json::from_str::<Value>(l).is_ok()),
        "{text}"
    );

    // Deleted.
    std::fs::remove_dir_all(state.join("index")).unwrap();
    check(
        &localagents_json(&e, &["jobs", "--json"]).await,
        "after deletion",
    );
    assert!(state.join("index/stamp").is_file(), "rebuilt");
    let st = localagents_json(&e, &["status", "--json"]).await;
    assert!(st["savings"].as_str().unwrap().contains("2 jobs"), "{st:#}");

    // Corrupted.
    let day_file = state.join("index/days").join(format!("{}.jsonl", &id[..8]));
    let mut bytes = std::fs::read(&day_file).unwrap();
    bytes.extend_from_slice(b"{\"id\": garbage\n\x00\x01\n");
    std::fs::write(&day_file, bytes).unwrap();
    let c = serve(&e, Some(Path::new("/bin/true"))).await;
    let (err, v) = call(&c, "list_jobs", json!({})).await;
    assert!(!err, "{v}");
    check(&v, "list_jobs after corruption");
    let text = std::fs::read_to_string(&day_file).unwrap();
    assert!(!text.contains("garbage"), "rebuilt: {text}");
    c.cancel().await.unwrap();
}

/// A job of 200 model turns (the real CLI, the fake llama-server), its
/// bodies dumped: the dump keeps each body once (under the largest body
/// plus 4 KB a request, where it held every body whole before), every body
/// reads back as the server got it, and `job log` shows every request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_200_requests_keeps_its_request_log_bounded_and_job_log_shows_every_request() {
    use crate::support::script;
    const TURNS: usize = 200;
    let fake = fake_llama::spawn(crate::jobs::strict_fake_opts()).await;
    fake.set_script(std::sync::Arc::new(|req| {
        let n = script::tool_results(req);
        if n < TURNS - 1 {
            script::Reply::Tool {
                name: "Bash".into(),
                input: json!({"command": format!("echo step {n}")}),
            }
        } else {
            script::Reply::Text("done".into())
        }
    }));
    let e = Harness::new().config(&format!(
        "endpoints:\n  box:\n    base_url: {}\n    backend: llama.cpp\ndefaults:\n  max_turns: 400\n  timeout_s: 900\n  dump_requests: true\n  prewarm: false\n",
        fake.url()
    ));
    git::repo(e.work());
    let v = localagents_json(
        &e,
        &["run", "--model", "gemma3-270m", "--json", "Run the steps."],
    )
    .await;
    assert_eq!(v["status"], "succeeded", "{v:#}");
    let dir = PathBuf::from(v["log_dir"].as_str().unwrap());
    let dump = std::fs::read(dir.join("requests_full.jsonl")).unwrap();
    let bodies = localagents::shim::log::dump_bodies(&dump);
    let sent: Vec<Value> = fake.bodies();
    let messages: Vec<&localagents::shim::log::DumpedBody> =
        bodies.iter().filter(|b| b.path == "/v1/messages").collect();
    assert_eq!(messages.len(), TURNS, "every request is in the dump");
    // The dump is the folded body before the last changes on its way out
    // (llama.cpp gets no `cache_control`, no `is_error: false`): each body
    // read back has the turns the server got, in their order.
    let turns = |v: &Value| -> Vec<String> {
        v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| format!("{} {}", m["role"], m["content"].to_string().len().min(1)))
            .collect()
    };
    for (b, s) in messages.iter().zip(&sent) {
        let b: Value = serde_json::from_slice(&b.body).unwrap();
        assert_eq!(turns(&b), turns(s), "a body read back has the turns sent");
        let last = |v: &Value| {
            v["messages"]
                .as_array()
                .unwrap()
                .last()
                .unwrap()
                .to_string()
        };
        let step = last(s).split("step ").nth(1).map(|t| {
            t.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        });
        if let Some(n) = step {
            assert!(last(&b).contains(&format!("step {n}")), "{}", last(&b));
        }
    }
    let largest = bodies.iter().map(|b| b.body.len()).max().unwrap();
    let whole: usize = bodies.iter().map(|b| b.body.len()).sum();
    let bound = largest + 4096 * bodies.len();
    assert!(
        dump.len() < bound,
        "the dump holds {} bytes, over its bound of {bound} (the bodies whole: {whole})",
        dump.len()
    );
    // job_log pages through every request.
    let c = serve(&e, Some(Path::new("/bin/true"))).await;
    let (mut offset, mut shown) = (0u64, 0usize);
    let mut total = Vec::new();
    loop {
        let (err, page) = call(
            &c,
            "job_log",
            json!({"job_id": v["id"], "stream": "requests", "offset": offset, "tail_lines": 50}),
        )
        .await;
        assert!(!err, "{page}");
        total.push(page["total_lines"].clone());
        shown += page["text"]
            .as_str()
            .unwrap()
            .lines()
            .filter(|l| l.contains("\"path\":\"/v1/messages\""))
            .count();
        match page["next_offset"].as_u64() {
            Some(n) => offset = n,
            None => break,
        }
    }
    assert_eq!(
        shown, TURNS,
        "job_log shows every request (pages of {total:?} lines)"
    );
    c.cancel().await.unwrap();
}
