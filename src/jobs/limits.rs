//! What a `run_agent` call may ask for. The caller is a model in a Claude
//! Code session, steered by whatever it has read, and the delegate it
//! starts is a headless session nobody watches. So a tool call may narrow
//! what the user's own config allows, never widen it:
//!
//! - `permission_mode` is one of Claude Code's modes; `bypassPermissions`
//!   only when the user's config says `defaults.allow_bypass_permissions`.
//! - `cwd` lies inside the calling session's project, or under a directory
//!   the user listed in `defaults.allowed_roots`.
//! - `allowed_tools` is a subset of `defaults.allowed_tools` (a rule such as
//!   `Bash(cargo test:*)` narrows a configured `Bash`).
//!
//! The user's own command line (`localagents run`) is not limited: the
//! user is the one who decides there. Project files cannot set any of
//! these keys ([`crate::config::trust`]).

use std::path::{Path, PathBuf};

use crate::config::Defaults;
use crate::error::Kind;
use crate::runner::rule_tool;

/// Why a tool call may not have what it asks: one sentence each, naming
/// the key of the user's config that would allow it.
#[derive(Debug)]
pub enum Refused {
    /// `bypassPermissions` from a session without the user's leave.
    Bypass,
    /// Not one of Claude Code's modes; `safe` lists the allowed ones.
    UnknownMode {
        mode: String,
        safe: Vec<&'static str>,
    },
    /// A job's directory outside the session's project and allowed roots.
    CwdOutside { cwd: PathBuf, project: PathBuf },
    /// An attached file that does not resolve.
    FileMissing {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An attached file outside the project and allowed roots.
    FileOutside { path: PathBuf, project: PathBuf },
    /// Tools beyond `defaults.allowed_tools`.
    WiderTools {
        wider: Vec<String>,
        allowed: Vec<String>,
    },
    /// An acceptance command while `defaults.sandbox` is on.
    AcceptanceSandboxed,
    /// An acceptance command while delegates may not use Bash.
    AcceptanceNoBash { allowed: Vec<String> },
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Bypass => f.write_str("permission_mode bypassPermissions is not allowed for a delegated job: the user can allow it with `defaults.allow_bypass_permissions: true` in ~/.config/localagents/models.yaml"),
            Refused::UnknownMode { mode, safe } => {
                write!(f, "permission_mode `{mode}` is not one of {}", safe.join(", "))
            }
            Refused::CwdOutside { cwd, project } => write!(
                f,
                "cwd {} is outside this session's project ({}): a delegated job runs only there, or under a directory the user lists in `defaults.allowed_roots` (~/.config/localagents/models.yaml)",
                cwd.display(),
                project.display()
            ),
            Refused::FileMissing { path, source } => write!(
                f,
                "cannot attach {} ({source}): attach an existing file inside the project",
                path.display()
            ),
            Refused::FileOutside { path, project } => write!(
                f,
                "file {} is outside this session's project ({}): attach files from the project, or under a directory the user lists in `defaults.allowed_roots`",
                path.display(),
                project.display()
            ),
            Refused::WiderTools { wider, allowed } => write!(
                f,
                "allowed_tools may only narrow what the user allows: {} {} not in defaults.allowed_tools ({}); the user can add {} there (~/.config/localagents/models.yaml)",
                wider.join(", "),
                if wider.len() == 1 { "is" } else { "are" },
                allowed.join(", "),
                if wider.len() == 1 { "it" } else { "them" },
            ),
            Refused::AcceptanceSandboxed => f.write_str("acceptance runs a command outside Claude Code's sandbox, and defaults.sandbox is on: put the command in the brief for the delegate to run instead"),
            Refused::AcceptanceNoBash { allowed } => write!(
                f,
                "acceptance runs a shell command, and defaults.allowed_tools ({}) does not let delegates use Bash: the user can add Bash there (~/.config/localagents/models.yaml)",
                allowed.join(", ")
            ),
        }
    }
}

