//! `localagents ui`: a local web page to watch endpoints, jobs and savings.
//!
//! A job is dozens of turns, several jobs share a server's slots, and the
//! ledger piles up over weeks: a page shows that better than JSON lines.
//! The page reads the same records as the CLI, through the same [`api`]
//! functions, and writes nothing except a cancel, which it asks to confirm.
//!
//! Who may see it: it binds 127.0.0.1 only, on a free port, and every
//! request must carry the random token from the URL it prints (Jupyter's
//! way), or it gets a 403. So does a request whose `Host` or `Origin` is not
//! this loopback address and port: a page elsewhere that rebinds its DNS
//! name to 127.0.0.1 sends its own name as `Host`. Every response forbids
//! inline script and framing (Content-Security-Policy) and sends a
//! referrer only to itself, so the token does not leak from a link (not
//! `no-referrer`: with it a browser sends `Origin: null` on the cancel
//! form's POST, which the guard refuses).
//!
//! Live updates are server-sent events: every second the server writes the
//! changed sections again with the same functions that wrote the page
//! ([`page`]) and the one static script swaps them in. With JavaScript off
//! the page shows everything as of its loading.

pub mod chart;
pub mod html;
pub mod page;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use futures::{Stream, StreamExt};

use crate::api::{self, Context, Manager, Status, valid_id};

/// How often the live stream looks at the records.
pub const TICK: Duration = Duration::from_secs(1);
/// How often it probes the endpoints again (every this many ticks).
const PROBE_EVERY: u64 = 5;
/// Days the savings chart covers.
pub const SAVINGS_DAYS: u32 = 30;
/// Running and queued jobs the overview shows at most.
const ACTIVE_MAX: usize = 50;
/// Recent jobs the overview lists.
const RECENT: usize = 20;

/// What every handler shares.
pub struct Ui {
    pub ctx: Context,
    pub manager: Arc<Manager>,
    pub token: String,
    pub port: u16,
}

/// A fresh token: 128 random bits, hex.
pub fn new_token() -> std::io::Result<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| std::io::Error::other(format!("no randomness: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// The URL to open.
pub fn url(port: u16, token: &str) -> String {
    format!("http://127.0.0.1:{port}/?token={token}")
}

/// Serve the page on `listener` (bound to 127.0.0.1) until `shutdown`.
pub async fn serve(
    ctx: Context,
    listener: tokio::net::TcpListener,
    token: String,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let port = listener.local_addr()?.port();
    let ui = Arc::new(Ui {
        manager: Manager::new(ctx.clone()),
        ctx,
        token,
        port,
    });
    axum::serve(listener, router(ui))
        .with_graceful_shutdown(shutdown)
        .await
}

/// The routes, behind the guard.
pub fn router(ui: Arc<Ui>) -> Router {
    Router::new()
        .route("/", get(overview))
        .route("/jobs/{id}", get(job))
        .route("/jobs/{id}/cancel", get(cancel_confirm).post(cancel))
        .route("/savings", get(savings))
        .route("/models", get(models))
        .route("/events", get(events))
        .route("/static/app.js", get(script))
        .route("/static/style.css", get(style))
        .layer(middleware::from_fn_with_state(ui.clone(), guard))
        .with_state(ui)
}

/// Why a request is refused, before any handler sees it.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No `token`, or the wrong one.
    Token,
    /// A `Host` that is not this loopback address and port.
    Host,
    /// An `Origin` that is not this page's.
    Origin,
}

impl Refusal {
    fn sentence(&self) -> &'static str {
        match self {
            Refusal::Token => {
                "403: this page needs the token from the URL that `localagents ui` printed"
            }
            Refusal::Host => {
                "403: this page answers only to 127.0.0.1, localhost or [::1] on its own port"
            }
            Refusal::Origin => "403: a request from another origin is refused",
        }
    }
}

/// Is this request for us: the token, a loopback `Host` on our port, and
/// no foreign `Origin`?
pub fn check(
    headers: &HeaderMap,
    query: Option<&str>,
    token: &str,
    port: u16,
) -> Result<(), Refusal> {
    let allowed = |h: &str| {
        [
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
        ]
        .iter()
        .any(|a| a.eq_ignore_ascii_case(h))
    };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .ok_or(Refusal::Host)?;
    if !allowed(host) {
        return Err(Refusal::Host);
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let ok = origin
            .to_str()
            .ok()
            .and_then(|o| o.strip_prefix("http://"))
            .is_some_and(allowed);
        if !ok {
            return Err(Refusal::Origin);
        }
    }
    let given = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("token="))
        .ok_or(Refusal::Token)?;
    if !same(given.as_bytes(), token.as_bytes()) {
        return Err(Refusal::Token);
    }
    Ok(())
}

/// Compare in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// The guard every request passes, and the headers every answer carries.
async fn guard(State(ui): State<Arc<Ui>>, req: Request, next: Next) -> Response {
    let mut res = match check(req.headers(), req.uri().query(), &ui.token, ui.port) {
        Ok(()) => next.run(req).await,
        Err(r) => (StatusCode::FORBIDDEN, r.sentence()).into_response(),
    };
    let h = res.headers_mut();
    for (k, v) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        h.insert(k, HeaderValue::from_static(v));
    }
    res
}

