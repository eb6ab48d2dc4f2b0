//! The servers' JSON answers (`/v1/models`, `/props`, `/slots`, error
//! bodies), as types.
//!
//! Why not plain structs of `Option`s: the probe reads many servers
//! (llama.cpp, its router mode, vLLM, llama-swap, other OpenAI-compatible
//! ones) across versions that add, drop and retype fields. A field of an
//! unexpected type must read as unknown without making the rest of the
//! answer unreadable, and a fallback (`meta.n_ctx`, else `context_length`)
//! is taken only when the first field is absent, not when it is there with
//! another type. [`Field`] keeps those three cases apart, so the typed
//! reading is exactly as lenient as reading `serde_json::Value`s was.
//! Unknown fields are ignored.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::ModelState;

/// One field of an answer: absent, present with another type than
/// expected, or present as `T`. With `OBJECT`, `T` is a JSON object read
/// into a struct, and a JSON array is of another type too (serde would
/// otherwise fill the struct's fields by position).
#[derive(Debug, Clone, PartialEq)]
pub enum Field<T, const OBJECT: bool = false> {
    Absent,
    Wrong,
    Is(T),
}

/// A field that holds a JSON object.
pub type Object<T> = Field<T, true>;

// Not derived: the derive would ask `T: Default` of every `T`.
#[allow(clippy::derivable_impls)]
impl<T, const O: bool> Default for Field<T, O> {
    fn default() -> Self {
        Field::Absent
    }
}

impl<T: DeserializeOwned, const O: bool> Field<T, O> {
    /// Read `v` as `T`; any other shape is [`Field::Wrong`].
    pub fn from_value(v: Value) -> Self {
        if O && !v.is_object() {
            return Field::Wrong;
        }
        match crate::anthropic::read(v) {
            Some(t) => Field::Is(t),
            None => Field::Wrong,
        }
    }
}

impl<'de, T: DeserializeOwned, const O: bool> Deserialize<'de> for Field<T, O> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(Self::from_value)
    }
}

impl<T, const O: bool> Field<T, O> {
    /// The value, when present with the expected type.
    pub fn value(&self) -> Option<&T> {
        match self {
            Field::Is(t) => Some(t),
            _ => None,
        }
    }

    /// The value, when present with the expected type.
    pub fn into_value(self) -> Option<T> {
        match self {
            Field::Is(t) => Some(t),
            _ => None,
        }
    }

    /// Present at all, whatever its type.
    pub fn present(&self) -> bool {
        !matches!(self, Field::Absent)
    }

    /// This field, or `other` when this one is absent.
    pub fn or<'a>(&'a self, other: &'a Self) -> &'a Self {
        match self {
            Field::Absent => other,
            _ => self,
        }
    }
}

/// A body as `T` when it is a JSON object, else none.
pub fn parse<T: DeserializeOwned>(body: &[u8]) -> Option<T> {
    let v: Value = serde_json::from_slice(body).ok()?;
    parse_value(v)
}

/// A parsed body as `T` when it is a JSON object, else none.
pub fn parse_value<T: DeserializeOwned>(v: Value) -> Option<T> {
    Object::<T>::from_value(v).into_value()
}

/// Who `owned_by` says serves a model. llama-swap is recognised only when
/// spelled exactly so (then the endpoint is llama-swap); in any case it
/// still says llama.cpp for backend detection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(from = "String")]
pub enum Owner {
    /// Exactly `llama-swap`.
    LlamaSwap,
    /// `vllm`, any case.
    Vllm,
    /// `llamacpp`, any case, or `llama-swap` in another case.
    LlamaCpp,
    /// A server that names itself (`probe/others.rs`):
    /// `sglang`, `exo`, `docker`, `lemonade`, `koboldcpp`, `llamafile`,
    /// `vllm-mlx`, `tabbyAPI`, and Jan's `llama.cpp` (with the dot).
    Server(crate::config::Backend),
    /// `remote`: Jan's cloud-provider models, not served on this machine.
    Remote,
    Unknown,
}

impl From<String> for Owner {
    fn from(s: String) -> Self {
        if s == "llama-swap" {
            Owner::LlamaSwap
        } else if s.eq_ignore_ascii_case("vllm") {
            Owner::Vllm
        } else if s.eq_ignore_ascii_case("llamacpp") || s.eq_ignore_ascii_case("llama-swap") {
            Owner::LlamaCpp
        } else if let Some(b) = super::others::owner(&s) {
            Owner::Server(b)
        } else if s == "remote" {
            Owner::Remote
        } else {
            Owner::Unknown
        }
    }
}

