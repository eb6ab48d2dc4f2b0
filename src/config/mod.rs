//! `models.yaml`: where the files are, how they merge, what they mean.
//!
//! The registry is re-read on every call, because users edit it while Claude
//! Code is running and expect the next tool call to see the edit. Reading is
//! cheap: each file's parse is cached by (mtime, size), so an unchanged file
//! costs one `stat`; so does a refusal. A file over [`MAX_FILE_BYTES`] or
//! nested deeper than [`MAX_DEPTH`] is refused before the YAML parser sees
//! it (its time grows with the square of the nesting).
//!
//! Merge order (later wins, mappings merge key by key, lists are replaced):
//!
//! 1. `--config FILE` / `LOCALAGENTS_CONFIG`, then its sidecar; *or*
//! 2. `~/.config/localagents/models.yaml`, its sidecar, then the project's
//!    `./models.yaml` and its sidecar (the project is the cwd at call time).
//!
//! The sidecar of `models.yaml` is `models.local.yaml` beside it. The user
//! sidecar (or the explicit file's) is the only file this program ever
//! writes (`register_endpoint`, `trust`); hand-written files are never
//! rewritten.
//!
//! The project's files are untrusted: unless the user trusts the project,
//! they may only add menu entries ([`trust`]).
//!
//! A file that is not valid YAML, or has a value of the wrong type, is a
//! [`ConfigError`] naming file, line and column. An unknown key is only a
//! warning that names the nearest valid key; the key is ignored. A broken
//! entry (an endpoint without a usable `base_url`) is dropped with a warning,
//! so one bad line never takes every tool down.

pub mod agents;
mod backend;
mod build;
pub mod otel;
pub mod prices;
mod schema;
pub mod trust;
mod wire;

pub use backend::{Counts, Speaks};
pub use build::check_base_url;
pub use schema::{
    BUILTIN_NEXT_PORT_NAME, Backend, Config, DEFAULT_KEEP_DAYS, DEFAULT_RUNAWAY_LIMIT, DEFAULT_SESSION_HEADER, MAX_KEEP_DAYS,
    ClearToolResults, Defaults, Endpoint, ModelEntry, Thinking, WireSetting, home_path,
    key_safe_url,
};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use serde_yaml_ng::{Mapping, Value};

/// A config problem that stops us from knowing what the user meant.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but could not be read.
    #[error("cannot read {path}: {source}; check its permissions")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// YAML syntax error, or a value of the wrong type.
    #[error("{path}:{line}:{column}: {message}; fix that line (the file is re-read on every call)")]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    /// The top level is not a mapping, or a section is not a mapping.
    #[error("{path}: {message}; see models.example.yaml for the layout")]
    Shape { path: PathBuf, message: String },
    /// Over [`MAX_FILE_BYTES`]: refused before it is read.
    #[error(
        "{path} is {} KiB, over the {} KiB (1 MiB) cap for a config file, so it was not read: keep only endpoints, models and defaults in it",
        crate::fmt::thousands(size.div_ceil(1024)),
        crate::fmt::thousands(MAX_FILE_BYTES / 1024)
    )]
    TooBig { path: PathBuf, size: u64 },
    /// Nested deeper than [`MAX_DEPTH`] (found by a byte scan, so the YAML
    /// parser never sees it).
    #[error(
        "{path}:{line}: nested more than {MAX_DEPTH} levels deep, over the cap for a config file, so it was not parsed: flatten it"
    )]
    TooDeep { path: PathBuf, line: usize },
    /// The lock beside the sidecar could not be taken.
    #[error(
        "cannot lock {path} to update the config beside it ({source}); check that its directory is writable by you"
    )]
    Lock {
        path: PathBuf,
        source: std::io::Error,
    },
    /// `--config` / `LOCALAGENTS_CONFIG` names a file that does not exist.
    #[error(
        "config file {path} (from {origin}) does not exist; create it from models.example.yaml or point {origin} elsewhere"
    )]
    Missing { path: PathBuf, origin: &'static str },
}

/// The largest config file read, in bytes.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// The deepest nesting of a config file (flow `[`/`{` and block
/// indentation together); real files nest four or five deep.
pub const MAX_DEPTH: usize = 64;

