//! models.yaml discovery, merging, errors and warnings.

use std::fs;
use std::path::Path;

use crate::support::harness::Harness;
use localagents::config::{self, ConfigError, Discovery};

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn discovery(user: &Path, project: &Path) -> Discovery {
    Discovery {
        explicit: None,
        user_dir: Some(user.to_path_buf()),
        project_dir: Some(project.to_path_buf()),
    }
}

#[test]
fn merge_order_user_sidecar_project_sidecar() {
    let tmp = tempfile::tempdir().unwrap();
    let user = tmp.path().join("user");
    let proj = tmp.path().join("proj");
    write(
        &user.join("models.yaml"),
        "endpoints:\n  a:\n    base_url: http://10.0.0.1:8080\n    notes: from user\n  b:\n    base_url: http://10.0.0.2:8080\ndefaults:\n  max_turns: 10\n",
    );
    write(
        &user.join("models.local.yaml"),
        "endpoints:\n  a:\n    notes: from user sidecar\n",
    );
    write(
        &proj.join("models.yaml"),
        "endpoints:\n  b:\n    base_url: http://10.0.0.3:9000\n  c:\n    base_url: http://10.0.0.4:8000\n    backend: vllm\ndefaults:\n  max_turns: 20\n",
    );
    write(
        &proj.join("models.local.yaml"),
        "defaults:\n  max_turns: 30\n",
    );
    // Untrusted, the project may not add or change endpoints or defaults.
    let loaded = config::load(&discovery(&user, &proj)).unwrap();
    let names: Vec<_> = loaded
        .config
        .endpoints
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(loaded.config.defaults.max_turns, 10);
    let w = loaded.warnings.join("\n");
    assert!(
        w.contains(&format!(
            "ignored from {}: endpoints.b, endpoints.c, defaults.max_turns; project files may not set them. Run `localagents trust`",
            proj.join("models.yaml").display()
        )),
        "{w}"
    );
    assert!(w.contains("models.local.yaml: defaults.max_turns"), "{w}");

    // Trusted (`localagents trust` records it in the user sidecar), it merges in full.
    config::set_trusted(&user.join("models.local.yaml"), &proj, true).unwrap();
    let loaded = config::load(&discovery(&user, &proj)).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let names: Vec<_> = loaded
        .config
        .endpoints
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(names, ["a", "b", "c"], "config order survives the merge");
    let a = loaded.config.endpoint("a").unwrap();
    assert_eq!(a.base_url, "http://10.0.0.1:8080");
    assert_eq!(a.notes.as_deref(), Some("from user sidecar"));
    assert_eq!(
        loaded.config.endpoint("b").unwrap().base_url,
        "http://10.0.0.3:9000"
    );
    assert_eq!(loaded.config.defaults.max_turns, 30);
    assert_eq!(loaded.files.len(), 4);
    assert_eq!(loaded.files[0], user.join("models.yaml"));
    assert_eq!(loaded.files[3], proj.join("models.local.yaml"));
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}

#[test]
fn explicit_config_replaces_discovery_but_keeps_its_sidecar() {
    let tmp = tempfile::tempdir().unwrap();
    let proj = tmp.path().join("proj");
    write(
        &proj.join("models.yaml"),
        "endpoints:\n  p:\n    base_url: http://10.9.9.9:1\n",
    );
    let file = tmp.path().join("cfg/my.yaml");
    write(
        &file,
        "endpoints:\n  x:\n    base_url: http://127.0.0.1:1234\n",
    );
    write(
        &tmp.path().join("cfg/my.local.yaml"),
        "endpoints:\n  y:\n    base_url: http://127.0.0.1:1235\n",
    );
    let d = Discovery {
        explicit: Some(file.clone()),
        user_dir: None,
        project_dir: Some(proj),
    };
    let loaded = config::load(&d).unwrap();
    let names: Vec<_> = loaded
        .config
        .endpoints
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(names, ["x", "y"]);
    assert_eq!(
        d.active_sidecar().unwrap(),
        tmp.path().join("cfg/my.local.yaml")
    );
}

