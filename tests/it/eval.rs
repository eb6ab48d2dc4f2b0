//! `localagents eval` (issue 21) through the real Claude Code CLI against
//! the fake llama.cpp server: a scripted competent model (each task's own
//! solution as tool calls) passes the quick suite; a model that only talks
//! fails every task with `text_only`; a looping model fails with the loop
//! named; `list_models` carries the stored result and marks it stale once
//! the served model file changes.
#![allow(clippy::disallowed_methods)] // signals a supervisor or a job on purpose

use std::sync::Arc;
use std::time::Duration;

use localagents::eval::tasks::{self, Step};
use serde_json::{Value, json};

use crate::jobs::strict_fake_opts;
use crate::support::fake_llama;
use crate::support::harness::{Harness, call, localagents, localagents_json, serve};
use crate::support::script::{self, Reply};

/// The task a request belongs to, from its brief's tag.
fn task_of(req: &Value) -> Option<tasks::Task> {
    let text = req["messages"].to_string();
    tasks::all()
        .into_iter()
        .find(|t| text.contains(&format!("[localagents eval: {}]", t.name)))
}

/// The delegate's working directory, from Claude Code's environment block.
fn workdir(req: &Value) -> String {
    let text = req.to_string();
    let at = text
        .find("Primary working directory: ")
        .expect("the environment names the working directory");
    text[at + "Primary working directory: ".len()..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != '\\' && *c != '"')
        .collect()
}

/// A competent model: each task's solution, one step a turn; the probe's
/// forced call made properly.
fn competent() -> script::Script {
    Arc::new(|req: &Value| {
        let tools = req["tools"].to_string();
        if tools.contains("get_weather") {
            return Reply::Tool {
                name: "get_weather".into(),
                input: json!({"city": "Paris"}),
            };
        }
        let Some(task) = task_of(req) else {
            return Reply::Text("ok".into());
        };
        let dir = workdir(req);
        let abs = |p: &str| format!("{dir}/{p}");
        match task.solution.get(script::tool_results(req)) {
            Some(Step::Read { path }) => Reply::Tool {
                name: "Read".into(),
                input: json!({"file_path": abs(path)}),
            },
            Some(Step::Edit { path, old, new }) => Reply::Tool {
                name: "Edit".into(),
                input: json!({"file_path": abs(path), "old_string": old, "new_string": new}),
            },
            Some(Step::Write { path, content }) => Reply::Tool {
                name: "Write".into(),
                input: json!({"file_path": abs(path), "content": content}),
            },
            Some(Step::Bash { command }) => Reply::Tool {
                name: "Bash".into(),
                input: json!({"command": command, "description": "Run the tests"}),
            },
            None => Reply::Text(format!("Done with {}: the check should pass.", task.name)),
        }
    })
}

