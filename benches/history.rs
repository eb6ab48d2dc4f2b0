//! A year of use (issue 55): what a user runs every turn, at 10, 1,000,
//! 10,000 and 100,000 jobs in the history, before and after the jobs
//! index, in one run; and the disk a short and a long job keep.
//!
//! The history: one finished job (a real one: the pinned Claude Code CLI
//! on the fake llama-server, one turn) copied N times into a fresh state
//! dir, its id, times and log dir rewritten, ids spread over 90 days (at
//! 100,000, `job.json` only, as issue 55 measured). Each command is the
//! binary started and waited for, the median of 3 runs; the after build's
//! first command after the copy (the index built from the records) is its
//! own column. `serve → list_jobs` is `localagents serve` started, MCP
//! initialised and `list_jobs` answered. Retention is off in these runs
//! (`keep_days: 0`): the history stays the same for both builds.
//!
//! The long job is issue 45's reader on a 16k window (the real CLI, the
//! fake llama-server), run by each build.
//!
//! Run: `LOCALAGENTS_BEFORE_BIN=<a build of 88f9da7> cargo bench --bench
//! history` (without it the before column says it was not measured;
//! `LOCALAGENTS_HISTORY_PART=table` or `disk` runs one part).
//! Needs the pinned Claude Code CLI (scripts/install-claude.sh, or
//! LOCALAGENTS_CLAUDE).

use localagents_testkit as support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::fake_llama::{self, FakeLlama, LlamaOpts};
use support::harness::Harness;

const SIZES: &[usize] = &[10, 1_000, 10_000, 100_000];
const RUNS: usize = 3;
const SPREAD_DAYS: i64 = 90;
/// At and above this many jobs only `job.json` is copied.
const RECORD_ONLY: usize = 100_000;

const COLUMNS: &[&str] = &[
    "jobs",
    "jobs --status running",
    "savings",
    "status",
    "hook prompt-submit",
    "hook session-start",
    "serve → list_jobs",
];

fn main() {
    support::bench::mode("history", false);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(run());
}

fn config(extra: &str) -> String {
    format!(
        "endpoints:\n  box:\n    base_url: http://127.0.0.1:9\n    backend: llama.cpp\ndefaults:\n  keep_days: 0\n{extra}"
    )
}

async fn run() {
    let before = std::env::var_os("LOCALAGENTS_BEFORE_BIN").map(PathBuf::from);
    let after = support::bin();
    let fake = fake_llama::spawn(LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: 32_768,
        slots: 1,
        ..Default::default()
    })
    .await;
    let (template, short_after) = short_job(&after, &fake).await;
    let part = std::env::var("LOCALAGENTS_HISTORY_PART").unwrap_or_default();
    if part != "disk" {
        table(&before, &after, &template).await;
    }
    if part != "table" {
        let short_before = match &before {
            Some(b) => Some(short_job(b, &fake).await.1),
            None => None,
        };
        disk(&before, &after, short_before, short_after).await;
    }
}

async fn table(before: &Option<PathBuf>, after: &Path, template: &Template) {
    println!("### A year of use (`cargo bench --bench history`)\n");
    println!(
        "Milliseconds, median of {RUNS} runs, each command started and waited for; ids over {SPREAD_DAYS} days.\n"
    );
    let mut head = vec!["jobs in history", "build", "first command"];
    head.extend(COLUMNS);
    head.push("disk");
    println!("| {} |", head.join(" | "));
    println!("|{}", "---|".repeat(head.len()));
    for &n in SIZES {
        let state = tempfile::tempdir().expect("a state dir");
        populate(state.path(), n, template);
        let disk = localagents::paths::dir_bytes(&state.path().join("jobs"));
        for (name, bin) in [
            ("before", before.clone()),
            ("after", Some(after.to_path_buf())),
        ] {
            let Some(bin) = bin else {
                println!(
                    "| {n} | before | not measured (LOCALAGENTS_BEFORE_BIN unset) |{}",
                    " |".repeat(COLUMNS.len() + 1)
                );
                continue;
            };
            let h = Harness::new()
                .state_at(state.path())
                .bin(&bin)
                .config(&config(""));
            let first = ms(time_cmd(&h, &["jobs", "--json"], None).await);
            let mut cells = vec![n.to_string(), name.to_string(), format!("{first:.0}")];
            for col in COLUMNS {
                let mut t = Vec::new();
                for run in 0..RUNS {
                    t.push(ms(time_column(&h, &bin, col, template, run).await));
                }
                t.sort_by(f64::total_cmp);
                cells.push(format!("{:.0}", t[RUNS / 2]));
            }
            cells.push(kb(disk));
            println!("| {} |", cells.join(" | "));
        }
    }
    println!();
}

