//! The live registry: config plus probes, and resolving a model name to
//! the endpoint and served id that will run it.
//!
//! Names are matched in three stages and the first stage with a hit wins:
//! exact id, then a case-insensitive glob from `served_name`, then the
//! seeds' fuzzy match (lowercase, keep a-z0-9, substring of 3+ chars). Ties
//! are broken deterministically so the same registry always answers the
//! same way: shortest id, then config order; among endpoints serving that
//! id, one with free slots first, then config order.

use std::path::PathBuf;

use serde::Serialize;
use serde_json::{Value, json};

use crate::config::{self, Config, ConfigError, Discovery, Loaded, ModelEntry};
use crate::probe::{self, EndpointStatus};

/// A model on the menu and where it is served now.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct MenuItem {
    pub name: String,
    pub notes: Option<String>,
    pub host: Option<String>,
    /// `endpoint/served id` pairs that match this name right now.
    pub running_on: Vec<String>,
}

/// The object `status --json` prints and `list_models` returns.
/// (Its schema keeps the title `Status`, the reference's name for it.)
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "Status")]
pub struct Report {
    /// Files read, in merge order. Empty: the built-in default is in use.
    pub config: Vec<PathBuf>,
    pub cwd: Option<PathBuf>,
    pub default_model: Option<String>,
    pub warnings: Vec<String>,
    pub endpoints: Vec<EndpointStatus>,
    pub models: Vec<MenuItem>,
}

/// With the zero-config endpoints (ports 8080, 9931, 11434 and 1234), the
/// ones that answered stand for all: the others are not failures to report.
pub fn builtin_answered(config: &Config, probes: Vec<EndpointStatus>) -> Vec<EndpointStatus> {
    if !config.endpoints_are_builtin() || !probes.iter().any(|p| p.up) {
        return probes;
    }
    probes.into_iter().filter(|p| p.up).collect()
}

/// What the zero-config probe found, in one clause.
pub fn builtin_sentence(probes: &[EndpointStatus]) -> String {
    match probes.iter().find(|p| p.up) {
        Some(p) => format!(
            "the built-in endpoint `{}` answered at {} ({})",
            p.name,
            p.base_url,
            match p.name.as_str() {
                config::BUILTIN_NEXT_PORT_NAME => "llama.cpp's announced new default port",
                "ollama" => "Ollama's default port",
                "lmstudio" => "LM Studio's default port",
                _ => "llama.cpp's default port",
            }
        ),
        None => "nothing answered at http://127.0.0.1:8080 (llama.cpp's default port), http://127.0.0.1:9931 (its announced new default), http://127.0.0.1:11434 (Ollama's) nor http://127.0.0.1:1234 (LM Studio's)".into(),
    }
}

/// Load the config and probe everything.
pub async fn status(discovery: &Discovery) -> Result<(Loaded, Report), ConfigError> {
    let loaded = config::load(discovery)?;
    let probes = probe::probe_all(&loaded.config).await;
    let st = build_status(&loaded, discovery, probes);
    Ok((loaded, st))
}

/// Assemble the status object from a loaded config and probe results.
pub fn build_status(loaded: &Loaded, discovery: &Discovery, probes: Vec<EndpointStatus>) -> Report {
    let mut warnings = loaded.warnings.clone();
    let probes = builtin_answered(&loaded.config, probes);
    if loaded.builtin {
        warnings.push(format!(
            "no models.yaml found: {} (run `localagents config path` to see where files are looked for)",
            builtin_sentence(&probes)
        ));
    }
    let models = loaded
        .config
        .models
        .iter()
        .map(|m| MenuItem {
            name: m.name.clone(),
            notes: m.notes.clone(),
            host: m.host.clone(),
            // The entry itself, not a search of the menu by its name: one
            // pass over the menu, not one per model.
            running_on: stage_hits(Some(m), &probes, &m.name, None)
                .0
                .into_iter()
                .map(|h| format!("{}/{}", h.endpoint, h.id))
                .collect(),
        })
        .collect();
    Report {
        config: loaded.files.clone(),
        cwd: discovery.project_dir.clone(),
        default_model: loaded.config.defaults.model.clone(),
        warnings,
        endpoints: probes,
        models,
    }
}

