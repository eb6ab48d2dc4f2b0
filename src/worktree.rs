//! Git: worktree isolation for jobs, and what a job changed.
//!
//! A `worktree` job runs on branch `local-agent/<job>` in a fresh worktree
//! under the state dir, created from HEAD, at the same offset inside the repo
//! as the caller's cwd. When the job ends the worktree is kept only if it
//! changed something (dirty files, untracked files, or new commits); else the
//! worktree and the branch are removed, like Claude's own subagents.
//!
//! `files_changed` comes from `git status` before and after a job, so edits
//! made through Bash count too. Files that were already dirty before are
//! compared by content hash.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use git2::{
    BranchType, DiffOptions, Oid, Repository, StatusOptions, WorktreeAddOptions,
    WorktreePruneOptions,
};
use serde::{Deserialize, Serialize};

/// A git failure, with what to do.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error(
        "{0} is not inside a git repository: isolation \"worktree\" needs one (run `git init` and commit, or use isolation \"none\")"
    )]
    NotARepo(PathBuf),
    #[error(
        "the repository at {0} has no commit yet: commit once so a worktree can branch from HEAD"
    )]
    NoHead(PathBuf),
    #[error("git: {0}")]
    Git(#[from] git2::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl GitError {
    pub fn kind(&self) -> crate::error::Kind {
        match self {
            GitError::Io(_) => crate::error::Kind::Io,
            _ => crate::error::Kind::Git,
        }
    }
}

/// What the job record says about its worktree.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorktreeInfo {
    pub path: PathBuf,
    pub branch: String,
    /// The commit it branched from.
    pub base: String,
    /// The repository it belongs to (its main working directory).
    pub repo: PathBuf,
    pub kept: bool,
    /// `N files changed, +I -D` (untracked files counted).
    pub diffstat: Option<String>,
    /// Per file: `path | +I -D`.
    pub files: Vec<String>,
    pub note: Option<String>,
}

/// The branch name of a job.
pub fn branch_name(job: &str) -> String {
    format!("local-agent/{job}")
}

/// Create the worktree of a job. Returns the info and the cwd to run in.
pub fn create(
    cwd: &Path,
    job: &str,
    worktrees_dir: &Path,
) -> Result<(WorktreeInfo, PathBuf), GitError> {
    let repo = Repository::discover(cwd).map_err(|_| GitError::NotARepo(cwd.to_path_buf()))?;
    let root = repo
        .workdir()
        .ok_or_else(|| GitError::NotARepo(cwd.to_path_buf()))?
        .to_path_buf();
    let head = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .map_err(|_| GitError::NoHead(root.clone()))?;
    let branch_name = branch_name(job);
    let branch = repo.branch(&branch_name, &head, false)?;
    crate::paths::private_dir_all(worktrees_dir)?;
    let path = worktrees_dir.join(job);
    let mut opts = WorktreeAddOptions::new();
    let reference = branch.into_reference();
    opts.reference(Some(&reference));
    repo.worktree(job, &path, Some(&opts))?;
    let canon_cwd = cwd.canonicalize().unwrap_or_else(|_| cwd.to_path_buf());
    let canon_root = root.canonicalize().unwrap_or(root.clone());
    let offset = canon_cwd.strip_prefix(&canon_root).unwrap_or(Path::new(""));
    let job_cwd = path.join(offset);
    std::fs::create_dir_all(&job_cwd)?;
    Ok((
        WorktreeInfo {
            path,
            branch: branch_name,
            base: head.id().to_string(),
            repo: canon_root,
            ..Default::default()
        },
        job_cwd,
    ))
}

fn status_opts() -> StatusOptions {
    let mut o = StatusOptions::new();
    o.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .renames_head_to_index(false);
    o
}

/// `git status` of the repo around `cwd`: path → (status bits, content hash
/// of the working file). `None` outside a repository.
pub type Snapshot = BTreeMap<String, (u32, Option<Oid>)>;

pub fn snapshot(cwd: &Path) -> Option<Snapshot> {
    let repo = Repository::discover(cwd).ok()?;
    let root = repo.workdir()?.to_path_buf();
    let statuses = repo.statuses(Some(&mut status_opts())).ok()?;
    let mut snap = Snapshot::new();
    for s in statuses.iter() {
        let Ok(path) = s.path() else { continue };
        let hash = Oid::hash_file(git2::ObjectType::Blob, root.join(path)).ok();
        snap.insert(path.to_string(), (s.status().bits(), hash));
    }
    Some(snap)
}

/// Paths whose status or content differs between two snapshots.
pub fn changed(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (p, v) in after {
        if before.get(p) != Some(v) {
            out.push(p.clone());
        }
    }
    for p in before.keys() {
        if !after.contains_key(p) {
            out.push(p.clone());
        }
    }
    out.sort();
    out.dedup();
    out
}

fn diff_opts() -> DiffOptions {
    let mut o = DiffOptions::new();
    o.include_untracked(true)
        .recurse_untracked_dirs(true)
        .show_untracked_content(true);
    o
}

/// The diff of a worktree against its base: commits, index and working
/// files, untracked files included.
fn diff_of<'r>(repo: &'r Repository, base: &str) -> Result<git2::Diff<'r>, GitError> {
    let base = repo.find_commit(Oid::from_str(base)?)?;
    let tree = base.tree()?;
    Ok(repo.diff_tree_to_workdir_with_index(Some(&tree), Some(&mut diff_opts()))?)
}

