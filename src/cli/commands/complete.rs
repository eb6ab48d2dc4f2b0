//! `localagents complete`, `batch` and `review`: one-shot work without a
//! session (the same paths as the local_complete, local_batch and
//! local_review tools).
//!
//! SIGINT (Ctrl-C), SIGTERM or SIGHUP ends each cleanly, with the signal's
//! exit code (130, 143, 129): a request under way is dropped (its
//! connection closed, so the server stops generating), a batch's job is
//! cancelled and what it has is printed. They listen only once stdin is
//! read: a blocking read would not see a signal, and until then the
//! default action (the process ends) leaves nothing behind.

use std::future::Future;
use std::io::{Read, Write};
use std::path::PathBuf;

use crate::api::{self, BatchArgs, Caller, Context, Manager};
use crate::cli::{BatchCmd, CompleteCmd, ExitStatus, ReviewCmd, fail};
use crate::complete::{Ask, Options};
use crate::signals::{Stop, Stops};

/// `work`'s output, or the signal that came first (`work` dropped).
async fn unless_stopped<T>(work: impl Future<Output = T>) -> Result<T, Stop> {
    let mut stops = Stops::listen();
    tokio::select! {
        out = work => Ok(out),
        stop = stops.next() => Err(stop),
    }
}

/// The text of `arg`, or stdin when it is `-`.
fn text_or_stdin(arg: &str) -> std::io::Result<String> {
    if arg == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        Ok(s)
    } else {
        Ok(arg.to_string())
    }
}

pub async fn complete(ctx: &Context, a: CompleteCmd) -> anyhow::Result<ExitStatus> {
    let prompt = text_or_stdin(&a.prompt.join(" "))?;
    let ask = Ask {
        prompt,
        system: a.system,
        files: a.file,
    };
    let options = Options {
        max_tokens: a.max_tokens,
        temperature: a.temperature,
    };
    let c = match unless_stopped(api::local_complete(
        ctx,
        ask,
        a.model.as_deref(),
        a.endpoint.as_deref(),
        options,
        &Caller::User,
    ))
    .await
    {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Ok(fail(&e)),
        Err(stop) => return Ok(ExitStatus::Stopped(stop)),
    };
    let mut out = anstream::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut out, &c)?;
        writeln!(out)?;
    } else {
        writeln!(out, "{}", c.text.trim_end())?;
        eprintln!(
            "{} on {} · {} in + {} cached + {} out tokens · {} ms · {}",
            c.model,
            c.endpoint,
            c.usage.input,
            c.usage.cache_read,
            c.usage.output,
            c.ms,
            c.stop_reason.as_deref().unwrap_or("no stop reason")
        );
    }
    Ok(ExitStatus::Success)
}

/// JSON lines `{"prompt", "system"?, "files"?}`; a bad line is an error
/// naming it, and nothing is sent.
fn parse_items(text: &str) -> Result<Vec<Ask>, String> {
    let mut items = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let ask: Ask = serde_json::from_str(line).map_err(|e| {
            format!(
                "line {}: {e}; each line is {{\"prompt\": \"…\", \"system\"?: \"…\", \"files\"?: [\"path\"]}}",
                n + 1
            )
        })?;
        items.push(ask);
    }
    Ok(items)
}