/// Run a blocking read of the records off the async workers.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

fn not_found(ui: &Ui, message: &str) -> Response {
    (StatusCode::NOT_FOUND, Html(page::error(&ui.token, message))).into_response()
}

/// The running and queued jobs with their progress, and the recent ones.
fn jobs_html(ui: &Ui) -> String {
    let m = &ui.manager;
    // The index keeps the live jobs apart: no other record is read each
    // tick.
    let mut active = Vec::new();
    for record in m.active() {
        if !matches!(record.status(), Status::Running | Status::Queued) {
            continue;
        }
        if let Ok(requests) = api::job_requests(m, record.id()) {
            let progress = api::progress_of(&record, &requests);
            active.push(page::Active { record, progress });
        }
        if active.len() >= ACTIVE_MAX {
            break;
        }
    }
    let recent = api::list_jobs(m, None, RECENT, api::MAX_LIST_LIMIT)
        .map(|l| l.jobs)
        .unwrap_or_default();
    page::jobs(&ui.token, &active, &recent)
}

async fn endpoints_html(ui: &Ui) -> String {
    match crate::registry::status(&ui.ctx.discovery()).await {
        Ok((_, st)) => page::endpoints(Ok(&st.endpoints)),
        Err(e) => page::endpoints(Err(&e.to_string())),
    }
}

async fn overview(State(ui): State<Arc<Ui>>) -> Html<String> {
    let endpoints = endpoints_html(&ui).await;
    let u = ui.clone();
    let jobs = blocking(move || jobs_html(&u)).await;
    Html(page::overview(&ui.token, &endpoints, &jobs))
}

/// `/job/ID?diff_offset=N`.
#[derive(serde::Deserialize)]
struct JobQuery {
    diff_offset: Option<String>,
}

/// `/events?view=…&job=…`.
#[derive(serde::Deserialize)]
struct EventsQuery {
    view: Option<String>,
    job: Option<String>,
}

async fn job(
    State(ui): State<Arc<Ui>>,
    Path(id): Path<String>,
    Query(q): Query<JobQuery>,
) -> Response {
    // A bad offset reads as the diff's start, not a refused page.
    let offset = q
        .diff_offset
        .and_then(|o| o.parse::<usize>().ok())
        .unwrap_or(0);
    let diff = api::job_diff(&ui.manager, &id, api::DEFAULT_DIFF_BYTES, offset)
        .await
        .map_err(|e| e.to_string());
    let u = ui.clone();
    blocking(move || {
        let m = &u.manager;
        // One read of the record and of the request log serves the
        // progress block and the chart.
        let record = match api::job_record(m, &id) {
            Ok(r) => r,
            Err(e) => return not_found(&u, &e.to_string()),
        };
        let requests = match api::job_requests(m, &id) {
            Ok(r) => r,
            Err(e) => return not_found(&u, &e.to_string()),
        };
        let progress = api::progress_of(&record, &requests);
        let text = |w| api::job_text(m, &id, w).unwrap_or_else(|e| e.to_string());
        let brief = text(api::JobText::Brief);
        let transcript = text(api::JobText::Transcript);
        Html(page::job(
            &u.token,
            &page::JobView {
                record: &record,
                progress: &progress,
                brief: &brief,
                transcript: &transcript,
                requests: &requests,
                diff,
            },
        ))
        .into_response()
    })
    .await
}

async fn cancel_confirm(State(ui): State<Arc<Ui>>, Path(id): Path<String>) -> Response {
    let u = ui.clone();
    blocking(move || match api::job_record(&u.manager, &id) {
        Ok(r) => Html(page::cancel_confirm(&u.token, &r)).into_response(),
        Err(e) => not_found(&u, &e.to_string()),
    })
    .await
}

async fn cancel(State(ui): State<Arc<Ui>>, Path(id): Path<String>) -> Response {
    match api::cancel_job(&ui.manager, &id).await {
        Ok(_) => Redirect::to(&format!("/jobs/{id}?token={}", ui.token)).into_response(),
        Err(e) => not_found(&ui, &e.to_string()),
    }
}

async fn savings(State(ui): State<Arc<Ui>>) -> Response {
    let u = ui.clone();
    blocking(
        move || match api::savings(&u.ctx, crate::ledger::Since::Days(SAVINGS_DAYS)) {
            Ok(s) => {
                let today = chrono::Utc::now().date_naive();
                let days: Vec<chrono::NaiveDate> = (0..SAVINGS_DAYS)
                    .rev()
                    .map(|d| today - chrono::Duration::days(i64::from(d)))
                    .collect();
                Html(page::savings(&u.token, &s, &days)).into_response()
            }
            Err(e) => not_found(&u, &e.to_string()),
        },
    )
    .await
}