impl std::error::Error for Refused {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Refused::FileMissing { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl Refused {
    /// Always [`Kind::Invalid`]: the call asks past a limit of the user's.
    pub fn kind(&self) -> Kind {
        Kind::Invalid
    }
}

/// Claude Code's permission modes (`--permission-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionMode {
    Default,
    AcceptEdits,
    Plan,
    DontAsk,
    /// Only when the user's config allows it for a tool call.
    BypassPermissions,
}

impl PermissionMode {
    /// Every mode, the ones a tool call may always ask for first.
    pub const ALL: [PermissionMode; 5] = [
        PermissionMode::Default,
        PermissionMode::AcceptEdits,
        PermissionMode::Plan,
        PermissionMode::DontAsk,
        PermissionMode::BypassPermissions,
    ];

    /// The name Claude Code takes.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Default => "default",
            PermissionMode::AcceptEdits => "acceptEdits",
            PermissionMode::Plan => "plan",
            PermissionMode::DontAsk => "dontAsk",
            PermissionMode::BypassPermissions => "bypassPermissions",
        }
    }

    /// The mode of that exact name (names are case-sensitive, as in Claude Code).
    pub fn parse(s: &str) -> Option<PermissionMode> {
        PermissionMode::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// A mode any tool call may ask for.
    pub fn is_safe(self) -> bool {
        self != PermissionMode::BypassPermissions
    }
}

/// Who asks for a job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Caller {
    /// The user at the command line: their own flags.
    #[default]
    User,
    /// A Claude Code session over MCP, working in `project`.
    Session { project: PathBuf },
}

/// Check a permission mode for any caller; `Err` is the sentence to return.
pub fn permission_mode(mode: &str, caller: &Caller, d: &Defaults) -> Result<(), Refused> {
    match PermissionMode::parse(mode) {
        Some(PermissionMode::BypassPermissions) => {
            if matches!(caller, Caller::Session { .. }) && !d.allow_bypass_permissions {
                return Err(Refused::Bypass);
            }
            Ok(())
        }
        Some(_) => Ok(()),
        None => {
            let safe: Vec<&str> = PermissionMode::ALL
                .into_iter()
                .filter(|m| m.is_safe())
                .map(PermissionMode::as_str)
                .collect();
            Err(Refused::UnknownMode {
                mode: mode.to_string(),
                safe,
            })
        }
    }
}

/// Check the directory a session's job would run in.
pub fn cwd(cwd: &Path, project: &Path, d: &Defaults) -> Result<(), Refused> {
    let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let c = canon(cwd);
    let inside = std::iter::once(project)
        .chain(d.allowed_roots.iter().map(PathBuf::as_path))
        .any(|root| c.starts_with(canon(root)));
    if inside {
        return Ok(());
    }
    Err(Refused::CwdOutside {
        cwd: c,
        project: project.to_path_buf(),
    })
}

/// A file a session attaches to a completion must lie inside its project
/// (or an allowed root), symlinks resolved: a tool call may not read the
/// user's keys and hand them to a model.
pub fn file(path: &Path, project: &Path, d: &Defaults) -> Result<(), Refused> {
    let full = if path.is_absolute() {
        path.to_path_buf()
    } else {
        project.join(path)
    };
    // A path that does not exist (yet) cannot be checked: refused, so a
    // link created later cannot point outside.
    let c = full.canonicalize().map_err(|source| Refused::FileMissing {
        path: full.clone(),
        source,
    })?;
    let inside = std::iter::once(project)
        .chain(d.allowed_roots.iter().map(PathBuf::as_path))
        .any(|root| c.starts_with(root.canonicalize().unwrap_or_else(|_| root.to_path_buf())));
    if inside {
        return Ok(());
    }
    Err(Refused::FileOutside {
        path: c,
        project: project.to_path_buf(),
    })
}

/// Check that requested tools only narrow the configured ones.
pub fn allowed_tools(requested: &[String], d: &Defaults) -> Result<(), Refused> {
    let wider: Vec<String> = requested
        .iter()
        .filter(|r| {
            !d.allowed_tools
                .iter()
                .any(|a| a == *r || (a.as_str() == rule_tool(a) && a == rule_tool(r)))
        })
        .cloned()
        .collect();
    if wider.is_empty() {
        return Ok(());
    }
    Err(Refused::WiderTools {
        wider,
        allowed: d.allowed_tools.clone(),
    })
}

