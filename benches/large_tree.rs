//! A 60,000-file repository (issue 34): whether `serve` stays live while
//! jobs check out, snapshot and finish on it, and what our git costs
//! against the git CLI doing the same.
//!
//! 1. MCP `ping` every 25 ms while three worktree jobs start on the tree,
//!    and while three in-tree jobs finish on it (each walks the tree before
//!    and after): p50, p99 and max, and the time to the first `run_agent`
//!    answer. Run for the binary before the fix too when
//!    `LOCALAGENTS_BEFORE_BIN` names it (a build of 90d7879; the same run,
//!    so the ratio is fair), else that column says it was not measured.
//! 2. Our git against the git CLI on the same tree, medians of 5 after a
//!    warm-up run: a job's
//!    checkout against `git worktree add`, its snapshot against
//!    `git status --porcelain`, `files_changed` against the same, and
//!    `job_diff`'s page against `git diff HEAD --stat` and `git diff HEAD`
//!    (10 files changed, and 5,000 files rewritten).
//!
//! Run: `LOCALAGENTS_BEFORE_BIN=… cargo bench --bench large_tree`
//! (`LOCALAGENTS_BENCH_GIT_ONLY=1`: part 2 alone)
//! (`-- --markdown`: the docs/benchmarks.md table). Needs the pinned Claude
//! Code CLI (scripts/install-claude.sh, or LOCALAGENTS_CLAUDE) and git.

use localagents_testkit as support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::ClientRequest;
use serde_json::{Value, json};

use support::harness::{Harness, Served};
use support::stats::pct;

const FILES: usize = 60_000;

fn check_args() -> bool {
    let mut markdown = false;
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "--bench" => {}
            "--markdown" => markdown = true,
            _ => {
                eprintln!(
                    "large_tree bench: unexpected argument {a:?}; usage: cargo bench --bench large_tree [-- --markdown]"
                );
                std::process::exit(2);
            }
        }
    }
    markdown
}

fn main() {
    let markdown = check_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async_main(markdown));
}

/// Ping latencies (ms) while a scenario ran, the time to the first
/// run_agent answer (ms), and the calls that answered with an error.
struct Live {
    pings: Vec<f64>,
    first_answer_ms: f64,
    errors: Vec<String>,
}

impl Live {
    fn cells(&mut self) -> String {
        let n = self.pings.len();
        format!(
            "{:.1} | {:.1} | {:.0} | {:.0} | {n} | {}",
            pct(&mut self.pings, 0.5),
            pct(&mut self.pings, 0.99),
            pct(&mut self.pings, 1.0),
            self.first_answer_ms,
            self.errors.len()
        )
    }
}

fn config(url: &str) -> String {
    format!(
        "endpoints:\n  box:\n    base_url: {url}\n    backend: llama.cpp\nmodels:\n  gemma-3-270m:\n    notes: tiny test model\ndefaults:\n  max_turns: 6\n  setting_sources: []\n  prewarm: false\n  queue: false\n"
    )
}

async fn call(s: &Served, tool: &'static str, args: Value) -> Value {
    let (err, text) = s.call(tool, args).await;
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    assert!(!err, "{tool}: {v}");
    v
}

async fn wait_all(s: &Served, ids: &[String]) {
    for id in ids {
        loop {
            let v = call(s, "wait_job", json!({"job_id": id, "timeout_s": 100})).await;
            if v["still_running"] == false {
                if v["status"] != "succeeded" {
                    eprintln!(
                        "large_tree bench: job {id} ended {}: {}",
                        v["status"], v["error"]
                    );
                }
                break;
            }
        }
    }
}

/// Ping every 25 ms until `stop`; the round trips in ms.
async fn pinger(s: &Served, stop: Arc<AtomicBool>) -> Vec<f64> {
    let mut out = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let t = Instant::now();
        s.client
            .peer()
            .send_request(ClientRequest::PingRequest(Default::default()))
            .await
            .expect("ping");
        out.push(t.elapsed().as_secs_f64() * 1000.0);
        // harness-rules: a pace, not a wait (the bench pings every 25 ms)
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    out
}

