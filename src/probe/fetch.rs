//! The fetching of one probe: the paths a server answers, asked in
//! parallel within one deadline, and a vLLM router's replicas each probed
//! on its own. What the answers say is read by `read.rs`; this file asks,
//! times, and turns a failure into its one sentence.

use std::time::{Duration, Instant};

use super::read::{
    Shape, add_warnings, counters_of, detect, served_models, slot_counts, vllm_load,
};
use super::{
    EndpointStatus, FailureKind, Replica, ServerKind, TemplateCaps, answer, classify, client,
    http_client, local, others, replicas,
};
use crate::config::{Backend, Endpoint};

/// A fetched path: status and body, or a transport failure.
struct Fetched {
    status: u16,
    body: Vec<u8>,
    elapsed: Duration,
    /// The `Server` header, when the server sends one.
    server: Option<String>,
}

async fn fetch(ep: &Endpoint, path: &str, deadline: Instant) -> Result<Fetched, reqwest::Error> {
    let started = Instant::now();
    let remaining = deadline.saturating_duration_since(started);
    let resp = client::request(http_client(), ep, reqwest::Method::GET, path)
        .timeout(remaining.max(Duration::from_millis(1)))
        .send()
        .await?;
    let status = resp.status().as_u16();
    let server = resp
        .headers()
        .get(reqwest::header::SERVER)
        .and_then(|v| v.to_str().ok())
        .map(|s| crate::fmt::cut(s, 80));
    let body = client::read_at_most(resp, PROBE_BODY_CAP).await;
    Ok(Fetched {
        status,
        body,
        elapsed: started.elapsed(),
        server,
    })
}

/// The most of one probe answer that is read (a `/metrics` of a big
/// server is tens of KB; `/props` carries the chat template).
const PROBE_BODY_CAP: usize = 8 << 20;

/// The body of a 200.
fn ok_body(f: &Result<Fetched, reqwest::Error>) -> Option<&[u8]> {
    match f {
        Ok(f) if f.status == 200 => Some(&f.body),
        _ => None,
    }
}

/// Probe one endpoint now, within `budget`.
pub async fn probe(ep: &Endpoint, budget: Duration) -> EndpointStatus {
    let deadline = Instant::now() + budget;
    // A hard stop slightly after the deadline, in case a body trickles.
    match tokio::time::timeout(
        budget + Duration::from_millis(50),
        probe_server(ep, deadline, true),
    )
    .await
    {
        Ok(st) => st,
        Err(_) => {
            let (kind, sentence) = classify::timeout_sentence(ep, budget, true);
            EndpointStatus::new(ep).fail(kind, sentence)
        }
    }
}

/// Every answer of one endpoint; none for a path not asked.
struct Answers {
    models: Result<Fetched, reqwest::Error>,
    props: Option<Result<Fetched, reqwest::Error>>,
    slots: Option<Result<Fetched, reqwest::Error>>,
    metrics: Option<Result<Fetched, reqwest::Error>>,
    /// `GET /list_workers`: a vLLM router answers it.
    list_workers: Option<Result<Fetched, reqwest::Error>>,
    /// Ollama's and LM Studio's own paths, read.
    local: local::Answers,
    /// The other servers' own paths, read.
    others: others::Answers,
}

