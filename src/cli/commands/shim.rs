//! `localagents shim`: a shim for a whole local Claude Code session.

use std::io::Write;

use crate::api::Context;
use crate::cli::render::YELLOW;
use crate::cli::{ExitStatus, ShimArgs, fail};

pub async fn run(ctx: &Context, args: ShimArgs) -> anyhow::Result<ExitStatus> {
    if args.print_settings && (args.port == 0 || !args.no_token) {
        let _ = writeln!(
            anstream::stderr(),
            "localagents: --print-settings writes settings for a shim you start separately, so its URL must not change: add --port PORT --no-token (and start the shim with the same flags)"
        );
        return Ok(ExitStatus::Error);
    }
    let target = match crate::api::resolve_target(
        ctx,
        args.model.as_deref(),
        args.endpoint.as_deref(),
    )
    .await
    {
        Ok(t) => t,
        Err(e) => return Ok(fail(&e.into())),
    };
    let r = &target.resolved;
    if args.print_settings {
        let env = crate::api::shim_settings_env(&target, args.port);
        let mut out = anstream::stdout().lock();
        serde_json::to_writer_pretty(&mut out, &crate::session_env::settings_json(&env))?;
        writeln!(out)?;
        return Ok(ExitStatus::Success);
    }
    let serving = match crate::api::serve_shim(ctx, &target, args.port, args.no_token).await {
        Ok(s) => s,
        Err(crate::api::ShimStartError::Listen(e)) => {
            let _ = writeln!(
                anstream::stderr(),
                "localagents: cannot listen on 127.0.0.1:{}: {e}; pick another --port or stop what uses it",
                args.port
            );
            return Ok(ExitStatus::Failure);
        }
        Err(crate::api::ShimStartError::Token(e)) => return Err(e.into()),
    };
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", serving.base_url())?;
        out.flush()?;
    }
    let env = serving.session_env(&target);
    let mut err = anstream::stderr().lock();
    let window = r
        .context
        .map(|w| w.to_string())
        .unwrap_or_else(|| "unknown".into());
    writeln!(
        err,
        "localagents shim: {} on `{}` ({}), window {window}, at {}",
        r.served_id,
        r.endpoint,
        target.endpoint.base_url,
        serving.base_url()
    )?;
    if let Some(q) = &r.queued_note {
        writeln!(err, "{YELLOW}note:{YELLOW:#} {q}")?;
    }
    writeln!(
        err,
        "requests are logged to {}",
        serving.requests_log.display()
    )?;
    writeln!(err, "point claude at it with this env:")?;
    for (k, v) in &env {
        writeln!(err, "  export {k}={}", crate::session_env::sh_quote(v))?;
    }
    writeln!(
        err,
        "or: claude --settings {}",
        crate::session_env::sh_quote(&crate::session_env::settings_json(&env).to_string())
    )?;
    writeln!(
        err,
        "(ANTHROPIC_AUTH_TOKEN lets claude start without an Anthropic login; the shim never forwards it, nor any key or login)"
    )?;
    writeln!(err, "serving until interrupted (Ctrl-C)")?;
    drop(err);
    crate::signals::wait_for_shutdown().await;
    drop(serving);
    Ok(ExitStatus::Success)
}
