//! Pure readers of each server's answers: which kind of server it is
//! (llama.cpp, its router mode, llama-swap, vLLM), each model's per-slot
//! window and where it came from, the slots, vLLM's queue from `/metrics`,
//! and the warnings of an endpoint that is up. No I/O: `fetch.rs` hands
//! over parsed answers, so each reader is tested on answers shaped like
//! the real servers'.

use super::metrics::{self, Counters};
use super::{ContextSource, EndpointStatus, Load, MIN_WINDOW, ModelFile, ModelState, ServedModel, ServerKind, Slots, answer};
use crate::config::Backend;

/// What kind of server answers, from `/props` and `/v1/models` `owned_by`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shape {
    /// llama.cpp router mode (`/props` `role`).
    pub(super) router: bool,
    /// llama-swap (`owned_by`).
    pub(super) swap: bool,
    /// A llama-server asleep (`/props` `is_sleeping`).
    pub(super) sleeping: bool,
}

impl Shape {
    pub(super) fn kind(self) -> Option<ServerKind> {
        if self.router {
            Some(ServerKind::Router)
        } else if self.swap {
            Some(ServerKind::LlamaSwap)
        } else if self.sleeping {
            Some(ServerKind::Sleeping)
        } else {
            None
        }
    }
}

/// The windows the whole server reports, for [`window`].
pub(super) struct ServerWindows {
    /// `/props` (never a router's own, which says 0).
    pub(super) props: Option<u64>,
    /// The first slot's `n_ctx`.
    pub(super) slot: Option<u64>,
    /// The server lists one model.
    pub(super) single: bool,
}

/// Each listed model with its window, state and file.
pub(super) fn served_models(
    data: &[answer::ModelEntry],
    props: Option<&answer::Props>,
    slots: Option<&[answer::Object<answer::Slot>]>,
    backend: Backend,
    shape: Shape,
) -> Vec<ServedModel> {
    // A router's own /props says n_ctx 0: that is no window. Never 0.
    let windows = ServerWindows {
        props: props
            .filter(|_| !shape.router)
            .and_then(answer::Props::n_ctx)
            .filter(|c| *c > 0),
        slot: slots
            .and_then(|a| a.first())
            .and_then(answer::Field::value)
            .and_then(|s| s.n_ctx.value().copied()),
        single: data.len() == 1,
    };
    // One model behind /props: its path and build are this model's.
    let (path, build) = match (props, windows.single && !shape.router && !shape.swap) {
        (Some(p), true) => (p.model_path.value().cloned(), p.build_info.value().cloned()),
        _ => (None, None),
    };
    data.iter()
        .map(|m| {
            let (context, source) = window(m, backend, shape, &windows);
            let state = m
                .state()
                .cloned()
                .or_else(|| shape.sleeping.then_some(ModelState::Sleeping));
            let path = path.clone().or_else(|| m.root.value().cloned());
            ServedModel {
                id: m.id.value().cloned().unwrap_or_default(),
                context,
                context_source: context.and(source),
                state,
                file: ModelFile::of(path, m.size(), build.clone()),
            }
        })
        .collect()
}

/// A model's per-slot window and where it came from.
pub(super) fn window(
    m: &answer::ModelEntry,
    backend: Backend,
    shape: Shape,
    server: &ServerWindows,
) -> (Option<u64>, Option<ContextSource>) {
    let meta_ctx = m.meta_ctx().filter(|c| *c > 0);
    let max_model_len = m.max_model_len.value().copied();
    match backend {
        _ if shape.router || shape.swap => match (meta_ctx, preset_window(m)) {
            (Some(c), _) => (Some(c), Some(ContextSource::MetaNCtx)),
            (None, Some(c)) => (Some(c), Some(ContextSource::Preset)),
            (None, None) => (None, None),
        },
        Backend::Vllm => (max_model_len, Some(ContextSource::MaxModelLen)),
        _ => {
            if let (true, Some(c)) = (server.single, server.props) {
                (Some(c), Some(ContextSource::PropsNCtx))
            } else if let Some(c) = meta_ctx {
                (Some(c), Some(ContextSource::MetaNCtx))
            } else if let Some(c) = server.props {
                (Some(c), Some(ContextSource::PropsNCtx))
            } else if let Some(c) = server.slot {
                (Some(c), Some(ContextSource::SlotsNCtx))
            } else if let Some(c) = max_model_len {
                (Some(c), Some(ContextSource::MaxModelLen))
            } else {
                (None, None)
            }
        }
    }
}