/// A successful resolution.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resolved {
    /// The name that was asked for.
    pub requested: String,
    pub endpoint: String,
    pub base_url: String,
    /// The id to send as `model`.
    pub served_id: String,
    /// Per-slot window, when known.
    pub context: Option<u64>,
    pub context_source: Option<probe::ContextSource>,
    /// How the name matched: exact, glob, fuzzy, default.
    pub matched_by: String,
    /// Other ids that also matched, for the caller to pick explicitly.
    pub alternatives: Vec<String>,
    /// Set when every slot of the chosen endpoint is busy.
    pub queued_note: Option<String>,
}

/// Nothing serves the name: what to ask the user for.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Unavailable {
    pub error: &'static str,
    pub model: String,
    /// One paragraph for Claude to act on.
    pub message: String,
    pub host: Option<String>,
    pub notes: Option<String>,
    pub bring_up: Option<String>,
    /// `endpoint/id` of everything served right now.
    pub served: Vec<String>,
    /// Endpoints that are down, with the reason.
    pub down: Vec<String>,
}

#[derive(Debug, Clone)]
struct Hit {
    endpoint: String,
    ep_index: usize,
    id: String,
    free: Option<u64>,
}

/// Lowercase and keep only a-z0-9.
pub fn squash(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

fn glob_matcher(pattern: &str) -> Option<globset::GlobMatcher> {
    globset::GlobBuilder::new(pattern)
        .case_insensitive(true)
        .literal_separator(false)
        .build()
        .ok()
        .map(|g| g.compile_matcher())
}

/// All hits of the first matching stage, and the stage's name.
fn stage_hits(
    entry: Option<&ModelEntry>,
    probes: &[EndpointStatus],
    name: &str,
    only_endpoint: Option<&str>,
) -> (Vec<Hit>, &'static str) {
    let endpoint_filter = only_endpoint.or(entry.and_then(|e| e.endpoint.as_deref()));
    let candidates: Vec<(usize, &EndpointStatus, &str)> = probes
        .iter()
        .enumerate()
        .filter(|(_, p)| p.up)
        .filter(|(_, p)| endpoint_filter.is_none_or(|f| p.name == f))
        .flat_map(|(i, p)| p.models.iter().map(move |m| (i, p, m.id.as_str())))
        .collect();
    let mk = |(i, p, id): &(usize, &EndpointStatus, &str)| Hit {
        endpoint: p.name.clone(),
        ep_index: *i,
        id: id.to_string(),
        free: p.slots.map(|s| s.free),
    };
    let served_name = entry.and_then(|e| e.served_name.as_deref());

    // 1. exact
    let exact_targets: Vec<&str> = match served_name {
        Some(s) if !is_glob(s) => vec![s, name],
        _ => vec![name],
    };
    let hits: Vec<Hit> = candidates
        .iter()
        .filter(|(_, _, id)| exact_targets.contains(id))
        .map(mk)
        .collect();
    if !hits.is_empty() {
        return (hits, "exact");
    }
    // 2. glob from served_name (or the name itself when it is a glob)
    let pattern = match served_name {
        Some(s) if is_glob(s) => Some(s),
        _ if is_glob(name) => Some(name),
        _ => None,
    };
    if let Some(m) = pattern.and_then(glob_matcher) {
        let hits: Vec<Hit> = candidates
            .iter()
            .filter(|(_, _, id)| m.is_match(id))
            .map(mk)
            .collect();
        if !hits.is_empty() {
            return (hits, "glob");
        }
    }
    // Case-insensitive exact before fuzzy.
    let hits: Vec<Hit> = candidates
        .iter()
        .filter(|(_, _, id)| exact_targets.iter().any(|t| t.eq_ignore_ascii_case(id)))
        .map(mk)
        .collect();
    if !hits.is_empty() {
        return (hits, "exact");
    }
    // 3. fuzzy
    let mut needles = vec![squash(name)];
    if let Some(s) = served_name.filter(|s| !is_glob(s)) {
        needles.push(squash(s));
    }
    needles.retain(|n| n.len() >= 3);
    if needles.is_empty() {
        return (Vec::new(), "none");
    }
    let hits: Vec<Hit> = candidates
        .iter()
        .filter(|(_, _, id)| {
            let sq = squash(id);
            needles.iter().any(|n| sq.contains(n.as_str()))
        })
        .map(mk)
        .collect();
    (hits, "fuzzy")
}

/// Order: shortest id, then config order of the first endpoint, then id.
fn pick(hits: &[Hit]) -> Option<(String, Vec<Hit>)> {
    let mut ids: Vec<(&str, usize)> = Vec::new();
    for h in hits {
        match ids.iter_mut().find(|(id, _)| *id == h.id) {
            Some(entry) => entry.1 = entry.1.min(h.ep_index),
            None => ids.push((h.id.as_str(), h.ep_index)),
        }
    }
    ids.sort_by(|a, b| {
        a.0.len()
            .cmp(&b.0.len())
            .then(a.1.cmp(&b.1))
            .then(a.0.cmp(b.0))
    });
    let chosen = ids.first()?.0.to_string();
    let mut on: Vec<Hit> = hits.iter().filter(|h| h.id == chosen).cloned().collect();
    // Free slots first (known free > unknown > known full), then config order.
    on.sort_by_key(|h| {
        let rank = match h.free {
            Some(f) if f > 0 => 0,
            None => 1,
            Some(_) => 2,
        };
        (rank, h.ep_index)
    });
    Some((chosen, on))
}

/// Resolve `name` (or the default model) to an endpoint and served id.
pub fn resolve(
    config: &Config,
    probes: &[EndpointStatus],
    name: Option<&str>,
    endpoint: Option<&str>,
) -> Result<Resolved, Box<Unavailable>> {
    let name = name
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .or_else(|| config.defaults.model.clone());
    let Some(name) = name else {
        return resolve_any(config, probes, endpoint);
    };
    let (hits, stage) = stage_hits(config.model(&name), probes, &name, endpoint);
    let Some((id, on)) = pick(&hits) else {
        return Err(Box::new(unavailable(config, probes, &name, endpoint)));
    };
    let best = &on[0];
    finish(config, probes, &name, &id, best, stage, &hits)
}

/// No name and no default: the first model served, preferring free slots.
fn resolve_any(
    config: &Config,
    probes: &[EndpointStatus],
    endpoint: Option<&str>,
) -> Result<Resolved, Box<Unavailable>> {
    let mut hits: Vec<Hit> = Vec::new();
    for (i, p) in probes.iter().enumerate() {
        if !p.up || endpoint.is_some_and(|e| e != p.name) {
            continue;
        }
        for m in &p.models {
            hits.push(Hit {
                endpoint: p.name.clone(),
                ep_index: i,
                id: m.id.clone(),
                free: p.slots.map(|s| s.free),
            });
        }
    }
    hits.sort_by_key(|h| {
        let rank = match h.free {
            Some(f) if f > 0 => 0,
            None => 1,
            Some(_) => 2,
        };
        (rank, h.ep_index)
    });
    let Some(best) = hits.first().cloned() else {
        return Err(Box::new(unavailable(
            config,
            probes,
            "(any model)",
            endpoint,
        )));
    };
    let id = best.id.clone();
    finish(config, probes, &id, &id, &best, "default", &hits)
}

fn finish(
    config: &Config,
    probes: &[EndpointStatus],
    name: &str,
    id: &str,
    best: &Hit,
    stage: &str,
    hits: &[Hit],
) -> Result<Resolved, Box<Unavailable>> {
    let p = &probes[best.ep_index];
    let served = p.models.iter().find(|m| m.id == id);
    let (mut context, mut source) = (
        served.and_then(|m| m.context),
        served.and_then(|m| m.context_source),
    );
    if context.is_none()
        && let Some(c) = config.model(name).and_then(|m| m.context)
    {
        context = Some(c);
        source = Some(probe::ContextSource::Config);
    }
    let mut alternatives: Vec<String> = hits
        .iter()
        .filter(|h| h.id != id)
        .map(|h| format!("{}/{}", h.endpoint, h.id))
        .collect();
    alternatives.dedup();
    let queued_note = match p.slots {
        Some(s) if s.free == 0 => Some(format!(
            "all {} slots of `{}` are busy: the job will queue on the server until one frees up",
            s.total, p.name
        )),
        _ => None,
    };
    Ok(Resolved {
        requested: name.to_string(),
        endpoint: p.name.clone(),
        base_url: p.base_url.clone(),
        served_id: id.to_string(),
        context,
        context_source: source,
        matched_by: stage.to_string(),
        alternatives,
        queued_note,
    })
}

fn unavailable(
    config: &Config,
    probes: &[EndpointStatus],
    name: &str,
    endpoint: Option<&str>,
) -> Unavailable {
    let entry: Option<&ModelEntry> = config.model(name);
    let notes = entry.and_then(|e| e.notes.clone());
    let bring_up = entry.and_then(|e| e.bring_up.clone());
    let host = entry.and_then(|e| e.host.clone()).or_else(|| {
        let ep = entry.and_then(|e| e.endpoint.as_deref()).or(endpoint)?;
        config.endpoint(ep).map(|e| e.host_label())
    });
    let served: Vec<String> = probes
        .iter()
        .filter(|p| p.up)
        .flat_map(|p| p.models.iter().map(move |m| format!("{}/{}", p.name, m.id)))
        .collect();
    let down: Vec<String> = probes
        .iter()
        .filter(|p| !p.up)
        .map(|p| format!("{}: {}", p.name, p.error.clone().unwrap_or_default()))
        .collect();
    let mut msg = match (&host, endpoint) {
        (_, Some(ep)) if config.endpoint(ep).is_none() => format!(
            "there is no endpoint `{ep}` in the config. Known endpoints: {}.",
            config
                .endpoints
                .iter()
                .map(|e| e.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        (Some(h), _) => {
            format!("{name} is not running anywhere. Ask the user to bring it up on {h}.")
        }
        (None, Some(ep)) => {
            format!("{name} is not running on `{ep}`. Ask the user to bring it up there.")
        }
        (None, None) => format!("{name} is not running anywhere. Ask the user to bring it up."),
    };
    if let Some(n) = &notes {
        msg.push_str(&format!(" Notes: {n}."));
    }
    if let Some(b) = &bring_up {
        msg.push_str(&format!(" Start command on file: `{b}`."));
    }
    if served.is_empty() {
        msg.push_str(" Nothing is served right now.");
    } else {
        msg.push_str(&format!(" Served right now: {}.", served.join(", ")));
    }
    if entry.is_none() && !config.models.is_empty() {
        msg.push_str(&format!(
            " Names on the menu: {}.",
            config
                .models
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Unavailable {
        error: "model_unavailable",
        model: name.to_string(),
        message: msg,
        host,
        notes,
        bring_up,
        served,
        down,
    }
}

/// Short guidance that `list_models` adds to the status object.
pub fn guidance(status: &Report) -> Value {
    let up = status.endpoints.iter().filter(|e| e.up).count();
    json!({
        "next": if up > 0 {
            "Pick a served model (or a menu name) and call run_agent with a self-contained brief: files, interface, acceptance command, constraints."
        } else {
            "Nothing is up. Tell the user which model you need (menu name and host) and ask them to start it; then call list_models again."
        },
        "endpoints_up": up,
        "endpoints_total": status.endpoints.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, ModelEntry};
    use crate::probe::{ServedModel, Slots};

    fn up(name: &str, ids: &[&str], free: Option<u64>) -> EndpointStatus {
        let ep = crate::config::Endpoint {
            name: name.into(),
            base_url: format!("http://{name}:8080"),
            backend: None,
            host: None,
            notes: None,
            env: Default::default(),
            api_key_env: None,
            allow_insecure_key: false,
            session_header: None,
            vllm_router: false,
            wire: None,
            window: None,
        };
        let mut st = EndpointStatus::new(&ep);
        st.up = true;
        st.models = ids
            .iter()
            .map(|id| ServedModel {
                id: id.to_string(),
                context: Some(131072),
                context_source: Some(probe::ContextSource::PropsNCtx),
                state: None,
                file: None,
            })
            .collect();
        st.slots = free.map(|f| Slots {
            total: 2,
            busy: 2 - f,
            free: f,
            unused: None,
        });
        st
    }

    #[test]
    fn the_zero_config_pair_reports_the_port_that_answered() {
        let builtin = Config::builtin();
        let status_of = |name: &str, port: u16, is_up: bool| {
            let mut st = up(name, &["m"], Some(1));
            st.base_url = format!("http://127.0.0.1:{port}");
            st.up = is_up;
            st
        };
        let only_new = vec![
            status_of("local", 8080, false),
            status_of("local-9931", 9931, true),
        ];
        let kept = builtin_answered(&builtin, only_new.clone());
        assert_eq!(kept.len(), 1, "the one that did not answer is no failure");
        assert_eq!(
            builtin_sentence(&kept),
            "the built-in endpoint `local-9931` answered at http://127.0.0.1:9931 (llama.cpp's announced new default port)"
        );
        let both_down = vec![
            status_of("local", 8080, false),
            status_of("local-9931", 9931, false),
        ];
        assert_eq!(builtin_answered(&builtin, both_down.clone()).len(), 2);
        assert!(
            builtin_sentence(&both_down).starts_with("nothing answered at http://127.0.0.1:8080")
        );
        // A user's own config is never pruned.
        let mine = cfg(vec![]);
        let mut mine = mine;
        mine.endpoints.truncate(1);
        assert_eq!(builtin_answered(&mine, only_new).len(), 2);
    }

    fn cfg(models: Vec<ModelEntry>) -> Config {
        let mut c = Config::builtin();
        c.models = models;
        c
    }

    fn entry(name: &str) -> ModelEntry {
        ModelEntry {
            name: name.into(),
            notes: None,
            host: None,
            served_name: None,
            endpoint: None,
            context: None,
            bring_up: None,
        }
    }

    #[test]
    fn seeds_example_fuzzy() {
        let probes = vec![up(
            "llamacpp",
            &["unsloth/Qwen3.8-27B-GGUF:UD-Q4_K_XL"],
            Some(1),
        )];
        let r = resolve(&cfg(vec![]), &probes, Some("qwen3.8-27b"), None).unwrap();
        assert_eq!(r.served_id, "unsloth/Qwen3.8-27B-GGUF:UD-Q4_K_XL");
        assert_eq!(r.matched_by, "fuzzy");
        assert_eq!(r.endpoint, "llamacpp");
        assert_eq!(r.context, Some(131072));
    }

    #[test]
    fn exact_beats_fuzzy() {
        let probes = vec![up("a", &["qwen3.8-27b-instruct-long", "qwen3.8-27b"], None)];
        let r = resolve(&cfg(vec![]), &probes, Some("qwen3.8-27b"), None).unwrap();
        assert_eq!(r.served_id, "qwen3.8-27b");
        assert_eq!(r.matched_by, "exact");
    }

    #[test]
    fn glob_from_served_name_case_insensitive() {
        let mut e = entry("coder");
        e.served_name = Some("*qwen3-coder-30b*".into());
        let probes = vec![up(
            "a",
            &["gemma", "unsloth/Qwen3-Coder-30B-A3B-GGUF:Q4"],
            None,
        )];
        let r = resolve(&cfg(vec![e]), &probes, Some("coder"), None).unwrap();
        assert_eq!(r.served_id, "unsloth/Qwen3-Coder-30B-A3B-GGUF:Q4");
        assert_eq!(r.matched_by, "glob");
    }

    #[test]
    fn ambiguity_picks_shortest_then_config_order_and_lists_others() {
        let probes = vec![
            up("a", &["org/qwen3.8-27b-q8_0"], None),
            up("b", &["qwen3.8-27b-q4", "org/qwen3.8-27b-q4_k_m"], None),
        ];
        let r = resolve(&cfg(vec![]), &probes, Some("qwen3.8-27b"), None).unwrap();
        assert_eq!(r.served_id, "qwen3.8-27b-q4");
        assert_eq!(r.endpoint, "b");
        assert_eq!(
            r.alternatives,
            ["a/org/qwen3.8-27b-q8_0", "b/org/qwen3.8-27b-q4_k_m"]
        );
        // Same again: deterministic.
        assert_eq!(
            resolve(&cfg(vec![]), &probes, Some("qwen3.8-27b"), None).unwrap(),
            r
        );
    }

    #[test]
    fn several_endpoints_prefer_free_slots_then_config_order() {
        let probes = vec![
            up("first", &["m-7b"], Some(0)),
            up("second", &["m-7b"], Some(1)),
            up("third", &["m-7b"], Some(2)),
        ];
        let r = resolve(&cfg(vec![]), &probes, Some("m-7b"), None).unwrap();
        assert_eq!(r.endpoint, "second");
        assert!(r.queued_note.is_none());
        let busy = vec![up("first", &["m-7b"], Some(0))];
        let r = resolve(&cfg(vec![]), &busy, Some("m-7b"), None).unwrap();
        assert!(r.queued_note.unwrap().contains("queue"));
    }

    #[test]
    fn endpoint_filter_and_model_endpoint_override() {
        let probes = vec![up("a", &["m-7b"], Some(1)), up("b", &["m-7b"], Some(1))];
        let r = resolve(&cfg(vec![]), &probes, Some("m-7b"), Some("b")).unwrap();
        assert_eq!(r.endpoint, "b");
        let mut e = entry("m-7b");
        e.endpoint = Some("b".into());
        let r = resolve(&cfg(vec![e]), &probes, Some("m-7b"), None).unwrap();
        assert_eq!(r.endpoint, "b");
    }

    #[test]
    fn short_names_do_not_fuzzy_match() {
        let probes = vec![up("a", &["qwen3.8-27b"], None)];
        assert!(resolve(&cfg(vec![]), &probes, Some("qw"), None).is_err());
    }

    #[test]
    fn unavailable_names_whom_to_ask_and_what_is_served() {
        let mut e = entry("qwen3.8-27b");
        e.host = Some("gpu-server".into());
        e.notes = Some("default mid-size coder on llama.cpp; run with --reasoning on".into());
        let mut down = up("gpu", &[], None);
        down.up = false;
        down.error = Some("host is up, nothing listens on port 8080".into());
        let probes = vec![up("local", &["gemma3-270m"], Some(2)), down];
        let u = resolve(&cfg(vec![e]), &probes, Some("qwen3.8-27b"), None).unwrap_err();
        assert_eq!(u.error, "model_unavailable");
        assert!(u.message.starts_with(
            "qwen3.8-27b is not running anywhere. Ask the user to bring it up on gpu-server. Notes: default mid-size coder on llama.cpp; run with --reasoning on."
        ), "{}", u.message);
        assert!(
            u.message.contains("Served right now: local/gemma3-270m."),
            "{}",
            u.message
        );
        assert_eq!(u.down.len(), 1);
    }

    #[test]
    fn no_name_no_default_takes_a_free_served_model() {
        let probes = vec![
            up("a", &["x-model"], Some(0)),
            up("b", &["y-model"], Some(1)),
        ];
        let r = resolve(&cfg(vec![]), &probes, None, None).unwrap();
        assert_eq!(r.served_id, "y-model");
        let mut c = cfg(vec![]);
        c.defaults.model = Some("x-model".into());
        assert_eq!(
            resolve(&c, &probes, None, None).unwrap().served_id,
            "x-model"
        );
    }

    #[test]
    fn context_falls_back_to_config() {
        let mut p = up("a", &["m-7b"], None);
        p.models[0].context = None;
        p.models[0].context_source = None;
        let mut e = entry("m-7b");
        e.context = Some(200000);
        let r = resolve(&cfg(vec![e]), &[p], Some("m-7b"), None).unwrap();
        assert_eq!(r.context, Some(200000));
        assert_eq!(r.context_source.map(|c| c.as_str()), Some("config"));
    }
}

// ---- resolving a job's target ------------------------------------------

/// Why a model could not be resolved to a live endpoint.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("config error: {0}")]
    Config(#[from] ConfigError),
    /// Nothing serves the model: the message says whom to ask for what.
    #[error("{}", .0.message)]
    Unavailable(Box<Unavailable>),
    #[error("{0}")]
    Invalid(String),
}

impl ResolveError {
    pub fn kind(&self) -> crate::error::Kind {
        match self {
            ResolveError::Config(_) => crate::error::Kind::Config,
            ResolveError::Unavailable(_) => crate::error::Kind::ModelUnavailable,
            ResolveError::Invalid(_) => crate::error::Kind::Invalid,
        }
    }
}

/// A model resolved to a live endpoint, with what a shim route needs.
#[derive(Debug, Clone)]
pub struct Target {
    pub config: std::sync::Arc<Config>,
    pub resolved: Resolved,
    pub endpoint: config::Endpoint,
    pub backend: config::Backend,
    /// The endpoint's probe at resolution (slots and `/metrics` counters).
    pub probe: probe::EndpointStatus,
}

/// Every live endpoint that serves the model `model` resolves to: the
/// resolved one first, then the others that serve the same id (unless
/// `endpoint` pins one). A batch spreads over all of them.
pub async fn resolve_targets(
    ctx: &crate::context::Context,
    model: Option<&str>,
    endpoint: Option<&str>,
) -> Result<Vec<Target>, ResolveError> {
    let first = resolve_target(ctx, model, endpoint).await?;
    let mut out = vec![first.clone()];
    if endpoint.is_some() {
        return Ok(out);
    }
    let probes = probe::probe_all(&first.config).await;
    for p in probes {
        if !p.up || p.name == first.resolved.endpoint {
            continue;
        }
        let Some(m) = p.models.iter().find(|m| m.id == first.resolved.served_id) else {
            continue;
        };
        let Some(ep) = first.config.endpoint(&p.name).cloned() else {
            continue;
        };
        let mut resolved = first.resolved.clone();
        resolved.endpoint = p.name.clone();
        resolved.base_url = ep.base_url.clone();
        // The same fallback as the first target's: the model's own
        // `window:` (or `context:`) when this server says none.
        let fallback = first
            .resolved
            .context
            .filter(|_| first.resolved.context_source == Some(probe::ContextSource::Config));
        (resolved.context, resolved.context_source) = match (m.context, fallback) {
            (Some(c), _) => (Some(c), m.context_source),
            (None, Some(c)) => (Some(c), Some(probe::ContextSource::Config)),
            (None, None) => (None, None),
        };
        resolved.queued_note = None;
        out.push(Target {
            config: first.config.clone(),
            resolved,
            backend: config::Backend::parse(&p.backend).unwrap_or(config::Backend::Other),
            endpoint: ep,
            probe: p,
        });
    }
    Ok(out)
}

/// Load, probe and resolve `model` (or the default) on `endpoint` (or any).
pub async fn resolve_target(
    ctx: &crate::context::Context,
    model: Option<&str>,
    endpoint: Option<&str>,
) -> Result<Target, ResolveError> {
    let loaded = config::load(&ctx.discovery())?;
    let probes = probe::probe_all(&loaded.config).await;
    let resolved =
        resolve(&loaded.config, &probes, model, endpoint).map_err(ResolveError::Unavailable)?;
    let ep = loaded
        .config
        .endpoint(&resolved.endpoint)
        .cloned()
        .ok_or_else(|| {
            ResolveError::Invalid(format!(
                "endpoint `{}` vanished from the config",
                resolved.endpoint
            ))
        })?;
    let Some(status) = probes.into_iter().find(|p| p.name == resolved.endpoint) else {
        return Err(ResolveError::Invalid(format!(
            "endpoint `{}` has no probe result",
            resolved.endpoint
        )));
    };
    let backend = config::Backend::parse(&status.backend).unwrap_or(config::Backend::Other);
    Ok(Target {
        config: loaded.config.clone(),
        resolved,
        endpoint: ep,
        backend,
        probe: status,
    })
}