/// Fetch the paths this backend answers, in parallel; `/list_workers`
/// too when `detect_router` (not for a router's own replicas).
async fn fetch_all(ep: &Endpoint, deadline: Instant, detect_router: bool) -> Answers {
    let want_llama = matches!(ep.backend, None | Some(Backend::LlamaCpp | Backend::Llamafile));
    let want_metrics = matches!(ep.backend, None | Some(Backend::LlamaCpp | Backend::Vllm));
    let detect_router = detect_router
        && matches!(
            ep.backend,
            None | Some(Backend::LlamaCpp | Backend::Vllm | Backend::Other)
        );

    let models_f = fetch(ep, "/v1/models", deadline);
    let props_f = async {
        if want_llama {
            Some(fetch(ep, "/props", deadline).await)
        } else {
            None
        }
    };
    // /slots wakes a sleeping server and a router answers it 400: ask only
    // once /props says it is neither (one more local round trip).
    let props_then_slots = async {
        let props = props_f.await;
        let quiet = props
            .as_ref()
            .and_then(|r| r.as_ref().ok())
            .and_then(|f| answer::parse::<answer::Props>(&f.body))
            .is_some_and(|p| p.sleeping() || p.router())
            || props
                .as_ref()
                .and_then(|r| ok_body(r))
                .is_some_and(local::lmstudio_unexpected);
        let slots = if want_llama && !quiet {
            Some(fetch(ep, "/slots", deadline).await)
        } else {
            None
        };
        (props, slots)
    };
    let metrics_f = async {
        if want_metrics {
            Some(fetch(ep, "/metrics", deadline).await)
        } else {
            None
        }
    };
    let workers_f = async {
        if detect_router {
            Some(fetch(ep, "/list_workers", deadline).await)
        } else {
            None
        }
    };
    let (models, (props, slots), metrics, list_workers, mut local, mut others) = tokio::join!(
        models_f,
        props_then_slots,
        metrics_f,
        workers_f,
        fetch_local(ep, deadline),
        fetch_others(ep, deadline)
    );
    others.server_header = models.as_ref().ok().and_then(|f| f.server.clone());
    local.unexpected |= props
        .as_ref()
        .and_then(ok_body)
        .is_some_and(local::lmstudio_unexpected);
    Answers {
        models,
        props,
        slots,
        metrics,
        list_workers,
        local,
        others,
    }
}

/// The paths only the other servers answer ([`others`]), in the same
/// round; only those of what the backend may be. Docker Model Runner's
/// `/engines/_configure` is at the server's root, above a base_url that
/// ends in its `/engines` prefix.
async fn fetch_others(ep: &Endpoint, deadline: Instant) -> others::Answers {
    let want = |b: Backend| others::wanted(ep.backend, b);
    let get = |path: &'static str, want: bool| async move {
        if want {
            ok_body(&fetch(ep, path, deadline).await).map(<[u8]>::to_vec)
        } else {
            None
        }
    };
    // Under a base_url of `…/engines` or `…/engines/llama.cpp`, the root
    // is above `/engines`: so many levels up, then its own path.
    let below = ep
        .base_url
        .trim_end_matches('/')
        .rsplit('/')
        .position(|seg| seg == "engines")
        .filter(|_| !ep.base_url.ends_with("://"));
    let configure = match below {
        Some(0) => "/_configure",
        Some(1) => "/../_configure",
        _ => "/engines/_configure",
    };
    let tabby = want(Backend::TabbyApi);
    let kobold = want(Backend::KoboldCpp);
    let lemonade = want(Backend::Lemonade);
    let (version, window, info, model, localai, dmr, (slots, health)) = tokio::join!(
        get("/api/extra/version", kobold),
        get("/api/extra/true_max_context_length", kobold),
        get("/.well-known/serviceinfo", tabby || kobold),
        get("/v1/model", tabby),
        get("/.well-known/localai.json", want(Backend::LocalAi)),
        get(configure, want(Backend::DockerModelRunner)),
        async {
            tokio::join!(
                get("/api/v1/slots", lemonade),
                get("/api/v1/health", lemonade)
            )
        },
    );
    let list = |b: Option<Vec<u8>>| {
        b.and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
    };
    others::Answers {
        server_header: None,
        kobold_version: version.as_deref().and_then(answer::parse),
        kobold_window: window.as_deref().and_then(answer::parse),
        serviceinfo: info.as_deref().and_then(answer::parse),
        tabby_model: model.as_deref().and_then(answer::parse),
        localai: localai.as_deref().and_then(answer::parse),
        dmr_runners: list(dmr).and_then(|v| answer::Field::<_, false>::from_value(v).into_value()),
        lemonade_slots: slots.as_deref().and_then(answer::slots),
        lemonade_health: health.as_deref().and_then(answer::parse),
    }
}

