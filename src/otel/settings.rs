//! What telemetry is on and where it goes: the standard `OTEL_*`
//! variables over `defaults.otel`, resolved once per process.
//!
//! Off unless a switch turns it on: `OTEL_TRACES_EXPORTER=otlp` or
//! `OTEL_METRICS_EXPORTER=otlp` (or `defaults.otel.traces` / `metrics`).
//! An endpoint alone turns nothing on, and `OTEL_SDK_DISABLED=true` turns
//! everything off. A variable wins over the config, key by key, as the
//! OpenTelemetry specification has it for programmatic defaults.
//!
//! Header values are credentials: they are kept as [`Secret`], whose
//! `Debug` and `Display` print nothing of them.

use crate::config::otel::OtelConfig;

/// The default OTLP/HTTP base URL (the collector's HTTP port).
pub const DEFAULT_ENDPOINT: &str = "http://localhost:4318";

/// How long one export may take when `OTEL_EXPORTER_OTLP_TIMEOUT` does not
/// say (the specification's 10 s).
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;

/// The sentence for a gRPC setting: not built in, and the fix.
pub const GRPC_REFUSED: &str = "OTLP over gRPC is not built into localagents: use http/protobuf on port 4318 (OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf, OTEL_EXPORTER_OTLP_ENDPOINT=http://<collector>:4318, or defaults.otel.protocol)";

/// A header value: never logged, printed or returned.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(v: impl Into<String>) -> Secret {
        Secret(v.into())
    }

    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The OTLP encoding over HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    HttpProtobuf,
    HttpJson,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::HttpProtobuf => "http/protobuf",
            Protocol::HttpJson => "http/json",
        }
    }
}

/// One signal's exporter: where, how, with which headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signal {
    pub url: String,
    pub protocol: Protocol,
    pub headers: Vec<(String, Secret)>,
    pub timeout_ms: u64,
}

/// The delegate's own Claude Code telemetry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delegate {
    /// On: the user turned Claude Code's telemetry on.
    pub on: bool,
    /// The variables the user's own Claude Code would get that the
    /// delegate does not inherit (from `defaults.otel`), headers included:
    /// given only when `on`.
    pub env: Vec<(String, Secret)>,
    /// The user's `OTEL_RESOURCE_ATTRIBUTES`, to which the job's id is added.
    pub resource_attributes: Option<String>,
}

/// Telemetry as resolved for this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub traces: Option<Signal>,
    pub metrics: Option<Signal>,
    pub service_name: String,
    pub resource: Vec<(String, String)>,
    pub delegate: Delegate,
}

/// What [`resolve`] found: the settings (`None`: telemetry is off) and the
/// problems, each one sentence with its fix (said by `doctor` and logged).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    pub settings: Option<Settings>,
    pub problems: Vec<String>,
    /// Why it is off, when it is: `OTEL_SDK_DISABLED`, or no switch.
    pub off_because: Option<String>,
}

fn truthy(v: &str) -> bool {
    matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
}

/// `OTEL_TRACES_EXPORTER` / `OTEL_METRICS_EXPORTER`: `Some(true)` when it
/// names `otlp`, `Some(false)` for `none` or another exporter (said as a
/// problem), `None` when unset.
fn exporter_switch(var: &str, v: Option<String>, problems: &mut Vec<String>) -> Option<bool> {
    let v = v?;
    let names: Vec<String> = v
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    let otlp = names.iter().any(|n| n == "otlp");
    for n in names.iter().filter(|n| !matches!(n.as_str(), "otlp" | "none")) {
        problems.push(format!(
            "{var}={n}: localagents exports only otlp; set {var}=otlp"
        ));
    }
    Some(otlp)
}

