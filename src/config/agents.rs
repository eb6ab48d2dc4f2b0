//! The user's own subagent profiles: `.claude/agents/<name>.md` in the
//! project, then `~/.claude/agents/` (`$CLAUDE_CONFIG_DIR/agents` when
//! set), the places Claude Code reads them from. Each is Markdown with a
//! YAML front matter (`name`, `description`, `tools`, `model`) and the
//! agent's prompt as its body.
//!
//! Why here: a profile is YAML the user (or a project) wrote, and YAML is
//! read behind this module. Why localagents reads them itself rather than
//! leaving it to the delegate: a profile is handed to the delegate inline
//! (`claude --agents FILE --agent NAME`) with only what localagents allows
//! of it: the tools the user's config allows, no `model` (the delegate
//! stays on the local endpoint), so the lean delegate's setting sources
//! need not change. A project's profile is project content, like its
//! CLAUDE.md: it reaches the delegate, and can widen nothing.
//!
//! Every read is bounded ([`MAX_PROFILE_BYTES`], [`MAX_PROFILES`]), and
//! only regular files are read: a link or a FIFO in an agents directory is
//! skipped with a warning.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Largest profile read, in bytes.
pub const MAX_PROFILE_BYTES: u64 = 64 * 1024;
/// Profiles read at most from one directory.
pub const MAX_PROFILES: usize = 200;

/// Where a profile was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// `<project>/.claude/agents/`.
    Project,
    /// `~/.claude/agents/`.
    User,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Project => "project",
            Scope::User => "user",
        }
    }
}

/// One subagent profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub name: String,
    /// One line, for Claude to choose by.
    pub description: Option<String>,
    /// The body: the agent's system prompt.
    pub prompt: String,
    /// `tools:`; `None`: the profile names none (it takes what it is given).
    pub tools: Option<Vec<String>>,
    /// `model:`, never used to choose a model: the delegate stays local.
    pub model: Option<String>,
    pub scope: Scope,
    pub path: PathBuf,
}

/// A profile's front matter.
#[derive(Debug, Default, Deserialize)]
struct Front {
    name: Option<String>,
    description: Option<String>,
    tools: Option<Tools>,
    model: Option<String>,
}

/// `tools: Read, Write` or `tools: [Read, Write]`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Tools {
    Text(String),
    List(Vec<String>),
}

impl Tools {
    fn names(self) -> Vec<String> {
        let raw = match self {
            Tools::Text(t) => t.split(',').map(str::to_string).collect(),
            Tools::List(l) => l,
        };
        let mut out: Vec<String> = Vec::new();
        for t in raw {
            let t = t.trim().to_string();
            if !t.is_empty() && !out.contains(&t) {
                out.push(t);
            }
        }
        out
    }
}

/// Read a profile's text: `Err` says why it is not one.
pub fn parse(text: &str, path: &Path, scope: Scope) -> Result<Profile, String> {
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_string();
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (front, body) = match text.strip_prefix("---") {
        Some(rest) => {
            let end = rest
                .find("\n---")
                .ok_or("its front matter has no closing `---`")?;
            let yaml = &rest[..end];
            let body = rest[end + 4..].trim_start_matches(['-', '\r']);
            let body = body.strip_prefix('\n').unwrap_or(body);
            let front: Front = if yaml.trim().is_empty() {
                Front::default()
            } else {
                serde_yaml_ng::from_str(yaml)
                    .map_err(|e| format!("its front matter is not valid YAML ({e})"))?
            };
            (front, body)
        }
        None => (Front::default(), text),
    };
    let name = front
        .name
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or(stem);
    if !valid_name(&name) {
        return Err(format!(
            "its name `{}` is not a profile name (letters, digits, `-`, `_`, `.`)",
            crate::fmt::one_line(&name, 60)
        ));
    }
    Ok(Profile {
        name,
        description: front
            .description
            .map(|d| crate::fmt::one_line(&d, 300))
            .filter(|d| !d.is_empty()),
        prompt: body.trim().to_string(),
        tools: front.tools.map(Tools::names),
        model: front
            .model
            .map(|m| m.trim().to_string())
            .filter(|m| !m.is_empty()),
        scope,
        path: path.to_path_buf(),
    })
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The agents directories, in the order a name is looked up: the
/// project's (the nearest `.claude/agents` from `project` up to its
/// repository's root), then the user's.
pub fn dirs(project: Option<&Path>) -> Vec<(Scope, PathBuf)> {
    let mut out = Vec::new();
    if let Some(p) = project {
        for dir in p.ancestors() {
            let agents = dir.join(".claude").join("agents");
            if agents.is_dir() {
                out.push((Scope::Project, agents));
                break;
            }
            if dir.join(".git").exists() {
                break;
            }
        }
    }
    let user = std::env::var_os("CLAUDE_CONFIG_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".claude")));
    if let Some(u) = user {
        out.push((Scope::User, u.join("agents")));
    }
    out
}

/// Every profile the delegate can run from `project`, a name once (the
/// project's wins), sorted by name; and a warning for each file skipped.
/// Blocking: call it off the async workers.
pub fn list(project: Option<&Path>) -> (Vec<Profile>, Vec<String>) {
    let mut profiles: Vec<Profile> = Vec::new();
    let mut warnings = Vec::new();
    for (scope, dir) in dirs(project) {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        files.sort();
        if files.len() > MAX_PROFILES {
            warnings.push(format!(
                "{}: only the first {MAX_PROFILES} of {} profiles are read",
                dir.display(),
                files.len()
            ));
            files.truncate(MAX_PROFILES);
        }
        for f in files {
            match read(&f, scope) {
                Ok(p) => {
                    if !profiles.iter().any(|x| x.name == p.name) {
                        profiles.push(p);
                    }
                }
                Err(why) => warnings.push(format!("{}: skipped: {why}", f.display())),
            }
        }
    }
    profiles.sort_by(|a, b| a.name.cmp(&b.name));
    (profiles, warnings)
}

/// One profile file: a regular file (not a link, not a FIFO) of at most
/// [`MAX_PROFILE_BYTES`].
fn read(path: &Path, scope: Scope) -> Result<Profile, String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| e.to_string())?;
    if !meta.file_type().is_file() {
        return Err("not a regular file (a link or a FIFO is not read)".into());
    }
    if meta.len() > MAX_PROFILE_BYTES {
        return Err(format!(
            "{} bytes, over the {MAX_PROFILE_BYTES} a profile may have",
            meta.len()
        ));
    }
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_PROFILE_BYTES).read_to_string(&mut text))
        .map_err(|e| format!("cannot read it ({e})"))?;
    parse(&text, path, scope)
}