/// Where to look for config files. Built fresh for every call, because the
/// project part depends on the cwd at call time.
#[derive(Debug, Clone)]
pub struct Discovery {
    /// `--config` / `LOCALAGENTS_CONFIG`.
    pub explicit: Option<PathBuf>,
    /// The user config dir, normally `~/.config/localagents`.
    pub user_dir: Option<PathBuf>,
    /// The project directory (the cwd at call time).
    pub project_dir: Option<PathBuf>,
}

impl Discovery {
    /// The standard discovery: explicit file if any, else the XDG config dir
    /// and the current directory.
    pub fn standard(explicit: Option<PathBuf>) -> Self {
        Discovery {
            explicit,
            user_dir: crate::paths::config_dir(),
            project_dir: std::env::current_dir().ok(),
        }
    }

    /// The main files, in merge order, without sidecars, with their scope.
    fn main_files(&self) -> Vec<(PathBuf, trust::Scope)> {
        if let Some(explicit) = &self.explicit {
            return vec![(explicit.clone(), trust::Scope::User)];
        }
        let mut files = Vec::new();
        if let Some(dir) = &self.user_dir {
            files.push((dir.join("models.yaml"), trust::Scope::User));
        }
        if let Some(dir) = &self.project_dir {
            let project = dir.join("models.yaml");
            // A project inside ~/.config/localagents is the user file itself.
            if !files.iter().any(|(f, _)| *f == project) {
                files.push((project, trust::Scope::Project));
            }
        }
        files
    }

    /// Every candidate file, sidecars included, in merge order.
    pub fn candidates(&self) -> Vec<PathBuf> {
        self.scoped_candidates()
            .into_iter()
            .map(|(p, _)| p)
            .collect()
    }

    /// Every candidate file with its scope, in merge order.
    pub fn scoped_candidates(&self) -> Vec<(PathBuf, trust::Scope)> {
        let mut out = Vec::new();
        for (file, scope) in self.main_files() {
            let side = sidecar_of(&file);
            out.push((file, scope));
            out.push((side, scope));
        }
        out
    }

    /// The sidecar this program writes (`register_endpoint`, `trust`):
    /// beside the explicit config, else in the user config dir. Never in a
    /// project, whose files are not the user's to trust.
    pub fn active_sidecar(&self) -> Option<PathBuf> {
        if let Some(explicit) = &self.explicit {
            return Some(sidecar_of(explicit));
        }
        self.user_dir.as_ref().map(|d| d.join("models.local.yaml"))
    }
}

/// `models.yaml` → `models.local.yaml`; `x.yml` → `x.local.yml`.
pub fn sidecar_of(file: &Path) -> PathBuf {
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "models".into());
    let name = match file.extension() {
        Some(ext) => format!("{stem}.local.{}", ext.to_string_lossy()),
        None => format!("{stem}.local"),
    };
    file.with_file_name(name)
}

/// The merged, validated config plus how it was made.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Arc<Config>,
    /// The files that were read, in merge order.
    pub files: Vec<PathBuf>,
    /// Unknown keys, dropped entries, and similar.
    pub warnings: Vec<String>,
    /// True when no file existed and the built-in default is in use.
    pub builtin: bool,
}

/// Load and merge the config for this discovery.
pub fn load(discovery: &Discovery) -> Result<Loaded, ConfigError> {
    if let Some(explicit) = &discovery.explicit
        && !explicit.exists()
    {
        return Err(ConfigError::Missing {
            path: explicit.clone(),
            origin: "--config / LOCALAGENTS_CONFIG",
        });
    }
    let mut merged = Value::Mapping(Mapping::new());
    let mut files = Vec::new();
    let mut warnings = Vec::new();
    // User scope first (it says which projects are trusted), then the project.
    let candidates = discovery.scoped_candidates();
    for scope in [trust::Scope::User, trust::Scope::Project] {
        let trusted = scope == trust::Scope::Project
            && discovery
                .project_dir
                .as_deref()
                .is_some_and(|dir| trust::is_trusted(dir, &schema::trusted_projects(&merged)));
        for (path, _) in candidates.iter().filter(|(_, s)| *s == scope) {
            let Some(parsed) = read_cached(path)? else {
                continue;
            };
            warnings.extend(parsed.warnings.iter().cloned());
            let mut value = parsed.value.clone();
            if scope == trust::Scope::Project
                && let Value::Mapping(m) = &mut value
                && m.shift_remove("trusted_projects").is_some()
            {
                // Trust is the user's to give, never a project's.
                warnings.push(trust::ignored_warning(path, &["trusted_projects".into()]));
            }
            if scope == trust::Scope::Project && !trusted {
                let dropped = trust::menu_only(&mut value);
                if !dropped.is_empty() {
                    warnings.push(trust::ignored_warning(path, &dropped));
                }
            }
            merge(&mut merged, value);
            files.push(path.clone());
        }
    }
    let builtin = files.is_empty();
    let (config, more) = build::build(merged);
    warnings.extend(more);
    Ok(Loaded {
        config: Arc::new(config),
        files,
        warnings,
        builtin,
    })
}

