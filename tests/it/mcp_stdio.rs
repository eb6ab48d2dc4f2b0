//! The MCP server over stdio, driven by rmcp's client against the built
//! binary: initialize, tools/list, list_models, register_endpoint.

use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::support::fake_llama;
use crate::support::harness::Harness;

fn result_json(r: &rmcp::model::CallToolResult) -> Value {
    let text = r
        .content
        .iter()
        .find_map(|c| c.as_text().map(|t| t.text.clone()))
        .expect("text content");
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

fn args(v: Value) -> serde_json::Map<String, Value> {
    v.as_object().cloned().unwrap()
}

#[tokio::test]
async fn initialize_list_tools_list_models_register_endpoint() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: 32768,
        ..Default::default()
    })
    .await;
    let hand_written = format!(
        "# my servers, by hand\nendpoints:\n  box:\n    base_url: {}   # the fake\nmodels:\n  gemma-3-270m:\n    notes: tiny test model\n",
        fake.url()
    );
    let h = Harness::new().config(&hand_written).serve().await;
    let cfg = h.config_path().to_path_buf();
    let client = &h.client;
    let info = client.peer_info().expect("server info");
    assert_eq!(
        info.server_info.clone().expect("server_info").name,
        "localagents"
    );
    let instructions = info.instructions.clone().unwrap_or_default();
    assert!(instructions.contains("list_models") && instructions.contains("run_agent"));

    let tools = client.list_all_tools().await.unwrap();
    let mut names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "cancel_job",
            "cleanup_jobs",
            "job_diff",
            "job_log",
            "job_status",
            "list_jobs",
            "list_models",
            "local_batch",
            "local_complete",
            "local_review",
            "register_endpoint",
            "run_agent",
            "wait_job",
        ],
        "every tool, and no other"
    );
    let reg = tools
        .iter()
        .find(|t| t.name == "register_endpoint")
        .unwrap();
    let props = reg.input_schema.get("properties").unwrap();
    assert!(
        props.get("base_url").unwrap().get("description").is_some(),
        "doc comments become descriptions"
    );
    assert!(
        props.get("api_key_env").is_none(),
        "keys are not a tool call's to set"
    );

    // list_models
    let r = client
        .call_tool(CallToolRequestParams::new("list_models"))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true));
    let v = result_json(&r);
    assert_eq!(v["config"][0], json!(cfg));
    let ep = &v["endpoints"][0];
    assert_eq!(ep["name"], "box");
    assert_eq!(ep["up"], true);
    assert_eq!(ep["backend"], "llama.cpp");
    assert_eq!(ep["models"][0]["id"], "gemma3-270m");
    assert_eq!(ep["models"][0]["context"], 32768);
    assert_eq!(ep["slots"]["total"], 2);
    assert_eq!(
        v["models"][0]["running_on"][0], "box/gemma3-270m",
        "fuzzy match of the menu name"
    );
    assert!(v["guidance"]["next"].is_string());

    // register_endpoint
    let r = client
        .call_tool(
            CallToolRequestParams::new("register_endpoint").with_arguments(args(json!({
                "name": "second",
                "base_url": fake.url(),
                "host": "gpu-box",
                "notes": "registered by the test"
            }))),
        )
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{:?}", r.content);
    let v = result_json(&r);
    assert_eq!(v["endpoint"]["up"], true);
    assert_eq!(v["endpoint"]["models"][0]["id"], "gemma3-270m");
    let sidecar = h.dir().join("models.local.yaml");
    assert_eq!(v["written_to"], json!(sidecar));
    let side_text = std::fs::read_to_string(&sidecar).unwrap();
    assert!(
        side_text.contains("second:") && side_text.contains("gpu-box"),
        "{side_text}"
    );
    assert_eq!(
        std::fs::read_to_string(&cfg).unwrap(),
        hand_written,
        "hand-written file untouched"
    );

    let r = client
        .call_tool(CallToolRequestParams::new("list_models"))
        .await
        .unwrap();
    let v = result_json(&r);
    let names: Vec<_> = v["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].clone())
        .collect();
    assert_eq!(names, [json!("box"), json!("second")]);

    // Bad input: a tool error that says what to do, not a protocol error.
    for (bad, needle) in [
        (
            json!({"name": "../etc", "base_url": "http://127.0.0.1:1"}),
            "invalid endpoint name",
        ),
        (
            json!({"name": "ok", "base_url": "file:///etc/passwd"}),
            "only http and https",
        ),
        (
            json!({"name": "ok", "base_url": "http://127.0.0.1:1", "backend": "tgi"}),
            "unknown backend",
        ),
        (
            json!({"name": "ok", "base_url": "http://127.0.0.1:1", "api_key_env": "sk-abc 123"}),
            "register_endpoint does not take api_key_env",
        ),
    ] {
        let r = client
            .call_tool(
                CallToolRequestParams::new("register_endpoint").with_arguments(args(bad.clone())),
            )
            .await
            .unwrap();
        assert_eq!(r.is_error, Some(true), "{bad}");
        let text = result_json(&r).to_string();
        assert!(text.contains(needle), "{bad}: {text}");
    }
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), hand_written);
    h.cancel().await;
}