async fn disk(
    before: &Option<PathBuf>,
    after: &Path,
    short_before: Option<Disk>,
    short_after: Disk,
) {
    println!("### Disk per job (`cargo bench --bench history`)\n");
    println!("| job | build | requests | job dir | largest files |");
    println!("|---|---|---|---|---|");
    if let Some(s) = short_before {
        println!("| short (one turn) | before | {} |", s.row());
    }
    println!("| short (one turn) | after | {} |", short_after.row());
    for (name, bin) in [
        ("before", before.clone()),
        ("after", Some(after.to_path_buf())),
    ] {
        let Some(bin) = bin else { continue };
        let r =
            support::long_job::long_job_from(&bin, support::long_job::Job::Reader, 16_384).await;
        let dir = PathBuf::from(r.record["log_dir"].as_str().unwrap_or_default());
        println!(
            "| long (issue 45's reader, 16k window) | {name} | {} |",
            Disk::of(&dir).row()
        );
        if std::env::var_os("LOCALAGENTS_HISTORY_KEEP").is_some() {
            eprintln!("kept: {}", dir.display());
            std::mem::forget(r);
        }
    }
}

/// What a job's directory keeps.
struct Disk {
    requests: usize,
    total: u64,
    files: Vec<(String, u64)>,
}

impl Disk {
    fn of(dir: &Path) -> Disk {
        let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                m.is_file()
                    .then(|| (e.file_name().to_string_lossy().into_owned(), m.len()))
            })
            .collect();
        files.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        let requests = std::fs::read_to_string(dir.join("requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .count();
        Disk {
            requests,
            total: files.iter().map(|(_, n)| n).sum(),
            files,
        }
    }

    fn row(&self) -> String {
        let largest: Vec<String> = self
            .files
            .iter()
            .take(4)
            .map(|(f, n)| format!("{f} {}", kb(*n)))
            .collect();
        format!(
            "{} | {} | {}",
            self.requests,
            kb(self.total),
            largest.join(", ")
        )
    }
}

fn kb(n: u64) -> String {
    if n >= 1_000_000 {
        format!("{:.2} MB", n as f64 / 1e6)
    } else {
        format!("{:.1} KB", n as f64 / 1e3)
    }
}

/// A one-turn job run by `bin` against `fake`: its record (the copies'
/// template) and its disk.
async fn short_job(bin: &Path, fake: &FakeLlama) -> (Template, Disk) {
    let h = Harness::new().bin(bin).config(&format!(
        "endpoints:\n  box:\n    base_url: {}\n    backend: llama.cpp\n",
        fake.url()
    ));
    support::git::repo(h.work());
    let out = tokio::process::Command::from(h.command([
        "run",
        "--model",
        "gemma3-270m",
        "--json",
        "Say ok.",
    ]))
    .current_dir(h.work())
    .output()
    .await
    .expect("localagents run");
    let record: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "run printed no record: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(record["status"], "succeeded", "{record:#}");
    let dir = PathBuf::from(record["log_dir"].as_str().expect("a log dir"));
    let files = std::fs::read_dir(&dir)
        .expect("the job dir")
        .flatten()
        .filter(|e| e.file_name() != "job.json" && e.path().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).expect("a job file"),
            )
        })
        .collect();
    let disk = Disk::of(&dir);
    (Template { record, files }, disk)
}