/// Parse a config text on its own: the value with unknown keys removed, and
/// the warnings about them. `path` only labels messages.
pub fn parse_text(path: &Path, text: &str) -> Result<(Value, Vec<String>), ConfigError> {
    // Typed pass first: it gives line and column for syntax and type
    // errors, and the unknown keys.
    let unknown = schema::check_text(text).map_err(|e| parse_error(path, &e))?;
    let mut value: Value = serde_yaml_ng::from_str(text).map_err(|e| parse_error(path, &e))?;
    if value.is_null() {
        value = Value::Mapping(Mapping::new());
    }
    if !value.is_mapping() {
        return Err(ConfigError::Shape {
            path: path.to_path_buf(),
            message: "the top level must be a mapping with `endpoints`, `models` and `defaults`"
                .into(),
        });
    }
    let warnings = unknown
        .iter()
        .filter_map(|key| schema::strip_unknown(path, &mut value, key))
        .collect();
    Ok((value, warnings))
}

fn parse_error(path: &Path, e: &serde_yaml_ng::Error) -> ConfigError {
    let (line, column) = e
        .location()
        .map(|l| (l.line(), l.column()))
        .unwrap_or((0, 0));
    let mut message = e.to_string();
    // serde_yaml_ng appends " at line L column C"; we already say where.
    if let Some(idx) = message.rfind(" at line ") {
        message.truncate(idx);
    }
    ConfigError::Parse {
        path: path.to_path_buf(),
        line,
        column,
        message,
    }
}

struct Parsed {
    value: Value,
    warnings: Vec<String>,
}

/// A parse, or why the file was refused: both are cached, so an unchanged
/// bad file costs one `stat` too.
type Outcome = Result<Arc<Parsed>, Arc<ConfigError>>;
type Stamp = (SystemTime, u64);
type ParseCache = Mutex<HashMap<PathBuf, (Stamp, Outcome)>>;

impl ConfigError {
    /// The same error again, from the cache (an I/O error keeps its kind
    /// and text).
    fn reissue(&self) -> ConfigError {
        let io = |e: &std::io::Error| std::io::Error::new(e.kind(), e.to_string());
        match self {
            ConfigError::Read { path, source } => ConfigError::Read {
                path: path.clone(),
                source: io(source),
            },
            ConfigError::Parse {
                path,
                line,
                column,
                message,
            } => ConfigError::Parse {
                path: path.clone(),
                line: *line,
                column: *column,
                message: message.clone(),
            },
            ConfigError::Shape { path, message } => ConfigError::Shape {
                path: path.clone(),
                message: message.clone(),
            },
            ConfigError::TooBig { path, size } => ConfigError::TooBig {
                path: path.clone(),
                size: *size,
            },
            ConfigError::TooDeep { path, line } => ConfigError::TooDeep {
                path: path.clone(),
                line: *line,
            },
            ConfigError::Lock { path, source } => ConfigError::Lock {
                path: path.clone(),
                source: io(source),
            },
            ConfigError::Missing { path, origin } => ConfigError::Missing {
                path: path.clone(),
                origin,
            },
        }
    }
}

fn cache() -> &'static ParseCache {
    static CACHE: OnceLock<ParseCache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Read and parse one file, reusing the last parse while mtime and size are
/// unchanged. `Ok(None)` when the file does not exist.
fn read_cached(path: &Path) -> Result<Option<Arc<Parsed>>, ConfigError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) if m.is_file() => m,
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let stamp = (
        meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        meta.len(),
    );
    if let Ok(cache) = cache().lock()
        && let Some((s, outcome)) = cache.get(path)
        && *s == stamp
    {
        return match outcome {
            Ok(parsed) => Ok(Some(parsed.clone())),
            Err(e) => Err(e.reissue()),
        };
    }
    let outcome = read_and_parse(path, stamp.1);
    if let Err(ConfigError::Read { .. }) = &outcome {
        // Permissions or a vanished file: the next call tries again.
        return outcome.map(|p| Some(Arc::new(p)));
    }
    let outcome: Outcome = outcome.map(Arc::new).map_err(Arc::new);
    if let Ok(mut cache) = cache().lock() {
        cache.insert(path.to_path_buf(), (stamp, outcome.clone()));
    }
    match outcome {
        Ok(parsed) => Ok(Some(parsed)),
        Err(e) => Err(e.reissue()),
    }
}

