//! The shim's transport (issue 15): a stale pooled connection is retried
//! once on a fresh one, the route is checked before the body is read, and
//! the open route answers only local programs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use localagents::config::{Backend, Endpoint};
use localagents::shim::log::RequestLog;
use localagents::shim::{Route, Shim};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::harness::Harness;

fn route(url: &str, dir: &std::path::Path) -> Route {
    Route {
        label: "t".into(),
        session: None,
        endpoint: Endpoint {
            backend: Some(Backend::LlamaCpp),
            ..Endpoint::at("fake", url)
        },
        backend: Backend::LlamaCpp,
        served_id: "m".into(),
        window: Some(32768),
        log: RequestLog::new(dir, false),
        idle_timeout: Duration::from_secs(10),
        first_byte_timeout: Duration::from_secs(2),
        guard: Default::default(),
        wire: Default::default(),
    }
}

/// Read one HTTP/1.1 request (headers and a Content-Length body).
async fn read_request(s: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let n = s.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return Some(buf);
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A backend that answers the first request on each connection with a
/// keep-alive response, then takes the next request on that connection
/// and closes without a word: what a server that dropped an idle
/// keep-alive connection looks like to a pooling client. The counter is
/// the number of requests answered.
async fn stale_backend() -> (String, Arc<AtomicU64>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let answered = Arc::new(AtomicU64::new(0));
    let a = answered.clone();
    tokio::spawn(async move {
        let mut n = 0u64;
        while let Ok((mut s, _)) = l.accept().await {
            let a = a.clone();
            n += 1;
            let id = n;
            tokio::spawn(async move {
                if read_request(&mut s).await.is_none() {
                    return;
                }
                let body = json!({
                    "id": format!("msg_{id}"), "type": "message", "role": "assistant", "model": "m",
                    "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                    "usage": {"input_tokens": 3, "output_tokens": 1}
                })
                .to_string();
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                // Counted before the answer is written: once the client has
                // its response, the count already includes it.
                a.fetch_add(1, Ordering::SeqCst);
                let _ = s.write_all(resp.as_bytes()).await;
                // The next request on this connection is read and dropped.
                let _ = read_request(&mut s).await;
            });
        }
    });
    (url, answered)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_pooled_connection_is_retried_once_on_a_fresh_one() {
    let (url, answered) = stale_backend().await;
    let h = Harness::new();
    let shim = Shim::start(0).await.unwrap();
    let reg = shim.register(route(&url, h.dir())).unwrap();
    let c = crate::support::http_client();
    let body = json!({"model": "m", "max_tokens": 8, "stream": false,
        "messages": [{"role": "user", "content": "hi"}]});
    let mut ok = 0;
    for _ in 0..100 {
        let r = c
            .post(format!("{}/v1/messages", reg.base_url))
            .json(&body)
            .send()
            .await
            .unwrap();
        if r.status() == 200 {
            ok += 1;
        }
    }
    assert_eq!(ok, 100, "every request answered 200");
    assert_eq!(answered.load(Ordering::SeqCst), 100);
    let log: Vec<Value> = std::fs::read_to_string(h.dir().join("requests.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(log.len(), 100);
    let retried = log
        .iter()
        .filter(|l| {
            l["translated"]
                .as_str()
                .is_some_and(|t| t.contains("retry_fresh_connection"))
        })
        .count();
    assert!(retried >= 1, "the log shows the retries");
    eprintln!("retries per 100 requests on a server that drops kept-alive connections: {retried}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_route_is_checked_before_the_body_is_read() {
    let shim = Shim::start(0).await.unwrap();
    let mut s = tokio::net::TcpStream::connect(shim.addr()).await.unwrap();
    // Claims a 100 MB body and sends none of it.
    s.write_all(
        b"POST /j/00000000000000000000000000000000/v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100000000\r\n\r\n",
    )
    .await
    .unwrap();
    let t = Instant::now();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("answered without waiting for the body")
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 404"), "{text}");
    assert!(text.contains("not_found_error"), "{text}");
    assert!(t.elapsed() < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_open_route_answers_only_local_programs() {
    let (url, _) = stale_backend().await;
    let h = Harness::new();
    let shim = Shim::start(0).await.unwrap();
    let _reg = shim.register_open(route(&url, h.dir()));
    let port = shim.addr().port();
    let c = crate::support::http_client();
    let body =
        json!({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
    let go = |host: Option<String>, origin: Option<&'static str>| {
        let mut r = c
            .post(format!("http://127.0.0.1:{port}/v1/messages"))
            .json(&body);
        if let Some(h) = host {
            r = r.header("host", h);
        }
        if let Some(o) = origin {
            r = r.header("origin", o);
        }
        r.send()
    };
    let r = go(None, None).await.unwrap();
    assert_eq!(r.status(), 200, "a local program");
    let r = go(Some(format!("localhost:{port}")), None).await.unwrap();
    assert_eq!(r.status(), 200);
    let r = go(Some(format!("evil.example:{port}")), None)
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "DNS rebinding");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "permission_error");
    let r = go(None, Some("https://evil.example")).await.unwrap();
    assert_eq!(r.status(), 403, "a browser page");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_never_answers_gets_an_error_within_the_first_byte_timeout() {
    let silent = crate::support::net::silent_listener().await;
    let h = Harness::new();
    let shim = Shim::start(0).await.unwrap();
    // first_byte_timeout 2 s (see `route`).
    let reg = shim
        .register(route(&format!("http://{}", silent.addr), h.dir()))
        .unwrap();
    let t = Instant::now();
    let r = crate::support::http_client()
        .post(format!("{}/v1/messages", reg.base_url))
        .json(&json!({"model": "m", "max_tokens": 8, "stream": true,
            "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    let took = t.elapsed();
    assert_eq!(r.status(), 504);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "error", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("sent no response headers within 2 s"),
        "{v}"
    );
    assert!(took < Duration::from_secs(6), "{took:?}");
}
