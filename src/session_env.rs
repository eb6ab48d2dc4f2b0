//! The environment that points a Claude Code session at a shim.
//!
//! Shared by the standalone shim (which prints it) and the job runner
//! (which sets it on the delegate). Each variable's reason is given beside
//! it, because every one of them was learned from a failure.

use crate::budget::Budget;

/// How a session is held to its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowRule {
    /// The job's budget ([`crate::budget`]): under 128k, output, one tool
    /// result and the compaction point are set from the window.
    Budget,
    /// Claude Code told the real window, and an output budget of window/8
    /// under 128k (`defaults.window_budget: false`).
    Plain,
}

impl WindowRule {
    /// The rule `defaults.window_budget` says.
    pub fn of(d: &crate::config::Defaults) -> WindowRule {
        if d.window_budget {
            WindowRule::Budget
        } else {
            WindowRule::Plain
        }
    }
}

/// `(name, value)` pairs, in a stable order.
pub fn session_env(
    base_url: &str,
    served_id: &str,
    window: Option<u64>,
    rule: WindowRule,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("ANTHROPIC_BASE_URL".into(), base_url.into()),
        // Every alias to the served id, so no background call goes elsewhere.
        ("ANTHROPIC_MODEL".into(), served_id.into()),
        ("ANTHROPIC_DEFAULT_OPUS_MODEL".into(), served_id.into()),
        ("ANTHROPIC_DEFAULT_SONNET_MODEL".into(), served_id.into()),
        ("ANTHROPIC_DEFAULT_HAIKU_MODEL".into(), served_id.into()),
        ("ANTHROPIC_SMALL_FAST_MODEL".into(), served_id.into()),
        // The per-request attribution block changes every request and
        // breaks the server's prefix cache.
        ("CLAUDE_CODE_ATTRIBUTION_HEADER".into(), "0".into()),
        // Local servers do not understand deferred tools.
        ("ENABLE_TOOL_SEARCH".into(), "false".into()),
    ];
    let Some(w) = window else { return env };
    match (rule, Budget::of(w)) {
        (WindowRule::Budget, Some(b)) => env.extend(b.env()),
        (WindowRule::Plain, Some(b)) => {
            env.push(("CLAUDE_CODE_MAX_CONTEXT_TOKENS".into(), w.to_string()));
            env.push(("CLAUDE_CODE_MAX_OUTPUT_TOKENS".into(), b.output.to_string()));
        }
        // Claude Code assumes 200k for a model it does not know.
        (_, None) => env.push(("CLAUDE_CODE_MAX_CONTEXT_TOKENS".into(), w.to_string())),
    }
    env
}

/// What a standalone shim's session needs to start without an Anthropic
/// login: Claude Code refuses to run with neither a login nor a credential
/// ("Not logged in · Please run /login"), and a user who points it at a
/// local server may have none. `ANTHROPIC_AUTH_TOKEN` is the variable
/// Ollama's and LM Studio's own Claude Code guides set. The shim never
/// sends what arrives in it (nor any key or login) upstream; the job
/// runner sets its own placeholder key on the delegate instead.
pub fn standalone_credential() -> (String, String) {
    ("ANTHROPIC_AUTH_TOKEN".into(), "localagents-shim".into())
}

/// Claude Code's stream watchdog ends a request whose stream has sent no
/// event for `CLAUDE_STREAM_IDLE_TIMEOUT_MS` (never less than 300 s in
/// 2.1.328). A local server's long prefill is silent for longer than that
/// (llama-server sends its headers at once and only `:` comments until the
/// first token), and the shim already waits it out up to its own budget
/// and then answers with an error event. So the delegate waits the shim's
/// longest silence plus a margin: the shim, which knows why, always speaks
/// first.
pub fn stream_idle_env(shim_longest_silence: std::time::Duration) -> (String, String) {
    let ms = (shim_longest_silence.as_secs() + STREAM_IDLE_MARGIN_S).max(300) * 1000;
    ("CLAUDE_STREAM_IDLE_TIMEOUT_MS".into(), ms.to_string())
}

/// How much longer than the shim the delegate waits.
pub const STREAM_IDLE_MARGIN_S: u64 = 30;

/// A `--settings` JSON object with that environment.
pub fn settings_json(env: &[(String, String)]) -> serde_json::Value {
    let map: serde_json::Map<String, serde_json::Value> = env
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    serde_json::json!({ "env": map })
}

/// Quote a value for a POSIX shell.
pub fn sh_quote(v: &str) -> String {
    if !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c))
    {
        v.to_string()
    } else {
        format!("'{}'", v.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_windows_get_their_budget() {
        let get = |env: &[(String, String)], k: &str| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        };
        let env = session_env("http://127.0.0.1:1/j/t", "m", Some(65536), WindowRule::Budget);
        let b = Budget::of(65536).unwrap();
        assert_eq!(
            get(&env, "CLAUDE_CODE_MAX_CONTEXT_TOKENS"),
            Some(b.claude_window.to_string())
        );
        assert_eq!(get(&env, "CLAUDE_CODE_MAX_OUTPUT_TOKENS").as_deref(), Some("8192"));
        assert_eq!(
            get(&env, "CLAUDE_CODE_FILE_READ_MAX_OUTPUT_TOKENS").as_deref(),
            Some("8192")
        );
        assert_eq!(get(&env, "ANTHROPIC_DEFAULT_HAIKU_MODEL").as_deref(), Some("m"));
        assert_eq!(get(&env, "CLAUDE_CODE_ATTRIBUTION_HEADER").as_deref(), Some("0"));
        // Plain: the real window, window/8 of output, no caps.
        let env = session_env("http://127.0.0.1:1/j/t", "m", Some(32768), WindowRule::Plain);
        assert_eq!(get(&env, "CLAUDE_CODE_MAX_CONTEXT_TOKENS").as_deref(), Some("32768"));
        assert_eq!(get(&env, "CLAUDE_CODE_MAX_OUTPUT_TOKENS").as_deref(), Some("4096"));
        assert_eq!(get(&env, "CLAUDE_CODE_FILE_READ_MAX_OUTPUT_TOKENS"), None);
        // 128k and more: Claude Code's defaults but the window.
        for rule in [WindowRule::Budget, WindowRule::Plain] {
            let env = session_env("http://127.0.0.1:1/j/t", "m", Some(131072), rule);
            assert_eq!(get(&env, "CLAUDE_CODE_MAX_CONTEXT_TOKENS").as_deref(), Some("131072"));
            assert_eq!(get(&env, "CLAUDE_CODE_MAX_OUTPUT_TOKENS"), None);
        }
    }

    #[test]
    fn the_delegate_waits_longer_than_the_shim() {
        use std::time::Duration;
        assert_eq!(
            stream_idle_env(Duration::from_secs(1310)),
            (
                "CLAUDE_STREAM_IDLE_TIMEOUT_MS".to_string(),
                "1340000".to_string()
            )
        );
        assert_eq!(stream_idle_env(Duration::from_secs(10)).1, "300000");
    }

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("abc-1"), "abc-1");
        assert_eq!(sh_quote("a b'c"), "'a b'\\''c'");
    }
}