#[test]
fn missing_explicit_config_is_an_error_that_names_the_file() {
    let d = Discovery {
        explicit: Some("/nonexistent/models.yaml".into()),
        user_dir: None,
        project_dir: None,
    };
    let err = config::load(&d).unwrap_err();
    assert!(matches!(err, ConfigError::Missing { .. }));
    assert!(err.to_string().contains("/nonexistent/models.yaml"));
}

#[test]
fn zero_config_uses_builtin_local_endpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let loaded = config::load(&discovery(&tmp.path().join("u"), &tmp.path().join("p"))).unwrap();
    assert!(loaded.builtin);
    assert!(loaded.files.is_empty());
    // llama.cpp's default port first, then the new default it announces
    // (ggml-org/llama.cpp PR 26508).
    let eps: Vec<(&str, &str)> = loaded
        .config
        .endpoints
        .iter()
        .map(|e| (e.name.as_str(), e.base_url.as_str()))
        .collect();
    assert_eq!(
        eps,
        [
            ("local", "http://127.0.0.1:8080"),
            ("local-9931", "http://127.0.0.1:9931"),
            ("ollama", "http://127.0.0.1:11434"),
            ("lmstudio", "http://127.0.0.1:1234")
        ]
    );
    let backends: Vec<_> = loaded.config.endpoints.iter().map(|e| e.backend).collect();
    use config::Backend::{LlamaCpp, LmStudio, Ollama};
    assert_eq!(
        backends,
        [Some(LlamaCpp), Some(LlamaCpp), Some(Ollama), Some(LmStudio)]
    );
    assert_eq!(loaded.config.defaults.permission_mode, "acceptEdits");
    assert_eq!(loaded.config.defaults.probe_timeout_s, 2.5);
    assert_eq!(loaded.config.defaults.max_turns, 60);
    assert_eq!(loaded.config.defaults.disallowed_tools, ["Agent", "Task"]);
}

#[test]
fn yaml_syntax_error_names_file_line_and_column() {
    let tmp = tempfile::tempdir().unwrap();
    let proj = tmp.path().join("p");
    write(
        &proj.join("models.yaml"),
        "endpoints:\n  a:\n    base_url: http://x:1\n   bad: [unclosed\n",
    );
    let err = config::load(&discovery(&proj, &tmp.path().join("u"))).unwrap_err();
    match &err {
        ConfigError::Parse {
            path, line, column, ..
        } => {
            assert_eq!(path, &proj.join("models.yaml"));
            assert_eq!(*line, 4, "{err}");
            assert!(*column > 0, "{err}");
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("models.yaml:4:"), "{text}");
}

#[test]
fn wrong_type_names_line_and_column() {
    let tmp = tempfile::tempdir().unwrap();
    let proj = tmp.path().join("p");
    write(&proj.join("models.yaml"), "defaults:\n  max_turns: many\n");
    let err = config::load(&discovery(&proj, &tmp.path().join("u"))).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("models.yaml:2:"), "{text}");
    assert!(text.contains("max_turns"), "{text}");
}

#[test]
fn unknown_key_warns_with_nearest_and_is_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let proj = tmp.path().join("p");
    write(
        &proj.join("models.yaml"),
        "enpoints:\n  a:\n    base_url: http://x:1\nendpoints:\n  b:\n    base_url: http://10.1.1.1:8080\n    bse_url: nope\nmodels:\n  m:\n    note: hi\n",
    );
    let loaded = config::load(&discovery(&proj, &tmp.path().join("u"))).unwrap();
    let w = loaded.warnings.join("\n");
    assert!(w.contains("`enpoints` (did you mean `endpoints`?)"), "{w}");
    assert!(
        w.contains("`endpoints.b.bse_url` (did you mean `base_url`?)"),
        "{w}"
    );
    assert!(w.contains("`models.m.note` (did you mean `notes`?)"), "{w}");
    let names: Vec<_> = loaded
        .config
        .endpoints
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(names, ["b"]);
}

