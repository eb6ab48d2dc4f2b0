//! Sockets that misbehave on purpose: a closed port and a listener that
//! accepts connections but never answers.

use std::net::SocketAddr;

/// A loopback port with nothing listening (bound, then released).
pub fn refused_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    drop(l);
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
) -> crate::support::fake_llama::Running {
    use axum::{Router, http::StatusCode, response::IntoResponse};
    let app = Router::new().fallback(move || async move {
        (
            StatusCode::from_u16(status).expect("status"),
            [("content-type", content_type)],
            body,
        )
            .into_response()
    });
    crate::support::fake_llama::Running::serve(app).await
}
