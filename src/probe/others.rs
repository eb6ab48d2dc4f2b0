//! The servers beyond llama.cpp, vLLM, Ollama and LM Studio: SGLang, exo,
//! Docker Model Runner, Lemonade, LocalAI, llamafile, Jan, vllm-mlx,
//! mlx_lm.server, TabbyAPI and KoboldCpp. Which one answers, read from
//! the probe's one parallel round, and each model's real window where the
//! server says it. No I/O: `fetch.rs` asks the paths below and hands the
//! parsed answers here.
//!
//! Why a round of their own paths: several of them imitate the servers
//! localagents knew first. DMR, Lemonade, LocalAI, SGLang and KoboldCpp
//! answer Ollama's `/api/version` and `/api/tags`; KoboldCpp and TabbyAPI
//! answer llama.cpp's `/props`; SGLang lists `max_model_len` as vLLM does.
//! Taken for those, a job would get their slots, metrics and fixes. So
//! these are told apart first, by what only they say:
//!
//! | server | what tells it | its window |
//! |---|---|---|
//! | SGLang | `/v1/models` `owned_by: sglang` | `max_model_len` |
//! | exo | `owned_by: exo` | `context_length` (the model card's) |
//! | Docker Model Runner | `owned_by: docker` | `/engines/_configure` `context-size`, else `dmr.context_window` |
//! | Lemonade | `owned_by: lemonade` | `context_length`, else `/api/v1/slots` `n_ctx` |
//! | LocalAI | `/.well-known/localai.json` | none (`window:`) |
//! | llamafile | `owned_by: llamafile`, or a `Server: llamafile` header, or `/props` `build_info` `b<unix time>-…` | `/props` `n_ctx` |
//! | Jan | `owned_by: llama.cpp` (with the dot) | none (`window:`) |
//! | vllm-mlx | `owned_by: vllm-mlx` | none (`window:`) |
//! | mlx_lm.server | `Server: BaseHTTP/…` and no `owned_by` | none (`window:`) |
//! | TabbyAPI | `/.well-known/serviceinfo` `software.name: TabbyAPI` | `/v1/model` `parameters.max_seq_len` |
//! | KoboldCpp | `/api/extra/version` `result: KoboldCpp` | `/api/extra/true_max_context_length` |
//!
//! The sources of each shape are cited beside the stand-in that answers
//! with it (`tests/support/src/fake_others.rs`).

use serde::Deserialize;

use super::answer::{self, Field, Object};
use super::{ContextSource, EndpointStatus, ServedModel};
use crate::config::Backend;

/// The backend an `owned_by` names, for the servers here.
pub(super) fn owner(s: &str) -> Option<Backend> {
    Some(match s {
        "sglang" => Backend::Sglang,
        "exo" => Backend::Exo,
        "docker" => Backend::DockerModelRunner,
        "lemonade" => Backend::Lemonade,
        "koboldcpp" => Backend::KoboldCpp,
        "llamafile" => Backend::Llamafile,
        "vllm-mlx" => Backend::VllmMlx,
        // Jan's proxy (janhq/jan src-tauri/src/core/server/proxy.rs).
        "llama.cpp" => Backend::Jan,
        _ if s.eq_ignore_ascii_case("tabbyapi") => Backend::TabbyApi,
        _ => return None,
    })
}

/// Whether `b` is read here (not by `read.rs` or `local.rs`).
fn ours(b: Backend) -> bool {
    !matches!(
        b,
        Backend::LlamaCpp | Backend::Vllm | Backend::Ollama | Backend::LmStudio | Backend::Other
    )
}

/// The `owned_by` a backend's server writes ([`owner`]'s inverse).
fn owner_name(b: Backend) -> &'static str {
    match b {
        Backend::DockerModelRunner => "docker",
        Backend::Jan => "llama.cpp",
        Backend::TabbyApi => "tabbyAPI",
        b => b.as_str(),
    }
}

/// `{"value": N}`: KoboldCpp's `/api/extra/true_max_context_length`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Value {
    value: Field<u64>,
}

/// KoboldCpp's `/api/extra/version`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct KoboldVersion {
    result: Field<String>,
}

/// `/.well-known/serviceinfo` (TabbyAPI, KoboldCpp).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ServiceInfo {
    software: Object<Software>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Software {
    name: Field<String>,
}

/// TabbyAPI's `/v1/model`: the loaded model's card.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct TabbyModel {
    id: Field<String>,
    parameters: Object<TabbyParameters>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TabbyParameters {
    /// The longest prompt and answer one request may have.
    max_seq_len: Field<u64>,
}

/// LocalAI's `/.well-known/localai.json`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct LocalAiInfo {
    version: Field<String>,
    endpoints: Object<serde_json::Map<String, serde_json::Value>>,
}

