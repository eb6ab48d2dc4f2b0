//! What a job's page in `localagents ui` reads: its progress, its model
//! requests and the tails of its texts, from the records on disk whichever
//! process runs the job.

use serde::Serialize;

use super::{Error, JobRecord, Manager, Status};

/// the page shows and its live updates repeat.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LiveProgress {
    pub status: Status,
    /// Requests to the model so far (each is a turn of the session).
    pub turns: u64,
    pub tool_calls: u64,
    /// Prompt, cached and output tokens, summed over the requests.
    pub tokens: u64,
    pub last_activity: Option<String>,
    /// The acceptance command's round, once it has run.
    pub acceptance_round: Option<u32>,
    pub elapsed_s: Option<f64>,
}

/// One `/v1/messages` request of a job (a line of its `requests.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestPoint {
    pub ts: String,
    pub status: u16,
    /// Prompt tokens the server processed anew.
    pub new_tokens: u64,
    /// Prompt tokens the server had in its cache.
    pub cached_tokens: u64,
    pub output_tokens: u64,
    pub ttft_ms: Option<u64>,
    pub ms: u64,
    pub error: Option<String>,
}

/// The most of a request log a page reads (its tail).
pub const REQUESTS_READ_CAP: u64 = crate::wire::READ_CAP;
/// The most of a brief or transcript a page shows (its tail).
pub const TEXT_READ_CAP: u64 = 256 << 10;

/// A job's model requests, oldest first (from the last
/// [`REQUESTS_READ_CAP`] bytes of its log).
pub fn job_requests(m: &Manager, id: &str) -> Result<Vec<RequestPoint>, Error> {
    let dir = m.job_dir(id)?;
    let records = crate::wire::read_requests(&dir.requests(), REQUESTS_READ_CAP)
        .map_err(|e| Error::Invalid(format!("job {id}: {e}")))?;
    Ok(records
        .into_iter()
        .filter(crate::wire::RequestRecord::is_messages)
        .map(|r| RequestPoint {
            ts: r.ts,
            status: r.status,
            new_tokens: r.usage.input,
            cached_tokens: r.usage.cache_read,
            output_tokens: r.usage.output,
            ttft_ms: r.ttft_ms,
            ms: r.ms,
            error: r.error,
        })
        .collect())
}

/// A job's progress from its record and request log.
pub fn job_progress(m: &Manager, id: &str) -> Result<LiveProgress, Error> {
    let rec = m.record(id)?;
    let requests = job_requests(m, id)?;
    Ok(progress_of(&rec, &requests))
}

/// A job's progress from its record and the requests already read.
pub fn progress_of(rec: &JobRecord, requests: &[RequestPoint]) -> LiveProgress {
    LiveProgress {
        status: rec.status(),
        turns: requests.len() as u64,
        tool_calls: rec.tool_calls(),
        tokens: requests
            .iter()
            .map(|r| r.new_tokens + r.cached_tokens + r.output_tokens)
            .sum(),
        acceptance_round: rec.acceptance().map(|a| a.rounds),
        last_activity: rec.last_activity().map(str::to_string),
        elapsed_s: rec.elapsed_s(),
    }
}

/// The tail of one of a job's text files (its brief, its transcript):
/// at most [`TEXT_READ_CAP`] bytes, empty when the file is not there.
pub fn job_text(m: &Manager, id: &str, which: JobText) -> Result<String, Error> {
    let dir = m.job_dir(id)?;
    let path = match which {
        JobText::Brief => dir.task(),
        JobText::Transcript => dir.transcript(),
    };
    match crate::paths::read_tail(&path, TEXT_READ_CAP) {
        Ok((bytes, _)) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(Error::Invalid(format!("job {id}: {e}"))),
    }
}

/// Which text of a job ([`job_text`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobText {
    /// `task.txt`: the whole brief.
    Brief,
    /// `transcript.txt`: what the delegate said and did.
    Transcript,
}

/// A job's whole record.
pub fn job_record(m: &Manager, id: &str) -> Result<JobRecord, Error> {
    Ok(m.record(id)?)
}