/// The `/metrics` numbers of its body, when it answered some.
pub(super) fn counters_of(body: Option<&[u8]>) -> Option<Counters> {
    let body = body?;
    let c = metrics::parse(&String::from_utf8_lossy(body));
    if c.is_empty() { None } else { Some(c) }
}

/// Slots: `/slots` first, else `/props` total plus the processing gauge.
pub(super) fn slot_counts(
    slots: Option<&[answer::Object<answer::Slot>]>,
    props: Option<&answer::Props>,
    counters: Option<&Counters>,
) -> Option<Slots> {
    if let Some(arr) = slots {
        let total = arr.len() as u64;
        let busy = arr
            .iter()
            .filter(|s| s.value().is_some_and(answer::Slot::busy))
            .count() as u64;
        // Known only when every slot tells.
        let unused = arr
            .iter()
            .map(|s| s.value().and_then(answer::Slot::used))
            .try_fold(0u64, |n, used| used.map(|u| n + u64::from(!u)));
        return Some(Slots {
            total,
            busy,
            free: total.saturating_sub(busy),
            unused,
        });
    }
    let total = props?.total_slots.value().copied()?;
    let busy = metrics::first(counters?, &["llamacpp:requests_processing"])?;
    let busy = (busy as u64).min(total);
    Some(Slots {
        total,
        busy,
        free: total - busy,
        unused: None,
    })
}

/// vLLM's queue from its `/metrics`.
pub(super) fn vllm_load(c: &Counters) -> Load {
    Load {
        running: metrics::first(c, &["vllm:num_requests_running"]).unwrap_or(0.0),
        waiting: metrics::first(c, &["vllm:num_requests_waiting"]).unwrap_or(0.0),
        kv_cache_usage: metrics::first(
            c,
            &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
        ),
    }
}

/// Non-fatal findings about an endpoint that is up.
pub(super) fn add_warnings(st: &mut EndpointStatus, backend: Backend, props_answered: bool) {
    if st.models.is_empty() {
        st.warnings
            .push("the server answers but serves no model yet".into());
    }
    for m in &st.models {
        if let Some(c) = m.context
            && let Some(refusal) = super::small_window(backend, &m.id, c)
        {
            st.warnings.push(refusal);
        } else if let Some(c) = m.context
            && c < MIN_WINDOW
        {
            st.warnings.push(format!(
                "{}: window {} per slot is under the {} a delegate needs (Claude Code's fixed prompt and one tool result leave the conversation no room): give each slot {} or more, 32k+ for jobs that read several files",
                m.id,
                c,
                crate::fmt::thousands(MIN_WINDOW),
                crate::fmt::thousands(MIN_WINDOW)
            ));
        }
    }
    if backend.needs_window()
        && let Some(m) = st.models.iter().find(|m| m.context.is_none())
    {
        st.warnings.push(super::no_window(backend, &st.name, &m.id));
    }
    st.warnings.extend(super::guard_note(backend));
    if backend == Backend::LlamaCpp && !props_answered {
        st.warnings
            .push("GET /props did not answer: per-slot window and slots unknown".into());
    }
}

/// The per-slot window a router will give a model it has not loaded, from
/// its launch args (`status.args`): `--ctx-size`/`-c`, divided by
/// `--parallel`/`-np` when that is given (with parallel on auto the slots
/// share one unified cache, each seeing the whole size).
pub fn preset_window(model: &answer::ModelEntry) -> Option<u64> {
    let args = model.args()?;
    let value = |names: &[&str]| -> Option<i64> {
        args.windows(2)
            .rev()
            .find(|w| names.contains(&w[0]))
            .and_then(|w| w[1].parse().ok())
    };
    let ctx = value(&["--ctx-size", "-c"]).filter(|c| *c > 0)? as u64;
    match value(&["--parallel", "-np"]) {
        Some(p) if p > 0 => Some(ctx / p as u64).filter(|c| *c > 0),
        _ => Some(ctx),
    }
}

/// Backend from `owned_by` and which endpoints answered.
pub(super) fn detect(data: &[answer::ModelEntry], props_answered: bool) -> Backend {
    let owned: Vec<answer::Owner> = data
        .iter()
        .filter_map(|m| m.owned_by.value().copied())
        .collect();
    if owned.contains(&answer::Owner::Vllm) {
        Backend::Vllm
    } else if owned
        .iter()
        .any(|o| matches!(o, answer::Owner::LlamaCpp | answer::Owner::LlamaSwap))
        || props_answered
    {
        // llama-swap fronts llama-server processes, as a rule.
        Backend::LlamaCpp
    } else if data.iter().any(|m| m.max_model_len.present()) {
        Backend::Vllm
    } else {
        Backend::Other
    }
}