/// Read a config file within [`MAX_FILE_BYTES`], refuse one nested deeper
/// than [`MAX_DEPTH`] before the YAML parser sees it (its time grows with
/// the square of the nesting), then parse it.
fn read_and_parse(path: &Path, size: u64) -> Result<Parsed, ConfigError> {
    use std::io::Read;
    let too_big = |size| ConfigError::TooBig {
        path: path.to_path_buf(),
        size,
    };
    if size > MAX_FILE_BYTES {
        return Err(too_big(size));
    }
    let read = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(read)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        // It grew since the stat.
        return Err(too_big(bytes.len() as u64));
    }
    if let Some(line) = too_deep(&bytes, MAX_DEPTH) {
        return Err(ConfigError::TooDeep {
            path: path.to_path_buf(),
            line,
        });
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        read(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 ({e})"),
        ))
    })?;
    let (value, warnings) = parse_text(path, &text)?;
    Ok(Parsed { value, warnings })
}

/// The first line (1-based) where YAML `text` nests deeper than `max`, by
/// one pass over its bytes, without parsing: flow collections (`[`, `{`
/// that open a value, outside quotes and comments) and block nesting
/// (indentation and `- ` entries) add up. Block scalars (`|`, `>`) are
/// skipped. It may see a little less nesting than a parser would (never
/// more), which is all a cap needs.
pub fn too_deep(text: &[u8], max: usize) -> Option<usize> {
    let mut flow = 0usize;
    // Columns of the open block levels.
    let mut blocks: Vec<usize> = Vec::new();
    // The indent of the line that opened a block scalar: deeper lines are
    // its text.
    let mut scalar_parent: Option<usize> = None;
    let mut i = 0;
    let mut line = 1;
    let n = text.len();
    while i < n {
        // A line starts at i.
        let start = i;
        let mut col = 0;
        while i < n && text[i] == b' ' {
            i += 1;
            col += 1;
        }
        let blank = i >= n || matches!(text[i], b'\n' | b'\r' | b'#');
        if let Some(parent) = scalar_parent {
            if blank || col > parent {
                i = skip_line(text, i);
                line += 1;
                continue;
            }
            scalar_parent = None;
        }
        if blank && flow == 0 {
            i = skip_line(text, i);
            line += 1;
            continue;
        }
        let mut at_value = true;
        if flow == 0 {
            i = open_blocks(text, i, col, &mut blocks);
            if blocks.len() > max {
                return Some(line);
            }
        }
        let line_indent = text[start..i].iter().take_while(|&&b| b == b' ').count();
        // The rest of the line.
        while i < n && text[i] != b'\n' {
            let b = text[i];
            match b {
                b' ' | b'\t' | b'\r' => {}
                b'#' if i == start || matches!(text[i - 1], b' ' | b'\t') => {
                    i = skip_to_eol(text, i);
                    continue;
                }
                b'"' | b'\'' if at_value => {
                    let (end, lines) = skip_quoted(text, i);
                    i = end;
                    line += lines;
                    at_value = false;
                    continue;
                }
                b'[' | b'{' if at_value || flow > 0 => {
                    flow += 1;
                    at_value = true;
                    if blocks.len() + flow > max {
                        return Some(line);
                    }
                }
                b']' | b'}' if flow > 0 => {
                    flow -= 1;
                    at_value = false;
                }
                b',' if flow > 0 => at_value = true,
                b':' if i + 1 >= n
                    || matches!(text[i + 1], b' ' | b'\t' | b'\n' | b'\r')
                    || flow > 0 =>
                {
                    at_value = true;
                }
                b'|' | b'>' if at_value && flow == 0 => {
                    scalar_parent = Some(line_indent);
                    i = skip_to_eol(text, i);
                    continue;
                }
                _ => at_value = false,
            }
            i += 1;
        }
        if i < n {
            i += 1;
            line += 1;
        }
    }
    None
}

