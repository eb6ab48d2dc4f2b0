//! Turning the merged `models.yaml` into a [`Config`]: the checks of
//! each endpoint's URL and name, of the model entries and of the
//! defaults, and the prices. A problem with one entry becomes a warning
//! and the entry is dropped or defaulted; the keys and their defaults
//! live in [`super::schema`].

use indexmap::IndexMap;
use serde_yaml_ng::Value;

use super::schema::{
    Backend, Config, DEFAULT_RUNAWAY_LIMIT, DEFAULT_SESSION_HEADER, Defaults, DefaultsShape,
    Endpoint, EndpointShape, FileShape, ModelEntry, ModelShape, PriceShape, RESERVED_HEADERS,
    ClearToolResults, Thinking, WireSetting, home_path, key_safe_url,
};

/// A string that says something (empty ones count as unset).
fn text(s: &Option<String>) -> Option<String> {
    s.clone().filter(|v| !v.trim().is_empty())
}

fn valid_endpoint_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Check an endpoint URL: http or https with a host. Returns it without a
/// trailing slash, or a sentence saying what is wrong.
pub fn check_base_url(raw: &str) -> Result<String, String> {
    let url = url::Url::parse(raw.trim()).map_err(|e| format!("`{raw}` is not a URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "`{raw}` uses scheme `{}`; only http and https are allowed",
            url.scheme()
        ));
    }
    if url.host_str().is_none() {
        return Err(format!("`{raw}` has no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "`{raw}` has a query or fragment; give the bare base URL"
        ));
    }
    Ok(url.as_str().trim_end_matches('/').to_string())
}

/// Turn the merged value into a [`Config`]. Problems with single entries
/// become warnings and the entry is dropped or defaulted.
pub(super) fn build(merged: Value) -> (Config, Vec<String>) {
    let mut warnings = Vec::new();
    if merged.as_mapping().is_none_or(|m| m.is_empty()) {
        return (Config::builtin(), warnings);
    }
    let shape: FileShape = match serde_yaml_ng::from_value(merged) {
        Ok(s) => s,
        Err(e) => {
            warnings.push(format!(
                "the merged config does not fit together ({e}); using the built-in default"
            ));
            return (Config::builtin(), warnings);
        }
    };
    let mut endpoints: Vec<Endpoint> = shape
        .endpoints
        .iter()
        .flatten()
        .filter_map(|(name, entry)| build_endpoint(name, entry.as_ref(), &mut warnings))
        .collect();
    let models = build_models(shape.models.as_ref(), &endpoints, &mut warnings);
    let mut defaults = Defaults::default();
    if let Some(d) = &shape.defaults {
        apply_job_defaults(&mut defaults, d, &mut warnings);
        apply_guard_defaults(&mut defaults, d, &mut warnings);
    }
    let prices = build_prices(shape.prices.as_ref(), &mut warnings);
    let trusted_projects = shape
        .trusted_projects
        .iter()
        .flatten()
        .filter_map(|p| home_path(p))
        .collect();
    if shape.endpoints.is_none() {
        // Only models or defaults were written: keep the zero-config endpoint.
        endpoints = Config::builtin().endpoints;
    } else if endpoints.is_empty() {
        warnings.push(
            "no usable endpoint in the config: add one under `endpoints:` (e.g. base_url: http://127.0.0.1:8080)"
                .into(),
        );
    }
    (
        Config {
            endpoints,
            models,
            defaults,
            trusted_projects,
            prices,
        },
        warnings,
    )
}