async fn models(State(ui): State<Arc<Ui>>) -> Html<String> {
    match crate::registry::status(&ui.ctx.discovery()).await {
        Ok((_, st)) => {
            let state_dir = ui.ctx.state_dir.clone();
            let endpoints = st.endpoints;
            let (endpoints, evals) = blocking(move || {
                let evals = crate::eval::lines(&state_dir, &endpoints);
                (endpoints, evals)
            })
            .await;
            Html(page::models(&ui.token, Ok((&endpoints, &evals))))
        }
        Err(e) => Html(page::models(&ui.token, Err(&e.to_string()))),
    }
}

/// What a live stream watches.
enum Watch {
    Overview,
    Job(String),
}

/// `/events?view=overview` or `/events?view=job&job=ID`: the changed
/// sections, every [`TICK`].
async fn events(State(ui): State<Arc<Ui>>, Query(q): Query<EventsQuery>) -> Response {
    let watch = match (q.view.as_deref(), q.job) {
        (Some("job"), Some(id)) if valid_id(&id) => Watch::Job(id),
        (Some("overview") | None, _) => Watch::Overview,
        _ => return (StatusCode::BAD_REQUEST, "view=overview or view=job&job=ID").into_response(),
    };
    Sse::new(live(ui, watch))
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn live(ui: Arc<Ui>, watch: Watch) -> impl Stream<Item = Result<Event, Infallible>> {
    struct S {
        ui: Arc<Ui>,
        watch: Watch,
        tick: u64,
        last: HashMap<&'static str, String>,
        done: bool,
        interval: tokio::time::Interval,
    }
    let mut interval = tokio::time::interval(TICK);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let s = S {
        ui,
        watch,
        tick: 0,
        last: HashMap::new(),
        done: false,
        interval,
    };
    futures::stream::unfold(s, |mut s| async move {
        loop {
            if s.done {
                return None;
            }
            s.interval.tick().await;
            s.tick += 1;
            let mut out: Vec<(&'static str, String)> = Vec::new();
            match &s.watch {
                Watch::Overview => {
                    if s.tick % PROBE_EVERY == 1 {
                        out.push(("endpoints", endpoints_html(&s.ui).await));
                    }
                    let u = s.ui.clone();
                    out.push(("jobs", blocking(move || jobs_html(&u)).await));
                }
                Watch::Job(id) => {
                    let (u, id) = (s.ui.clone(), id.clone());
                    match blocking(move || api::job_progress(&u.manager, &id)).await {
                        Ok(p) => {
                            s.done = p.status.terminal();
                            out.push(("progress", page::progress(&p)));
                        }
                        Err(_) => s.done = true,
                    }
                }
            }
            let mut events: Vec<Result<Event, Infallible>> = Vec::new();
            for (name, html) in out {
                if s.last.get(name) != Some(&html) {
                    events.push(Ok(Event::default().event(name).data(html.clone())));
                    s.last.insert(name, html);
                }
            }
            if s.done {
                events.push(Ok(Event::default().event("done").data("")));
            }
            if !events.is_empty() {
                return Some((futures::stream::iter(events), s));
            }
        }
    })
    .flatten()
}

async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("app.js"),
    )
}

async fn style() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("style.css"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(host: &str, origin: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        if let Some(o) = origin {
            h.insert(header::ORIGIN, HeaderValue::from_str(o).unwrap());
        }
        h
    }

    #[test]
    fn the_guard_wants_the_token_a_loopback_host_and_no_foreign_origin() {
        let t = "00ff";
        let ok = headers("127.0.0.1:4000", None);
        assert_eq!(check(&ok, Some("token=00ff"), t, 4000), Ok(()));
        assert_eq!(check(&ok, Some("a=1&token=00ff"), t, 4000), Ok(()));
        assert_eq!(check(&ok, None, t, 4000), Err(Refusal::Token));
        assert_eq!(check(&ok, Some("token=00fe"), t, 4000), Err(Refusal::Token));
        assert_eq!(
            check(&ok, Some("token=00ff0"), t, 4000),
            Err(Refusal::Token)
        );
        let q = Some("token=00ff");
        assert_eq!(check(&headers("localhost:4000", None), q, t, 4000), Ok(()));
        assert_eq!(
            check(&headers("evil.example:4000", None), q, t, 4000),
            Err(Refusal::Host)
        );
        assert_eq!(
            check(&headers("127.0.0.1:4001", None), q, t, 4000),
            Err(Refusal::Host)
        );
        assert_eq!(check(&HeaderMap::new(), q, t, 4000), Err(Refusal::Host));
        let same_origin = headers("127.0.0.1:4000", Some("http://127.0.0.1:4000"));
        assert_eq!(check(&same_origin, q, t, 4000), Ok(()));
        let foreign = headers("127.0.0.1:4000", Some("http://evil.example"));
        assert_eq!(check(&foreign, q, t, 4000), Err(Refusal::Origin));
        let null = headers("127.0.0.1:4000", Some("null"));
        assert_eq!(check(&null, q, t, 4000), Err(Refusal::Origin));
    }
}
