//! Jobs as MCP tasks (the tasks extension, SEP-2663): the task id is the
//! job id, so the task path and the job id + `wait_job` path share one job
//! record.

use rmcp::model::IntoContents;
use rmcp::model::{
    CallToolResult, DetailedTask, ErrorData, JsonObject, Task, TaskPayload, TaskStatus,
};

use super::Reply;
use crate::api::{JobReply, Manager, valid_id};

/// How often a client should poll `tasks/get`.
const POLL_MS: u64 = 2000;
/// How long a finished task stays readable (job records last longer).
const TTL_MS: u64 = 24 * 3600 * 1000;

fn now() -> String {
    crate::api::now_ts()
}

/// A job's task as it is now (working; `get` fills in the rest).
fn working(id: &str, created: String) -> Task {
    Task::new(id, TaskStatus::Working, created, now())
        .with_ttl_ms(TTL_MS)
        .with_poll_interval_ms(POLL_MS)
}

/// The task of a job that was just started.
pub fn task_of(id: &str, m: &Manager) -> Task {
    let created = m.record(id).map(|r| r.created().to_string()).unwrap_or_else(|_| now());
    working(id, created)
}

/// Is this a job we know? A clear error for anything else.
pub fn known(m: &Manager, id: &str) -> Result<(), ErrorData> {
    if !valid_id(id) || !m.knows(id) {
        return Err(ErrorData::invalid_params(
            format!("no task {id}: task ids are the job ids run_agent returned"),
            None,
        ));
    }
    Ok(())
}

/// `tasks/get` for job `id`.
pub fn get(m: &Manager, id: &str) -> Result<DetailedTask, ErrorData> {
    known(m, id)?;
    let rec = m
        .record(id)
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
    let task = working(id, rec.created().to_string());
    if !rec.status().terminal() {
        let line = m
            .progress(id)
            .map(|p| p.borrow().line())
            .or(rec.last_activity().map(str::to_string))
            .unwrap_or_else(|| rec.status().as_str().to_string());
        return Ok(DetailedTask::new(
            task.with_status_message(line),
            TaskPayload::Working,
        ));
    }
    // The same result a plain run_agent call returns once the job ends.
    let reply = JobReply {
        job: rec.summary(),
        still_running: false,
        next: None,
    };
    let result = CallToolResult::success(Reply(reply).into_contents());
    let result: JsonObject = match serde_json::to_value(result) {
        Ok(serde_json::Value::Object(o)) => o,
        _ => {
            return Err(ErrorData::internal_error(
                "cannot encode the job result",
                None,
            ));
        }
    };
    Ok(DetailedTask::new(
        task.with_status_message(rec.status().as_str()),
        TaskPayload::Completed { result },
    ))
}
