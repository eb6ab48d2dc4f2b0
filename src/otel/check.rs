//! What `doctor` says of telemetry: on or off and why, the problems of
//! its settings, and whether each collector URL answers.

use std::time::Duration;

use super::settings::{self, Resolved};
use crate::config::otel::OtelConfig;

/// How long `doctor` waits for a collector.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// One line of `doctor`: `warn` or not, and the sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub warn: bool,
    pub text: String,
}

fn ok(text: String) -> Line {
    Line { warn: false, text }
}

fn warn(text: String) -> Line {
    Line { warn: true, text }
}

/// Does the collector at `url` answer an empty export (an empty protobuf
/// message: zero bytes) within [`ANSWER_WITHIN`]? Its HTTP status, or why not.
async fn answers(s: &settings::Signal) -> Result<u16, String> {
    let client = crate::probe::http_client();
    let mut req = client
        .post(&s.url)
        .timeout(ANSWER_WITHIN)
        .header("content-type", match s.protocol {
            settings::Protocol::HttpProtobuf => "application/x-protobuf",
            settings::Protocol::HttpJson => "application/json",
        })
        .body(match s.protocol {
            settings::Protocol::HttpProtobuf => "",
            settings::Protocol::HttpJson => "{}",
        });
    for (k, v) in &s.headers {
        req = req.header(k.as_str(), v.expose());
    }
    match req.send().await {
        Ok(r) => Ok(r.status().as_u16()),
        Err(e) if e.is_timeout() => Err(format!(
            "no answer within {} s",
            ANSWER_WITHIN.as_secs()
        )),
        Err(e) => Err(crate::probe::classify::error_chain(&e)),
    }
}

/// `doctor`'s lines on telemetry for `cfg` (`defaults.otel`) and this
/// process's `OTEL_*` variables.
pub async fn lines(cfg: &OtelConfig) -> Vec<Line> {
    let r: Resolved = settings::from_process(cfg);
    let mut out: Vec<Line> = r
        .problems
        .iter()
        .map(|p| warn(format!("telemetry: {p}")))
        .collect();
    let Some(s) = r.settings else {
        let why = r.off_because.unwrap_or_default();
        out.push(ok(format!("telemetry: off ({why})")));
        return out;
    };
    for (name, sig) in [("traces", &s.traces), ("metrics", &s.metrics)] {
        let Some(sig) = sig else { continue };
        let what = format!("telemetry: {name} to {} ({})", sig.url, sig.protocol.name());
        out.push(match answers(sig).await {
            Ok(code) if code < 400 || code == 415 => ok(format!("{what}; the collector answers (HTTP {code})")),
            Ok(code) => warn(format!(
                "{what}; the collector answers HTTP {code}: check the URL's path and the headers it wants (OTEL_EXPORTER_OTLP_HEADERS or defaults.otel.headers_env)"
            )),
            Err(why) => warn(format!(
                "{what}; the collector does not answer ({why}): jobs run, their telemetry is dropped; start the collector or fix OTEL_EXPORTER_OTLP_ENDPOINT"
            )),
        });
    }
    if s.delegate.on {
        out.push(ok(
            "telemetry: the delegate's own Claude Code telemetry is on, tagged localagents.job.id=<job>".into(),
        ));
    }
    out
}