/// One runner of Docker Model Runner's `/engines/_configure`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct DmrRunner {
    #[serde(rename = "Model")]
    model: Field<String>,
    #[serde(rename = "Config")]
    config: Object<DmrConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct DmrConfig {
    #[serde(rename = "context-size")]
    context_size: Field<i64>,
}

/// What the probe read of the paths only these servers answer.
#[derive(Debug, Default)]
pub(super) struct Answers {
    /// The `Server` header of `/v1/models`.
    pub(super) server_header: Option<String>,
    pub(super) kobold_version: Option<KoboldVersion>,
    pub(super) kobold_window: Option<Value>,
    pub(super) serviceinfo: Option<ServiceInfo>,
    pub(super) tabby_model: Option<TabbyModel>,
    pub(super) localai: Option<LocalAiInfo>,
    pub(super) dmr_runners: Option<Vec<Object<DmrRunner>>>,
    /// Lemonade's `/api/v1/slots`: llama-server's `/slots` of the loaded
    /// model.
    pub(super) lemonade_slots: Option<Vec<Object<answer::Slot>>>,
    /// Lemonade's `/api/v1/health`: which model that is.
    pub(super) lemonade_health: Option<LemonadeHealth>,
}

/// Lemonade's `/api/v1/health` (src/cpp/server/server.cpp).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct LemonadeHealth {
    model_loaded: Field<String>,
}

/// Which paths a probe of an endpoint declared `declared` asks here.
pub(super) fn wanted(declared: Option<Backend>, b: Backend) -> bool {
    declared.is_none() || declared == Some(b)
}

/// `build_info` as llamafile 0.10 builds it: `b<unix time>-<commit>`
/// (its build numbers the release by `date +%s`; llama.cpp's own build
/// numbers are four or five digits).
fn llamafile_build(props: Option<&answer::Props>) -> bool {
    props
        .and_then(|p| p.build_info.value())
        .and_then(|b| b.strip_prefix('b'))
        .and_then(|b| b.split('-').next())
        .is_some_and(|n| n.len() == 10 && n.bytes().all(|c| c.is_ascii_digit()))
}

/// One of these servers, when declared or when its own answers say so.
pub(super) fn detect(
    declared: Option<Backend>,
    data: &[answer::ModelEntry],
    props: Option<&answer::Props>,
    a: &Answers,
) -> Option<Backend> {
    if let Some(b) = declared {
        return ours(b).then_some(b);
    }
    let named = |s: &str| a.serviceinfo.as_ref().and_then(|i| i.software.value()).and_then(|s| s.name.value()).is_some_and(|n| n.eq_ignore_ascii_case(s));
    // First: TabbyAPI with its Kobold API on answers KoboldCpp's version
    // path as KoboldCpp (endpoints/Kobold/router.py, "Impersonate
    // Koboldcpp").
    if named("TabbyAPI") {
        return Some(Backend::TabbyApi);
    }
    if a.kobold_version.as_ref().and_then(|v| v.result.value()).is_some_and(|r| r == "KoboldCpp") || named("KoboldCpp") {
        return Some(Backend::KoboldCpp);
    }
    if a.localai.as_ref().is_some_and(|l| l.version.value().is_some() && l.endpoints.value().is_some()) {
        return Some(Backend::LocalAi);
    }
    // An `owned_by` that is only the id's namespace (Ollama's is the
    // model's: `exo/…`, `docker/…` pulled from a user of that name) says
    // nothing of the server.
    if let Some(b) = data.iter().find_map(|m| match m.owned_by.value() {
        Some(answer::Owner::Server(b))
            if !m.id.value().is_some_and(|id| id.starts_with(&format!("{}/", owner_name(*b)))) =>
        {
            Some(*b)
        }
        _ => None,
    }) {
        return Some(b);
    }
    let header = a.server_header.as_deref().unwrap_or_default();
    if header.starts_with("llamafile") || llamafile_build(props) {
        return Some(Backend::Llamafile);
    }
    // Python's http.server, and models with no `owned_by` at all.
    if header.starts_with("BaseHTTP/") && data.iter().all(|m| !m.owned_by.present()) {
        return Some(Backend::MlxLm);
    }
    None
}

/// Each model of a server here with its window, where the server says
/// it.
pub(super) fn read(
    st: &mut EndpointStatus,
    backend: Backend,
    data: &[answer::ModelEntry],
    props: Option<&answer::Props>,
    a: &Answers,
) {
    st.backend = backend.as_str().to_string();
    st.up = true;
    st.models = data
        .iter()
        // Jan's cloud-provider models: a job there would leave the machine.
        .filter(|m| m.owned_by.value() != Some(&answer::Owner::Remote))
        .map(|m| {
            let id = m.id.value().cloned().unwrap_or_default();
            let (context, source) = window(backend, &id, m, props, a).unzip();
            ServedModel {
                id,
                context,
                context_source: source,
                state: m.state().cloned(),
                file: None,
            }
        })
        .collect();
}