#[cfg(test)]
mod tests {
    //! Each reader on answers shaped like the real servers' (the fakes in
    //! tests/support hold the full bodies: fake_llama, fake_vllm,
    //! fake_swap).

    use super::*;

    use answer::entries;

    fn props(body: &str) -> answer::Props {
        answer::parse(body.as_bytes()).unwrap()
    }

    const PLAIN: Shape = Shape {
        router: false,
        swap: false,
        sleeping: false,
    };

    /// llama-server's `/v1/models`: one model, `owned_by: llamacpp`, `meta`.
    const LLAMA_MODELS: &str = r#"{"object": "list", "data": [{"id": "qwen", "object": "model",
        "created": 1764460800, "owned_by": "llamacpp",
        "meta": {"n_ctx_train": 262144, "n_ctx": 131072, "size": 16000000000}}]}"#;

    /// llama-server's `/props`: per-slot `n_ctx`, slots, path and build.
    const LLAMA_PROPS: &str = r#"{"default_generation_settings": {"id": 0, "n_ctx": 65536,
        "is_processing": false}, "total_slots": 2, "model_path": "/models/qwen.gguf",
        "chat_template_caps": {"supports_system_role": true}, "build_info": "b7777-fake"}"#;

    /// vLLM's `/v1/models`.
    const VLLM_MODELS: &str = r#"{"object": "list", "data": [{"id": "qwen", "object": "model",
        "created": 1764460800, "owned_by": "vllm", "root": "/models/qwen", "parent": null,
        "max_model_len": 40960}]}"#;

    /// llama-swap's `/v1/models`: `owned_by: llama-swap`, `meta.n_ctx` when
    /// its config says a context.
    const SWAP_MODELS: &str = r#"{"object": "list", "data": [
        {"id": "a", "object": "model", "owned_by": "llama-swap", "status": {"value": "loaded"},
         "meta": {"llamaswap": {"type": "model"}, "n_ctx": 32768}},
        {"id": "b", "object": "model", "owned_by": "llama-swap", "status": {"value": "unloaded"}}]}"#;

    #[test]
    fn the_backend_is_read_from_owned_by_then_props_then_max_model_len() {
        assert_eq!(detect(&entries(VLLM_MODELS), false), Backend::Vllm);
        assert_eq!(detect(&entries(LLAMA_MODELS), false), Backend::LlamaCpp);
        assert_eq!(detect(&entries(SWAP_MODELS), false), Backend::LlamaCpp);
        let bare = r#"{"data": [{"id": "m"}]}"#;
        assert_eq!(detect(&entries(bare), true), Backend::LlamaCpp);
        assert_eq!(detect(&entries(bare), false), Backend::Other);
        let len_only = r#"{"data": [{"id": "m", "max_model_len": 8192}]}"#;
        assert_eq!(detect(&entries(len_only), false), Backend::Vllm);
    }

    #[test]
    fn a_single_llama_server_takes_its_window_path_and_build_from_props() {
        let p = props(LLAMA_PROPS);
        let models = served_models(
            &entries(LLAMA_MODELS),
            Some(&p),
            None,
            Backend::LlamaCpp,
            PLAIN,
        );
        assert_eq!(models.len(), 1);
        let m = &models[0];
        assert_eq!(m.id, "qwen");
        assert_eq!(m.context, Some(65536));
        assert_eq!(m.context_source, Some(ContextSource::PropsNCtx));
        let file = m.file.as_ref().unwrap();
        assert_eq!(file.path.as_deref(), Some("/models/qwen.gguf"));
        assert_eq!(file.build.as_deref(), Some("b7777-fake"));
        // Without /props the model's own meta.n_ctx is its window.
        let models = served_models(&entries(LLAMA_MODELS), None, None, Backend::LlamaCpp, PLAIN);
        assert_eq!(models[0].context, Some(131072));
        assert_eq!(models[0].context_source, Some(ContextSource::MetaNCtx));
    }

    #[test]
    fn vllm_s_window_is_max_model_len() {
        let models = served_models(&entries(VLLM_MODELS), None, None, Backend::Vllm, PLAIN);
        assert_eq!(models[0].context, Some(40960));
        assert_eq!(models[0].context_source, Some(ContextSource::MaxModelLen));
        assert_eq!(
            models[0].file.as_ref().and_then(|f| f.path.as_deref()),
            Some("/models/qwen")
        );
    }

    #[test]
    fn behind_llama_swap_a_window_is_meta_n_ctx_or_unknown_and_state_is_read() {
        let shape = Shape {
            swap: true,
            ..PLAIN
        };
        let models = served_models(&entries(SWAP_MODELS), None, None, Backend::LlamaCpp, shape);
        assert_eq!(models[0].context, Some(32768));
        assert_eq!(models[0].context_source, Some(ContextSource::MetaNCtx));
        assert_eq!(models[1].context, None);
        assert_eq!(models[1].context_source, None);
        assert_eq!(models[1].state, Some(ModelState::Unloaded));
        assert_eq!(shape.kind(), Some(ServerKind::LlamaSwap));
        assert_eq!(PLAIN.kind(), None);
    }

    #[test]
    fn a_router_s_preset_window_is_ctx_size_over_parallel() {
        let with = |args: &str| {
            let body = format!(
                r#"{{"data": [{{"id": "m", "status": {{"value": "unloaded", "args": {args}}}}}]}}"#
            );
            preset_window(&entries(&body)[0])
        };
        assert_eq!(with(r#"["--ctx-size", "65536", "-np", "2"]"#), Some(32768));
        assert_eq!(with(r#"["-c", "65536"]"#), Some(65536));
        assert_eq!(with(r#"["-c", "65536", "--parallel", "-1"]"#), Some(65536));
        assert_eq!(with(r#"["--port", "8080"]"#), None);
    }

    #[test]
    fn slots_come_from_the_slots_answer_else_props_and_the_processing_gauge() {
        // llama-server's /slots: one busy slot that served, one idle fresh.
        let body = br#"[{"id": 0, "n_ctx": 65536, "is_processing": true, "id_task": 7,
            "n_prompt_tokens": 29}, {"id": 1, "n_ctx": 65536, "is_processing": false}]"#;
        let arr = answer::slots(body).unwrap();
        let s = slot_counts(Some(&arr), None, None).unwrap();
        assert_eq!((s.total, s.busy, s.free, s.unused), (2, 1, 1, Some(1)));
        let p = props(LLAMA_PROPS);
        let c = metrics::parse("llamacpp:requests_processing 5\n");
        let s = slot_counts(None, Some(&p), Some(&c)).unwrap();
        assert_eq!((s.total, s.busy, s.free, s.unused), (2, 2, 0, None));
        assert!(slot_counts(None, Some(&p), None).is_none());
    }

    #[test]
    fn vllm_s_queue_is_read_from_its_metrics() {
        let text = "# TYPE vllm:num_requests_running gauge\n\
vllm:num_requests_running{engine=\"0\",model_name=\"qwen\"} 3\n\
vllm:num_requests_waiting{engine=\"0\",model_name=\"qwen\"} 1\n\
vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"qwen\"} 0.25\n";
        let c = counters_of(Some(text.as_bytes())).unwrap();
        let load = vllm_load(&c);
        assert_eq!((load.running, load.waiting), (3.0, 1.0));
        assert_eq!(load.kv_cache_usage, Some(0.25));
        assert!(counters_of(Some(b"# nothing\n")).is_none());
        assert!(counters_of(None).is_none());
    }

    #[test]
    fn an_endpoint_up_is_warned_of_no_model_a_small_window_and_no_props() {
        let ep = crate::config::Endpoint::at("local", "http://127.0.0.1:1");
        let mut st = EndpointStatus::new(&ep);
        add_warnings(&mut st, Backend::LlamaCpp, false);
        assert_eq!(st.warnings.len(), 2, "{:?}", st.warnings);
        assert!(st.warnings[0].contains("serves no model"));
        assert!(st.warnings[1].contains("/props did not answer"));
        let mut st = EndpointStatus::new(&ep);
        st.models = served_models(
            &entries(r#"{"data": [{"id": "m", "max_model_len": 12288}]}"#),
            None,
            None,
            Backend::Vllm,
            PLAIN,
        );
        add_warnings(&mut st, Backend::Vllm, false);
        assert_eq!(st.warnings.len(), 1, "{:?}", st.warnings);
        assert!(
            st.warnings[0].starts_with("m: window 12288 per slot is under the 16,384 a delegate needs"),
            "{:?}",
            st.warnings
        );
    }
}
