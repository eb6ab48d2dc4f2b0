//! The two desktop model servers: Ollama and LM Studio. Their answers as
//! types, whether an endpoint is one of them, and the pure reading of each
//! model's real window, state and the slots. No I/O: `fetch.rs` asks
//! `/api/ps` and `/api/version` (Ollama) and `/api/v1/models` (LM Studio,
//! `/api/v0/models` on 0.3.x) in the probe's one parallel round, and hands
//! the parsed answers here.
//!
//! Both load models on demand: a model downloaded but not loaded is listed
//! `unloaded` with no window, since the window is the one it is loaded
//! with (Ollama: the Modelfile's `num_ctx`, `OLLAMA_CONTEXT_LENGTH` or a
//! VRAM default as low as 4,096; LM Studio: the load's context length,
//! 4,096 by default in its app).

use serde::Deserialize;

use super::answer::{self, Field, Object};
use super::{ContextSource, EndpointStatus, MIN_WINDOW, ModelState, ServedModel, ServerKind, Slots};
use crate::config::Backend;

/// Ollama `GET /api/ps` (ollama api/types.go ProcessResponse).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct OllamaPs {
    models: Field<Vec<Object<OllamaPsModel>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct OllamaPsModel {
    name: Field<String>,
    model: Field<String>,
    /// The per-slot `num_ctx` it is loaded with.
    context_length: Field<u64>,
}

/// Ollama `GET /api/version`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Version {
    version: Field<String>,
}

