//! Sockets that misbehave on purpose: a closed port and a listener that
//! accepts connections but never answers.

use std::net::SocketAddr;

/// A loopback port with nothing listening: 9 (discard). A port bound and
/// released again is handed out by the kernel as an ephemeral port soon
/// after, and a test running beside this one may then listen there (seen:
/// a 404 from another test's fake instead of a refusal). Port 9 is below
/// the ephemeral range and no test listens on it.
pub fn refused_addr() -> SocketAddr {
    let addr: SocketAddr = "127.0.0.1:9".parse().expect("addr");
    assert!(
        std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(1)).is_err(),
        "something listens on {addr}; these tests need it closed"
    );
    addr
}

/// A listener that accepts and then says nothing, until dropped.
pub struct Silent {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn silent_listener() -> Silent {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = l.accept().await {
            held.push(sock); // keep it open, never write
        }
    });
    Silent { addr, task }
}

/// A server that answers every request with a fixed status and body.
pub async fn fixed_response(
    status: u16,
    content_type: &'static str,
    body: &'static str,
) -> crate::fake_llama::Running {
    use axum::{Router, http::StatusCode, response::IntoResponse};
    let app = Router::new().fallback(move || async move {
        (
            StatusCode::from_u16(status).expect("status"),
            [("content-type", content_type)],
            body,
        )
            .into_response()
    });
    crate::fake_llama::Running::serve(app).await
}

/// A loopback port free now (bound and released: a process started right
/// after may take it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}
