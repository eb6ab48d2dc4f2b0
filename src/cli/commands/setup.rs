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

pub async fn doctor(ctx: &Context) -> anyhow::Result<ExitStatus> {
    let checks = crate::setup::doctor(ctx).await;
    let mut out = anstream::stdout().lock();
    let mut failed = false;
    for (lvl, msg) in checks {
        let tag = match lvl {
            Level::Ok => format!("{GREEN}ok  {GREEN:#}"),
            Level::Warn => format!("{YELLOW}warn{YELLOW:#}"),
            Level::Fail => {
                failed = true;
                format!("{RED}fail{RED:#}")
            }
        };
        writeln!(out, "{tag}  {msg}")?;
    }
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