/// One entry of `endpoints`, or none (with a warning saying why) when it
/// cannot be used.
fn build_endpoint(
    name: &str,
    entry: Option<&EndpointShape>,
    warnings: &mut Vec<String>,
) -> Option<Endpoint> {
    if !valid_endpoint_name(name) {
        warnings.push(format!(
            "endpoint `{name}`: names may use only letters, digits, `_`, `.` and `-`; it is skipped"
        ));
        return None;
    }
    let empty = EndpointShape::default();
    let m = entry.unwrap_or(&empty);
    let Some(raw_url) = text(&m.base_url) else {
        warnings.push(format!(
            "endpoint `{name}` has no base_url; it is skipped (add e.g. `base_url: http://127.0.0.1:8080`)"
        ));
        return None;
    };
    let base_url = match check_base_url(&raw_url) {
        Ok(u) => u,
        Err(why) => {
            warnings.push(format!("endpoint `{name}`: {why}; it is skipped"));
            return None;
        }
    };
    let vllm_router = text(&m.backend).is_some_and(|b| is_vllm_router(&b));
    let backend = match text(&m.backend) {
        None => None,
        Some(b) if b.eq_ignore_ascii_case("auto") || is_vllm_router(&b) => None,
        Some(b) => match Backend::parse(&b) {
            Some(b) => Some(b),
            None => {
                warnings.push(format!(
                    "endpoint `{name}`: unknown backend `{b}` (use {}); it will be detected",
                    Backend::names()
                ));
                None
            }
        },
    };
    let env: IndexMap<String, String> = m
        .env
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.text()))
        .collect();
    let api_key_env = text(&m.api_key_env);
    if let Some(var) = &api_key_env
        && std::env::var_os(var).is_none()
    {
        warnings.push(format!(
            "endpoint `{name}`: api_key_env names `{var}`, which is not set in this environment; export it where localagents runs"
        ));
    }
    let allow_insecure_key = m.allow_insecure_key.unwrap_or(false);
    if api_key_env.is_some() && !allow_insecure_key && !key_safe_url(&base_url) {
        warnings.push(format!(
            "endpoint `{name}`: its key is not sent: {base_url} is plain http to a host that is not loopback or private; use https, or set allow_insecure_key: true on it if you accept that"
        ));
    }
    let session_header = session_header(name, m.session_header.as_deref(), warnings);
    let wire = text(&m.wire).and_then(|w| {
        let parsed = WireSetting::parse(&w);
        if parsed.is_none() {
            warnings.push(format!(
                "endpoint `{name}`: unknown wire `{w}` (use messages or chat); the shim's rule decides"
            ));
        }
        parsed
    });
    Some(Endpoint {
        wire,
        window: m.window.filter(|w| *w > 0),
        name: name.to_string(),
        base_url,
        allow_insecure_key,
        session_header,
        vllm_router,
        backend,
        host: text(&m.host),
        notes: text(&m.notes),
        env,
        api_key_env,
    })
}

/// `backend: vllm-router` (or `vllm_router`, `vllm router`).
fn is_vllm_router(b: &str) -> bool {
    matches!(
        b.trim()
            .to_ascii_lowercase()
            .replace(['_', ' '], "-")
            .as_str(),
        "vllm-router"
    )
}

/// The endpoint's session header: the default when unset, none for `""`,
/// else the name given when it is a header name localagents may send (a
/// bad one falls back to the default, with a warning naming why).
fn session_header(name: &str, given: Option<&str>, warnings: &mut Vec<String>) -> Option<String> {
    let Some(given) = given else {
        return Some(DEFAULT_SESSION_HEADER.into());
    };
    let h = given.trim();
    if h.is_empty() {
        return None;
    }
    let why = if reqwest::header::HeaderName::from_bytes(h.as_bytes()).is_err() {
        Some("is not an HTTP header name (letters, digits and `-`)")
    } else if RESERVED_HEADERS.contains(&h.to_ascii_lowercase().as_str()) {
        Some("is a header that carries a credential or the request's framing")
    } else {
        None
    };
    match why {
        Some(why) => {
            warnings.push(format!(
                "endpoint `{name}`: session_header `{}` {why}; `{DEFAULT_SESSION_HEADER}` is sent instead (set `session_header: \"\"` to send none)",
                crate::fmt::one_line(h, 60)
            ));
            Some(DEFAULT_SESSION_HEADER.into())
        }
        None => Some(h.to_string()),
    }
}