/// The block levels open at a line whose content starts at byte `i`,
/// column `col`: those it closes are popped, its own is pushed, and one
/// more per `- ` entry marker (`- - x`: each opens a level of its own).
/// Returns where the line's content starts past its markers.
fn open_blocks(text: &[u8], mut i: usize, mut col: usize, blocks: &mut Vec<usize>) -> usize {
    let n = text.len();
    while blocks.last().is_some_and(|&c| c >= col) {
        blocks.pop();
    }
    blocks.push(col);
    while i + 1 < n && text[i] == b'-' && matches!(text[i + 1], b' ' | b'\t') {
        i += 2;
        col += 2;
        while i < n && text[i] == b' ' {
            i += 1;
            col += 1;
        }
        blocks.push(col);
    }
    i
}

/// Past the end of the line at `i` (its newline included).
fn skip_line(text: &[u8], i: usize) -> usize {
    let e = skip_to_eol(text, i);
    if e < text.len() { e + 1 } else { e }
}

/// The newline ending the line at `i` (or the end).
fn skip_to_eol(text: &[u8], mut i: usize) -> usize {
    while i < text.len() && text[i] != b'\n' {
        i += 1;
    }
    i
}

/// Past the quoted scalar opening at `i` (`"` with `\` escapes, `'` with
/// `''`), and the newlines inside it.
fn skip_quoted(text: &[u8], i: usize) -> (usize, usize) {
    let q = text[i];
    let mut j = i + 1;
    let mut lines = 0;
    while j < text.len() {
        match text[j] {
            b'\\' if q == b'"' => j += 1,
            b'\n' => lines += 1,
            c if c == q => {
                if q == b'\'' && text.get(j + 1) == Some(&b'\'') {
                    j += 1;
                } else {
                    return (j + 1, lines);
                }
            }
            _ => {}
        }
        j += 1;
    }
    (j, lines)
}

/// Deep merge: mappings merge key by key (new keys keep their order, after
/// the old ones), anything else is replaced.
pub fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Mapping(b), Value::Mapping(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(existing) if existing.is_mapping() && v.is_mapping() => merge(existing, v),
                    _ => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, o) => *b = o,
    }
}

/// Render the merged config as YAML (for `config check`). API keys are never
/// in the config, only the names of env vars that hold them.
pub fn render(config: &Config) -> String {
    serde_yaml_ng::to_string(&config.to_value())
        .unwrap_or_else(|e| format!("# cannot render: {e}\n"))
}

/// Write `endpoints.<name>` into the sidecar, keeping everything else in it.
pub fn write_sidecar_endpoint(
    sidecar: &Path,
    name: &str,
    entry: Mapping,
) -> Result<(), ConfigError> {
    edit_sidecar(sidecar, "register_endpoint", |map| {
        let endpoints = map
            .entry(Value::String("endpoints".into()))
            .or_insert_with(|| Value::Mapping(Mapping::new()));
        if !endpoints.is_mapping() {
            *endpoints = Value::Mapping(Mapping::new());
        }
        if let Value::Mapping(eps) = endpoints {
            eps.insert(Value::String(name.into()), Value::Mapping(entry));
        }
    })
}

/// Add `dir` to (or remove it from) `trusted_projects` in the user
/// sidecar. Returns whether the list changed.
pub fn set_trusted(sidecar: &Path, dir: &Path, trusted: bool) -> Result<bool, ConfigError> {
    let shown = dir.display().to_string();
    let mut changed = false;
    edit_sidecar(sidecar, "localagents trust", |map| {
        let list = map
            .entry(Value::String("trusted_projects".into()))
            .or_insert_with(|| Value::Sequence(Vec::new()));
        if !list.is_sequence() {
            *list = Value::Sequence(Vec::new());
        }
        if let Value::Sequence(items) = list {
            let has = items.iter().any(|v| v.as_str() == Some(shown.as_str()));
            if trusted && !has {
                items.push(Value::String(shown.clone()));
                changed = true;
            } else if !trusted && has {
                items.retain(|v| v.as_str() != Some(shown.as_str()));
                changed = true;
            }
        }
    })?;
    Ok(changed)
}

