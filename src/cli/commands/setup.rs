//! `localagents setup`, `doctor` and `bringup`.

use std::io::Write;
use std::path::Path;

use crate::api::Context;
use crate::cli::ExitStatus;
use crate::cli::render::{GREEN, RED, YELLOW};
use crate::setup::Level;

fn status(code: u8) -> ExitStatus {
    match code {
        0 => ExitStatus::Success,
        2 => ExitStatus::Error,
        _ => ExitStatus::Failure,
    }
}

pub fn setup(ctx: &Context, root: Option<&Path>) -> anyhow::Result<ExitStatus> {
    let mut out = anstream::stdout().lock();
    Ok(status(crate::setup::setup(ctx, root, &mut out)?))
}

/// `localagents doctor`: each line printed as its check ends.
pub async fn doctor(ctx: &Context) -> anyhow::Result<ExitStatus> {
    let mut failed = false;
    let mut written: std::io::Result<()> = Ok(());
    crate::setup::doctor_each(ctx, &mut |lvl, msg| {
        let tag = match lvl {
            Level::Ok => format!("{GREEN}ok  {GREEN:#}"),
            Level::Warn => format!("{YELLOW}warn{YELLOW:#}"),
            Level::Fail => {
                failed = true;
                format!("{RED}fail{RED:#}")
            }
        };
        if written.is_ok() {
            let mut out = anstream::stdout().lock();
            written = writeln!(out, "{tag}  {msg}").and_then(|()| out.flush());
        }
    })
    .await;
    written?;
    Ok(if failed {
        ExitStatus::Failure
    } else {
        ExitStatus::Success
    })
}

pub async fn bringup(
    ctx: &Context,
    model: &str,
    action: crate::setup::BringupAction,
    force: bool,
    timeout: u64,
) -> anyhow::Result<ExitStatus> {
    let code = crate::setup::bringup(
        ctx,
        model,
        action,
        force,
        std::time::Duration::from_secs(timeout),
        &mut std::io::stdout(),
    )
    .await?;
    Ok(status(code))
}