/// Three jobs started at once on `tree` through `serve` of `bin`, pinged
/// throughout, until all three end.
async fn scenario(bin: &Path, url: &str, tree: &Path, worktree: bool) -> Live {
    let h = Harness::new().config(&config(url)).bin(bin).cwd(tree);
    let s = h.serve().await;
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let start = |n: usize| {
        let args = if worktree {
            json!({"task": format!("Look around ({n})."), "model": "gemma-3-270m", "isolation": "worktree"})
        } else {
            json!({"task": format!("Write note{n}.txt."), "model": "gemma-3-270m"})
        };
        let s = &s;
        async move {
            let (err, text) = s.call("run_agent", args).await;
            let v: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
            let id = (!err).then(|| v["id"].as_str().unwrap().to_string());
            (t0.elapsed(), id.ok_or_else(|| v.to_string()))
        }
    };
    let jobs = async {
        let (a, b, c) = tokio::join!(start(1), start(2), start(3));
        let first = a.0.min(b.0).min(c.0);
        let (mut ids, mut errors) = (Vec::new(), Vec::new());
        for r in [a.1, b.1, c.1] {
            match r {
                Ok(id) => ids.push(id),
                Err(e) => errors.push(e),
            }
        }
        wait_all(&s, &ids).await;
        stop.store(true, Ordering::SeqCst);
        (first, errors)
    };
    let ((first, errors), pings) = tokio::join!(jobs, pinger(&s, stop.clone()));
    s.cancel().await;
    for e in &errors {
        eprintln!("large_tree bench: a run_agent call failed: {e}");
    }
    Live {
        pings,
        first_answer_ms: first.as_secs_f64() * 1000.0,
        errors,
    }
}

fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    out
}

/// Median seconds of 5 runs of `f` (each after `setup`), after one run
/// that warms the page cache (and lets either side refresh the index).
async fn median5<F, Fut>(setup: impl FnMut(), f: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    median_of(5, true, setup, f).await
}

/// Median seconds of `runs` runs of `f` (each after `setup`), after a
/// warm-up run when `warm`.
async fn median_of<F, Fut>(runs: usize, warm: bool, mut setup: impl FnMut(), mut f: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    if warm {
        setup();
        f().await;
    }
    let mut v = Vec::new();
    for _ in 0..runs {
        setup();
        let t = Instant::now();
        f().await;
        v.push(t.elapsed().as_secs_f64());
    }
    pct(&mut v, 0.5)
}

fn rewrite(tree: &Path, n: usize) {
    for i in 0..n {
        let p = tree.join(format!("pkg{:03}/mod{:05}.py", i % 200, i / 200));
        std::fs::write(&p, format!("# rewritten {i}\nVALUE = {i}\n")).unwrap();
    }
}

