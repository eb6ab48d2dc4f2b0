//! Where things live on disk: the XDG config and state dirs, and the one
//! atomic-write helper every durable file goes through.

use std::io::Write;
use std::path::{Path, PathBuf};

use etcetera::BaseStrategy;

/// `$XDG_CONFIG_HOME/localagents`, i.e. `~/.config/localagents`.
pub fn config_dir() -> Option<PathBuf> {
    etcetera::choose_base_strategy()
        .ok()
        .map(|s| s.config_dir().join("localagents"))
}

/// `$XDG_STATE_HOME/localagents`, i.e. `~/.local/state/localagents`.
pub fn default_state_dir() -> PathBuf {
    etcetera::choose_base_strategy()
        .ok()
        .and_then(|s| s.state_dir())
        .map(|d| d.join("localagents"))
        .unwrap_or_else(|| std::env::temp_dir().join("localagents-state"))
}

/// Write a file so that readers see either the old or the new content:
/// a temp file in the same directory, fsync, then rename over the target.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    let dir = dir.unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
