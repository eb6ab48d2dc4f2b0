//! `localagents hook prompt-submit`: the plugin's UserPromptSubmit hook.
//! stdout is the hook protocol; it always exits 0.

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