#[test]
fn broken_entry_is_dropped_with_a_warning_others_survive() {
    let tmp = tempfile::tempdir().unwrap();
    let proj = tmp.path().join("p");
    write(
        &proj.join("models.yaml"),
        "endpoints:\n  bad:\n    base_url: ftp://x\n  nourl:\n    host: h\n  good:\n    base_url: http://127.0.0.1:8080/\n    backend: llama-cpp\n",
    );
    let loaded = config::load(&discovery(&proj, &tmp.path().join("u"))).unwrap();
    let names: Vec<_> = loaded
        .config
        .endpoints
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(names, ["good"]);
    assert_eq!(loaded.config.endpoints[0].base_url, "http://127.0.0.1:8080");
    let w = loaded.warnings.join("\n");
    assert!(w.contains("only http and https"), "{w}");
    assert!(w.contains("`nourl` has no base_url"), "{w}");
}

/// Ollama and LM Studio are known backends (issue 44): declared, they
/// parse with no warning; an unknown name still warns and is detected.
#[test]
fn ollama_and_lmstudio_are_known_backends() {
    let tmp = tempfile::tempdir().unwrap();
    let proj = tmp.path().join("p");
    write(
        &proj.join("models.yaml"),
        "endpoints:\n  o:\n    base_url: http://127.0.0.1:11434\n    backend: ollama\n  l:\n    base_url: http://127.0.0.1:1234\n    backend: LM-Studio\n  t:\n    base_url: http://127.0.0.1:8080\n    backend: tgi\n",
    );
    let loaded = config::load(&discovery(&proj, &tmp.path().join("u"))).unwrap();
    let backends: Vec<_> = loaded
        .config
        .endpoints
        .iter()
        .map(|e| e.backend.map(config::Backend::as_str))
        .collect();
    assert_eq!(backends, [Some("ollama"), Some("lmstudio"), None]);
    let w = loaded.warnings.join("\n");
    assert!(w.contains("unknown backend `tgi`"), "{w}");
    assert!(!w.contains("`ollama`") && !w.contains("LM-Studio"), "{w}");
}

#[test]
fn edits_are_seen_on_the_next_load() {
    let tmp = tempfile::tempdir().unwrap();
    let proj = tmp.path().join("p");
    let file = proj.join("models.yaml");
    write(
        &file,
        "endpoints:\n  a:\n    base_url: http://127.0.0.1:1\n",
    );
    let d = discovery(&proj, &tmp.path().join("u"));
    assert_eq!(
        config::load(&d).unwrap().config.endpoints[0].base_url,
        "http://127.0.0.1:1"
    );
    write(
        &file,
        "endpoints:\n  a:\n    base_url: http://127.0.0.1:22222\n",
    );
    assert_eq!(
        config::load(&d).unwrap().config.endpoints[0].base_url,
        "http://127.0.0.1:22222"
    );
}

#[test]
fn sidecar_write_keeps_other_entries_and_refuses_a_broken_sidecar() {
    let tmp = tempfile::tempdir().unwrap();
    let side = tmp.path().join("models.local.yaml");
    write(&side, "defaults:\n  max_turns: 7\n");
    let mut entry = serde_yaml_ng::Mapping::new();
    entry.insert("base_url".into(), "http://127.0.0.1:9".into());
    config::write_sidecar_endpoint(&side, "gpu", entry.clone()).unwrap();
    let text = fs::read_to_string(&side).unwrap();
    assert!(text.contains("max_turns: 7"), "{text}");
    assert!(text.contains("gpu:"), "{text}");

    write(&side, "endpoints: [broken\n");
    let err = config::write_sidecar_endpoint(&side, "gpu", entry).unwrap_err();
    assert!(matches!(err, ConfigError::Parse { .. }), "{err}");
    assert_eq!(
        fs::read_to_string(&side).unwrap(),
        "endpoints: [broken\n",
        "nothing lost"
    );
}