/// `k=v,k2=v2`, values percent-decoded (the W3C baggage form the
/// specification uses for headers and resource attributes).
pub fn parse_pairs(v: &str) -> Vec<(String, String)> {
    v.split(',')
        .filter_map(|p| {
            let (k, val) = p.split_once('=')?;
            let k = k.trim();
            (!k.is_empty()).then(|| (k.to_string(), percent_decode(val.trim())))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(h) = b.get(i + 1..i + 3)
            && let Ok(n) = u8::from_str_radix(std::str::from_utf8(h).unwrap_or("zz"), 16)
        {
            out.push(n);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A header value as `OTEL_EXPORTER_OTLP_HEADERS` carries it: the
/// characters that would end or split a pair (`,` `=` `%`, and space)
/// percent-encoded, as the readers decode them.
fn percent_encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            ',' | '=' | '%' | ' ' => out.push_str(&format!("%{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// One signal: `path` is `traces` or `metrics`.
fn signal(
    env: &dyn Fn(&str) -> Option<String>,
    cfg: &OtelConfig,
    path: &str,
    problems: &mut Vec<String>,
) -> Option<Signal> {
    let upper = path.to_ascii_uppercase();
    let protocol = env(&format!("OTEL_EXPORTER_OTLP_{upper}_PROTOCOL"))
        .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .or_else(|| cfg.protocol.clone())
        .map(|p| p.trim().to_ascii_lowercase());
    let protocol = match protocol.as_deref() {
        None | Some("http/protobuf") => Protocol::HttpProtobuf,
        Some("http/json") => Protocol::HttpJson,
        Some("grpc") => {
            if !problems.iter().any(|p| p == GRPC_REFUSED) {
                problems.push(GRPC_REFUSED.to_string());
            }
            return None;
        }
        Some(other) => {
            problems.push(format!(
                "OTLP protocol `{other}` is not http/protobuf or http/json; using http/protobuf"
            ));
            Protocol::HttpProtobuf
        }
    };
    let own = match path {
        "traces" => cfg.traces_endpoint.clone(),
        _ => cfg.metrics_endpoint.clone(),
    };
    let url = env(&format!("OTEL_EXPORTER_OTLP_{upper}_ENDPOINT"))
        .or(own)
        .unwrap_or_else(|| {
            let base = env("OTEL_EXPORTER_OTLP_ENDPOINT")
                .or_else(|| cfg.endpoint.clone())
                .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
            format!("{}/v1/{path}", base.trim_end_matches('/'))
        });
    if url::Url::parse(&url).map_or(true, |u| !matches!(u.scheme(), "http" | "https")) {
        problems.push(format!(
            "the OTLP {path} endpoint `{url}` is not an http(s) URL: set OTEL_EXPORTER_OTLP_ENDPOINT=http://<collector>:4318"
        ));
        return None;
    }
    let mut headers: Vec<(String, Secret)> = Vec::new();
    for (name, var) in &cfg.headers_env {
        match env(var) {
            Some(v) => headers.push((name.clone(), Secret::new(v))),
            None => problems.push(format!(
                "defaults.otel.headers_env.{name} names {var}, which is not set: export {var} before starting localagents"
            )),
        }
    }
    let from_env = env(&format!("OTEL_EXPORTER_OTLP_{upper}_HEADERS"))
        .or_else(|| env("OTEL_EXPORTER_OTLP_HEADERS"));
    for (k, v) in parse_pairs(from_env.as_deref().unwrap_or("")) {
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case(&k));
        headers.push((k.to_ascii_lowercase(), Secret::new(v)));
    }
    let timeout_ms = env(&format!("OTEL_EXPORTER_OTLP_{upper}_TIMEOUT"))
        .or_else(|| env("OTEL_EXPORTER_OTLP_TIMEOUT"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(DEFAULT_TIMEOUT_MS)
        .clamp(1, 600_000);
    Some(Signal {
        url,
        protocol,
        headers,
        timeout_ms,
    })
}

/// The delegate's telemetry: on when the user turned Claude Code's on.
fn delegate(env: &dyn Fn(&str) -> Option<String>, cfg: &OtelConfig) -> Delegate {
    let on = env("CLAUDE_CODE_ENABLE_TELEMETRY").is_some_and(|v| truthy(&v)) || cfg.delegate;
    if !on {
        return Delegate::default();
    }
    // What the user's environment does not already give the delegate
    // (it inherits the environment): the config's settings as variables.
    let mut out: Vec<(String, Secret)> = vec![(
        "CLAUDE_CODE_ENABLE_TELEMETRY".into(),
        Secret::new("1"),
    )];
    let mut set = |k: &str, v: Option<String>| {
        if env(k).is_none()
            && let Some(v) = v
        {
            out.push((k.to_string(), Secret::new(v)));
        }
    };
    set("OTEL_EXPORTER_OTLP_ENDPOINT", cfg.endpoint.clone());
    set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", cfg.traces_endpoint.clone());
    set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", cfg.metrics_endpoint.clone());
    set(
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        cfg.protocol.clone().filter(|p| p != "grpc"),
    );
    set("OTEL_METRICS_EXPORTER", cfg.metrics.then(|| "otlp".into()));
    set("OTEL_TRACES_EXPORTER", cfg.traces.then(|| "otlp".into()));
    let headers: Vec<String> = cfg
        .headers_env
        .iter()
        .filter_map(|(name, var)| Some(format!("{name}={}", percent_encode(&env(var)?))))
        .collect();
    if !headers.is_empty() {
        set("OTEL_EXPORTER_OTLP_HEADERS", Some(headers.join(",")));
    }
    let mut attrs = env("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default();
    if !cfg.resource_attributes.is_empty() && attrs.is_empty() {
        attrs = cfg
            .resource_attributes
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
    }
    Delegate {
        on,
        env: out,
        resource_attributes: Some(attrs).filter(|a| !a.trim().is_empty()),
    }
}

/// Resolve this process's telemetry from `env` (the `OTEL_*` variables)
/// over `cfg` (`defaults.otel`).
pub fn resolve(env: &dyn Fn(&str) -> Option<String>, cfg: &OtelConfig) -> Resolved {
    let env = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    let mut problems = Vec::new();
    if env("OTEL_SDK_DISABLED").is_some_and(|v| truthy(&v)) {
        return Resolved {
            settings: None,
            problems,
            off_because: Some("OTEL_SDK_DISABLED is set".into()),
        };
    }
    let traces_on =
        exporter_switch("OTEL_TRACES_EXPORTER", env("OTEL_TRACES_EXPORTER"), &mut problems)
            .unwrap_or(cfg.traces);
    let metrics_on =
        exporter_switch("OTEL_METRICS_EXPORTER", env("OTEL_METRICS_EXPORTER"), &mut problems)
            .unwrap_or(cfg.metrics);
    let traces = traces_on
        .then(|| signal(&env, cfg, "traces", &mut problems))
        .flatten();
    let metrics = metrics_on
        .then(|| signal(&env, cfg, "metrics", &mut problems))
        .flatten();
    if traces.is_none() && metrics.is_none() {
        let off = if traces_on || metrics_on {
            "its exporters could not be set up"
        } else {
            "no switch is on (OTEL_TRACES_EXPORTER=otlp, OTEL_METRICS_EXPORTER=otlp or defaults.otel.traces / metrics)"
        };
        return Resolved {
            settings: None,
            problems,
            off_because: Some(off.into()),
        };
    }
    let mut resource: Vec<(String, String)> = cfg
        .resource_attributes
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in parse_pairs(&env("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default()) {
        resource.retain(|(n, _)| n != &k);
        resource.push((k, v));
    }
    let service_name = env("OTEL_SERVICE_NAME")
        .or_else(|| cfg.service_name.clone())
        .or_else(|| {
            resource
                .iter()
                .find(|(k, _)| k == "service.name")
                .map(|(_, v)| v.clone())
        })
        .unwrap_or_else(|| "localagents".into());
    resource.retain(|(k, _)| k != "service.name");
    Resolved {
        settings: Some(Settings {
            traces,
            metrics,
            service_name,
            resource,
            delegate: delegate(&env, cfg),
        }),
        problems,
        off_because: None,
    }
}

/// [`resolve`] from this process's environment.
pub fn from_process(cfg: &OtelConfig) -> Resolved {
    resolve(&|k| std::env::var(k).ok(), cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)], cfg: &OtelConfig) -> Resolved {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        resolve(
            &move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()),
            cfg,
        )
    }

    #[test]
    fn off_without_a_switch_and_an_endpoint_alone_turns_nothing_on() {
        let r = with(&[], &OtelConfig::default());
        assert_eq!(r.settings, None);
        let r = with(
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")],
            &OtelConfig::default(),
        );
        assert_eq!(r.settings, None);
        assert!(r.off_because.unwrap().contains("no switch"));
    }

    #[test]
    fn the_standard_variables_turn_it_on_and_win_over_the_config() {
        let cfg = OtelConfig {
            endpoint: Some("http://from-config:4318".into()),
            protocol: Some("http/json".into()),
            metrics: true,
            ..OtelConfig::default()
        };
        let r = with(
            &[
                ("OTEL_TRACES_EXPORTER", "otlp"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/"),
                ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:9/x"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20abc,x-a=1"),
                ("OTEL_SERVICE_NAME", "me"),
                ("OTEL_RESOURCE_ATTRIBUTES", "team=infra,service.name=ignored"),
            ],
            &cfg,
        );
        let s = r.settings.unwrap();
        let t = s.traces.unwrap();
        assert_eq!(t.url, "http://c:4318/v1/traces");
        assert_eq!(t.protocol, Protocol::HttpJson, "the config's, no variable says");
        assert_eq!(t.headers[0].0, "authorization");
        assert_eq!(t.headers[0].1.expose(), "Bearer abc");
        assert_eq!(format!("{:?}", t.headers), r#"[("authorization", <redacted>), ("x-a", <redacted>)]"#);
        assert_eq!(s.metrics.unwrap().url, "http://m:9/x");
        assert_eq!(s.service_name, "me");
        assert_eq!(s.resource, vec![("team".to_string(), "infra".to_string())]);
        assert!(!s.delegate.on);
    }

    #[test]
    fn grpc_is_refused_with_the_fix_and_disabled_means_off() {
        let r = with(
            &[
                ("OTEL_TRACES_EXPORTER", "otlp"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ],
            &OtelConfig::default(),
        );
        assert_eq!(r.settings, None);
        assert_eq!(r.problems, vec![GRPC_REFUSED.to_string()]);
        let r = with(
            &[("OTEL_TRACES_EXPORTER", "otlp"), ("OTEL_SDK_DISABLED", "true")],
            &OtelConfig::default(),
        );
        assert_eq!(r.settings, None);
    }

    #[test]
    fn headers_env_is_read_and_goes_to_the_delegate_only_when_its_telemetry_is_on() {
        let mut cfg = OtelConfig {
            traces: true,
            headers_env: [("authorization".to_string(), "OTEL_TOKEN".to_string())].into(),
            ..OtelConfig::default()
        };
        let vars = [("OTEL_TOKEN", "Bearer s3cret")];
        let s = with(&vars, &cfg).settings.unwrap();
        assert_eq!(s.traces.unwrap().headers[0].1.expose(), "Bearer s3cret");
        assert_eq!(s.delegate, Delegate::default());
        cfg.delegate = true;
        let d = with(&vars, &cfg).settings.unwrap().delegate;
        assert!(d.on);
        let h = d
            .env
            .iter()
            .find(|(k, _)| k == "OTEL_EXPORTER_OTLP_HEADERS")
            .unwrap();
        assert_eq!(h.1.expose(), "authorization=Bearer%20s3cret");
        assert_eq!(parse_pairs(h.1.expose())[0].1, "Bearer s3cret");
        let missing = with(&[], &cfg);
        assert!(missing.problems[0].contains("OTEL_TOKEN, which is not set"));
    }
}