/// The menu of models; one naming an endpoint that is not defined is kept,
/// with a warning.
fn build_models(
    shapes: Option<&IndexMap<String, Option<ModelShape>>>,
    endpoints: &[Endpoint],
    warnings: &mut Vec<String>,
) -> Vec<ModelEntry> {
    let mut models = Vec::new();
    for (name, entry) in shapes.into_iter().flatten() {
        let empty = ModelShape::default();
        let m = entry.as_ref().unwrap_or(&empty);
        let endpoint = text(&m.endpoint);
        if let Some(e) = &endpoint
            && !endpoints.iter().any(|x: &Endpoint| &x.name == e)
        {
            warnings.push(format!(
                "model `{name}`: endpoint `{e}` is not defined under `endpoints`"
            ));
        }
        models.push(ModelEntry {
            name: name.clone(),
            notes: text(&m.notes),
            host: text(&m.host),
            served_name: text(&m.served_name),
            endpoint,
            context: m.window.or(m.context),
            bring_up: text(&m.bring_up),
        });
    }
    models
}

/// The `defaults` that shape a job: model, permissions, tools, timeouts,
/// Claude's own settings.
fn apply_job_defaults(defaults: &mut Defaults, d: &DefaultsShape, warnings: &mut Vec<String>) {
    if let Some(v) = text(&d.model) {
        defaults.model = Some(v);
    }
    if let Some(v) = text(&d.permission_mode) {
        defaults.permission_mode = v;
    }
    if let Some(v) = &d.allowed_tools {
        defaults.allowed_tools = v.clone();
    }
    if let Some(v) = &d.disallowed_tools {
        defaults.disallowed_tools = v.clone();
    }
    if let Some(v) = &d.setting_sources {
        defaults.setting_sources = v.clone();
    }
    if let Some(v) = d.max_turns {
        defaults.max_turns = v;
    }
    if let Some(v) = d.timeout_s {
        defaults.timeout_s = v;
    }
    if let Some(v) = d.probe_timeout_s {
        if v > 0.0 && v <= 60.0 {
            defaults.probe_timeout_s = v;
        } else {
            warnings.push(format!(
                "defaults.probe_timeout_s = {v} is out of range (0, 60]; using 2.5"
            ));
        }
    }
    if let Some(v) = text(&d.system_prompt_append) {
        defaults.system_prompt_append = v;
    }
    if let Some(v) = d.dump_requests {
        defaults.dump_requests = v;
    }
    if let Some(v) = text(&d.claude_path) {
        defaults.claude_path = Some(v);
    }
    if let Some(v) = d.stream_idle_timeout_s {
        defaults.stream_idle_timeout_s = v.max(1);
    }
    if let Some(v) = text(&d.mcp_config) {
        defaults.mcp_config = Some(v);
    }
    if let Some(v) = d.first_byte_timeout_s {
        defaults.first_byte_timeout_s = Some(v.clamp(1, 24 * 3600));
    }
    if let Some(v) = d.allow_bypass_permissions {
        defaults.allow_bypass_permissions = v;
    }
}

/// `defaults.keep_days`: at most a century.
fn apply_keep_days(defaults: &mut Defaults, d: &DefaultsShape, warnings: &mut Vec<String>) {
    if let Some(v) = d.keep_days {
        if v <= super::schema::MAX_KEEP_DAYS {
            defaults.keep_days = v;
        } else {
            warnings.push(format!(
                "defaults.keep_days = {v} is over {} (a century); using {} (0 keeps every job)",
                super::schema::MAX_KEEP_DAYS,
                super::schema::DEFAULT_KEEP_DAYS
            ));
        }
    }
}