/// Ollama's `/api/ps` and `/api/version`, LM Studio's `/api/v1/models`
/// (then `/api/v0/models` when 0.3.x answers that one with its error), in
/// the same round as the other paths; only what the backend may be.
async fn fetch_local(ep: &Endpoint, deadline: Instant) -> local::Answers {
    let want_ollama = matches!(ep.backend, None | Some(Backend::Ollama));
    let want_lms = matches!(ep.backend, None | Some(Backend::LmStudio));
    let get = |path: &'static str, want: bool| async move {
        if want {
            ok_body(&fetch(ep, path, deadline).await).map(<[u8]>::to_vec)
        } else {
            None
        }
    };
    let lms = async {
        let v1 = get("/api/v1/models", want_lms).await;
        let old = v1.as_deref().is_some_and(local::lmstudio_unexpected);
        let v0 = get("/api/v0/models", old).await;
        (v1, v0, old)
    };
    let (ps, version, (v1, v0, old)) = tokio::join!(
        get("/api/ps", want_ollama),
        get("/api/version", want_ollama),
        lms
    );
    local::Answers {
        ps: ps.as_deref().and_then(answer::parse),
        version: version.as_deref().and_then(answer::parse),
        lms: v1.as_deref().and_then(answer::parse),
        lms_v0: v0.as_deref().and_then(answer::parse),
        unexpected: old,
    }
}

/// Probe one server (`detect_router`: and see whether it is a vLLM
/// router, whose replicas are then probed instead).
pub(super) async fn probe_server(ep: &Endpoint, deadline: Instant, detect_router: bool) -> EndpointStatus {
    let mut st = EndpointStatus::new(ep);
    let budget = deadline.saturating_duration_since(Instant::now());
    let answers = fetch_all(ep, deadline, detect_router).await;
    if let Some(lw) = &answers.list_workers {
        match ok_body(lw).and_then(replicas::listed) {
            Some((urls, refused)) => {
                return through_router(ep, st, answers.models, (urls, refused), deadline).await;
            }
            None if ep.vllm_router => {
                let (kind, sentence) = match lw {
                    Err(e) => classify::transport(ep, e, budget),
                    Ok(f) => (
                        FailureKind::Http,
                        format!(
                            "endpoint `{}` is declared `backend: vllm-router`, but GET /list_workers answered {} without a list of workers: point base_url at vllm-router's --port, or remove `backend: vllm-router`",
                            ep.name, f.status
                        ),
                    ),
                };
                return st.fail(kind, sentence);
            }
            None => {}
        }
    }

    // /v1/models decides up or down.
    let data = match model_list(ep, &mut st, answers.models, budget) {
        Ok(data) => data,
        Err((kind, sentence)) => return st.fail(kind, sentence),
    };
    let props = answers
        .props
        .as_ref()
        .and_then(ok_body)
        .and_then(answer::parse::<answer::Props>)
        .filter(answer::Props::is_llama);
    if read_known(&mut st, ep, &data, props.as_ref(), (&answers.others, &answers.local)) {
        return st;
    }
    let shape = Shape {
        router: props.as_ref().is_some_and(answer::Props::router),
        swap: data
            .iter()
            .any(|m| m.owned_by.value() == Some(&answer::Owner::LlamaSwap)),
        sleeping: props.as_ref().is_some_and(answer::Props::sleeping),
    };
    if shape.router {
        st.max_instances = props
            .as_ref()
            .and_then(|p| p.max_instances.value().copied());
    }
    st.kind = shape.kind();

    // Backend: configured, else detected.
    let backend = match ep.backend {
        Some(b) => b,
        None => detect(&data, props.is_some()),
    };
    st.backend = backend.as_str().to_string();
    st.up = true;

    let slots = answers
        .slots
        .as_ref()
        .and_then(ok_body)
        .and_then(answer::slots);
    st.models = served_models(&data, props.as_ref(), slots.as_deref(), backend, shape);
    with_config_window(&mut st, ep);

    if let Some(p) = &props {
        if p.chat_template_caps.present() {
            let caps = p.chat_template_caps.value();
            st.chat_template = Some(TemplateCaps {
                supports_system_role: caps.and_then(|c| c.supports_system_role.value().copied()),
                supports_tool_calls: caps.and_then(|c| c.supports_tool_calls.value().copied()),
            });
        }
        if shape.sleeping {
            st.warnings.push(
                "the server is sleeping: the first request wakes it (it reloads the model)".into(),
            );
        }
    }

    let counters = counters_of(answers.metrics.as_ref().and_then(ok_body));
    st.metrics = counters.is_some();
    st.slots = slot_counts(slots.as_deref(), props.as_ref(), counters.as_ref());
    if backend == Backend::Vllm
        && let Some(c) = &counters
    {
        st.load = Some(vllm_load(c));
    }
    st.counters = counters;
    add_warnings(&mut st, backend, props.is_some());
    st
}

