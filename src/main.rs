//! The `localagents` binary: parse arguments, set up logging on stderr, run.
//!
//! stdout is reserved for command output and, in `serve` mode, for the MCP
//! protocol, so logs go to stderr only (`LOCALAGENTS_LOG=debug` for more).

use std::process::ExitCode;

use clap::Parser;
use localagents::cli::{self, Cli};

fn main() -> ExitCode {
    // A job guard is this binary re-executed; it must not start a runtime.
    if let Some(code) = localagents::process::guard_entry() {
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // A hook this binary does not know (a newer plugin): no output, exit 0.
        Err(e)
            if std::env::args().nth(1).as_deref() == Some("hook")
                && !matches!(
                    e.kind(),
                    clap::error::ErrorKind::DisplayHelp
                        | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                ) =>
        {
            return ExitCode::SUCCESS;
        }
        Err(e) => e.exit(),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("LOCALAGENTS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("localagents: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let ran = runtime.block_on(cli::run(cli));
    // A read of stdin on the blocking pool cannot be cancelled: do not
    // wait for it (or any other blocking task) to exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    // What telemetry is queued goes out now, within its bound: a collector
    // that does not answer costs at most that (issue 47).
    localagents::otel::shutdown(localagents::otel::FLUSH_BOUND);
    match ran {
        Ok(status) => status.into(),
        // `localagents jobs | head -1`: the reader is done, so are we.
        Err(e) if cli::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("localagents: {e:#}");
            ExitCode::from(1)
        }
    }
}