/// Read the sidecar (or start empty), change its top-level mapping, write
/// it back atomically, all under the lock beside it
/// ([`crate::paths::lock_beside`]), so two writers at once (a
/// `register_endpoint` and a `localagents trust`, in any processes) each
/// keep the other's update. A sidecar that does not parse is left alone
/// and reported, so nothing is lost.
fn edit_sidecar(
    sidecar: &Path,
    writer: &str,
    change: impl FnOnce(&mut Mapping),
) -> Result<(), ConfigError> {
    let _lock = crate::paths::lock_beside(sidecar).map_err(|source| ConfigError::Lock {
        path: crate::paths::lock_path(sidecar),
        source,
    })?;
    let mut root = if sidecar.exists() {
        let text = std::fs::read_to_string(sidecar).map_err(|source| ConfigError::Read {
            path: sidecar.to_path_buf(),
            source,
        })?;
        let (value, _) = parse_text(sidecar, &text)?;
        value
    } else {
        Value::Mapping(Mapping::new())
    };
    let Value::Mapping(map) = &mut root else {
        return Err(ConfigError::Shape {
            path: sidecar.to_path_buf(),
            message: "the top level must be a mapping".into(),
        });
    };
    change(map);
    let body = serde_yaml_ng::to_string(&root).map_err(|e| ConfigError::Shape {
        path: sidecar.to_path_buf(),
        message: format!("cannot serialise: {e}"),
    })?;
    let header = format!("# Written by localagents ({writer}). Merged over the file beside it.\n");
    if let Some(dir) = sidecar.parent() {
        crate::paths::private_dir_all(dir).map_err(|source| ConfigError::Read {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    crate::paths::write_atomic(sidecar, format!("{header}{body}").as_bytes()).map_err(|source| {
        ConfigError::Read {
            path: sidecar.to_path_buf(),
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_depth_scan_counts_flow_and_block_nesting_and_nothing_else() {
        let deep = |s: &str, max| too_deep(s.as_bytes(), max);
        // Flow: each `[` / `{` that opens a value, with the block level.
        assert_eq!(deep("a: [[1]]\n", 3), None);
        assert_eq!(deep("a: [[[1]]]\n", 3), Some(1));
        assert_eq!(deep("a:\n  b: {c: [1, {d: 2}]}\n", 4), Some(2));
        assert_eq!(deep("a:\n  b: {c: [1, {d: 2}]}\n", 5), None);
        // Across lines.
        assert_eq!(deep("a: [\n  [\n    [1]]]\n", 3), Some(3));
        // Not nesting: brackets in quotes, comments, plain text, block scalars.
        let quiet = "endpoints:\n  box:\n    notes: \"[[[[[[\" # {{{{{{\n    host: 'it''s [[[['\nmodels:\n  m:\n    notes: see x[[[[ and y{{{{\n    bring_up: |\n      [[[[[[ {{{{{{\n          - - - - - - x\n    host: h\n";
        assert_eq!(deep(quiet, 3), None, "{quiet}");
        // Block: indentation and `- ` entries.
        let block: String = (0..10)
            .map(|i| format!("{}k{i}:\n", "  ".repeat(i)))
            .collect();
        assert_eq!(deep(&block, 10), None);
        assert_eq!(deep(&block, 9), Some(10));
        assert_eq!(deep("a:\n- - - - x\n", 4), Some(2));
        assert_eq!(deep("a:\n- - - x\n", 4), None);
        // Dedenting closes levels.
        let wide: String = (0..100).map(|i| format!("k{i}:\n  v: [1]\n")).collect();
        assert_eq!(deep(&wide, 3), None);
        // The example config passes with room to spare.
        assert_eq!(deep(include_str!("../../models.example.yaml"), 8), None);
    }

    /// A refusal is cached like a parse: while mtime and size stand, the
    /// file is not read again (here its bytes changed under the same stamp,
    /// and the cached error still answers).
    #[test]
    fn an_unchanged_bad_file_is_parsed_once() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("models.yaml");
        let bad = "models: [oops\n";
        std::fs::write(&path, bad).unwrap();
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        let first = read_cached(&path).err().unwrap();
        assert!(matches!(first, ConfigError::Parse { .. }), "{first}");
        // Valid YAML of the same size, under the same mtime.
        let good = "models: {}   \n";
        assert_eq!(good.len(), bad.len());
        std::fs::write(&path, good).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        let again = read_cached(&path).err().unwrap();
        assert_eq!(again.to_string(), first.to_string(), "from the cache");
        // A real edit is seen.
        std::fs::write(&path, "models: {}\n").unwrap();
        assert!(read_cached(&path).unwrap().is_some());
    }
}