/// Issue 26 (#4): `register_endpoint` and `trust` read, change and write
/// the user sidecar; done at once, each keeps the others' updates (a lock
/// beside the sidecar serialises them). Rounds of 12 threads, 6 through
/// each public function the API calls, released together.
#[test]
fn concurrent_sidecar_updates_keep_every_update() {
    let tmp = tempfile::tempdir().unwrap();
    for round in 0..20 {
        let side = tmp
            .path()
            .join(format!("r{round}"))
            .join("models.local.yaml");
        write(&side, "defaults:\n  max_turns: 7\n");
        let go = std::sync::Arc::new(std::sync::Barrier::new(12));
        let threads: Vec<_> = (0..12)
            .map(|i| {
                let (side, go) = (side.clone(), go.clone());
                std::thread::spawn(move || {
                    go.wait();
                    if i % 2 == 0 {
                        config::set_trusted(
                            &side,
                            &Path::new("/projects").join(format!("p{i}")),
                            true,
                        )
                        .map(|_| ())
                    } else {
                        let mut entry = serde_yaml_ng::Mapping::new();
                        entry.insert(
                            "base_url".into(),
                            format!("http://127.0.0.1:{}", 9000 + i).into(),
                        );
                        config::write_sidecar_endpoint(&side, &format!("ep{i}"), entry)
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        let text = fs::read_to_string(&side).unwrap();
        let lost: Vec<String> = (0..12)
            .map(|i| {
                if i % 2 == 0 {
                    format!("/projects/p{i}")
                } else {
                    format!("ep{i}:")
                }
            })
            .filter(|want| !text.contains(want.as_str()))
            .collect();
        assert!(lost.is_empty(), "round {round}: lost {lost:?}:\n{text}");
        assert!(text.contains("max_turns: 7"), "{text}");
    }
}

/// The same across processes: 12 `localagents trust DIR` at once, each
/// its own process, keep all 12 projects in the user sidecar.
#[test]
fn concurrent_trust_processes_keep_every_project() {
    // The program finds its user config under HOME: no --config.
    let h = Harness::new().no_config();
    let home = h.home().to_path_buf();
    let dirs: Vec<_> = (0..12).map(|i| h.dir().join(format!("proj{i}"))).collect();
    for d in &dirs {
        fs::create_dir_all(d).unwrap();
    }
    let children: Vec<_> = dirs
        .iter()
        .map(|d| {
            h.command(["trust"])
                .arg(d)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let side = home.join(".config/localagents/models.local.yaml");
    let text = fs::read_to_string(&side).unwrap();
    for d in &dirs {
        let shown = d.canonicalize().unwrap().display().to_string();
        assert!(
            text.contains(&format!("{shown}\n")),
            "lost {shown}:\n{text}"
        );
    }
}

/// Issue 26 (#3): a project's models.yaml nested deeper than the cap is
/// refused by a byte scan before it is parsed (the YAML parser took
/// quadratic time on 40,000 `[`: 15.9 s for `status`), with a sentence
/// naming the file and the cap; so is a file over 1 MiB. An unchanged bad
/// file is refused from the cache.
#[test]
fn a_deeply_nested_or_huge_project_file_is_refused_before_it_is_parsed() {
    let tmp = tempfile::tempdir().unwrap();
    let user = tmp.path().join("user");
    let proj = tmp.path().join("proj");
    let file = proj.join("models.yaml");
    // Past serde_yaml_ng's own recursion limit (128), so the parser, if it
    // ran, would say something else.
    write(
        &file,
        &format!("a: {}{}\n", "[".repeat(200), "]".repeat(200)),
    );
    for _ in 0..2 {
        let err = config::load(&discovery(&user, &proj)).unwrap_err();
        assert!(matches!(err, ConfigError::TooDeep { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            format!(
                "{}:1: nested more than 64 levels deep, over the cap for a config file, so it was not parsed: flatten it",
                file.display()
            )
        );
    }
    // Block style counts too.
    let deep: String = (0..70)
        .map(|i| format!("{}k{i}:\n", "  ".repeat(i)))
        .collect();
    write(&file, &deep);
    let err = config::load(&discovery(&user, &proj)).unwrap_err();
    assert!(
        matches!(err, ConfigError::TooDeep { line: 65, .. }),
        "{err}"
    );
    // Over 1 MiB: refused before it is read.
    write(
        &file,
        &format!(
            "models:\n  a:\n    notes: \"{}\"\n",
            "x".repeat(1024 * 1024)
        ),
    );
    let err = config::load(&discovery(&user, &proj)).unwrap_err();
    assert!(matches!(err, ConfigError::TooBig { .. }), "{err}");
    assert!(
        err.to_string().starts_with(&format!(
            "{} is 1,025 KiB, over the 1,024 KiB (1 MiB) cap for a config file",
            file.display()
        )),
        "{err}"
    );
}

/// The same through the binary, with the 80 KB file of the report:
/// `localagents status` in the project answers with the sentence, and the
/// SessionStart hook says it in one line and exits 0.
#[test]
fn status_and_the_session_start_hook_refuse_an_80_kb_nested_project_file() {
    // No --config: the program finds the project's file from its cwd.
    let h = Harness::new().no_config();
    let proj = h.dir().join("proj");
    let h = h.cwd(&proj);
    write(
        &proj.join("models.yaml"),
        &format!("a: {}{}\n", "[".repeat(40_000), "]".repeat(40_000)),
    );
    let run = |args: &[&str], stdin: &str| {
        use std::io::Write;
        let mut c = h
            .command(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        c.wait_with_output().unwrap()
    };
    let want = format!(
        "{}:1: nested more than 64 levels deep, over the cap for a config file, so it was not parsed: flatten it",
        proj.join("models.yaml").display()
    );
    let out = run(&["status"], "");
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&want), "{err}");
    let input = serde_json::json!({"session_id": "s", "cwd": proj, "hook_event_name": "SessionStart", "source": "startup"});
    let out = run(&["hook", "session-start"], &input.to_string());
    assert_eq!(out.status.code(), Some(0));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("nested more than 64 levels deep"), "{said}");
}

/// `session_header`: `X-Session-ID` when unset, none for `""`, a header
/// name as given, and a header that carries a credential (or is no header
/// name) refused with a warning naming why, the default in its place.
/// `backend: vllm-router` declares a router whose replicas' backend is
/// detected.
#[test]
fn session_header_and_a_declared_router() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("models.yaml");
    write(
        &file,
        "endpoints:\n  a:\n    base_url: http://10.0.0.1:8080\n  b:\n    base_url: http://10.0.0.2:8080\n    session_header: \"\"\n  c:\n    base_url: http://10.0.0.3:8080\n    session_header: X-User-ID\n    backend: vllm-router\n  d:\n    base_url: http://10.0.0.4:8080\n    session_header: Authorization\n  e:\n    base_url: http://10.0.0.5:8080\n    session_header: \"bad header\"\n",
    );
    let loaded = config::load(&Discovery::standard(Some(file))).unwrap();
    let header = |n: &str| loaded.config.endpoint(n).unwrap().session_header.clone();
    assert_eq!(header("a").as_deref(), Some("X-Session-ID"));
    assert_eq!(header("b"), None);
    assert_eq!(header("c").as_deref(), Some("X-User-ID"));
    assert_eq!(header("d").as_deref(), Some("X-Session-ID"));
    assert_eq!(header("e").as_deref(), Some("X-Session-ID"));
    let c = loaded.config.endpoint("c").unwrap();
    assert!(c.vllm_router);
    assert_eq!(c.backend, None);
    assert!(!loaded.config.endpoint("a").unwrap().vllm_router);
    assert!(
        loaded.warnings.iter().any(|w| w
            == "endpoint `d`: session_header `Authorization` is a header that carries a credential or the request's framing; `X-Session-ID` is sent instead (set `session_header: \"\"` to send none)"),
        "{:?}",
        loaded.warnings
    );
    assert!(
        loaded.warnings.iter().any(|w| w
            .starts_with("endpoint `e`: session_header `bad header` is not an HTTP header name")),
        "{:?}",
        loaded.warnings
    );
    // `config check` writes them back as they were given.
    let v = loaded.config.to_value();
    assert_eq!(v["endpoints"]["b"]["session_header"], "");
    assert_eq!(v["endpoints"]["c"]["backend"], "vllm-router");
    assert!(v["endpoints"]["a"].get("session_header").is_none());
}
