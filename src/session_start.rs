//! The `SessionStart` hook with the binary installed: first contact.
//!
//! It owns the one line a new Claude Code session may show the user about
//! localagents, and the small cache that keeps that line from nagging. It
//! says something only when something needs the user: the config does not
//! load, or no endpoint is up ("`/local-status` shows why"). Each finding is
//! said at most once a day ([`TELL_AGAIN_AFTER`]); a second session within
//! the day prints nothing about it and does not even probe.
//!
//! Right after the launcher's first-contact build (`build.status` 0 in
//! `${CLAUDE_PLUGIN_DATA}`), it says once that the binary is built and to
//! reconnect the MCP server in `/mcp` if it shows as failed: Claude Code
//! 2.1.328 skips a plugin's MCP server that failed to start, in new
//! sessions too, for 15 minutes (`~/.claude/mcp-needs-auth-cache.json`).
//!
//! The line is the hook JSON's `systemMessage`, which Claude Code 2.1.328
//! shows the user ("SessionStart:startup says: …") and does not send to the
//! model. (The launcher prints the same field when the binary is missing.)
//!
//! A session start must not wait on a hung endpoint, so the probe is inline
//! but short: every endpoint at once, at most [`PROBE_BUDGET`], and it stops
//! at the first endpoint that is up. An endpoint found up is remembered for
//! [`UP_FRESH`], so most session starts read one small file and print
//! nothing. Inline rather than detached because the first session is the
//! one that most needs the line, and a detached probe could only report to
//! the next one; the budget bounds the cost to 1.5 s in the worst case
//! (every endpoint silent, not refusing), once per cache period.
//!
//! It never fails: any error means no output, and it always exits 0.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::config::{self, Discovery};
use crate::probe;

/// A finding is not said again within this time.
pub const TELL_AGAIN_AFTER: Duration = Duration::from_secs(24 * 3600);
/// An endpoint found up this recently is taken to be up still: no probe.
pub const UP_FRESH: Duration = Duration::from_secs(10 * 60);
/// The longest the probe may take (less when `probe_timeout_s` is lower).
pub const PROBE_BUDGET: Duration = Duration::from_millis(1500);
/// How long after the build ended its news is still worth a line: Claude
/// Code's skip of a failed MCP server lasts 15 minutes.
pub const BUILT_NEWS: Duration = Duration::from_secs(15 * 60);
/// A config error longer than this is cut (the line stays one line).
const MAX_ERROR_CHARS: usize = 240;

/// What is remembered between session starts:
/// `<state>/hook/session-start.json`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Cache {
    /// When a probe last found an endpoint up (Unix seconds).
    #[serde(default)]
    up_at: Option<u64>,
    /// Finding key → when the user was last told (Unix seconds).
    #[serde(default)]
    told: BTreeMap<String, u64>,
}

/// Something the user should hear about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The merged config does not load.
    Config(String),
    /// The launcher's build of the binary just ended well.
    Built,
    /// No configured endpoint answered.
    NoEndpoint,
    /// The binary's version is not the plugin's (a plugin update left an
    /// old binary behind): the rebuild command.
    Stale {
        binary: String,
        plugin: String,
        rebuild: String,
    },
}

impl Finding {
    fn key(&self) -> &'static str {
        match self {
            Finding::Config(_) => "config",
            Finding::Built => "built",
            Finding::NoEndpoint => "no-endpoint",
            Finding::Stale { .. } => "stale",
        }
    }

    /// The line shown to the user.
    pub fn line(&self) -> String {
        match self {
            Finding::Config(e) => {
                let e = crate::fmt::one_line(e, MAX_ERROR_CHARS);
                format!(
                    "localagents: the config does not load ({e}); `localagents config check` shows it."
                )
            }
            Finding::Built => "localagents: the localagents binary is built. Claude Code skips an MCP server that failed to start for 15 minutes, so if /mcp lists localagents as failed, reconnect it there.".to_string(),
            Finding::NoEndpoint => {
                "localagents: no endpoint is up; `/local-status` shows why.".to_string()
            }
            Finding::Stale {
                binary,
                plugin,
                rebuild,
            } => format!(
                "localagents: the binary is version {binary} but the plugin is {plugin}; rebuild it with `{rebuild}`, then reconnect localagents in /mcp."
            ),
        }
    }
}

