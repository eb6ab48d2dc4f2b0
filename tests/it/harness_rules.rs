//! One test harness (issue 43, item 4): every test in tests/it and
//! tests/e2e, and every bench, builds the environment of a `localagents`
//! it runs through `support::harness::Harness`, and every wait goes
//! through `support::until` (or its `until_async` / `until_blocking`
//! twins). This scans those sources, line by line, for what comes back
//! when a test sets up by hand:
//!
//! - `env_for(` / `env_with(`: the old ways to an environment, gone;
//! - a direct `clean_env(`: the policy is the harness's to apply;
//! - `CARGO_BIN_EXE_localagents`: the binary is run through
//!   `Harness::command` (`support::bin()` names it where a path is needed);
//! - `.arg("--state-dir")` or `.env("HOME", …)` on a command: the state
//!   dir and HOME come from the harness (`Harness::state_at`,
//!   `Harness::home_dir`);
//! - `tempfile::tempdir()` with `"HOME"` within the next 30 lines: a temp
//!   dir made into a HOME by hand;
//! - `thread::sleep(` / `time::sleep(` whose enclosing block is a loop: a
//!   hand-rolled wait.
//!
//! A line that does one of these on purpose (Claude Code's own session
//! env, a bench's pace) says so with `harness-rules:` and why, on the line
//! or the one above. tests/support is where the harness and the waits
//! live, and is not scanned; nor are this file (its needles are its data)
//! and tests/it/layering.rs (a scan of src/, with needles of its own).

use std::path::{Path, PathBuf};

