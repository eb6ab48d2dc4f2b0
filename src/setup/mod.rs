//! One-time setup, health checks, and bringing a model up on request: the
//! three commands a user runs by hand, each in a file of its own.
//!
//! This file owns `setup`, the one install command after `cargo install`:
//! a starter config if there is none, and the plugin registered with Claude
//! Code (its files are built into the binary). `doctor.rs` checks
//! everything a delegated job needs, each line `ok`, `warn` or `fail` with
//! the fix. `bringup.rs` runs a model's configured `bring_up` command
//! detached, logging to the state dir, and polls until the model is served;
//! localagents never starts a server unless the user asks this way.

mod bringup;
mod doctor;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::api::Context;
use crate::config;

pub use bringup::{BringupAction, bringup};
pub use doctor::{Level, doctor_each, fixed_prompt_line};

/// The starter config written by `setup`.
pub const EXAMPLE_CONFIG: &str = include_str!("../../models.example.yaml");

/// The plugin's files, built into the binary. `setup` writes them to a
/// clean directory of their own and registers that: Claude Code's install
/// copies the whole marketplace directory, git-ignored files included (a
/// known Claude Code issue), which for a checkout with a `target/` means
/// gigabytes of build output.
pub const PLUGIN_FILES: &[(&str, &str, bool)] = &[
    (
        ".claude-plugin/plugin.json",
        include_str!("../../.claude-plugin/plugin.json"),
        false,
    ),
    (
        ".claude-plugin/marketplace.json",
        include_str!("../../.claude-plugin/marketplace.json"),
        false,
    ),
    (
        "plugin/localagents",
        include_str!("../../plugin/localagents"),
        true,
    ),
    ("bin/localagents", include_str!("../../bin/localagents"), true),
    (
        "hooks/hooks.json",
        include_str!("../../hooks/hooks.json"),
        false,
    ),
    (
        "commands/local-status.md",
        include_str!("../../commands/local-status.md"),
        false,
    ),
    (
        "commands/local-bringup.md",
        include_str!("../../commands/local-bringup.md"),
        false,
    ),
    (
        "commands/local-jobs.md",
        include_str!("../../commands/local-jobs.md"),
        false,
    ),
    (
        "skills/local-agents/SKILL.md",
        include_str!("../../skills/local-agents/SKILL.md"),
        false,
    ),
    (
        "skills/local-agents/reference.md",
        include_str!("../../skills/local-agents/reference.md"),
        false,
    ),
    ("LICENSE", include_str!("../../LICENSE"), false),
];

/// Write the plugin files under `dir` (overwriting: idempotent).
pub fn write_plugin_files(dir: &Path) -> std::io::Result<()> {
    for (rel, body, exec) in PLUGIN_FILES {
        let path = dir.join(rel);
        crate::paths::write_atomic(&path, body.as_bytes())?;
        #[cfg(unix)]
        if *exec {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    Ok(())
}

/// Where `setup` keeps its clean copy of the plugin.
pub fn plugin_copy_dir() -> Option<PathBuf> {
    use etcetera::BaseStrategy;
    etcetera::choose_base_strategy()
        .ok()
        .map(|s| s.data_dir().join("localagents").join("plugin"))
}

/// Where the plugin files are: `--root` (a checkout, for development), else
/// a clean copy written from the binary.
pub fn plugin_root(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return p
            .join(".claude-plugin/plugin.json")
            .is_file()
            .then(|| p.to_path_buf());
    }
    let dir = plugin_copy_dir()?;
    write_plugin_files(&dir).ok()?;
    Some(dir)
}

/// The claude binary jobs will use: the same lookup as the runner
/// (`defaults.claude_path`, `$LOCALAGENTS_CLAUDE`, PATH); with a config that
/// does not load, the built-in defaults.
fn claude_bin(ctx: &Context) -> Result<PathBuf, String> {
    let config = config::load(&ctx.discovery())
        .map(|l| l.config)
        .unwrap_or_else(|_| std::sync::Arc::new(config::Config::builtin()));
    crate::runner::find_claude(&config)
}

fn run_claude(bin: &Path, args: &[&str]) -> (bool, String) {
    match Command::new(bin).args(args).stdin(Stdio::null()).output() {
        Ok(o) => {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            (o.status.success(), text.trim().to_string())
        }
        Err(e) => (false, e.to_string()),
    }
}

/// `localagents setup`. Returns the exit code.
pub fn setup(ctx: &Context, root: Option<&Path>, out: &mut impl Write) -> std::io::Result<u8> {
    let mut code = 0;
    // 1. A starter config, only if there is none.
    let d = ctx.discovery();
    let existing: Vec<PathBuf> = d.candidates().into_iter().filter(|p| p.is_file()).collect();
    if let Some(first) = existing.first() {
        writeln!(out, "config: {} exists; left as is", first.display())?;
    } else {
        let target = ctx
            .explicit_config
            .clone()
            .or_else(|| crate::paths::config_dir().map(|c| c.join("models.yaml")));
        match target {
            Some(t) => {
                crate::paths::write_atomic(&t, EXAMPLE_CONFIG.as_bytes())?;
                writeln!(
                    out,
                    "config: wrote a starter {} (it probes the local defaults: llama.cpp, Ollama, LM Studio; name your servers under `endpoints:` there)",
                    t.display()
                )?;
            }
            None => writeln!(out, "config: no config dir is known; pass --config FILE")?,
        }
    }
    // 2. The plugin, if Claude Code is here.
    match (claude_bin(ctx), plugin_root(root)) {
        (Err(why), _) => {
            writeln!(out, "plugin: {why}; then run `localagents setup` again")?;
        }
        (Ok(_), None) => {
            code = 1;
            writeln!(
                out,
                "plugin: cannot write the plugin files (no data dir, or --root has no .claude-plugin/plugin.json); pass --root <a localagents checkout>"
            )?;
        }
        (Ok(bin), Some(root)) => {
            let root_s = root.display().to_string();
            let (ok, text) = run_claude(&bin, &["plugin", "marketplace", "add", &root_s]);
            if ok {
                writeln!(out, "plugin: marketplace localagents added from {root_s}")?;
            } else if text.to_lowercase().contains("already") {
                writeln!(out, "plugin: marketplace localagents already added")?;
            } else {
                code = 1;
                writeln!(
                    out,
                    "plugin: `claude plugin marketplace add {root_s}` failed: {text}"
                )?;
            }
            let (ok, text) = run_claude(&bin, &["plugin", "install", "localagents@localagents"]);
            if ok {
                writeln!(
                    out,
                    "plugin: localagents@localagents installed (or already installed)"
                )?;
            } else if text.to_lowercase().contains("already") {
                writeln!(out, "plugin: localagents@localagents already installed")?;
            } else {
                code = 1;
                writeln!(
                    out,
                    "plugin: `claude plugin install localagents@localagents` failed: {text}"
                )?;
            }
        }
    }
    writeln!(
        out,
        "next: start your llama-server or vLLM, run `localagents doctor`, then restart Claude Code and ask it to \"use the local agent to …\""
    )?;
    Ok(code)
}