/// `GET /v1/models`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ModelList {
    pub data: Field<Vec<Object<ModelEntry>>>,
}

/// `GET /v1/models` with `"data": null`: Ollama's answer when it has no
/// model (its `Data []Model` has no omitempty).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NullList {
    pub data: Field<()>,
}

/// One entry of `/v1/models` `data`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ModelEntry {
    pub id: Field<String>,
    pub owned_by: Field<Owner>,
    /// llama.cpp: `n_ctx`, `size`.
    pub meta: Object<Meta>,
    /// Some OpenAI-compatible servers.
    pub context_length: Field<u64>,
    /// vLLM.
    pub max_model_len: Field<u64>,
    /// vLLM: the model's path.
    pub root: Field<String>,
    /// A llama.cpp router's or llama-swap's per-model state.
    pub status: Object<ModelStatus>,
    /// Docker Model Runner: `dmr.context_window`.
    pub dmr: Object<DmrMeta>,
}

/// Docker Model Runner's `dmr` object of a `/v1/models` entry
/// (docker/model-runner pkg/inference/models/api.go:82-102).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct DmrMeta {
    /// The size the model was packaged with, or its GGUF's trained
    /// length (not a runtime setting: that is `/engines/_configure`).
    pub context_window: Field<u64>,
}

impl ModelEntry {
    /// `meta.n_ctx`, or `context_length` when `meta.n_ctx` is absent.
    pub fn meta_ctx(&self) -> Option<u64> {
        let absent = Field::Absent;
        let meta_ctx = self.meta.value().map_or(&absent, |m| &m.n_ctx);
        meta_ctx.or(&self.context_length).value().copied()
    }

    /// `meta.size`.
    pub fn size(&self) -> Option<u64> {
        self.meta.value().and_then(|m| m.size.value().copied())
    }

    /// `status.value`.
    pub fn state(&self) -> Option<&ModelState> {
        self.status.value().and_then(|s| s.value.value())
    }

    /// `status.args`, its strings.
    pub fn args(&self) -> Option<Vec<&str>> {
        let args = self.status.value()?.args.value()?;
        Some(
            args.iter()
                .filter_map(|a| a.value().map(String::as_str))
                .collect(),
        )
    }
}

/// `/v1/models` `data[].meta` (llama.cpp).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Meta {
    pub n_ctx: Field<u64>,
    pub size: Field<u64>,
}

/// `/v1/models` `data[].status` (llama.cpp router).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ModelStatus {
    pub value: Field<ModelState>,
    /// The launch args of the model's instance.
    pub args: Field<Vec<Field<String>>>,
}

/// `/props` `role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Role {
    #[serde(rename = "router")]
    Router,
    #[serde(other)]
    Unknown,
}

/// `GET /props` (llama.cpp).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Props {
    pub default_generation_settings: Object<GenerationSettings>,
    pub n_ctx: Field<u64>,
    pub total_slots: Field<u64>,
    pub role: Field<Role>,
    pub is_sleeping: Field<bool>,
    pub max_instances: Field<u64>,
    pub model_path: Field<String>,
    pub build_info: Field<String>,
    pub chat_template_caps: Object<ChatTemplateCaps>,
}

impl Props {
    /// Whether this is llama.cpp's `/props` (another server may answer
    /// the path with something else).
    pub fn is_llama(&self) -> bool {
        self.default_generation_settings.present() || self.total_slots.present()
    }

    pub fn router(&self) -> bool {
        self.role.value() == Some(&Role::Router)
    }

    pub fn sleeping(&self) -> bool {
        self.is_sleeping.value() == Some(&true)
    }

    /// `default_generation_settings.n_ctx`, or `n_ctx` when that is absent.
    pub fn n_ctx(&self) -> Option<u64> {
        let absent = Field::Absent;
        let nested = self
            .default_generation_settings
            .value()
            .map_or(&absent, |g| &g.n_ctx);
        nested.or(&self.n_ctx).value().copied()
    }
}

/// `/props` `default_generation_settings`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct GenerationSettings {
    pub n_ctx: Field<u64>,
}

