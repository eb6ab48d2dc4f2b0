//! What kind of failure an error is: one machine-readable name beside the
//! sentence a person reads, the way [`crate::probe::FailureKind`] names an
//! endpoint's failure beside its sentence.
//!
//! Each layer keeps its own error enum, because each knows only its own
//! failures (a config file, a job id, a worktree); an upper layer wraps a
//! lower one (`#[from]`, its sentence unchanged) instead of copying its
//! variants. Every one of them answers [`Kind`] through `kind()`, so the MCP
//! boundary can return `{"kind", "error"}` for any failure and the CLI's
//! exit status follows the kind, not the wrapping.

use schemars::JsonSchema;
use serde::Serialize;

/// The kinds of failure a tool call or command can end with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The config does not load (a YAML error, a missing `--config` file).
    Config,
    /// The call asks for something it may not or cannot have (an argument
    /// out of range, a limit of the user's config, a job that cannot be
    /// resumed).
    Invalid,
    /// Nothing serves the model: ask the user for it by name.
    ModelUnavailable,
    /// Not a job id.
    BadJobId,
    /// No job of that id.
    NoSuchJob,
    /// A job record that does not read.
    UnreadableJob,
    /// Worktree isolation cannot be had (not a repository, no commit).
    Git,
    /// The file system refused (a full disk, a permission).
    Io,
}

impl Kind {
    /// The name in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Config => "config",
            Kind::Invalid => "invalid",
            Kind::ModelUnavailable => "model_unavailable",
            Kind::BadJobId => "bad_job_id",
            Kind::NoSuchJob => "no_such_job",
            Kind::UnreadableJob => "unreadable_job",
            Kind::Git => "git",
            Kind::Io => "io",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_name_is_as_str() {
        for k in [
            Kind::Config,
            Kind::Invalid,
            Kind::ModelUnavailable,
            Kind::BadJobId,
            Kind::NoSuchJob,
            Kind::UnreadableJob,
            Kind::Git,
            Kind::Io,
        ] {
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
    }
}
