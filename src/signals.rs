//! Waiting for the signals that end a long-running command (`serve`,
//! `shim`): Ctrl-C, SIGTERM or SIGHUP (the terminal or the client went
//! away). Both the MCP server and the CLI use it, so it lives below both of
//! them.

/// Ctrl-C, SIGTERM or SIGHUP. Listening replaces SIGHUP's default (the
/// process dies at once, its jobs' records left `running`, read as `lost`),
/// so the caller stops its jobs first.
pub async fn wait_for_shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate());
        let hup = signal(SignalKind::hangup());
        let one = |s: std::io::Result<tokio::signal::unix::Signal>| async move {
            match s {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = one(term) => {}
            _ = one(hup) => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