/// A model's window on `backend`, and where it came from.
fn window(
    backend: Backend,
    id: &str,
    m: &answer::ModelEntry,
    props: Option<&answer::Props>,
    a: &Answers,
) -> Option<(u64, ContextSource)> {
    let positive = |c: Option<u64>| c.filter(|c| *c > 0);
    match backend {
        Backend::Sglang => positive(m.max_model_len.value().copied()).map(|c| (c, ContextSource::MaxModelLen)),
        Backend::Exo => positive(m.context_length.value().copied()).map(|c| (c, ContextSource::ContextLength)),
        Backend::DockerModelRunner => {
            let configured = a.dmr_runners.iter().flatten().filter_map(Field::value).find(|r| r.model.value().is_some_and(|n| n == id || id.starts_with(&format!("{n}:")))).and_then(|r| r.config.value()?.context_size.value().copied()).filter(|c| *c > 0).map(|c| c as u64);
            configured
                .map(|c| (c, ContextSource::DmrConfigure))
                .or_else(|| {
                    positive(m.dmr.value().and_then(|d| d.context_window.value().copied()))
                        .map(|c| (c, ContextSource::DmrContextWindow))
                })
        }
        Backend::Lemonade => positive(m.context_length.value().copied())
            .map(|c| (c, ContextSource::ContextLength))
            .or_else(|| {
                // The slots are the loaded model's only.
                let health = a.lemonade_health.as_ref()?;
                (health.model_loaded.value().map(String::as_str) == Some(id)).then_some(())?;
                let slot = a.lemonade_slots.as_ref()?.first()?.value()?;
                positive(slot.n_ctx.value().copied()).map(|c| (c, ContextSource::SlotsNCtx))
            }),
        Backend::Llamafile => positive(props.and_then(answer::Props::n_ctx)).map(|c| (c, ContextSource::PropsNCtx)),
        Backend::TabbyApi => a
            .tabby_model
            .as_ref()
            .filter(|t| t.id.value().is_none_or(|t| t == id))
            .and_then(|t| positive(t.parameters.value()?.max_seq_len.value().copied()))
            .map(|c| (c, ContextSource::MaxSeqLen)),
        Backend::KoboldCpp => positive(a.kobold_window.as_ref().and_then(|v| v.value.value().copied()))
            .map(|c| (c, ContextSource::TrueMaxContext)),
        // Where a plain OpenAI-compatible server may say it.
        Backend::OpenAi => positive(m.meta_ctx())
            .map(|c| (c, ContextSource::MetaNCtx))
            .or_else(|| positive(m.max_model_len.value().copied()).map(|c| (c, ContextSource::MaxModelLen))),
        _ => None,
    }
}

/// The sentence of a job refused because neither the server nor the
/// config says the window of `id` on endpoint `endpoint`.
pub fn no_window(backend: Backend, endpoint: &str, id: &str) -> String {
    format!(
        "{id} on `{endpoint}`: {} does not say its window, and the window budget and the truncation guard need it, so no job starts on it: set `window:` on endpoint `{endpoint}` in models.yaml to the tokens a request may have there (e.g. `window: 65536`), or on the model's entry under `models:`",
        backend.title()
    )
}

/// Why no job starts on `id` at `endpoint`: its window unknown where the
/// backend needs one ([`no_window`]), or too small
/// ([`super::small_window`]).
pub fn window_refusal(
    backend: Backend,
    endpoint: &str,
    id: &str,
    context: Option<u64>,
) -> Option<String> {
    match context {
        None if backend.needs_window() => Some(no_window(backend, endpoint, id)),
        None => None,
        Some(c) => super::small_window(backend, id, c),
    }
}

/// What the truncation guard can check on `backend`, when that is less
/// than everything (doctor and `status` say it).
pub fn guard_note(backend: Backend) -> Option<String> {
    use crate::config::Counts;
    match backend.counts() {
        Counts::None => Some(format!(
            "truncation: {} reports no token counts in a stream, so the guard can check only that a request fits the window; a cut inside the window goes unseen",
            backend.title()
        )),
        Counts::NoCache if backend.needs_window() => Some(format!(
            "figures: {} reports no cached tokens, so a job's prompt cache is unknown (not zero); the truncation guard still compares what it read with what was sent",
            backend.title()
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use answer::entries;

    /// Ollama's `owned_by` is the model's namespace: a model pulled as
    /// `exo/…` does not make Ollama exo.
    #[test]
    fn an_owned_by_that_is_only_the_namespace_says_nothing() {
        let none = Answers::default();
        let pulled = entries(r#"{"object":"list","data":[{"id":"exo/qwen3:8b","object":"model","owned_by":"exo"}]}"#);
        assert_eq!(detect(None, &pulled, None, &none), None);
        let served = entries(r#"{"object":"list","data":[{"id":"mlx-community/Qwen3","object":"model","owned_by":"exo"}]}"#);
        assert_eq!(detect(None, &served, None, &none), Some(Backend::Exo));
    }
}