/// The `defaults` that bound what a job may do: roots, sandbox, rounds,
/// load and acceptance timeouts, the loop guard, thinking.
fn apply_guard_defaults(defaults: &mut Defaults, d: &DefaultsShape, warnings: &mut Vec<String>) {
    for r in d.allowed_roots.iter().flatten() {
        match home_path(r) {
            Some(p) => defaults.allowed_roots.push(p),
            None => warnings.push(format!(
                "defaults.allowed_roots: `{r}` is not an absolute path (or one under ~/); it is ignored"
            )),
        }
    }
    if let Some(v) = d.sandbox {
        defaults.sandbox = v;
    }
    if let Some(v) = d.queue {
        defaults.queue = v;
    }
    if let Some(v) = d.prewarm {
        defaults.prewarm = v;
    }
    if let Some(v) = d.fix_rounds {
        if v <= 10 {
            defaults.fix_rounds = v;
        } else {
            warnings.push(format!("defaults.fix_rounds = {v} is over 10; using 2"));
        }
    }
    apply_keep_days(defaults, d, warnings);
    if let Some(v) = d.acceptance_timeout_s {
        defaults.acceptance_timeout_s = v.clamp(1, 7 * 24 * 3600);
    }
    if let Some(v) = d.load_timeout_s {
        defaults.load_timeout_s = v.clamp(1, 24 * 3600);
    }
    if let Some(v) = d.backend_fail_s {
        defaults.backend_fail_s = v.min(7 * 24 * 3600);
    }
    if let Some(v) = d
        .reference_model
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
    {
        defaults.reference_model = v.to_string();
    }
    if let Some(v) = d.loop_limit {
        if v == 0 || (2..=50).contains(&v) {
            defaults.loop_limit = v;
        } else {
            warnings.push(format!(
                "defaults.loop_limit = {v} is not 2 to 50; using 3 (0 turns the guard off)"
            ));
        }
    }
    if let Some(v) = d.runaway_limit {
        if v <= 20 {
            defaults.runaway_limit = v;
        } else {
            warnings.push(format!(
                "defaults.runaway_limit = {v} is over 20; using {DEFAULT_RUNAWAY_LIMIT} (0 turns the guard off)"
            ));
        }
    }
    if let Some(v) = d.thinking.as_deref() {
        match Thinking::parse(v) {
            Some(t) => defaults.thinking = t,
            None => warnings.push(format!(
                "defaults.thinking = `{v}` is not auto, keep or drop; using auto"
            )),
        }
    }
    if let Some(v) = d.window_budget {
        defaults.window_budget = v;
    }
    if let Some(o) = &d.otel {
        defaults.otel = Some(super::otel::build(o, warnings));
    }
    if let Some(v) = d.nudges {
        if v <= 3 {
            defaults.nudges = v;
        } else {
            warnings.push(format!(
                "defaults.nudges = {v} is more than 3; using 1 (a second nudge got the same answer again: 0 turns it off)"
            ));
        }
    }
    if let Some(v) = d.clear_tool_results.as_deref() {
        match ClearToolResults::parse(v) {
            Some(c) => defaults.clear_tool_results = c,
            None => warnings.push(format!(
                "defaults.clear_tool_results = `{v}` is not auto, on or off; using off"
            )),
        }
    }
}

/// `prices`, by model; an entry without both prices is ignored, with a
/// warning.
fn build_prices(
    shapes: Option<&IndexMap<String, PriceShape>>,
    warnings: &mut Vec<String>,
) -> IndexMap<String, super::prices::Price> {
    let mut prices = IndexMap::new();
    for (model, p) in shapes.into_iter().flatten() {
        match (p.input, p.output) {
            (Some(input), Some(output)) if input >= 0.0 && output >= 0.0 => {
                let cache_read = p.cache_read.filter(|c| *c >= 0.0).unwrap_or(input / 10.0);
                prices.insert(
                    model.clone(),
                    super::prices::Price {
                        input,
                        output,
                        cache_read,
                    },
                );
            }
            _ => warnings.push(format!(
                "prices.{model} needs input and output (USD per million tokens, not negative); ignored"
            )),
        }
    }
    prices
}