/// One of the servers with readers of their own ([`others`], then
/// [`local`]: several of the others answer Ollama's and llama.cpp's paths
/// too), read into `st`; false for llama.cpp, vLLM and the rest.
fn read_known(
    st: &mut EndpointStatus,
    ep: &Endpoint,
    data: &[answer::ModelEntry],
    props: Option<&answer::Props>,
    (other, desktop): (&others::Answers, &local::Answers),
) -> bool {
    if let Some(b) = others::detect(ep.backend, data, props, other) {
        others::read(st, b, data, props, other);
        with_config_window(st, ep);
        add_warnings(st, b, false);
        return true;
    }
    if let Some(b) = local::detect(ep.backend, desktop) {
        local::read(st, b, data, desktop);
        add_warnings(st, b, false);
        return true;
    }
    false
}

/// The endpoint's `window:` for each model the server says no window of.
fn with_config_window(st: &mut EndpointStatus, ep: &Endpoint) {
    let Some(w) = ep.window else { return };
    for m in st.models.iter_mut().filter(|m| m.context.is_none()) {
        m.context = Some(w);
        m.context_source = Some(super::ContextSource::Config);
    }
}

/// A vLLM router: each replica probed on its own, concurrently, in what is
/// left of the budget, and the router's `/workers` for its view of their
/// health; folded into the router's status ([`replicas::fold`]).
async fn through_router(
    ep: &Endpoint,
    mut st: EndpointStatus,
    models: Result<Fetched, reqwest::Error>,
    (urls, refused): (Vec<String>, Vec<String>),
    deadline: Instant,
) -> EndpointStatus {
    if let Ok(f) = &models {
        st.latency_ms = Some(f.elapsed.as_millis() as u64);
    }
    let eps: Vec<Endpoint> = urls.iter().map(|u| replicas::endpoint_of(ep, u)).collect();
    // Boxed: a replica is probed by this same function (never as a router).
    let probes = futures::future::join_all(
        eps.iter()
            .map(|r| Box::pin(probe_server(r, deadline, false))),
    );
    let (workers, statuses) = tokio::join!(fetch(ep, "/workers", deadline), probes);
    let workers = ok_body(&workers)
        .and_then(answer::parse::<replicas::Workers>)
        .unwrap_or_default();
    let list: Vec<Replica> = urls
        .iter()
        .zip(statuses.iter().cloned())
        .map(|(u, s)| replicas::replica(u, s, &workers))
        .collect();
    for r in &refused {
        st.warnings.push(format!(
            "the router lists a replica that is not probed: {r}"
        ));
    }
    if !list.iter().any(|r| r.up) {
        let (kind, sentence) = replicas::all_down(&list);
        st.kind = Some(ServerKind::VllmRouter);
        st.replicas = list;
        return st.fail(kind, sentence);
    }
    st.up = true;
    replicas::fold(&mut st, list, &statuses);
    st
}

/// `/v1/models` as a list of models each with an id, or why the endpoint
/// is down. Sets the latency once the server answered.
fn model_list(
    ep: &Endpoint,
    st: &mut EndpointStatus,
    fetched: Result<Fetched, reqwest::Error>,
    budget: Duration,
) -> Result<Vec<answer::ModelEntry>, (FailureKind, String)> {
    let f = fetched.map_err(|e| classify::transport(ep, &e, budget))?;
    st.latency_ms = Some(f.elapsed.as_millis() as u64);
    if f.status != 200 {
        return Err(classify::http(ep, "/v1/models", f.status, &f.body));
    }
    // Ollama with no model at all says `"data": null`.
    if answer::parse::<answer::NullList>(&f.body).is_some_and(|l| l.data.value().is_some()) {
        return Ok(Vec::new());
    }
    answer::parse::<answer::ModelList>(&f.body)
        .and_then(|list| list.data.into_value())
        .and_then(|data| {
            data.into_iter()
                .map(|m| m.into_value().filter(|m| m.id.value().is_some()))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| classify::bad_body(ep, "/v1/models", &f.body))
}
