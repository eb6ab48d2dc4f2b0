//! localagents: hand Claude Code's grunt work to a model on your own
//! server: llama.cpp, vLLM, Ollama, LM Studio, SGLang, exo, Docker Model
//! Runner, Lemonade, LocalAI, llamafile, Jan, vllm-mlx, mlx_lm.server,
//! TabbyAPI, KoboldCpp or any OpenAI-compatible server.
//!
//! The crate is both the `localagents` binary and a library, so tests and
//! benchmarks drive the same code paths the binary does. Each concern has
//! its own module:
//!
//! - [`config`]: `models.yaml` discovery, merging, validation, caching.
//! - [`probe`]: what each server really serves, its window and load.
//! - [`registry`]: the status object and model-name resolution.
//! - [`jobs`]: durable job records and the manager that runs them.
//! - [`runner`]: starting a headless Claude Code delegate and reading its events.
//! - [`worktree`]: git worktree isolation and what a job changed.
//! - [`api`]: the operations behind MCP tools and CLI commands.
//! - [`shim`]: the HTTP shim between a delegate and its backend.
//! - [`anthropic`]: what a Messages server answers, typed, and the one lenient field rule.
//! - [`complete`]: one-shot completions (no tools, no session).
//! - [`mcp`]: the MCP server on stdio.
//! - [`cli`]: argument parsing and human-readable output.
//! - [`budget`]: how a job's window is split, and the settings that hold
//!   Claude Code to it.
//! - [`session_env`]: the env that points Claude Code at a shim.
//! - [`hook`]: the prompt hook that reports finished jobs.
//! - [`session_start`]: the session-start hook's one line for the user.
//! - [`setup`]: setup, doctor and bringup.
//! - [`paths`]: XDG dirs and atomic writes.
//! - [`fmt`]: number formatting for sentences.
//! - [`ledger`]: tokens kept local and their list-price equivalent.
//! - [`eval`]: which served model can do the work (`localagents eval`).
//! - [`ui`]: the local page that shows endpoints, jobs and savings (`localagents ui`).

//!
//! It runs on Linux and macOS. It does not build for Windows: it leads
//! process groups, signals them and reads `/proc` or libproc ([`process`]),
//! which Windows does not have. There, building it fails with the one
//! sentence below instead of a wall of errors from code that cannot work;
//! Windows users run it in WSL2 (docs/guide.md, "Windows").

#[cfg(not(unix))]
compile_error!(
    "localagents runs on Linux and macOS only (process groups, signals, /proc): on Windows, install and run it inside WSL2 (see docs/guide.md, section \"Windows\")"
);

/// Declares each module for Unix alone, so that a Windows build stops at
/// the `compile_error!` above and nowhere else.
macro_rules! unix_only {
    ($($item:item)*) => { $( #[cfg(unix)] $item )* };
}

unix_only! {
    pub mod anthropic;
    pub mod api;
    pub mod budget;
    pub mod cli;
    pub mod complete;
    pub mod config;
    pub mod context;
    pub mod error;
    pub mod eval;
    pub mod fmt;
    pub mod hook;
    pub mod jobs;
    pub mod ledger;
    pub mod mcp;
    pub mod otel;
    pub mod paths;
    pub mod prefix;
    pub mod probe;
    pub mod process;
    pub mod registry;
    pub mod runner;
    pub mod session_env;
    pub mod session_start;
    pub mod setup;
    pub mod shim;
    pub mod signals;
    pub mod ui;
    pub mod wire;
    pub mod worktree;
}