pub async fn batch(ctx: Context, a: BatchCmd) -> anyhow::Result<ExitStatus> {
    let text = if a.file == "-" {
        text_or_stdin("-")?
    } else {
        match std::fs::read_to_string(&a.file) {
            Ok(t) => t,
            Err(e) => {
                return Ok(fail(&api::Error::Invalid(format!(
                    "cannot read {} ({e}): pass a JSON-lines file, or - for stdin",
                    a.file
                ))));
            }
        }
    };
    let items = match parse_items(&text) {
        Ok(i) => i,
        Err(e) => return Ok(fail(&api::Error::Invalid(e))),
    };
    let total = items.len() as u64;
    let mut stops = Stops::listen();
    let manager = Manager::new(ctx);
    let args = BatchArgs {
        items,
        model: a.model,
        endpoint: a.endpoint,
        options: Options {
            max_tokens: a.max_tokens,
            temperature: a.temperature,
        },
        base: PathBuf::new(),
    };
    let rec = match api::start_batch(&manager, args, &Caller::User).await {
        Ok(r) => r,
        Err(e) => return Ok(fail(&e)),
    };
    let id = rec.id().to_string();
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total),
        indicatif::ProgressDrawTarget::stderr(),
    );
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} items · {elapsed} · {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut progress = manager.progress(&id);
    let mut stopped = None;
    loop {
        tokio::select! {
            stop = stops.next() => {
                let _ = manager.cancel(&id).await;
                stopped = Some(stop);
                break;
            }
            r = manager.wait(&id, std::time::Duration::from_millis(250)) => {
                if let Some(p) = progress.as_mut() {
                    let p = p.borrow_and_update().clone();
                    if let Some((done, _)) = p.items {
                        bar.set_position(done);
                    }
                    bar.set_message(format!("{} tokens", p.tokens));
                }
                match r {
                    Ok((_, false)) => break,
                    Ok((_, true)) => {}
                    Err(e) => {
                        bar.finish_and_clear();
                        return Ok(fail(&e.into()));
                    }
                }
            }
        }
    }
    bar.finish_and_clear();
    let rec = manager.record(&id).map_err(|e| anyhow::anyhow!("{e}"))?;
    let printed = print_batch(&rec, a.json);
    ExitStatus::of_job(&rec, stopped, printed)
}

/// A batch's items as JSON or text on stdout, its result on stderr.
fn print_batch(rec: &api::JobRecord, json: bool) -> anyhow::Result<()> {
    let id = rec.id();
    let report = rec.summary().batch;
    let mut out = anstream::stdout().lock();
    if json {
        serde_json::to_writer_pretty(
            &mut out,
            &serde_json::json!({"job_id": id, "result": rec.result(), "batch": report}),
        )?;
        writeln!(out)?;
    } else if let Some(r) = &report {
        for item in &r.results {
            match (&item.text, &item.error) {
                (Some(t), _) => writeln!(
                    out,
                    "── item {} ({} ms)\n{}",
                    item.index + 1,
                    item.ms,
                    t.trim_end()
                )?,
                (_, Some(e)) => writeln!(out, "── item {} failed: {e}", item.index + 1)?,
                _ => {}
            }
        }
    }
    let _ = writeln!(
        anstream::stderr(),
        "job {id}: {}",
        rec.result().or(rec.error()).unwrap_or("")
    );
    Ok(())
}

pub async fn review(ctx: Context, a: ReviewCmd) -> anyhow::Result<ExitStatus> {
    let diff = match &a.diff {
        Some(f) if f == "-" => Some(text_or_stdin("-")?),
        Some(f) => match std::fs::read_to_string(f) {
            Ok(t) => Some(t),
            Err(e) => {
                return Ok(fail(&api::Error::Invalid(format!(
                    "cannot read {f} ({e}): pass a diff file, or - for stdin"
                ))));
            }
        },
        None => None,
    };
    let manager = Manager::new(ctx);
    let args = api::ReviewArgs {
        job_id: a.job,
        diff,
        model: a.model,
        endpoint: a.endpoint,
        focus: a.focus,
    };
    let r = match unless_stopped(api::local_review(&manager, args)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return Ok(fail(&e)),
        Err(stop) => return Ok(ExitStatus::Stopped(stop)),
    };
    let mut out = anstream::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut out, &r)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "verdict: {} ({} on {}, {} ms)",
            r.verdict, r.model, r.endpoint, r.ms
        )?;
        for f in &r.findings {
            writeln!(
                out,
                "- {}{}: {}",
                f.file.as_deref().unwrap_or("?"),
                f.line.map(|l| format!(":{l}")).unwrap_or_default(),
                f.what
            )?;
        }
        writeln!(out, "{}", r.summary)?;
    }
    Ok(ExitStatus::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_lines_parse_and_a_bad_one_is_named() {
        let items = parse_items(
            "{\"prompt\":\"a\"}\n\n{\"prompt\":\"b\",\"system\":\"s\",\"files\":[\"x.rs\"]}\n",
        )
        .unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[1].files, vec![PathBuf::from("x.rs")]);
        let e = parse_items("{\"prompt\":\"a\"}\n{\"prompt\": 3}\n").unwrap_err();
        assert!(e.starts_with("line 2: "), "{e}");
    }
}
