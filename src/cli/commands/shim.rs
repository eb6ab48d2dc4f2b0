//! `localagents shim`: a shim for a whole local Claude Code session.

use std::io::Write;

use crate::api::Context;
use crate::cli::render::YELLOW;
use crate::cli::{ExitStatus, ShimArgs, fail};

pub async fn run(ctx: &Context, args: ShimArgs) -> anyhow::Result<ExitStatus> {
    use crate::shim::{Route, Shim, log::RequestLog};
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
        let url = format!("http://127.0.0.1:{}", args.port);
        let mut env = crate::session_env::session_env(&url, &r.served_id, r.context);
        let d = &target.config.defaults;
        env.push(crate::session_env::stream_idle_env(
            crate::shim::first_byte_timeout(d.first_byte_timeout_s, r.context)
                .max(std::time::Duration::from_secs(d.stream_idle_timeout_s)),
        ));
        let mut out = anstream::stdout().lock();
        serde_json::to_writer_pretty(&mut out, &crate::session_env::settings_json(&env))?;
        writeln!(out)?;
        return Ok(ExitStatus::Success);
    }
    let started = chrono::Local::now().format("%Y%m%d-%H%M%S").to_string();
    let log_dir = ctx.state_dir.join("shim").join(started);
    let dump = target.config.defaults.dump_requests
        || std::env::var("LOCALAGENTS_DUMP_REQUESTS").is_ok_and(|v| v == "1");
    let policy = crate::shim::Policy {
        loop_limit: target.config.defaults.loop_limit,
        runaway_limit: target.config.defaults.runaway_limit,
        thinking: target.config.defaults.thinking,
        repair: true,
        stop_on_fatal: false,
    };
    let route = Route::for_target(
        "standalone".into(),
        &target,
        r.context,
        RequestLog::new(&log_dir, dump),
        policy,
    );
    let server = match Shim::start(args.port).await {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(
                anstream::stderr(),
                "localagents: cannot listen on 127.0.0.1:{}: {e}; pick another --port or stop what uses it",
                args.port
            );
            return Ok(ExitStatus::Failure);
        }
    };
    let reg = if args.no_token {
        server.register_open(route)
    } else {
        server.register(route)?
    };
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", reg.base_url)?;
        out.flush()?;
    }
    let mut env = crate::session_env::session_env(&reg.base_url, &r.served_id, r.context);
    env.push(crate::session_env::stream_idle_env(
        reg.route.longest_silence(),
    ));
    let mut err = anstream::stderr().lock();
    let window = r
        .context
        .map(|w| w.to_string())
        .unwrap_or_else(|| "unknown".into());
    writeln!(
        err,
        "localagents shim: {} on `{}` ({}), window {window}, at {}",
        r.served_id, r.endpoint, target.endpoint.base_url, reg.base_url
    )?;
    if let Some(q) = &r.queued_note {
        writeln!(err, "{YELLOW}note:{YELLOW:#} {q}")?;
    }
    writeln!(
        err,
        "requests are logged to {}",
        log_dir.join(crate::shim::log::REQUESTS).display()
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
        "(if claude asks you to log in, also export ANTHROPIC_API_KEY=local; the shim never forwards it)"
    )?;
    writeln!(err, "serving until interrupted (Ctrl-C)")?;
    drop(err);
    crate::signals::wait_for_shutdown().await;
    drop(reg);
    Ok(ExitStatus::Success)
}