/// The profile `name` as the delegate would find it from `project`, or
/// the sentence naming the profiles there are. Blocking.
pub fn find(name: &str, project: Option<&Path>) -> Result<Profile, String> {
    let (all, _) = list(project);
    if let Some(p) = all.iter().find(|p| p.name == name) {
        return Ok(p.clone());
    }
    let known: Vec<String> = all
        .iter()
        .map(|p| format!("{} ({})", p.name, p.scope.as_str()))
        .collect();
    let places = dirs(project)
        .iter()
        .map(|(_, d)| d.display().to_string())
        .collect::<Vec<_>>()
        .join(" and ");
    Err(if known.is_empty() {
        format!(
            "no subagent profile `{}`: there are none in {places}; write one as <name>.md there, or leave `agent` out",
            crate::fmt::one_line(name, 60)
        )
    } else {
        format!(
            "no subagent profile `{}`: the delegate can run {} (from {places})",
            crate::fmt::one_line(name, 60),
            known.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_reads_its_front_matter_and_its_body() {
        let p = parse(
            "---\nname: test-writer\ndescription: Writes\n  focused tests.\ntools: Read, Write, Bash, WebFetch, Read\nmodel: opus\n---\nYou write tests.\n",
            Path::new("/p/.claude/agents/tw.md"),
            Scope::Project,
        )
        .unwrap();
        assert_eq!(p.name, "test-writer");
        assert_eq!(p.description.as_deref(), Some("Writes focused tests."));
        assert_eq!(p.tools.unwrap(), ["Read", "Write", "Bash", "WebFetch"]);
        assert_eq!(p.model.as_deref(), Some("opus"));
        assert_eq!(p.prompt, "You write tests.");
        let p = parse(
            "---\ntools: [Read, Grep]\n---\nbody",
            Path::new("/h/reviewer.md"),
            Scope::User,
        )
        .unwrap();
        assert_eq!(p.name, "reviewer");
        assert_eq!(p.tools.unwrap(), ["Read", "Grep"]);
        // No front matter: the whole text is the prompt, all tools.
        let p = parse("Just a prompt.", Path::new("/h/plain.md"), Scope::User).unwrap();
        assert_eq!((p.name.as_str(), p.tools), ("plain", None));
    }

    #[test]
    fn a_bad_profile_says_why() {
        let e = parse("---\nname: x\n", Path::new("/a.md"), Scope::User).unwrap_err();
        assert!(e.contains("no closing `---`"), "{e}");
        let e = parse("---\nname: [\n---\n", Path::new("/a.md"), Scope::User).unwrap_err();
        assert!(e.contains("not valid YAML"), "{e}");
        let e = parse(
            "---\nname: ../../etc\n---\n",
            Path::new("/a.md"),
            Scope::User,
        )
        .unwrap_err();
        assert!(e.contains("is not a profile name"), "{e}");
    }
}
