//! `defaults.otel`: where `serve` (and every command) sends its
//! OpenTelemetry when no `OTEL_*` variable says otherwise.
//!
//! Claude Code does not pass `OTEL_*` variables to the MCP servers it
//! starts, so `serve` cannot inherit them: the user's config says the same
//! things here. Headers may carry credentials, so the file names the
//! environment variable that holds each value (`headers_env`), never the
//! value. Like every key that sends something somewhere, `defaults.otel` is
//! read only from the user's own config or a trusted project's
//! ([`super::trust`]).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `defaults.otel` as written.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename = "otel (a mapping)")]
pub(super) struct OtelShape {
    pub endpoint: Option<String>,
    pub traces_endpoint: Option<String>,
    pub metrics_endpoint: Option<String>,
    pub protocol: Option<String>,
    pub traces: Option<bool>,
    pub metrics: Option<bool>,
    pub headers_env: Option<BTreeMap<String, String>>,
    pub service_name: Option<String>,
    pub resource_attributes: Option<BTreeMap<String, String>>,
    pub delegate: Option<bool>,
}

/// `defaults.otel`, checked. Every field unset: telemetry stays off unless
/// the `OTEL_*` variables turn it on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OtelConfig {
    /// The OTLP/HTTP base URL (`/v1/traces` and `/v1/metrics` are added).
    pub endpoint: Option<String>,
    /// The full URL for spans, as given.
    pub traces_endpoint: Option<String>,
    /// The full URL for metrics, as given.
    pub metrics_endpoint: Option<String>,
    /// `http/protobuf` (the default), `http/json` or `grpc` (refused).
    pub protocol: Option<String>,
    /// Export spans (like `OTEL_TRACES_EXPORTER=otlp`).
    pub traces: bool,
    /// Export metrics (like `OTEL_METRICS_EXPORTER=otlp`).
    pub metrics: bool,
    /// Header name → the environment variable that holds its value.
    pub headers_env: BTreeMap<String, String>,
    pub service_name: Option<String>,
    pub resource_attributes: BTreeMap<String, String>,
    /// Turn the delegate's own Claude Code telemetry on (like
    /// `CLAUDE_CODE_ENABLE_TELEMETRY=1`), tagged with the job's id.
    pub delegate: bool,
}

fn text(s: &Option<String>) -> Option<String> {
    s.as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

fn env_name(v: &str) -> bool {
    !v.is_empty()
        && !v.starts_with(|c: char| c.is_ascii_digit())
        && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn url_ok(key: &str, v: Option<String>, warnings: &mut Vec<String>) -> Option<String> {
    let v = v?;
    match url::Url::parse(&v) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => Some(v),
        _ => {
            warnings.push(format!(
                "defaults.otel.{key} = `{v}` is not an http(s) URL; ignored (for example http://localhost:4318)"
            ));
            None
        }
    }
}

/// Check `defaults.otel`; a bad entry is a warning and is left out.
pub(super) fn build(shape: &OtelShape, warnings: &mut Vec<String>) -> OtelConfig {
    let mut headers_env = BTreeMap::new();
    for (name, var) in shape.headers_env.iter().flatten() {
        let header_ok = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
        if header_ok && env_name(var) {
            headers_env.insert(name.to_ascii_lowercase(), var.clone());
        } else {
            warnings.push(format!(
                "defaults.otel.headers_env.{name}: `{var}` must name an environment variable (letters, digits, _) for a header name of letters, digits and -; ignored"
            ));
        }
    }
    let protocol = text(&shape.protocol).map(|p| p.to_ascii_lowercase());
    if let Some(p) = &protocol
        && !matches!(p.as_str(), "http/protobuf" | "http/json" | "grpc")
    {
        warnings.push(format!(
            "defaults.otel.protocol = `{p}` is not http/protobuf, http/json or grpc; using http/protobuf"
        ));
    }
    OtelConfig {
        endpoint: url_ok("endpoint", text(&shape.endpoint), warnings),
        traces_endpoint: url_ok("traces_endpoint", text(&shape.traces_endpoint), warnings),
        metrics_endpoint: url_ok("metrics_endpoint", text(&shape.metrics_endpoint), warnings),
        protocol: protocol
            .filter(|p| matches!(p.as_str(), "http/protobuf" | "http/json" | "grpc")),
        traces: shape.traces.unwrap_or(false),
        metrics: shape.metrics.unwrap_or(false),
        headers_env,
        service_name: text(&shape.service_name),
        resource_attributes: shape.resource_attributes.clone().unwrap_or_default(),
        delegate: shape.delegate.unwrap_or(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_entry_is_a_warning_and_left_out() {
        let shape: OtelShape = serde_yaml_ng::from_str(
            "endpoint: ftp://x\nprotocol: GRPC\ntraces: true\nheaders_env:\n  Authorization: OTEL_TOKEN\n  x-bad: 'not a var'\n",
        )
        .unwrap();
        let mut w = Vec::new();
        let c = build(&shape, &mut w);
        assert_eq!(c.endpoint, None);
        assert_eq!(c.protocol.as_deref(), Some("grpc"));
        assert!(c.traces && !c.metrics && !c.delegate);
        assert_eq!(
            c.headers_env.into_iter().collect::<Vec<_>>(),
            vec![("authorization".to_string(), "OTEL_TOKEN".to_string())]
        );
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("x-bad"), "{w:?}");
        assert!(w[1].contains("ftp://x"), "{w:?}");
    }
}