#[tokio::test]
async fn config_error_comes_back_as_a_tool_error() {
    let h = Harness::new()
        .config("endpoints:\n  a: {base_url: http://x\n")
        .serve()
        .await;
    let (cfg, client) = (h.config_path(), &h.client);
    let r = client
        .call_tool(CallToolRequestParams::new("list_models"))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    let text = result_json(&r).to_string();
    assert!(
        text.contains("config error") && text.contains("models.yaml:"),
        "{text}"
    );
    // Fixing the file heals the next call without a restart.
    std::fs::write(
        cfg,
        format!(
            "endpoints:\n  a:\n    base_url: http://{}\n",
            crate::support::net::refused_addr()
        ),
    )
    .unwrap();
    let r = client
        .call_tool(CallToolRequestParams::new("list_models"))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true));
    assert_eq!(result_json(&r)["endpoints"][0]["error_kind"], "refused");
    h.cancel().await;
}

/// Every tool error carries its kind beside its sentence: the text is the
/// sentence (for `model_unavailable`, its structure), the structured
/// content `{"kind", "error"}`.
#[tokio::test]
async fn every_tool_error_names_its_kind() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: 32768,
        ..Default::default()
    })
    .await;
    let h = Harness::new()
        .config(&format!(
            "endpoints:\n  box:\n    base_url: {}\n",
            fake.url()
        ))
        .serve()
        .await;
    let cfg = h.config_path();
    let call = |tool: &'static str, a: Value| {
        let c = &h.client;
        async move {
            let r = c
                .call_tool(CallToolRequestParams::new(tool).with_arguments(args(a)))
                .await
                .unwrap();
            assert_eq!(r.is_error, Some(true), "{tool}: {:?}", r.content);
            let text = r
                .content
                .iter()
                .find_map(|c| c.as_text().map(|t| t.text.clone()))
                .unwrap();
            (text, r.structured_content.expect("structured content"))
        }
    };
    let (text, s) = call("job_status", json!({"job_id": "../etc"})).await;
    assert_eq!(s["kind"], "bad_job_id");
    assert_eq!(s["error"], text.as_str());
    assert!(text.contains("is not a job id"), "{text}");

    let (text, s) = call("job_status", json!({"job_id": "20261130-061500-1a2b3c4d"})).await;
    assert_eq!(
        (s["kind"].as_str(), s["error"].as_str()),
        (Some("no_such_job"), Some(text.as_str()))
    );

    let (text, s) = call("run_agent", json!({"task": "t", "timeout_s": 0})).await;
    assert_eq!(s["kind"], "invalid");
    assert!(
        text.starts_with("timeout_s must be between 1 and"),
        "{text}"
    );

    let (text, s) = call("run_agent", json!({"task": "t", "model": "no-such-model"})).await;
    assert_eq!(s["kind"], "model_unavailable");
    assert_eq!(s["error"], "model_unavailable");
    let shown: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(shown["error"], "model_unavailable", "{text}");
    assert_eq!(shown["model"], "no-such-model");
    assert!(
        shown.get("kind").is_none(),
        "the text keeps its old shape: {text}"
    );

    std::fs::write(cfg, "endpoints: [").unwrap();
    let (text, s) = call("list_models", json!({})).await;
    assert_eq!(s["kind"], "config", "{text}");
    assert!(text.starts_with("config error: "), "{text}");
    h.cancel().await;
}

