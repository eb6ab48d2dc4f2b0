//! A job's lifecycle ([`Status`]): its own file so that what reads a
//! record without all of it (a scan's brief in [`super::dir`]) needs
//! nothing of [`super::record`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A job's lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Timeout,
    Lost,
}

impl Status {
    pub fn terminal(self) -> bool {
        !matches!(self, Status::Queued | Status::Running)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Running => "running",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
            Status::Timeout => "timeout",
            Status::Lost => "lost",
        }
    }

    /// Every status, for messages and schemas.
    pub const ALL: &'static str = "queued, running, succeeded, failed, cancelled, timeout or lost";

    pub fn parse(s: &str) -> Option<Status> {
        Some(match s {
            "queued" => Status::Queued,
            "running" => Status::Running,
            "succeeded" => Status::Succeeded,
            "failed" => Status::Failed,
            "cancelled" => Status::Cancelled,
            "timeout" => Status::Timeout,
            "lost" => Status::Lost,
            _ => return None,
        })
    }
}

impl std::str::FromStr for Status {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Status::parse(s.trim())
            .ok_or_else(|| format!("unknown status `{}`: use {}", s.trim(), Status::ALL))
    }
}