fn cache_path(state_dir: &Path) -> PathBuf {
    state_dir.join("hook").join("session-start.json")
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn within(at: Option<u64>, now: u64, span: Duration) -> bool {
    at.is_some_and(|t| t <= now && now - t < span.as_secs())
}

fn read_cache(path: &Path) -> Cache {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

fn write_cache(path: &Path, cache: &Cache) {
    if let Ok(bytes) = serde_json::to_vec(cache)
        && let Err(e) = crate::paths::write_atomic(path, &bytes)
    {
        tracing::debug!("session-start cache {}: {e}", path.display());
    }
}

/// True when some endpoint of `config` is up, probing all at once and
/// stopping at the first that is; false after `budget` at most.
async fn any_up(config: &config::Config, budget: Duration) -> bool {
    let mut probes: futures::stream::FuturesUnordered<_> = config
        .endpoints
        .iter()
        .map(|ep| probe::probe(ep, budget))
        .collect();
    let first_up = async {
        while let Some(st) = probes.next().await {
            if st.up {
                return true;
            }
        }
        false
    };
    tokio::time::timeout(budget + Duration::from_millis(100), first_up)
        .await
        .unwrap_or(false)
}

/// When the launcher's build in `plugin_data` ended well (Unix seconds).
fn build_ended_ok(plugin_data: &Path) -> Option<u64> {
    let status = plugin_data.join("build.status");
    let text = std::fs::read_to_string(&status).ok()?;
    if text.trim() != "0" {
        return None;
    }
    let m = std::fs::metadata(&status).ok()?.modified().ok()?;
    m.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

/// The plugin's version (`.claude-plugin/plugin.json` under its root).
fn plugin_version(root: &Path) -> Option<String> {
    let bytes = std::fs::read(root.join(".claude-plugin/plugin.json")).ok()?;
    #[derive(serde::Deserialize)]
    struct Manifest {
        #[serde(default, deserialize_with = "crate::anthropic::lenient")]
        version: Option<String>,
    }
    serde_json::from_slice::<Manifest>(&bytes).ok()?.version
}

/// A binary that is not the plugin's version, and how to rebuild it.
fn stale(plugin_root: Option<&Path>, plugin_data: Option<&Path>) -> Option<Finding> {
    let root = plugin_root?;
    let plugin = plugin_version(root)?;
    let binary = env!("CARGO_PKG_VERSION").to_string();
    if plugin == binary {
        return None;
    }
    let rebuild = match plugin_data {
        Some(d) => format!(
            "cargo install --locked --path '{}' --root '{}'",
            root.display(),
            d.display()
        ),
        None => format!("cargo install --locked --path '{}'", root.display()),
    };
    Some(Finding::Stale {
        binary,
        plugin,
        rebuild,
    })
}

/// What to tell the user now, if anything, updating the cache in
/// `state_dir`. `plugin_data` is `${CLAUDE_PLUGIN_DATA}`, where the
/// launcher builds the binary; `plugin_root` is `${CLAUDE_PLUGIN_ROOT}`.
pub async fn check(
    state_dir: &Path,
    discovery: &Discovery,
    plugin_data: Option<&Path>,
    plugin_root: Option<&Path>,
) -> Option<Finding> {
    let path = cache_path(state_dir);
    let now = now_s();
    let mut cache = read_cache(&path);
    if let Some(f) = stale(plugin_root, plugin_data)
        && !within(cache.told.get(f.key()).copied(), now, TELL_AGAIN_AFTER)
    {
        cache.told.insert(f.key().into(), now);
        write_cache(&path, &cache);
        return Some(f);
    }
    if let Some(ended) = plugin_data.and_then(build_ended_ok)
        && within(Some(ended), now, BUILT_NEWS)
        && cache
            .told
            .get(Finding::Built.key())
            .is_none_or(|t| *t < ended)
    {
        cache.told.insert(Finding::Built.key().into(), now);
        write_cache(&path, &cache);
        return Some(Finding::Built);
    }
    let told_recently =
        |c: &Cache, f: &Finding| within(c.told.get(f.key()).copied(), now, TELL_AGAIN_AFTER);
    let loaded = match config::load(discovery) {
        Ok(l) => l,
        Err(e) => {
            let f = Finding::Config(e.to_string());
            if told_recently(&cache, &f) {
                return None;
            }
            cache.told.insert(f.key().into(), now);
            write_cache(&path, &cache);
            return Some(f);
        }
    };
    // Nothing new could be said: no probe at all.
    if told_recently(&cache, &Finding::NoEndpoint) || within(cache.up_at, now, UP_FRESH) {
        return None;
    }
    let budget = PROBE_BUDGET.min(Duration::from_secs_f64(
        loaded.config.defaults.probe_timeout_s,
    ));
    if any_up(&loaded.config, budget).await {
        cache.up_at = Some(now);
        write_cache(&path, &cache);
        return None;
    }
    cache.told.insert(Finding::NoEndpoint.key().into(), now);
    write_cache(&path, &cache);
    Some(Finding::NoEndpoint)
}

/// The hook's stdout for a finding: Claude Code's hook JSON, the line in
/// `systemMessage`.
pub fn hook_json(f: &Finding) -> String {
    json!({ "systemMessage": f.line() }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_binary_older_than_the_plugin_is_said_once_a_day_with_the_rebuild() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("plugin");
        std::fs::create_dir_all(root.join(".claude-plugin")).unwrap();
        std::fs::write(
            root.join(".claude-plugin/plugin.json"),
            r#"{"name": "localagents", "version": "9.9.9"}"#,
        )
        .unwrap();
        let data = tmp.path().join("data");
        let state = tmp.path().join("state");
        let d = unreachable_config(tmp.path());
        let f = check(&state, &d, Some(&data), Some(&root)).await.unwrap();
        let line = f.line();
        assert!(
            line.contains(&format!(
                "the binary is version {} but the plugin is 9.9.9",
                env!("CARGO_PKG_VERSION")
            )) && line.contains(&format!("--root '{}'", data.display())),
            "{line}"
        );
        let again = check(&state, &d, Some(&data), Some(&root)).await;
        assert!(!matches!(again, Some(Finding::Stale { .. })), "once a day");
        // The same version: nothing about it.
        std::fs::write(
            root.join(".claude-plugin/plugin.json"),
            format!(r#"{{"version": "{}"}}"#, env!("CARGO_PKG_VERSION")),
        )
        .unwrap();
        assert!(stale(Some(&root), Some(&data)).is_none());
    }

    fn unreachable_config(dir: &Path) -> Discovery {
        // Port 9 (discard) on loopback: refused at once.
        let cfg = dir.join("models.yaml");
        std::fs::write(
            &cfg,
            "endpoints:\n  box:\n    base_url: http://127.0.0.1:9\n    backend: llama.cpp\n",
        )
        .unwrap();
        Discovery {
            explicit: Some(cfg),
            user_dir: None,
            project_dir: None,
        }
    }

    #[tokio::test]
    async fn no_endpoint_is_said_once_a_day() {
        let tmp = tempfile::tempdir().unwrap();
        let d = unreachable_config(tmp.path());
        let state = tmp.path().join("state");
        assert_eq!(
            check(&state, &d, None, None).await,
            Some(Finding::NoEndpoint)
        );
        assert_eq!(
            check(&state, &d, None, None).await,
            None,
            "not again within the day"
        );
        // A day later it is said again.
        let path = cache_path(&state);
        let mut c = read_cache(&path);
        c.told.insert("no-endpoint".into(), now_s() - 24 * 3600 - 1);
        write_cache(&path, &c);
        assert_eq!(
            check(&state, &d, None, None).await,
            Some(Finding::NoEndpoint)
        );
    }

    #[tokio::test]
    async fn a_bad_config_is_named_once_a_day() {
        let tmp = tempfile::tempdir().unwrap();
        let d = Discovery {
            explicit: Some(tmp.path().join("missing.yaml")),
            user_dir: None,
            project_dir: None,
        };
        let state = tmp.path().join("state");
        let f = check(&state, &d, None, None).await.expect("a finding");
        assert!(
            matches!(&f, Finding::Config(e) if e.contains("missing.yaml")),
            "{f:?}"
        );
        assert!(
            f.line().contains("localagents config check"),
            "{}",
            f.line()
        );
        assert_eq!(check(&state, &d, None, None).await, None);
    }

    #[tokio::test]
    async fn a_finished_build_is_news_once() {
        let tmp = tempfile::tempdir().unwrap();
        let d = unreachable_config(tmp.path());
        let (state, data) = (tmp.path().join("state"), tmp.path().join("data"));
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("build.status"), "101\n").unwrap();
        assert_eq!(
            check(&state, &d, Some(&data), None).await,
            Some(Finding::NoEndpoint),
            "a failed build is the launcher's to report"
        );
        std::fs::write(data.join("build.status"), "0\n").unwrap();
        let built = check(&state, &d, Some(&data), None).await;
        assert_eq!(built, Some(Finding::Built));
        assert!(built.unwrap().line().contains("/mcp"));
        assert_eq!(check(&state, &d, Some(&data), None).await, None);
    }

    #[test]
    fn a_broken_cache_is_a_fresh_start() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("c.json");
        for bad in [&b""[..], b"null", b"{\"up_at\": \"x\"}", b"\xff"] {
            std::fs::write(&p, bad).unwrap();
            let c = read_cache(&p);
            assert!(c.up_at.is_none() && c.told.is_empty());
        }
        // A time in the future (a clock set back) does not silence it.
        assert!(!within(Some(now_s() + 1000), now_s(), UP_FRESH));
    }

    #[test]
    fn the_hook_json_carries_one_line_in_system_message() {
        let long = Finding::Config("x\ny ".repeat(500));
        let v: serde_json::Value = serde_json::from_str(&hook_json(&long)).unwrap();
        let line = v["systemMessage"].as_str().unwrap();
        assert!(!line.contains('\n') && line.chars().count() < 400, "{line}");
        assert_eq!(v.as_object().unwrap().len(), 1);
    }
}