/// May a session's job carry an acceptance command? It runs `sh -c` in the
/// job's tree, which is what the delegate's Bash tool does: so only when the
/// user lets delegates use Bash, and not when their Bash is sandboxed (the
/// command would run outside Claude Code's sandbox).
pub fn acceptance(d: &Defaults) -> Result<(), Refused> {
    if d.sandbox {
        return Err(Refused::AcceptanceSandboxed);
    }
    if !d.allowed_tools.iter().any(|t| t == "Bash") {
        return Err(Refused::AcceptanceNoBash {
            allowed: d.allowed_tools.clone(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Caller {
        Caller::Session {
            project: PathBuf::from("/p"),
        }
    }

    #[test]
    fn bypass_needs_the_users_word() {
        let mut d = Defaults::default();
        let e = permission_mode("bypassPermissions", &session(), &d)
            .unwrap_err()
            .to_string();
        assert!(e.contains("defaults.allow_bypass_permissions: true"), "{e}");
        assert!(permission_mode("bypassPermissions", &Caller::User, &d).is_ok());
        d.allow_bypass_permissions = true;
        assert!(permission_mode("bypassPermissions", &session(), &d).is_ok());
        for m in ["default", "acceptEdits", "plan", "dontAsk"] {
            assert!(permission_mode(m, &session(), &d).is_ok());
        }
        let e = permission_mode("yolo", &Caller::User, &d)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not one of default, acceptEdits, plan, dontAsk"),
            "{e}"
        );
    }

    #[test]
    fn acceptance_needs_unsandboxed_bash() {
        let mut d = Defaults::default();
        assert!(acceptance(&d).is_ok());
        d.sandbox = true;
        assert!(
            acceptance(&d)
                .unwrap_err()
                .to_string()
                .contains("defaults.sandbox")
        );
        d.sandbox = false;
        d.allowed_tools = vec!["Read".into(), "Bash(git:*)".into()];
        assert!(
            acceptance(&d)
                .unwrap_err()
                .to_string()
                .contains("add Bash there")
        );
    }

    #[test]
    fn tools_may_only_narrow() {
        let d = Defaults::default();
        let ok: Vec<String> = ["Read", "Bash(cargo test:*)"].map(String::from).to_vec();
        assert!(allowed_tools(&ok, &d).is_ok());
        let wide: Vec<String> = ["Read", "NotebookEdit", "mcp__x__y"]
            .map(String::from)
            .to_vec();
        let e = allowed_tools(&wide, &d).unwrap_err().to_string();
        assert!(e.starts_with("allowed_tools may only narrow what the user allows: NotebookEdit, mcp__x__y are not in defaults.allowed_tools (Read, Edit"), "{e}");
        // A configured rule does not allow the bare tool.
        let d = Defaults {
            allowed_tools: vec!["Bash(git:*)".into()],
            ..Defaults::default()
        };
        assert!(allowed_tools(&["Bash".into()], &d).is_err());
        assert!(allowed_tools(&["Bash(git:*)".into()], &d).is_ok());
    }

    #[test]
    fn cwd_stays_in_the_project_or_allowed_roots() {
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().join("p");
        let other = tmp.path().join("o");
        std::fs::create_dir_all(project.join("sub")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let mut d = Defaults::default();
        assert!(cwd(&project.join("sub"), &project, &d).is_ok());
        let e = cwd(&other, &project, &d).unwrap_err().to_string();
        assert!(e.contains("defaults.allowed_roots"), "{e}");
        assert!(cwd(Path::new("/"), &project, &d).is_err());
        // `..` does not get out: paths compare canonicalised.
        assert!(cwd(&project.join("sub/../../o"), &project, &d).is_err());
        d.allowed_roots = vec![other.clone()];
        assert!(cwd(&other, &project, &d).is_ok());
    }
}