/// Every request gets an answer over the real binary's stdio: a line that is
/// not JSON, not UTF-8, nested too deep or longer than 16 MiB gets a parse
/// error (-32700, id null); an invalid request with an id gets -32600 with
/// that id; the server keeps serving.
#[test]
fn every_bad_line_gets_an_error_reply_and_the_server_keeps_serving() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    use std::time::Duration;

    let h = Harness::new();
    let mut child = h
        .command(["serve"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let v = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
            if tx.send(v).is_err() {
                return;
            }
        }
    });
    let next = |what: &str| -> Value {
        rx.recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no reply to {what} in 20 s"))
    };
    let mut send = |bytes: &[u8]| {
        stdin.write_all(bytes).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(next("initialize")["id"], 1);
    send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let long = vec![b' '; 16 * 1024 * 1024 + 10];
    let bad: [(&str, &[u8]); 4] = [
        (
            "invalid JSON",
            b"{\"jsonrpc\": \"2.0\", \"id\": 2, \"method\": ",
        ),
        (
            "invalid UTF-8",
            b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\xff\xfe\"}",
        ),
        ("nesting over 128", deep.as_bytes()),
        ("a line over 16 MiB", &long),
    ];
    for (what, line) in bad {
        send(line);
        let r = next(what);
        assert_eq!(r["error"]["code"], -32700, "{what}: {r}");
        assert!(r["id"].is_null(), "{what}: {r}");
        assert!(r.as_object().unwrap().contains_key("id"), "{what}: {r}");
    }
    send(br#"{"jsonrpc":"2.0","id":8,"method":5}"#);
    let r = next("an invalid request");
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert_eq!(r["id"], 8, "{r}");
    send(br#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#);
    let r = next("ping");
    assert_eq!(r["id"], 9, "{r}");
    assert!(r.get("result").is_some(), "{r}");
    drop(stdin);
    let _ = child.wait();
}

/// Issue 26 (#2): a transcript that is a FIFO, a link to /dev/zero or a
/// link to /etc/passwd gets a refusal naming it at once, and the server
/// still answers `ping` (the read ran off the async workers, bounded).
#[tokio::test]
async fn job_log_refuses_a_fifo_a_device_link_and_a_file_link_at_once() {
    let s = Harness::new().serve().await;
    type Make = fn(&std::path::Path);
    let kinds: [(&str, Make); 3] = [
        ("fifo", |p| {
            let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: mkfifo on a NUL-terminated path we own.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        }),
        ("zero", |p| {
            std::os::unix::fs::symlink("/dev/zero", p).unwrap()
        }),
        ("passwd", |p| {
            std::os::unix::fs::symlink("/etc/passwd", p).unwrap()
        }),
    ];
    for (n, (what, make)) in kinds.iter().enumerate() {
        let id = format!("20261201-000000-0000000{n}");
        crate::support::write_job_record(s.state_dir(), &id);
        let t = s.state_dir().join("jobs").join(&id).join("transcript.txt");
        make(&t);
        let call = s.call("job_log", json!({"job_id": id}));
        let (err, text) = tokio::time::timeout(std::time::Duration::from_secs(20), call)
            .await
            .unwrap_or_else(|_| panic!("{what}: job_log did not answer within 20 s"));
        assert!(err, "{what}: {text}");
        assert!(text.contains("transcript.txt"), "{what}: {text}");
        assert!(!text.contains("root:"), "{what}: {text}");
        let ping = s
            .client
            .send_request(rmcp::model::ClientRequest::PingRequest(Default::default()));
        tokio::time::timeout(std::time::Duration::from_secs(10), ping)
            .await
            .unwrap_or_else(|_| panic!("{what}: no answer to ping"))
            .expect("ping");
    }
    s.cancel().await;
}
