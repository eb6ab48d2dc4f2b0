//! Loading a model must not unload one that a running job uses.
//!
//! A llama.cpp router past `--models-max`, or a llama-swap group, unloads a
//! model to make room for another. A job whose model goes away mid-session
//! stalls while the server reloads it (minutes for a 27B) or fails. So
//! before anything loads a model on such an endpoint (a job's own load, a
//! one-shot completion or batch, `bringup --run`) and before
//! `bringup --unload`, the endpoint's loaded set
//! is checked against the running jobs of every localagents process (their
//! records), and the answer names the job. `force` skips the check.

use super::record::Status;
use super::store::Store;
use crate::error::Kind;
use crate::probe::EndpointStatus;
use crate::probe::load;

/// Running (or queued) jobs on `endpoint` whose model is one of `models`:
/// `(job id, model)`.
fn users(store: &Store, endpoint: &str, models: &[String]) -> Vec<(String, String)> {
    store
        .active()
        .into_iter()
        .filter_map(|(_, r)| r.ok())
        .filter(|r| matches!(r.status(), Status::Running | Status::Queued))
        .filter(|r| r.endpoint() == endpoint && models.iter().any(|m| m == r.served_id()))
        .map(|r| (r.id().to_string(), r.served_id().to_string()))
        .collect()
}

fn name_jobs(users: &[(String, String)]) -> String {
    users
        .iter()
        .map(|(id, m)| format!("job {id} ({m})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A load or unload that would take a running job's model away: the
/// jobs, and the way out.
#[derive(Debug, thiserror::Error)]
pub enum InUse {
    #[error(
        "loading {model} on `{endpoint}` could unload the model of running {}: {why}. Wait for it (wait_job); only if the user says so, load it anyway with force (run_agent, `localagents run --force`) or `localagents bringup {model} --run --force`",
        name_jobs(.jobs)
    )]
    Load {
        model: String,
        endpoint: String,
        /// `(job id, model)`.
        jobs: Vec<(String, String)>,
        why: String,
    },
    #[error(
        "{model} on `{endpoint}` is in use by running {}: wait for it (wait_job), or pass --force to unload anyway",
        name_jobs(.jobs)
    )]
    Unload {
        model: String,
        endpoint: String,
        jobs: Vec<(String, String)>,
    },
}

impl InUse {
    /// Always [`Kind::Invalid`]: `force` is the user's to give.
    pub fn kind(&self) -> Kind {
        Kind::Invalid
    }
}

/// May `model` be loaded on this endpoint now? Err names the job that
/// would lose its model, and the way out.
pub fn check_load(store: &Store, st: &EndpointStatus, model: &str) -> Result<(), InUse> {
    let Some(risk) = load::at_risk(st, model) else {
        return Ok(());
    };
    let users = users(store, &st.name, &risk.models);
    if users.is_empty() {
        return Ok(());
    }
    Err(InUse::Load {
        model: model.to_string(),
        endpoint: st.name.clone(),
        jobs: users,
        why: risk.why,
    })
}

/// May `model` be unloaded now?
pub fn check_unload(store: &Store, st: &EndpointStatus, model: &str) -> Result<(), InUse> {
    let users = users(store, &st.name, &[model.to_string()]);
    if users.is_empty() {
        return Ok(());
    }
    Err(InUse::Unload {
        model: model.to_string(),
        endpoint: st.name.clone(),
        jobs: users,
    })
}