/// Finish a job's worktree: keep it with a diffstat if it changed, else
/// remove it and its branch.
pub fn finish(info: &mut WorktreeInfo, job: &str) -> Result<(), GitError> {
    let wt_repo = Repository::open(&info.path)?;
    let head = wt_repo.head()?.peel_to_commit()?.id().to_string();
    let dirty = !wt_repo.statuses(Some(&mut status_opts()))?.is_empty();
    if !dirty && head == info.base {
        drop(wt_repo);
        remove(info, job)?;
        info.kept = false;
        info.note = Some("nothing changed: worktree and branch removed".into());
        return Ok(());
    }
    let diff = diff_of(&wt_repo, &info.base)?;
    let stats = diff.stats()?;
    info.diffstat = Some(format!(
        "{} files changed, +{} -{}",
        stats.files_changed(),
        stats.insertions(),
        stats.deletions()
    ));
    let mut files = Vec::new();
    for i in 0..diff.deltas().len() {
        if let Ok(Some(patch)) = git2::Patch::from_diff(&diff, i) {
            let (_, add, del) = patch.line_stats().unwrap_or((0, 0, 0));
            let path = patch
                .delta()
                .new_file()
                .path()
                .or_else(|| patch.delta().old_file().path())
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            files.push(format!("{path} | +{add} -{del}"));
        }
    }
    info.files = files;
    info.kept = true;
    info.note = Some(format!(
        "kept on branch {} at {}; review everything (untracked files too) with `localagents job diff {job}` or the job_diff tool",
        info.branch,
        info.path.display()
    ));
    Ok(())
}

/// Whether a kept worktree holds work that is nowhere else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreviewed {
    /// Uncommitted or untracked files in the worktree.
    Dirty(usize),
    /// Commits on the branch that the repository's HEAD does not contain.
    Unmerged,
}

impl std::fmt::Display for Unreviewed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreviewed::Dirty(n) => write!(f, "{n} uncommitted or untracked files"),
            Unreviewed::Unmerged => write!(f, "commits not merged into the repository's HEAD"),
        }
    }
}

/// May this worktree and branch go without losing work? `Ok(None)` when
/// the tree is clean and the branch tip is in the repository's HEAD (or the
/// worktree is already gone); `Ok(Some(why))` when something would be lost.
pub fn unreviewed(info: &WorktreeInfo) -> Result<Option<Unreviewed>, GitError> {
    if info.path.exists() {
        let wt = Repository::open(&info.path)?;
        let dirty = wt.statuses(Some(&mut status_opts()))?.len();
        if dirty > 0 {
            return Ok(Some(Unreviewed::Dirty(dirty)));
        }
    }
    let repo = Repository::open(&info.repo)?;
    let Ok(branch) = repo.find_branch(&info.branch, BranchType::Local) else {
        return Ok(None);
    };
    let Some(tip) = branch.get().target() else {
        return Ok(None);
    };
    let head = repo.head()?.peel_to_commit()?.id();
    if tip.to_string() == info.base || tip == head || repo.graph_descendant_of(head, tip)? {
        return Ok(None);
    }
    Ok(Some(Unreviewed::Unmerged))
}

/// Remove a job's worktree directory, its git metadata and its branch.
pub fn remove(info: &WorktreeInfo, job: &str) -> Result<(), GitError> {
    let repo = Repository::open(&info.repo)?;
    if let Ok(wt) = repo.find_worktree(job) {
        let mut o = WorktreePruneOptions::new();
        o.valid(true).working_tree(true).locked(false);
        wt.prune(Some(&mut o))?;
    }
    if info.path.exists() {
        std::fs::remove_dir_all(&info.path)?;
    }
    if let Ok(mut b) = repo.find_branch(&info.branch, BranchType::Local) {
        b.delete()?;
    }
    Ok(())
}

/// The full patch text of a kept worktree.
pub fn diff_text(info: &WorktreeInfo) -> Result<String, GitError> {
    let repo = Repository::open(&info.path)?;
    let diff = diff_of(&repo, &info.base)?;
    patch_text(&diff)
}

/// The patch of `paths` in the tree around `cwd`, HEAD to working files.
pub fn diff_paths(cwd: &Path, paths: &[String]) -> Result<String, GitError> {
    let repo = Repository::discover(cwd).map_err(|_| GitError::NotARepo(cwd.to_path_buf()))?;
    let head = repo.head().and_then(|h| h.peel_to_tree()).ok();
    let mut o = diff_opts();
    for p in paths {
        o.pathspec(p);
    }
    if paths.is_empty() {
        return Ok(String::new());
    }
    let diff = repo.diff_tree_to_workdir_with_index(head.as_ref(), Some(&mut o))?;
    patch_text(&diff)
}

fn patch_text(diff: &git2::Diff) -> Result<String, GitError> {
    let mut out = Vec::new();
    diff.print(git2::DiffFormat::Patch, |_, _, line| {
        match line.origin() {
            '+' | '-' | ' ' => out.push(line.origin() as u8),
            _ => {}
        }
        out.extend_from_slice(line.content());
        true
    })?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}