async fn eval_json(e: &Harness, args: &[&str]) -> Value {
    let mut all = vec!["eval", "--model", "gemma-3-270m", "--json"];
    all.extend_from_slice(args);
    localagents_json(e, &all).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_competent_model_passes_the_quick_suite_and_list_models_shows_it() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(competent());
    let e = Harness::with_fake(fake.url());
    let doctor = |e: &Harness| {
        let e = e.clone();
        async move {
            let out = localagents(&e, &["doctor"]).await;
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    let before = doctor(&e).await;
    assert!(
        before.contains("model gemma3-270m on `box` has never been evaluated: run `localagents eval --model gemma3-270m --endpoint box`"),
        "{before}"
    );
    let r = eval_json(&e, &[]).await;
    assert_eq!(r["suite"], "quick", "{r}");
    let after = doctor(&e).await;
    assert!(
        after.contains("model gemma3-270m on `box`: eval quick 2/2 ("),
        "{after}"
    );
    assert_eq!(r["total"], 2, "{r}");
    assert_eq!(r["passed"], 2, "{r}");
    assert_eq!(r["probe"]["tool_call"], "tool_use", "{r}");
    assert_eq!(r["probe"]["folded_system_accepted"], true);
    assert_eq!(r["probe"]["count_tokens"], true);
    assert_eq!(r["probe"]["window"], 131072);
    for t in r["tasks"].as_array().unwrap() {
        assert_eq!(t["passed"], true, "{t}");
        assert_eq!(t["fix_rounds"], 0, "{t}");
        assert!(t["tool_calls"].as_u64().unwrap() >= 2, "{t}");
        assert!(t["tokens_new"].as_u64().unwrap() > 0, "{t}");
        assert_eq!(t["model_faults"]["repaired_tool_calls"], 0);
        // The eval's own time around each job (target < 1 s).
        assert!(t["overhead_ms"].as_u64().is_some(), "{t}");
    }
    // The eval never touched the user's tree: its repositories and the
    // jobs' worktrees are gone.
    let job = r["tasks"][0]["job"].as_str().unwrap();
    assert!(!e.state_dir().join("worktrees").join(job).exists());
    assert_eq!(
        std::fs::read_dir(e.work()).unwrap().count(),
        0,
        "the work dir is untouched"
    );

    // list_models carries it.
    let c = serve(&e, None).await;
    let (err, v) = call(&c, "list_models", json!({})).await;
    assert!(!err, "{v}");
    let line = v["evals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["model"] == "gemma3-270m")
        .cloned()
        .unwrap_or_else(|| panic!("{v}"));
    let text = line["line"].as_str().unwrap();
    assert!(
        text.starts_with("eval quick 2/2 (") && text.contains("tool calls 100% valid"),
        "{line}"
    );
    assert!(line["stale"].is_null(), "{line}");

    // Another model file behind the same id: the result is stale (once
    // the probe cache, 1 s, has let the change through).
    *fake.state.model_path.lock().unwrap() = Some("/models/gemma3-270m-Q8_0.gguf".into());
    let client = &c;
    crate::support::until_async(
        "the eval goes stale",
        Duration::from_secs(20),
        || async move {
            let (_, v) = call(client, "list_models", json!({})).await;
            !v["evals"][0]["stale"].is_null()
        },
    )
    .await;
    let (_, v) = call(&c, "list_models", json!({})).await;
    let line = &v["evals"][0];
    assert_eq!(
        line["stale"], "stale: another model file is served now",
        "{v}"
    );
    assert!(
        line["line"]
            .as_str()
            .unwrap()
            .ends_with("stale: another model file is served now")
    );
    c.cancel().await.unwrap();

    // status says it too.
    let out = localagents(&e, &["status"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("gemma3-270m on `box`: eval quick 2/2"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_only_talks_fails_every_task_and_a_looping_one_names_the_loop() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(script::text(
        "I would change the code like this, but I will not.",
    ));
    let e = Harness::with_fake(fake.url());
    let r = eval_json(&e, &[]).await;
    assert_eq!(r["passed"], 0, "{r}");
    assert_eq!(r["probe"]["tool_call"], "text");
    for t in r["tasks"].as_array().unwrap() {
        assert_eq!(t["passed"], false, "{t}");
        assert_eq!(t["text_only"], true, "{t}");
        let why = t["failure"].as_str().unwrap();
        let rec = std::fs::read_to_string(
            e.state_dir()
                .join("jobs")
                .join(t["job"].as_str().unwrap())
                .join("job.json"),
        )
        .unwrap();
        assert!(why.starts_with("check failed: "), "{why}");
        assert!(
            why.contains("the model answered in text only"),
            "{why} {rec}"
        );
        assert!(why.contains("the model answered in text only"), "{why}");
        assert_eq!(t["fix_rounds"], 1, "one fix round was given: {t}");
    }

    // Room for the loop guard's six calls (the test config has 6 turns).
    let cfg = std::fs::read_to_string(e.config_path()).unwrap();
    std::fs::write(
        e.config_path(),
        cfg.replace("max_turns: 6", "max_turns: 12"),
    )
    .unwrap();
    fake.set_script(Arc::new(|req: &Value| {
        if req["tools"].to_string().contains("get_weather") {
            return Reply::Text("It is sunny.".into());
        }
        Reply::Tool {
            name: "Bash".into(),
            input: json!({"command": "ls", "description": "List"}),
        }
    }));
    let r = eval_json(&e, &[]).await;
    assert_eq!(r["passed"], 0, "{r}");
    for t in r["tasks"].as_array().unwrap() {
        let why = t["failure"].as_str().unwrap();
        assert!(
            why.starts_with("stuck: the model called Bash(`ls`) 6 times in a row"),
            "{why}"
        );
        assert_eq!(t["model_faults"]["loop_notes"], 1, "{t}");
    }
}

/// `sig` to `localagents eval` while its first task's job runs: it cancels
/// that job, prints what it has (nothing stored) and exits with `code`.
async fn a_signal_cancels_the_running_task_and_stores_nothing(name: &str, sig: i32, code: i32) {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    // A model whose first call takes long: the job is running when the signal comes.
    fake.set_script(Arc::new(|req: &Value| {
        if req["tools"].to_string().contains("get_weather") {
            return Reply::Text("sunny".into());
        }
        Reply::Tool {
            name: "Bash".into(),
            input: json!({"command": "tail -f /dev/null", "description": "Wait"}),
        }
    }));
    let e = Harness::with_fake(fake.url());
    let mut eval =
        tokio::process::Command::from(e.command(["eval", "--model", "gemma-3-270m", "--json"]));
    eval.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let child = eval.spawn().unwrap();
    // Wait for the condition: a job whose delegate runs the long command.
    let jobs = e.state_dir().join("jobs");
    let mut id = String::new();
    crate::support::until(
        &format!("{name}: a job reaches the long command"),
        Duration::from_secs(60),
        || {
            let running = std::fs::read_dir(&jobs).ok().and_then(|d| {
                d.flatten().find_map(|x| {
                    let rec: Value =
                        serde_json::from_slice(&std::fs::read(x.path().join("job.json")).ok()?)
                            .ok()?;
                    (rec["status"] == "running"
                        && rec["last_activity"]
                            .as_str()
                            .is_some_and(|a| a.contains("tail -f /dev/null")))
                    .then(|| rec["id"].as_str().unwrap().to_string())
                })
            });
            running.map(|r| id = r).is_some()
        },
    )
    .await;
    let out = crate::jobs::signal_ends_the_job(name, "eval", child, sig, code, &jobs, &id).await;
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["cancelled"], "cancelled during task off_by_one", "{r}");
    assert!(
        !e.state_dir().join("eval").exists()
            || std::fs::read_dir(e.state_dir().join("eval"))
                .unwrap()
                .count()
                == 0,
        "nothing stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_cancels_the_running_task_and_stores_nothing() {
    a_signal_cancels_the_running_task_and_stores_nothing("SIGINT", libc::SIGINT, 130).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_cancels_the_running_task_and_stores_nothing() {
    a_signal_cancels_the_running_task_and_stores_nothing("SIGTERM", libc::SIGTERM, 143).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_cancels_the_running_task_and_stores_nothing() {
    a_signal_cancels_the_running_task_and_stores_nothing("SIGHUP", libc::SIGHUP, 129).await;
}

/// Issue 46: each task has a turn limit and a time limit (`--max-turns`,
/// `--task-timeout`); a task that hits one is named so in its row, and the
/// suite goes on to the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_past_its_turn_or_time_limit_is_named_and_the_suite_goes_on() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let e = Harness::with_fake(fake.url());
    // Never done: a new command every turn (no loop for the guard).
    fake.set_script(Arc::new(|req: &Value| {
        if req["tools"].to_string().contains("get_weather") {
            return Reply::Text("It is sunny.".into());
        }
        let n = script::tool_results(req);
        Reply::Tool {
            name: "Bash".into(),
            input: json!({"command": format!("echo step {n}"), "description": "Step"}),
        }
    }));
    let r = eval_json(&e, &["--max-turns", "3"]).await;
    let rows = r["tasks"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "the suite went on: {r}");
    for t in rows {
        let why = t["failure"].as_str().unwrap();
        assert!(
            why.starts_with("turn limit: 3 turns (--max-turns) reached; "),
            "{why}"
        );
    }
    // A call that outlasts the task's time.
    fake.set_script(Arc::new(|req: &Value| {
        if req["tools"].to_string().contains("get_weather") {
            return Reply::Text("It is sunny.".into());
        }
        Reply::Tool {
            name: "Bash".into(),
            input: json!({"command": "tail -f /dev/null", "description": "Wait"}),
        }
    }));
    let r = eval_json(&e, &["--task-timeout", "8"]).await;
    let rows = r["tasks"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "the suite went on: {r}");
    for t in rows {
        assert_eq!(t["status"], "timeout", "{t}");
        let why = t["failure"].as_str().unwrap();
        assert!(
            why.starts_with("time limit: 8 s (--task-timeout) reached; "),
            "{why}"
        );
    }
}
