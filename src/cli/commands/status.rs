//! `localagents status`: probe every endpoint.

use std::io::Write;

use crate::api::Context;
use crate::cli::render::render_status;
use crate::cli::{ExitStatus, fail};
use crate::registry;

pub async fn run(ctx: &Context, json: bool) -> anyhow::Result<ExitStatus> {
    let (_, st) = match registry::status(&ctx.discovery()).await {
        Ok(x) => x,
        Err(e) => return Ok(fail(&e.into())),
    };
    let mut out = anstream::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &st)?;
        writeln!(out)?;
    } else {
        render_status(&mut out, &st)?;
        for e in crate::eval::lines(&ctx.state_dir, &st.endpoints) {
            writeln!(out, "{} on `{}`: {}", e.model, e.endpoint, e.line)?;
        }
        for line in crate::api::status_notes(ctx) {
            writeln!(out, "{line}")?;
        }
        writeln!(out, "{}", crate::api::savings_line(ctx))?;
    }
    Ok(ExitStatus::Success)
}