/// The job copied into the history.
struct Template {
    record: Value,
    /// Its files but `job.json`.
    files: Vec<(String, Vec<u8>)>,
}

/// `n` copies of the template under `state/jobs`, ids over
/// [`SPREAD_DAYS`] days, the newest a minute old.
fn populate(state: &Path, n: usize, t: &Template) {
    let now = chrono::Utc::now();
    let jobs = state.join("jobs");
    std::fs::create_dir_all(&jobs).expect("jobs dir");
    let span = chrono::Duration::days(SPREAD_DAYS).num_seconds();
    for i in 0..n {
        let at = now
            - chrono::Duration::minutes(1)
            - chrono::Duration::seconds(span * i as i64 / n.max(1) as i64);
        let id = format!("{}-{:08x}", at.format("%Y%m%d-%H%M%S"), i);
        let dir = jobs.join(&id);
        std::fs::create_dir(&dir).expect("a job dir");
        let mut rec = t.record.clone();
        let ts = |d: chrono::DateTime<chrono::Utc>| d.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
        rec["id"] = json!(id);
        rec["created"] = json!(ts(at));
        rec["started"] = json!(ts(at));
        rec["finished"] = json!(ts(at + chrono::Duration::seconds(30)));
        rec["log_dir"] = json!(dir);
        std::fs::write(
            dir.join("job.json"),
            serde_json::to_vec_pretty(&rec).unwrap(),
        )
        .expect("job.json");
        if n < RECORD_ONLY {
            for (name, bytes) in &t.files {
                std::fs::write(dir.join(name), bytes).expect("a job file");
            }
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One command of `h`, started and waited for, `stdin` written to it.
async fn time_cmd(h: &Harness, args: &[&str], stdin: Option<Vec<u8>>) -> Duration {
    use tokio::io::AsyncWriteExt;
    let mut c = tokio::process::Command::from(h.command(args));
    c.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let t = Instant::now();
    let mut child = c.spawn().expect("localagents");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(b) = stdin {
        input.write_all(&b).await.expect("stdin");
    }
    drop(input);
    let out = child.wait_with_output().await.expect("localagents");
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

async fn time_column(h: &Harness, bin: &Path, col: &str, t: &Template, run: usize) -> Duration {
    match col {
        "jobs" => time_cmd(h, &["jobs", "--json"], None).await,
        "jobs --status running" => {
            time_cmd(h, &["jobs", "--status", "running", "--json"], None).await
        }
        "savings" => time_cmd(h, &["savings", "--json"], None).await,
        "status" => time_cmd(h, &["status", "--json"], None).await,
        "hook prompt-submit" => {
            let input = json!({"session_id": format!("bench-{run}-{}", std::process::id()), "cwd": t.record["origin_cwd"], "hook_event_name": "UserPromptSubmit", "prompt": "hi"});
            time_cmd(
                h,
                &["hook", "prompt-submit"],
                Some(input.to_string().into_bytes()),
            )
            .await
        }
        "hook session-start" => {
            let _ = std::fs::remove_file(h.state_dir().join("hook/session-start.json"));
            let input = json!({"session_id": "bench", "cwd": t.record["origin_cwd"], "hook_event_name": "SessionStart", "source": "startup"});
            time_cmd(
                h,
                &["hook", "session-start"],
                Some(input.to_string().into_bytes()),
            )
            .await
        }
        "serve → list_jobs" => {
            let started = Instant::now();
            let c = support::harness::serve_from(h, bin, Some(Path::new("/bin/true"))).await;
            let (err, v) = support::harness::call(&c, "list_jobs", json!({})).await;
            let took = started.elapsed();
            assert!(!err, "{v}");
            let _ = c.cancel().await;
            took
        }
        other => unreachable!("{other}"),
    }
}
