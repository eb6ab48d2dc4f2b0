//! `localagents ui`: serve the local page and print its URL.

use std::io::Write;

use crate::api::Context;
use crate::cli::ExitStatus;

pub async fn run(ctx: Context, port: u16) -> anyhow::Result<ExitStatus> {
    let listener = match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
        Ok(l) => l,
        Err(e) => {
            let _ = writeln!(
                anstream::stderr(),
                "localagents: cannot listen on 127.0.0.1:{port} ({e}): pick another --port, or 0 for a free one"
            );
            return Ok(ExitStatus::Error);
        }
    };
    let token = crate::ui::new_token()?;
    let port = listener.local_addr()?.port();
    {
        let mut out = anstream::stdout().lock();
        writeln!(out, "{}", crate::ui::url(port, &token))?;
        out.flush()?;
    }
    let _ = writeln!(
        anstream::stderr(),
        "localagents ui: open the URL above (127.0.0.1 only; the token is its key); Ctrl-C stops it"
    );
    let shutdown = async {
        crate::signals::wait_for_shutdown().await;
    };
    crate::ui::serve(ctx, listener, token, shutdown).await?;
    Ok(ExitStatus::Success)
}