/// LM Studio `GET /api/v1/models` (0.4.0+).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct LmsModels {
    models: Field<Vec<Object<LmsModel>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct LmsModel {
    #[serde(rename = "type")]
    kind: Field<String>,
    key: Field<String>,
    max_context_length: Field<u64>,
    loaded_instances: Field<Vec<Object<LmsInstance>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct LmsInstance {
    config: Object<LmsConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct LmsConfig {
    context_length: Field<u64>,
    parallel: Field<u64>,
}

/// LM Studio `GET /api/v0/models` (0.3.6+).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct LmsV0 {
    data: Field<Vec<Object<LmsV0Model>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct LmsV0Model {
    id: Field<String>,
    #[serde(rename = "type")]
    kind: Field<String>,
    state: Field<String>,
    max_context_length: Field<u64>,
    loaded_context_length: Field<u64>,
}

/// LM Studio's answer to a path or method it does not serve: HTTP 200
/// and `{"error": "Unexpected endpoint or method. (GET /props)"}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Unexpected {
    error: Field<String>,
}

/// Whether a body is LM Studio's 200 for a path it does not serve.
pub(super) fn lmstudio_unexpected(body: &[u8]) -> bool {
    answer::parse::<Unexpected>(body)
        .and_then(|u| u.error.into_value())
        .is_some_and(|e| e.starts_with("Unexpected endpoint or method."))
}

/// What the probe read of the paths only these two servers answer.
#[derive(Debug, Default)]
pub(super) struct Answers {
    pub(super) ps: Option<OllamaPs>,
    pub(super) version: Option<Version>,
    pub(super) lms: Option<LmsModels>,
    pub(super) lms_v0: Option<LmsV0>,
    /// `/props` (or `/api/v1/models`) answered LM Studio's 200-error.
    pub(super) unexpected: bool,
}

impl Answers {
    fn ps_models(&self) -> Option<&[Object<OllamaPsModel>]> {
        self.ps.as_ref()?.models.value().map(Vec::as_slice)
    }

    fn lms_models(&self) -> Option<&[Object<LmsModel>]> {
        let list = self.lms.as_ref()?.models.value()?;
        // Entries with a key and `loaded_instances`: no other server's.
        list.iter()
            .filter_map(Field::value)
            .any(|m| m.key.value().is_some() && m.loaded_instances.present())
            .then_some(list.as_slice())
    }

    fn v0_models(&self) -> Option<&[Object<LmsV0Model>]> {
        let list = self.lms_v0.as_ref()?.data.value()?;
        list.iter()
            .filter_map(Field::value)
            .any(|m| m.state.present() && m.max_context_length.present())
            .then_some(list.as_slice())
    }
}

/// Ollama or LM Studio, when declared or when their own paths say so.
pub(super) fn detect(declared: Option<Backend>, a: &Answers) -> Option<Backend> {
    match declared {
        Some(b @ (Backend::Ollama | Backend::LmStudio)) => return Some(b),
        Some(_) => return None,
        None => {}
    }
    let version = a.version.as_ref().and_then(|v| v.version.value());
    if a.ps_models().is_some() && version.is_some() {
        Some(Backend::Ollama)
    } else if a.lms_models().is_some() || a.v0_models().is_some() || a.unexpected {
        Some(Backend::LmStudio)
    } else {
        None
    }
}

/// Each model of `st` that [`small_window`] refuses, with its sentence
/// (doctor's lines and the page's note say these).
pub fn refusals(st: &EndpointStatus) -> Vec<String> {
    let Some(backend) = Backend::parse(&st.backend) else {
        return Vec::new();
    };
    st.models
        .iter()
        .filter_map(|m| small_window(backend, &m.id, m.context?))
        .collect()
}

/// Why no job starts on `id`, when its window is under [`MIN_WINDOW`] on
/// a server whose refusal of a prompt too long the shim cannot turn into
/// a compaction ([`Backend::refuses_small_window`]: every one but
/// llama.cpp, vLLM and a gateway), with the server's own fix. Ollama and
/// LM Studio default to small windows and truncate a longer prompt
/// without an error, so a job there would run on a conversation the
/// model never saw. The same sentence is the status warning, doctor's
/// line, `list_models`' and `run_agent`'s error. Never a setting sent to
/// the server: the user's to change.
pub fn small_window(backend: Backend, id: &str, window: u64) -> Option<String> {
    if !backend.refuses_small_window() || window >= MIN_WINDOW {
        return None;
    }
    let silently = backend
        .over_window()
        .map(|w| format!(", and {} {w}", backend.title()))
        .unwrap_or_default();
    let fix = backend.window_fix(id);
    Some(format!(
        "{id}: window {} tokens per slot, under the {} a delegate needs (Claude Code's fixed prompt and one tool result leave the conversation no room){silently}, so no job starts on it: {fix}",
        crate::fmt::thousands(window),
        crate::fmt::thousands(MIN_WINDOW),
    ))
}

/// The sentence of a model that is downloaded but not loaded.
fn on_first_use(id: &str, ceiling: Option<u64>) -> String {
    let ceiling = ceiling
        .map(|c| format!(" (the model allows up to {c})"))
        .unwrap_or_default();
    format!("{id}: loads on first use; its window is known only once it is loaded{ceiling}")
}

/// Fill an Ollama or LM Studio endpoint's status from `/v1/models`'
/// `data` and their own answers.
pub(super) fn read(
    st: &mut EndpointStatus,
    backend: Backend,
    data: &[answer::ModelEntry],
    a: &Answers,
) {
    st.backend = backend.as_str().to_string();
    st.up = true;
    st.metrics = false;
    if backend == Backend::Ollama {
        st.kind = Some(ServerKind::Ollama);
        st.models = ollama_models(data, a.ps_models().unwrap_or_default());
        st.slots = Some(Slots {
            total: 1,
            busy: 0,
            free: 1,
            unused: None,
        });
        st.warnings.push(
            "slots: 1 assumed: Ollama does not publish OLLAMA_NUM_PARALLEL (default 1), and requests past it wait their turn".into(),
        );
    } else {
        st.kind = Some(ServerKind::LmStudio);
        let (models, parallel) = lmstudio_models(data, a.lms_models(), a.v0_models());
        st.models = models;
        st.slots = parallel.map(|total| Slots {
            total,
            busy: 0,
            free: total,
            unused: None,
        });
    }
    let unloaded: Vec<String> = st
        .models
        .iter()
        .filter(|m| m.context.is_none())
        .map(|m| on_first_use(&m.id, ceiling(a, &m.id)))
        .collect();
    st.warnings.extend(unloaded);
    st.warnings.push(figures(backend));
}

/// What a job's figures cannot say on these two: neither serves
/// `/metrics`, so a job's figures come from each answer's `usage`; and
/// Ollama's `usage` has no cache fields (anthropic.go:219-222 at
/// v0.33.0-rc2), so its cache reads as unknown, not as none.
fn figures(backend: Backend) -> String {
    match backend {
        Backend::Ollama => "figures: Ollama has no /metrics and reports no cached tokens, so a job's figures come from usage alone and its prompt cache is unknown (not zero)".into(),
        _ => "figures: LM Studio has no /metrics, so a job's figures come from usage alone".into(),
    }
}

/// LM Studio's `max_context_length` of a model, the most it can be loaded with.
fn ceiling(a: &Answers, id: &str) -> Option<u64> {
    let v1 = a.lms_models().and_then(|l| {
        l.iter()
            .filter_map(Field::value)
            .find(|m| m.key.value().map(String::as_str) == Some(id))
            .and_then(|m| m.max_context_length.value().copied())
    });
    v1.or_else(|| {
        a.v0_models()?
            .iter()
            .filter_map(Field::value)
            .find(|m| m.id.value().map(String::as_str) == Some(id))
            .and_then(|m| m.max_context_length.value().copied())
    })
}

/// Each `/v1/models` id, its window from `/api/ps` when it is loaded.
fn ollama_models(data: &[answer::ModelEntry], ps: &[Object<OllamaPsModel>]) -> Vec<ServedModel> {
    data.iter()
        .filter_map(|m| m.id.value())
        .map(|id| {
            let loaded = ps.iter().filter_map(Field::value).find(|p| {
                p.name.value() == Some(id) || p.model.value() == Some(id)
            });
            let context = loaded
                .and_then(|p| p.context_length.value().copied())
                .filter(|c| *c > 0);
            ServedModel {
                id: id.clone(),
                context,
                context_source: context.map(|_| ContextSource::OllamaPs),
                state: Some(if loaded.is_some() {
                    ModelState::Loaded
                } else {
                    ModelState::Unloaded
                }),
                file: None,
            }
        })
        .collect()
}

/// Each `/v1/models` id but embedding models, with its window and state
/// from `/api/v1/models` (else v0), and the slots: the `parallel` of the
/// loaded instances, summed.
fn lmstudio_models(
    data: &[answer::ModelEntry],
    v1: Option<&[Object<LmsModel>]>,
    v0: Option<&[Object<LmsV0Model>]>,
) -> (Vec<ServedModel>, Option<u64>) {
    let mut parallel: Option<u64> = None;
    let mut models = Vec::new();
    for id in data.iter().filter_map(|m| m.id.value()) {
        let e1 = v1.and_then(|l| {
            l.iter()
                .filter_map(Field::value)
                .find(|m| m.key.value() == Some(id))
        });
        let e0 = v0.and_then(|l| {
            l.iter()
                .filter_map(Field::value)
                .find(|m| m.id.value() == Some(id))
        });
        let kind = e1
            .and_then(|m| m.kind.value())
            .or_else(|| e0.and_then(|m| m.kind.value()));
        if kind.is_some_and(|k| k.starts_with("embedding")) {
            continue;
        }
        let (context, source, state) = match (e1, e0) {
            (Some(m), _) => {
                let configs: Vec<&LmsConfig> = m
                    .loaded_instances
                    .value()
                    .into_iter()
                    .flatten()
                    .filter_map(|i| i.value().and_then(|i| i.config.value()))
                    .collect();
                for c in &configs {
                    if let Some(p) = c.parallel.value() {
                        parallel = Some(parallel.unwrap_or(0) + p);
                    }
                }
                let context = configs
                    .iter()
                    .filter_map(|c| c.context_length.value().copied())
                    .filter(|c| *c > 0)
                    .min();
                let state = if configs.is_empty() {
                    ModelState::Unloaded
                } else {
                    ModelState::Loaded
                };
                (context, ContextSource::LmsInstance, Some(state))
            }
            (None, Some(m)) => {
                let state = m.state.value().map(|s| match s.as_str() {
                    "loaded" => ModelState::Loaded,
                    "not-loaded" => ModelState::Unloaded,
                    "loading" => ModelState::Loading,
                    other => ModelState::Other(other.to_string()),
                });
                let context = m.loaded_context_length.value().copied().filter(|c| *c > 0);
                (context, ContextSource::LmsV0, state)
            }
            (None, None) => (None, ContextSource::LmsV0, None),
        };
        models.push(ServedModel {
            id: id.clone(),
            context,
            context_source: context.map(|_| source),
            state,
            file: None,
        });
    }
    (models, parallel)
}

#[cfg(test)]
mod tests {
    //! On answers shaped like the real servers' (the stand-ins in
    //! tests/support hold the full bodies: fake_ollama, fake_lmstudio).

    use super::*;

    fn entries(body: &str) -> Vec<answer::ModelEntry> {
        answer::parse::<answer::ModelList>(body.as_bytes())
            .and_then(|l| l.data.into_value())
            .unwrap_or_default()
            .into_iter()
            .filter_map(Field::into_value)
            .collect()
    }

    const OLLAMA_V1: &str = r#"{"object":"list","data":[{"id":"qwen3-coder:latest","object":"model","created":1,"owned_by":"library"},{"id":"gemma3:4b","object":"model","created":1,"owned_by":"library"}]}"#;
    const OLLAMA_PS: &str = r#"{"models":[{"name":"qwen3-coder:latest","model":"qwen3-coder:latest","size":1,"digest":"x","details":{},"expires_at":"2026-12-04T20:30:00Z","size_vram":1,"context_length":65536}]}"#;

    #[test]
    fn ollama_is_told_by_api_ps_and_version_and_reads_the_loaded_window() {
        let a = Answers {
            ps: answer::parse(OLLAMA_PS.as_bytes()),
            version: answer::parse(br#"{"version":"0.32.15"}"#),
            ..Answers::default()
        };
        assert_eq!(detect(None, &a), Some(Backend::Ollama));
        assert_eq!(detect(Some(Backend::LlamaCpp), &a), None);
        let models = ollama_models(&entries(OLLAMA_V1), a.ps_models().unwrap());
        assert_eq!(models[0].context, Some(65536));
        assert_eq!(models[0].context_source, Some(ContextSource::OllamaPs));
        assert_eq!(models[0].state, Some(ModelState::Loaded));
        assert_eq!(models[1].context, None);
        assert_eq!(models[1].state, Some(ModelState::Unloaded));
        // Without /api/version (another server with an /api/ps): not Ollama.
        let b = Answers {
            ps: answer::parse(OLLAMA_PS.as_bytes()),
            ..Answers::default()
        };
        assert_eq!(detect(None, &b), None);
    }

    #[test]
    fn lmstudio_is_told_by_its_200_error_or_its_lists_and_reads_the_instance_window() {
        assert!(lmstudio_unexpected(
            br#"{"error":"Unexpected endpoint or method. (GET /props)"}"#
        ));
        assert!(!lmstudio_unexpected(br#"{"error":"model not found"}"#));
        assert!(!lmstudio_unexpected(b"404 page not found"));
        let v1: LmsModels = answer::parse(br#"{"models":[{"type":"llm","key":"qwen3-coder-30b","max_context_length":262144,"loaded_instances":[{"id":"qwen3-coder-30b","config":{"context_length":4096,"parallel":4}}]},{"type":"llm","key":"gemma","max_context_length":131072,"loaded_instances":[]},{"type":"embedding","key":"nomic","loaded_instances":[]}]}"#).unwrap();
        let a = Answers {
            lms: Some(v1),
            ..Answers::default()
        };
        assert_eq!(detect(None, &a), Some(Backend::LmStudio));
        let data = entries(
            r#"{"data":[{"id":"qwen3-coder-30b"},{"id":"gemma"},{"id":"nomic"}]}"#,
        );
        let (models, parallel) = lmstudio_models(&data, a.lms_models(), None);
        assert_eq!(models.len(), 2, "{models:?}");
        assert_eq!(models[0].context, Some(4096));
        assert_eq!(models[0].context_source, Some(ContextSource::LmsInstance));
        assert_eq!(models[1].state, Some(ModelState::Unloaded));
        assert_eq!(parallel, Some(4));
        assert_eq!(ceiling(&a, "gemma"), Some(131072));

        // 0.3.x: v0 only, `loading` kept.
        let v0: LmsV0 = answer::parse(br#"{"data":[{"id":"qwen3-coder-30b","type":"llm","state":"loaded","max_context_length":262144,"loaded_context_length":65536},{"id":"gemma","type":"llm","state":"loading","max_context_length":131072}]}"#).unwrap();
        let a = Answers {
            lms_v0: Some(v0),
            ..Answers::default()
        };
        assert_eq!(detect(None, &a), Some(Backend::LmStudio));
        let (models, parallel) = lmstudio_models(&data, None, a.v0_models());
        assert_eq!(models[0].context, Some(65536));
        assert_eq!(models[0].context_source, Some(ContextSource::LmsV0));
        assert_eq!(models[1].state, Some(ModelState::Loading));
        assert_eq!(parallel, None);
    }

    #[test]
    fn a_small_window_is_refused_on_these_two_only_with_their_fix() {
        let o = small_window(Backend::Ollama, "gemma3:4b", 4096).unwrap();
        assert!(o.contains("window 4,096 tokens per slot, under the 16,384"), "{o}");
        assert!(o.contains("`OLLAMA_CONTEXT_LENGTH=65536 ollama serve`"), "{o}");
        let l = small_window(Backend::LmStudio, "q", 4096).unwrap();
        assert!(l.contains("`lms load q --context-length 65536`"), "{l}");
        assert_eq!(small_window(Backend::Ollama, "m", MIN_WINDOW), None);
        // Issue 45 settled 16,384: a 24k window runs a job (with its budget).
        assert_eq!(small_window(Backend::Ollama, "m", 24_576), None);
        assert!(small_window(Backend::LmStudio, "m", MIN_WINDOW - 1).is_some());
        assert_eq!(small_window(Backend::LlamaCpp, "m", 4096), None);
    }

    #[test]
    fn bad_answers_read_as_unknown() {
        let a = Answers {
            ps: answer::parse(br#"{"models":"x"}"#),
            version: answer::parse(br#"{"version":3}"#),
            lms: answer::parse(br#"{"models":[{"key":1,"loaded_instances":{}}]}"#),
            lms_v0: answer::parse(br#"{"data":[[]]}"#),
            unexpected: false,
        };
        assert_eq!(detect(None, &a), None);
        let (models, _) = lmstudio_models(&entries(r#"{"data":[{"id":"m"}]}"#), None, None);
        assert_eq!(models[0].context, None);
    }
}