async fn async_main(markdown: bool) {
    let repo = tokio::task::spawn_blocking(|| support::git::large_repo(FILES))
        .await
        .unwrap();
    let fake = support::fake_llama::spawn(support::fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: 131072,
        slots: 4,
        ..Default::default()
    })
    .await;
    let tmp = Harness::new();
    // A checked-out copy for in-tree jobs and the git comparisons.
    let tree = tmp.dir().join("tree");
    let r = repo.clone();
    let t = tree.clone();
    tokio::task::spawn_blocking(move || {
        let ok = Command::new("git")
            .args(["clone", "-q", "--local"])
            .arg(&r)
            .arg(&t)
            .status()
            .unwrap()
            .success();
        assert!(ok);
    })
    .await
    .unwrap();

    // 1. Live under load, before and after.
    let before = std::env::var_os("LOCALAGENTS_BEFORE_BIN").map(PathBuf::from);
    let mut rows: Vec<(String, String, String)> = Vec::new();
    // LOCALAGENTS_BENCH_GIT_ONLY=1: only part 2.
    let live = std::env::var("LOCALAGENTS_BENCH_GIT_ONLY").as_deref() != Ok("1");
    for (what, worktree) in [
        ("three worktree jobs start", true),
        ("three in-tree jobs finish", false),
    ]
    .into_iter()
    .filter(|_| live)
    {
        let mut cells = Vec::new();
        for bin in [before.clone(), Some(support::bin())] {
            let Some(bin) = bin else {
                cells.push("not measured (LOCALAGENTS_BEFORE_BIN unset)".to_string());
                continue;
            };
            if worktree {
                fake.set_script(support::script::text("Looked around."));
            } else {
                fake.set_script(support::script::write_then_report("note.txt", "a note\n"));
            }
            // Each run on its own copy of the history (worktree jobs) or
            // the checked-out tree (in-tree jobs).
            let cwd = if worktree {
                let copy = tmp
                    .dir()
                    .join(format!("copy-{}", rows.len() * 2 + cells.len()));
                let (r, c) = (repo.clone(), copy.clone());
                tokio::task::spawn_blocking(move || support::git::clone_no_checkout(&r, &c))
                    .await
                    .unwrap();
                copy
            } else {
                tree.clone()
            };
            let mut live = scenario(&bin, fake.url(), &cwd, worktree).await;
            cells.push(live.cells());
        }
        rows.push((what.to_string(), cells[0].clone(), cells[1].clone()));
    }

    // 2. Our git against the git CLI on the same tree.
    let wts = tmp.dir().join("wts");
    let mut n = 0;
    // A checkout of 60,000 files takes long: 3 runs, no warm-up.
    let ours_checkout = median_of(
        3,
        false,
        || {},
        || {
            n += 1;
            let (tree, wts, job) = (tree.clone(), wts.clone(), format!("ours{n}"));
            async move {
                let c = localagents::worktree::plan(&tree, &job, &wts)
                    .await
                    .unwrap();
                localagents::worktree::check_out(&c, Arc::new(AtomicBool::new(false)))
                    .await
                    .unwrap();
                localagents::worktree::remove(&c.info, &job).await.unwrap();
            }
        },
    )
    .await;
    let mut m = 0;
    let git_checkout = median_of(
        3,
        false,
        || {},
        || {
            m += 1;
            let (tree, path) = (tree.clone(), wts.join(format!("git{m}")));
            async move {
                let p = path.display().to_string();
                git(
                    &tree,
                    &["worktree", "add", "-q", "-b", &format!("g{m}"), &p],
                );
                git(&tree, &["worktree", "remove", "--force", &p]);
                git(&tree, &["branch", "-q", "-D", &format!("g{m}")]);
            }
        },
    )
    .await;
    // (Each includes its removal: the same work on both sides.)

    rewrite(&tree, 10);
    let ours_snapshot = median5(
        || {},
        || {
            let t = tree.clone();
            async move {
                localagents::worktree::snapshot(&t).await.unwrap();
            }
        },
    )
    .await;
    let git_status = median5(
        || {},
        || {
            let t = tree.clone();
            async move {
                git(&t, &["status", "--porcelain"]);
            }
        },
    )
    .await;
    // files_changed: a snapshot after and the comparison with the one
    // before.
    let before_snap = localagents::worktree::snapshot(&tree).await.unwrap();
    let ours_changed = median5(
        || {},
        || {
            let (t, b) = (tree.clone(), before_snap.clone());
            async move {
                let after = localagents::worktree::snapshot(&t).await.unwrap();
                let _ = localagents::worktree::changed(&b, &after);
            }
        },
    )
    .await;
    let diff_rows = {
        let mut out = Vec::new();
        for files in [10usize, 5_000] {
            rewrite(&tree, files);
            let paths: Vec<String> = (0..files)
                .map(|i| format!("pkg{:03}/mod{:05}.py", i % 200, i / 200))
                .collect();
            let page_of = |paths: Vec<String>| {
                let of = localagents::worktree::DiffOf::Paths {
                    cwd: tree.clone(),
                    paths,
                };
                async move {
                    localagents::worktree::patch_page(of, 0, 100_000)
                        .await
                        .unwrap()
                        .text
                        .len()
                }
            };
            let ours = median5(
                || {},
                || {
                    let f = page_of(paths.clone());
                    async move {
                        f.await;
                    }
                },
            )
            .await;
            let bytes = page_of(paths.clone()).await;
            let stat = median5(
                || {},
                || {
                    let t = tree.clone();
                    async move {
                        git(&t, &["diff", "HEAD", "--stat"]);
                    }
                },
            )
            .await;
            let full = median5(
                || {},
                || {
                    let t = tree.clone();
                    async move {
                        git(&t, &["diff", "HEAD"]);
                    }
                },
            )
            .await;
            let git_bytes = git(&tree, &["diff", "HEAD"]).stdout.len();
            out.push((files, ours, bytes, stat, full, git_bytes));
        }
        out
    };

    // A worktree job's end: a fresh worktree (ours), 5,000 files rewritten
    // in it; the snapshot after, and the first page of its diff.
    let c = localagents::worktree::plan(&tree, "kept", &wts)
        .await
        .unwrap();
    localagents::worktree::check_out(&c, Arc::new(AtomicBool::new(false)))
        .await
        .unwrap();
    let wt = c.info.path.clone();
    rewrite(&wt, 5_000);
    let wt_snapshot = median5(
        || {},
        || {
            let t = wt.clone();
            async move {
                localagents::worktree::snapshot(&t).await.unwrap();
            }
        },
    )
    .await;
    let wt_status = median5(
        || {},
        || {
            let t = wt.clone();
            async move {
                git(&t, &["status", "--porcelain"]);
            }
        },
    )
    .await;
    let wt_diff = median5(
        || {},
        || {
            let info = c.info.clone();
            async move {
                let of = localagents::worktree::DiffOf::Worktree(info);
                localagents::worktree::patch_page(of, 0, 100_000)
                    .await
                    .unwrap();
            }
        },
    )
    .await;
    let wt_stat = median5(
        || {},
        || {
            let t = wt.clone();
            async move {
                git(&t, &["diff", "HEAD", "--stat"]);
            }
        },
    )
    .await;
    localagents::worktree::remove(&c.info, "kept")
        .await
        .unwrap();

    let v = Command::new("git").arg("--version").output().unwrap();
    let git_version = String::from_utf8_lossy(&v.stdout).trim().to_string();
    if !markdown {
        println!(
            "large_tree bench: {FILES} files, {git_version}, 2 runtime workers; before = {}",
            before
                .as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "not measured".into())
        );
    }
    println!(
        "MCP `ping` every 25 ms through `serve` on a {}-file repository (ms; first answer: the first `run_agent` reply):\n",
        localagents::fmt::thousands(FILES as u64)
    );
    println!(
        "| while | before: p50 \\| p99 \\| max \\| first answer \\| pings \\| failed calls | after: p50 \\| p99 \\| max \\| first answer \\| pings \\| failed calls |"
    );
    println!("|---|---|---|");
    for (what, b, a) in &rows {
        println!(
            "| {what} | {} | {} |",
            b.replace('|', "\\|"),
            a.replace('|', "\\|")
        );
    }
    println!(
        "\nOur git against the git CLI on the same tree (median of 5 after a warm-up run; the checkout: median of 3; s):\n"
    );
    println!("| what | ours | git CLI | ratio |");
    println!("|---|---|---|---|");
    let row = |what: &str, ours: f64, theirs: f64, git: &str| {
        println!(
            "| {what} | {ours:.3} | {theirs:.3} (`{git}`) | {:.2}× |",
            ours / theirs
        );
    };
    row(
        "a job's worktree: check out and remove",
        ours_checkout,
        git_checkout,
        "git worktree add` + `git worktree remove",
    );
    row(
        "snapshot (10 files changed)",
        ours_snapshot,
        git_status,
        "git status --porcelain",
    );
    row(
        "files_changed (snapshot after + compare)",
        ours_changed,
        git_status,
        "git status --porcelain",
    );
    for (files, ours, bytes, stat, full, git_bytes) in diff_rows {
        row(
            &format!("job_diff page, {files} files rewritten ({bytes} bytes)"),
            ours,
            stat,
            "git diff HEAD --stat",
        );
        row(
            &format!(
                "job_diff page, {files} files rewritten, against the whole patch ({git_bytes} bytes)"
            ),
            ours,
            full,
            "git diff HEAD",
        );
    }
    row(
        "a worktree job's snapshot after, 5000 files rewritten",
        wt_snapshot,
        wt_status,
        "git status --porcelain",
    );
    row(
        "job_diff page of that worktree (100000 bytes)",
        wt_diff,
        wt_stat,
        "git diff HEAD --stat",
    );
}