/// `/props` `chat_template_caps`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ChatTemplateCaps {
    pub supports_system_role: Field<bool>,
    pub supports_tool_calls: Field<bool>,
}

/// One element of `GET /slots` (llama.cpp).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Slot {
    pub n_ctx: Field<u64>,
    pub is_processing: Field<bool>,
    /// Older builds: non-zero while processing.
    pub state: Field<u64>,
    /// The last task the slot served; absent until it has served one.
    pub id_task: Field<i64>,
    pub n_prompt_tokens: Field<u64>,
}

impl Slot {
    pub fn busy(&self) -> bool {
        self.is_processing.value() == Some(&true) || self.state.value().is_some_and(|v| *v != 0)
    }

    /// Has it served a request since the server started (so its cache may
    /// hold somebody's prompt)? llama-server 11434 adds `id_task` and
    /// `n_prompt_tokens` to a slot once it has; older builds show
    /// `id_task: -1` on any idle slot, which tells nothing (`None`).
    pub fn used(&self) -> Option<bool> {
        if self.n_prompt_tokens.value().is_some_and(|n| *n > 0) {
            return Some(true);
        }
        match self.id_task.value() {
            Some(id) if *id >= 0 => Some(true),
            Some(_) => None,
            None => Some(false),
        }
    }
}

/// `GET /slots`: an array, whose elements need not be objects.
pub fn slots(body: &[u8]) -> Option<Vec<Object<Slot>>> {
    let v: Value = serde_json::from_slice(body).ok()?;
    Field::<Vec<Object<Slot>>>::from_value(v).into_value()
}

pub use crate::anthropic::ErrorBody;

/// A `/v1/models` body's entries, for the readers' tests.
#[cfg(test)]
pub(super) fn entries(models: &str) -> Vec<ModelEntry> {
    let list: ModelList = parse(models.as_bytes()).unwrap();
    list.data
        .into_value()
        .unwrap()
        .into_iter()
        .map(|m| m.into_value().unwrap())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(v: Value) -> ModelEntry {
        parse_value(v).unwrap()
    }

    #[test]
    fn a_field_of_another_type_reads_as_unknown_and_stops_the_fallback() {
        use serde_json::json;
        assert_eq!(entry(json!({"context_length": 5})).meta_ctx(), Some(5));
        assert_eq!(
            entry(json!({"meta": {}, "context_length": 5})).meta_ctx(),
            Some(5)
        );
        assert_eq!(
            entry(json!({"meta": [7], "context_length": 5})).meta_ctx(),
            Some(5)
        );
        assert_eq!(
            entry(json!({"meta": {"n_ctx": "7"}, "context_length": 5})).meta_ctx(),
            None
        );
        assert_eq!(entry(json!({"meta": {"n_ctx": 7.0}})).meta_ctx(), None);
        assert_eq!(entry(json!({"id": 3})).id, Field::Wrong);
        let p: Props =
            parse_value(json!({"default_generation_settings": {"n_ctx": null}, "n_ctx": 9}))
                .unwrap();
        assert_eq!((p.is_llama(), p.n_ctx()), (true, None));
        let p: Props =
            parse_value(json!({"default_generation_settings": null, "n_ctx": 9})).unwrap();
        assert_eq!((p.is_llama(), p.n_ctx()), (true, Some(9)));
        assert!(parse::<Props>(b"[1]").is_none());
        let s = slots(br#"[{"is_processing": true}, 3, {"state": 1}, {"state": 0}]"#).unwrap();
        let busy: Vec<bool> = s
            .iter()
            .map(|s| s.value().is_some_and(Slot::busy))
            .collect();
        assert_eq!(busy, [true, false, true, false]);
    }

    #[test]
    fn a_state_this_build_does_not_know_is_kept_verbatim() {
        use serde_json::json;
        let state = |v: Value| entry(json!({"status": {"value": v}})).state().cloned();
        assert_eq!(state(json!("loaded")), Some(ModelState::Loaded));
        let failed = state(json!("failed")).unwrap();
        assert_eq!(failed, ModelState::Other("failed".into()));
        assert_eq!(serde_json::to_string(&failed).unwrap(), r#""failed""#);
        assert_eq!(
            serde_json::to_string(&ModelState::Unloaded).unwrap(),
            r#""unloaded""#
        );
        assert_eq!(state(json!(3)), None);
    }
}