/// Where a test or bench sets up by hand: `file:line: rule`.
fn offences(file: &str, text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let allowed = |i: usize| {
        lines[i].contains("harness-rules:") || (i > 0 && lines[i - 1].contains("harness-rules:"))
    };
    for (i, line) in lines.iter().enumerate() {
        if allowed(i) || line.trim_start().starts_with("//") {
            continue;
        }
        let mut say = |rule: &str| out.push(format!("{file}:{}: {rule}", i + 1));
        if line.contains("env_for(") || line.contains("env_with(") {
            say("env_for/env_with: start from Harness::with_fake or Harness::new().config");
        }
        if line.contains("clean_env(") {
            say("a direct clean_env: the harness applies the policy");
        }
        if line.contains("CARGO_BIN_EXE_localagents") {
            say("the binary by hand: Harness::command (support::bin() for its path)");
        }
        if line.contains(r#".arg("--state-dir")"#) {
            say("--state-dir by hand: Harness::state_at");
        }
        if line.contains(r#".env("HOME""#) {
            say("HOME by hand: Harness::home_dir");
        }
        if line.contains("tempfile::tempdir()")
            && lines[i + 1..lines.len().min(i + 31)]
                .iter()
                .any(|l| l.contains(r#""HOME""#))
        {
            say("a temp dir made a HOME by hand: Harness::new() (or Harness::home_dir)");
        }
        if (line.contains("thread::sleep(") || line.contains("time::sleep("))
            && in_a_loop(&lines, i)
        {
            say("a sleep in a loop: wait with support::until (until_async, until_blocking)");
        }
    }
    out
}

/// Whether line `at` is inside a loop of its function: walking back, the
/// first line indented less than everything seen so far opens the block
/// around it; a `loop`, `while` or `for` there is a loop, a `fn` ends the
/// search.
fn in_a_loop(lines: &[&str], at: usize) -> bool {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut level = indent(lines[at]);
    for l in lines[..at].iter().rev() {
        let t = l.trim_start();
        if t.is_empty() || indent(l) >= level {
            continue;
        }
        level = indent(l);
        let opener = t.trim_end();
        if t.starts_with("loop")
            || t.starts_with("while ")
            || t.starts_with("for ")
            || opener.ends_with("= loop {")
        {
            return true;
        }
        if t.starts_with("fn ")
            || t.starts_with("async fn ")
            || t.starts_with("pub fn ")
            || t.starts_with("pub async fn ")
            || t.contains(" fn ")
            || level == 0
        {
            return false;
        }
    }
    false
}

/// The sources the rules hold for, relative to the repository.
fn sources() -> Vec<PathBuf> {
    let root = crate::support::repo_root();
    let mut out = Vec::new();
    let mut stack = vec![
        root.join("tests/it"),
        root.join("tests/e2e"),
        root.join("benches"),
    ];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.retain(|p| {
        !p.ends_with("tests/it/harness_rules.rs") && !p.ends_with("tests/it/layering.rs")
    });
    out.sort();
    out
}

fn relative(p: &Path) -> String {
    p.strip_prefix(crate::support::repo_root())
        .unwrap_or(p)
        .display()
        .to_string()
}

#[test]
fn every_test_and_bench_starts_from_the_harness_and_waits_through_until() {
    let files = sources();
    assert!(
        files.len() > 40,
        "the scan found the test and bench sources: {files:?}"
    );
    let found: Vec<String> = files
        .iter()
        .flat_map(|p| offences(&relative(p), &std::fs::read_to_string(p).unwrap()))
        .collect();
    assert!(
        found.is_empty(),
        "set up through Harness, wait through support::until:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_rules_catch_each_kind_of_hand_setup() {
    // Each offender is a test as it was before the harness: the rule it
    // breaks is named, and the same code said on purpose passes.
    let cases: &[(&str, &str)] = &[
        ("let e = env_for(fake.url());", "env_for/env_with"),
        (
            "let e = crate::support::harness::env_with(&cfg);",
            "env_for/env_with",
        ),
        ("clean_env(&mut c, &home);", "a direct clean_env"),
        (
            r#"let out = Command::new(env!("CARGO_BIN_EXE_localagents"))"#,
            "the binary by hand",
        ),
        (
            "let c = bin()\n    .arg(\"--state-dir\")\n    .arg(&state);",
            "--state-dir by hand",
        ),
        (
            "let c = bin()\n    .env(\"HOME\", tmp.path());",
            "HOME by hand",
        ),
        (
            "let tmp = tempfile::tempdir().unwrap();\nlet env = [(\"HOME\", tmp.path())];",
            "a temp dir made a HOME",
        ),
        (
            "async fn wait() {\n    let t = Instant::now();\n    loop {\n        if done() {\n            break;\n        }\n        tokio::time::sleep(Duration::from_millis(50)).await;\n    }\n}",
            "a sleep in a loop",
        ),
        (
            "fn wait() {\n    while !done() {\n        std::thread::sleep(Duration::from_millis(50));\n    }\n}",
            "a sleep in a loop",
        ),
        (
            "fn wait() {\n    for _ in 0..300 {\n        if done() {\n            return;\n        }\n        std::thread::sleep(Duration::from_millis(100));\n    }\n}",
            "a sleep in a loop",
        ),
    ];
    for (code, rule) in cases {
        let found = offences("synthetic.rs", code);
        assert!(
            found.iter().any(|f| f.contains(rule)),
            "{rule} not caught in:\n{code}\nfound: {found:?}"
        );
        let on_purpose: String = code
            .lines()
            .map(|l| format!("{l} // harness-rules: on purpose\n"))
            .collect();
        assert_eq!(
            offences("synthetic.rs", &on_purpose),
            Vec::<String>::new(),
            "said on purpose"
        );
    }
    // What the harness gives passes: a harness, its commands, until, and
    // a sleep that is a pause and not in a loop.
    let fine = "async fn t() {\n    let h = Harness::with_fake(fake.url());\n    let out = h.command([\"status\"]).output().unwrap();\n    until(\"the job\", Duration::from_secs(5), || done()).await;\n    tokio::time::sleep(Duration::from_millis(500)).await;\n}\n";
    assert_eq!(offences("fine.rs", fine), Vec::<String>::new());
}
