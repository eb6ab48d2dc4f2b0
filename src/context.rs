//! The context of one `localagents` process: where its config and state
//! live.
//!
//! It sits low in the layering (everything from the registry up takes it)
//! and knows nothing but paths, so no module has to import the API layer
//! just to learn where the state directory is.

use std::path::PathBuf;

use crate::config::Discovery;

/// Shared context of a running `localagents` process.
#[derive(Debug, Clone)]
pub struct Context {
    /// `--config` / `LOCALAGENTS_CONFIG`.
    pub explicit_config: Option<PathBuf>,
    /// `--state-dir` / `LOCALAGENTS_STATE_DIR`.
    pub state_dir: PathBuf,
}

impl Context {
    /// Discovery for this call: the cwd is read now, not at start.
    pub fn discovery(&self) -> Discovery {
        Discovery::standard(self.explicit_config.clone())
    }
}
