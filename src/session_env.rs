//! The environment that points a Claude Code session at a shim.
//!
//! Shared by the standalone shim (which prints it) and the job runner
//! (which sets it on the delegate). Each variable's reason is given beside
//! it, because every one of them was learned from a failure.

/// Below this window Claude Code needs a smaller output budget: its
/// auto-compact threshold is window minus max output, which would otherwise
/// sit near zero.
pub use crate::probe::SMALL_WINDOW;

/// The output budget for a window: window/8 under 128k, else none (keep
/// Claude Code's default).
pub fn output_budget(window: u64) -> Option<u64> {
    (window < SMALL_WINDOW).then(|| (window / 8).max(1024))
}

/// `(name, value)` pairs, in a stable order.
pub fn session_env(base_url: &str, served_id: &str, window: Option<u64>) -> Vec<(String, String)> {
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
    if let Some(w) = window {
        // Claude Code assumes 200k for a model it does not know.
        env.push(("CLAUDE_CODE_MAX_CONTEXT_TOKENS".into(), w.to_string()));
        if let Some(out) = output_budget(w) {
            env.push(("CLAUDE_CODE_MAX_OUTPUT_TOKENS".into(), out.to_string()));
        }
    }
    env
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
    fn small_windows_shrink_output() {
        assert_eq!(output_budget(32768), Some(4096));
        assert_eq!(output_budget(4096), Some(1024));
        assert_eq!(output_budget(131072), None);
        let env = session_env("http://127.0.0.1:1/j/t", "m", Some(65536));
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CLAUDE_CODE_MAX_CONTEXT_TOKENS"), Some("65536"));
        assert_eq!(get("CLAUDE_CODE_MAX_OUTPUT_TOKENS"), Some("8192"));
        assert_eq!(get("ANTHROPIC_DEFAULT_HAIKU_MODEL"), Some("m"));
        assert_eq!(get("CLAUDE_CODE_ATTRIBUTION_HEADER"), Some("0"));
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
