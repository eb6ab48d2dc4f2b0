//! `localagents hook prompt-submit` and `hook session-start`: the plugin's
//! UserPromptSubmit and SessionStart hooks. stdout is the hook protocol;
//! they always exit 0.

use std::io::Write;

use crate::api::Context;
use crate::cli::ExitStatus;

pub fn prompt_submit(ctx: &Context) -> anyhow::Result<ExitStatus> {
    if let Some(out) = crate::hook::prompt_submit(&ctx.state_dir) {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{out}");
    }
    Ok(ExitStatus::Success)
}

pub async fn session_start(ctx: &Context) -> anyhow::Result<ExitStatus> {
    let data = std::env::var_os("CLAUDE_PLUGIN_DATA").map(std::path::PathBuf::from);
    let root = std::env::var_os("CLAUDE_PLUGIN_ROOT").map(std::path::PathBuf::from);
    if let Some(f) = crate::session_start::check(
        &ctx.state_dir,
        &ctx.discovery(),
        data.as_deref(),
        root.as_deref(),
    )
    .await
    {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{}", crate::session_start::hook_json(&f));
    }
    Ok(ExitStatus::Success)
}
