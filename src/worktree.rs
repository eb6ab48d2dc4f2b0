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
//!
//! Every public function here is `async` and runs git on tokio's blocking
//! pool: git2 walks, stats, hashes and writes the whole tree (a 60,000-file
//! checkout takes seconds), and on an async worker that would freeze every
//! other job's relay and every MCP answer that shares the worker. The
//! blocking bodies are private to this file, and `clippy.toml` refuses
//! git2's entry points (`Repository::open`, `discover`, `init`,
//! `Oid::hash_file`) anywhere else, so a git call cannot land on the
//! runtime by accident.
#![allow(clippy::disallowed_methods)] // the one module that may call git2

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
    /// The job was cancelled or timed out while git checked out its
    /// worktree; the worktree and its branch were removed.
    #[error("stopped while git checked out the worktree; the worktree and its branch were removed")]
    Stopped,
    /// The blocking task running git ended without an answer (a panic).
    #[error("the git task ended without an answer ({0}): an internal error of localagents")]
    Task(String),
}

impl GitError {
    pub fn kind(&self) -> crate::error::Kind {
        match self {
            GitError::Io(_) => crate::error::Kind::Io,
            _ => crate::error::Kind::Git,
        }
    }
}

/// Run `f` (git work) on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, GitError> + Send + 'static,
) -> Result<T, GitError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| GitError::Task(e.to_string()))?
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

/// A job's worktree before git checks it out: where it goes, which
/// branch, from which commit, and how many files HEAD has (what the
/// checkout will write).
#[derive(Debug, Clone)]
pub struct Checkout {
    pub info: WorktreeInfo,
    /// Where the job runs: the caller's offset inside the repository.
    pub cwd: PathBuf,
    /// Files in HEAD's tree.
    pub files: usize,
    job: String,
}

/// Plan the worktree of job `job` for a caller in `cwd`: the repository,
/// its HEAD and file count, the path under `worktrees_dir`. Nothing is
/// written yet.
pub async fn plan(cwd: &Path, job: &str, worktrees_dir: &Path) -> Result<Checkout, GitError> {
    let (cwd, job, worktrees_dir) = (
        cwd.to_path_buf(),
        job.to_string(),
        worktrees_dir.to_path_buf(),
    );
    blocking(move || plan_blocking(&cwd, &job, &worktrees_dir)).await
}

fn plan_blocking(cwd: &Path, job: &str, worktrees_dir: &Path) -> Result<Checkout, GitError> {
    let repo = Repository::discover(cwd).map_err(|_| GitError::NotARepo(cwd.to_path_buf()))?;
    let root = repo
        .workdir()
        .ok_or_else(|| GitError::NotARepo(cwd.to_path_buf()))?
        .to_path_buf();
    let head = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .map_err(|_| GitError::NoHead(root.clone()))?;
    let mut files = 0usize;
    head.tree()?.walk(git2::TreeWalkMode::PreOrder, |_, e| {
        if e.kind() != Some(git2::ObjectType::Tree) {
            files += 1;
        }
        git2::TreeWalkResult::Ok
    })?;
    let path = worktrees_dir.join(job);
    let canon_cwd = cwd.canonicalize().unwrap_or_else(|_| cwd.to_path_buf());
    let canon_root = root.canonicalize().unwrap_or(root.clone());
    let offset = canon_cwd.strip_prefix(&canon_root).unwrap_or(Path::new(""));
    Ok(Checkout {
        cwd: path.join(offset),
        info: WorktreeInfo {
            path,
            branch: branch_name(job),
            base: head.id().to_string(),
            repo: canon_root,
            ..Default::default()
        },
        files,
        job: job.to_string(),
    })
}

/// Create the planned worktree: its branch at the base commit, the
/// worktree, and every file of HEAD checked out. `stop` set meanwhile (a
/// cancel or a timeout of the job) makes it remove what it made as soon
/// as git returns (libgit2 cannot abort a checkout while it writes) and
/// answer [`GitError::Stopped`]; a failed checkout is removed too. Either
/// way no worktree or branch is left behind.
pub async fn check_out(c: &Checkout, stop: Arc<AtomicBool>) -> Result<(), GitError> {
    let c = c.clone();
    blocking(move || {
        let made = check_out_blocking(&c);
        let stopped = stop.load(Ordering::SeqCst);
        if (made.is_err() || stopped)
            && let Err(e) = remove_blocking(&c.info, &c.job)
        {
            tracing::warn!(
                "job {}: could not remove the worktree {} ({e})",
                c.job,
                c.info.path.display()
            );
        }
        match made {
            Err(e) => Err(e),
            Ok(()) if stopped => Err(GitError::Stopped),
            Ok(()) => Ok(()),
        }
    })
    .await
}

/// Tests hold a checkout at its start until this file exists (at most a
/// minute), so that a cancel lands during the checkout whatever the
/// machine's speed. Unset, nothing waits.
const HOLD_ENV: &str = "LOCALAGENTS_TEST_HOLD_CHECKOUT";

fn hold_for_tests() {
    let Some(gate) = std::env::var_os(HOLD_ENV) else {
        return;
    };
    let t = std::time::Instant::now();
    while !Path::new(&gate).exists() && t.elapsed() < std::time::Duration::from_secs(60) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn check_out_blocking(c: &Checkout) -> Result<(), GitError> {
    hold_for_tests();
    let repo = Repository::open(&c.info.repo)?;
    let head = repo.find_commit(Oid::from_str(&c.info.base)?)?;
    let branch = repo.branch(&c.info.branch, &head, false)?;
    if let Some(parent) = c.info.path.parent() {
        crate::paths::private_dir_all(parent)?;
    }
    // `.git/worktrees` made here, not by libgit2: two jobs that check out
    // at once both see it missing, both make it, and one fails with
    // "failed to make directory '.git/worktrees': directory exists".
    std::fs::create_dir_all(repo.commondir().join("worktrees"))?;
    let mut opts = WorktreeAddOptions::new();
    let reference = branch.into_reference();
    opts.reference(Some(&reference));
    add_worktree(&repo, c, &opts)?;
    std::fs::create_dir_all(&c.cwd)?;
    Ok(())
}

/// `git worktree add`, again after a spurious "already checked out". The
/// branch is the job's own, made just before, so no worktree holds it;
/// libgit2 1.9.7 says so anyway while another job's worktree in the same
/// repository is half made: `git_repository_foreach_worktree`
/// (src/libgit2/repository.c:3049) assigns the comparison `lookup < 0`,
/// not the lookup's error, so a worktree whose files are not all written
/// yet returns 1 from the walk, which `git_branch_is_checked_out` reads
/// as "checked out" (seen with three jobs checking out at once). The
/// check comes before the add makes anything, so the add simply runs
/// again once the other worktree's files are written.
fn add_worktree(repo: &Repository, c: &Checkout, opts: &WorktreeAddOptions) -> Result<(), GitError> {
    const TRIES: u32 = 6;
    let mut tries = 0;
    loop {
        match repo.worktree(&c.job, &c.info.path, Some(opts)) {
            Ok(_) => return Ok(()),
            Err(e) if tries + 1 < TRIES && e.message().contains("is already checked out") => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(25 << tries));
            }
            Err(e) => return Err(e.into()),
        }
    }
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

/// The [`Snapshot`] of the tree around `cwd` now.
pub async fn snapshot(cwd: &Path) -> Option<Snapshot> {
    let cwd = cwd.to_path_buf();
    blocking(move || Ok(snapshot_blocking(&cwd)))
        .await
        .ok()
        .flatten()
}

fn snapshot_blocking(cwd: &Path) -> Option<Snapshot> {
    let repo = Repository::discover(cwd).ok()?;
    let root = repo.workdir()?.to_path_buf();
    // The index is refreshed and written back, as `git status` does: an
    // entry written in the same second as the index ("racily clean")
    // would otherwise be hashed again by every later status. When the
    // index cannot be written (another git holds its lock), the status is
    // taken without.
    let statuses = repo
        .statuses(Some(status_opts().update_index(true)))
        .or_else(|_| repo.statuses(Some(&mut status_opts())))
        .ok()?;
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
/// remove it and its branch. `dirty` is what the job's last snapshot
/// said, when it took one (a second walk of the tree is not needed).
/// Returns the info as the record should say it.
pub async fn finish(
    info: &WorktreeInfo,
    job: &str,
    dirty: Option<bool>,
) -> Result<WorktreeInfo, GitError> {
    let (mut info, job) = (info.clone(), job.to_string());
    blocking(move || {
        finish_blocking(&mut info, &job, dirty)?;
        Ok(info)
    })
    .await
}

fn finish_blocking(
    info: &mut WorktreeInfo,
    job: &str,
    dirty: Option<bool>,
) -> Result<(), GitError> {
    let wt_repo = Repository::open(&info.path)?;
    let head = wt_repo.head()?.peel_to_commit()?.id().to_string();
    let dirty = match dirty {
        Some(d) => d,
        None => !wt_repo.statuses(Some(&mut status_opts()))?.is_empty(),
    };
    if !dirty && head == info.base {
        drop(wt_repo);
        remove_blocking(info, job)?;
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
        if files.len() >= MAX_FILES_LISTED {
            files.push(format!(
                "… and {} more files (the whole list: `localagents job diff {job}` or git on branch {})",
                diff.deltas().len() - MAX_FILES_LISTED,
                info.branch
            ));
            break;
        }
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

/// The most files a record lists one by one (`WorktreeInfo::files`); a
/// job that rewrote 5,000 files keeps its record small.
pub const MAX_FILES_LISTED: usize = 200;

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
pub async fn unreviewed(info: &WorktreeInfo) -> Result<Option<Unreviewed>, GitError> {
    let info = info.clone();
    blocking(move || unreviewed_blocking(&info)).await
}

fn unreviewed_blocking(info: &WorktreeInfo) -> Result<Option<Unreviewed>, GitError> {
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
pub async fn remove(info: &WorktreeInfo, job: &str) -> Result<(), GitError> {
    let (info, job) = (info.clone(), job.to_string());
    blocking(move || remove_blocking(&info, &job)).await
}

fn remove_blocking(info: &WorktreeInfo, job: &str) -> Result<(), GitError> {
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

/// Whose diff: a kept worktree against its base, or named paths of the
/// tree around a cwd against HEAD (an in-tree job).
#[derive(Debug, Clone)]
pub enum DiffOf {
    Worktree(WorktreeInfo),
    Paths { cwd: PathBuf, paths: Vec<String> },
}

/// One page of a patch: the bytes from an offset, at most a cap, and what
/// the page left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PatchPage {
    /// The page: valid UTF-8 (lossy), starting at `offset`.
    pub text: String,
    /// Where the page starts in the patch.
    pub offset: usize,
    /// The whole patch's size, when git was let run to its end (a page
    /// that stops early does not know it).
    pub total_bytes: Option<usize>,
    /// Where the next page starts, if the patch goes on.
    pub next_offset: Option<usize>,
    /// Files in the diff.
    pub files: usize,
    /// Files whose patch starts before the page's end (shown in part or
    /// whole on this page or an earlier one).
    pub files_reached: usize,
    /// The first file the page did not reach.
    pub first_left_out: Option<String>,
}

/// The page of the patch of `of` from byte `offset`, at most `max` bytes.
/// Git stops writing the patch once the page is full, so a diff of
/// thousands of files costs what its page costs, in time and memory. Named
/// paths are diffed one at a time, in order, each as an exact path: one
/// diff with thousands of pathspecs would match every file of the tree
/// against every one of them.
pub async fn patch_page(of: DiffOf, offset: usize, max: usize) -> Result<PatchPage, GitError> {
    blocking(move || {
        let mut pager = Pager::new(offset, max);
        match of {
            DiffOf::Worktree(info) => {
                let repo = Repository::open(&info.path)?;
                let diff = diff_of(&repo, &info.base)?;
                let files = diff.deltas().len();
                pager.feed(&diff)?;
                let left = (pager.stopped && pager.files_reached < files)
                    .then(|| diff.get_delta(pager.files_reached).and_then(delta_path))
                    .flatten();
                Ok(pager.page(files, left))
            }
            DiffOf::Paths { cwd, mut paths } => {
                paths.sort();
                paths.dedup();
                if paths.is_empty() {
                    return Ok(pager.page(0, None));
                }
                let repo = Repository::discover(&cwd)
                    .map_err(|_| GitError::NotARepo(cwd.to_path_buf()))?;
                let head = repo.head().and_then(|h| h.peel_to_tree()).ok();
                if paths.len() > FEW_PATHS {
                    return paths_page_whole(&repo, head.as_ref(), &paths, pager);
                }
                let mut left = None;
                for (i, p) in paths.iter().enumerate() {
                    if pager.stopped || pager.pos >= pager.end {
                        pager.stopped = true;
                        left = Some(p.clone());
                        pager.files_reached = i;
                        break;
                    }
                    let mut o = diff_opts();
                    o.pathspec(p).disable_pathspec_match(true);
                    let diff = repo.diff_tree_to_workdir_with_index(head.as_ref(), Some(&mut o))?;
                    pager.feed(&diff)?;
                }
                if !pager.stopped {
                    pager.files_reached = paths.len();
                }
                Ok(pager.page(paths.len(), left))
            }
        }
    })
    .await
}

/// Up to this many named paths are diffed one by one (each costs a look
/// at one file); more are picked out of one diff of the whole tree (which
/// costs what `git diff` costs, whatever the number).
const FEW_PATHS: usize = 32;

/// The page of many named paths: one diff of the tree, each file's patch
/// made only for a named path, in the diff's (sorted) order, until the
/// page is full.
fn paths_page_whole(
    repo: &Repository,
    head: Option<&git2::Tree>,
    paths: &[String],
    mut pager: Pager,
) -> Result<PatchPage, GitError> {
    let wanted: std::collections::HashSet<&str> = paths.iter().map(String::as_str).collect();
    let diff = repo.diff_tree_to_workdir_with_index(head, Some(&mut diff_opts()))?;
    let named: Vec<usize> = (0..diff.deltas().len())
        .filter(|&i| {
            diff.get_delta(i)
                .and_then(delta_path)
                .is_some_and(|p| wanted.contains(p.as_str()))
        })
        .collect();
    let mut left = None;
    for (n, &i) in named.iter().enumerate() {
        if pager.stopped || pager.pos >= pager.end {
            pager.stopped = true;
            left = diff.get_delta(i).and_then(delta_path);
            pager.files_reached = n;
            break;
        }
        if let Some(mut patch) = git2::Patch::from_diff(&diff, i)? {
            pager.feed_patch(&mut patch)?;
        }
    }
    if !pager.stopped {
        pager.files_reached = named.len();
    }
    Ok(pager.page(named.len(), left))
}

fn delta_path(d: git2::DiffDelta<'_>) -> Option<String> {
    d.new_file()
        .path()
        .or_else(|| d.old_file().path())
        .map(|p| p.display().to_string())
}

/// A patch printed into one page: bytes `offset..offset + max` are kept
/// (cut back to whole UTF-8 characters), and git is stopped at the first
/// file that starts past them.
struct Pager {
    offset: usize,
    end: usize,
    buf: Vec<u8>,
    /// Bytes of patch printed so far.
    pos: usize,
    files_reached: usize,
    stopped: bool,
}

impl Pager {
    fn new(offset: usize, max: usize) -> Pager {
        Pager {
            offset,
            end: offset.saturating_add(max),
            buf: Vec::new(),
            pos: 0,
            files_reached: 0,
            stopped: false,
        }
    }

    /// Print `diff` on, until the page is full.
    fn feed(&mut self, diff: &git2::Diff) -> Result<(), GitError> {
        let mut last = None;
        let printed = diff.print(git2::DiffFormat::Patch, |delta, _, line| {
            self.line(&mut last, delta, line)
        });
        self.printed(printed)
    }

    /// Print one file's patch on, until the page is full.
    fn feed_patch(&mut self, patch: &mut git2::Patch) -> Result<(), GitError> {
        let mut last = None;
        let printed = patch.print(&mut |delta, _, line| self.line(&mut last, delta, line));
        self.printed(printed)
    }

    fn printed(&self, printed: Result<(), git2::Error>) -> Result<(), GitError> {
        match printed {
            Ok(()) => Ok(()),
            Err(e) if self.stopped && e.code() == git2::ErrorCode::User => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// One line of the patch: kept where it falls inside the page; false
    /// (git stops) once the page is full.
    fn line(
        &mut self,
        last: &mut Option<(Option<PathBuf>, Option<PathBuf>)>,
        delta: git2::DiffDelta<'_>,
        line: git2::DiffLine<'_>,
    ) -> bool {
        let key = (
            delta.old_file().path().map(Path::to_path_buf),
            delta.new_file().path().map(Path::to_path_buf),
        );
        if last.as_ref() != Some(&key) {
            if self.pos >= self.end {
                self.stopped = true;
                return false;
            }
            self.files_reached += 1;
            *last = Some(key);
        }
        let origin = matches!(line.origin(), '+' | '-' | ' ');
        let len = line.content().len() + usize::from(origin);
        let (from, to) = (self.pos, self.pos + len);
        // The part of this line inside the page.
        let lo = self.offset.max(from).min(to);
        let hi = self.end.min(to).max(lo);
        if hi > lo {
            let mut piece: Vec<u8> = Vec::with_capacity(len);
            if origin {
                piece.push(line.origin() as u8);
            }
            piece.extend_from_slice(line.content());
            self.buf.extend_from_slice(&piece[lo - from..hi - from]);
        }
        self.pos = to;
        if self.pos > self.end {
            self.stopped = true;
            return false;
        }
        true
    }

    /// The page, for a diff of `files` files whose first file not reached
    /// is `first_left_out`.
    fn page(self, files: usize, first_left_out: Option<String>) -> PatchPage {
        // Whole characters: a character split at the page's end starts the
        // next page.
        let text_end = match std::str::from_utf8(&self.buf) {
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            _ => self.buf.len(),
        };
        let start = self.offset.min(self.pos);
        let shown = start + text_end;
        PatchPage {
            text: String::from_utf8_lossy(&self.buf[..text_end]).into_owned(),
            offset: start,
            total_bytes: (!self.stopped).then_some(self.pos),
            next_offset: (self.stopped || shown < self.pos).then_some(shown),
            files,
            files_reached: self.files_reached.min(files),
            first_left_out: first_left_out.filter(|_| self.stopped),
        }
    }
}

/// `git init` in `dir` and one commit of everything in it (an eval task's
/// repository).
pub async fn commit_all(dir: &Path, message: &str) -> Result<(), GitError> {
    let (dir, message) = (dir.to_path_buf(), message.to_string());
    blocking(move || {
        let r = Repository::init(&dir)?;
        let mut index = r.index()?;
        index.add_all(["*"], git2::IndexAddOption::DEFAULT, None)?;
        index.write()?;
        let tree = r.find_tree(index.write_tree()?)?;
        let sig = git2::Signature::now("localagents eval", "eval@localagents.invalid")?;
        r.commit(Some("HEAD"), &sig, &sig, &message, &tree, &[])?;
        Ok(())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }

    /// A repository of `n` committed files, each then rewritten.
    fn rewritten(n: usize) -> (tempfile::TempDir, Vec<String>) {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        git(d, &["init", "-q", "-b", "main"]);
        git(d, &["config", "user.email", "t@example.com"]);
        git(d, &["config", "user.name", "t"]);
        let paths: Vec<String> = (0..n).map(|i| format!("f{i:04}.txt")).collect();
        for p in &paths {
            std::fs::write(d.join(p), "one\ntwo\nthree\n").unwrap();
        }
        git(d, &["add", "."]);
        git(d, &["commit", "-qm", "init"]);
        for (i, p) in paths.iter().enumerate() {
            std::fs::write(d.join(p), format!("one\n2 é {i}\nthree\n")).unwrap();
        }
        (tmp, paths)
    }

    #[tokio::test]
    async fn a_diff_page_stops_git_at_its_end_and_says_what_follows() {
        // Many paths (picked out of one diff of the tree), and a few (each
        // diffed as an exact path): the same pages.
        for n in [500, 12] {
            pages_of_a_rewrite(n).await;
        }
    }

    async fn pages_of_a_rewrite(n: usize) {
        let (tmp, paths) = rewritten(n);
        let max = if n > 100 { 2_000 } else { 300 };
        let of = || DiffOf::Paths {
            cwd: tmp.path().to_path_buf(),
            paths: paths.clone(),
        };
        let first = patch_page(of(), 0, max).await.unwrap();
        assert_eq!(first.files, n);
        assert!(first.text.len() <= max, "{}", first.text.len());
        assert_eq!(first.total_bytes, None, "git stopped before the end");
        let next = first.next_offset.expect("the diff goes on");
        assert_eq!(next, first.text.len());
        assert!(first.files_reached < n / 2, "{}", first.files_reached);
        let left = first
            .first_left_out
            .clone()
            .expect("the first file left out");
        assert_eq!(left, paths[first.files_reached]);
        // Paging on reads the whole patch, once, in order, whole
        // characters on every page, and the last page knows the size.
        let mut whole = first.text.clone();
        let mut offset = next;
        let last = loop {
            let p = patch_page(of(), offset, max).await.unwrap();
            assert_eq!(p.offset, offset);
            whole.push_str(&p.text);
            match p.next_offset {
                Some(n) => offset = n,
                None => break p,
            }
        };
        assert_eq!(last.total_bytes, Some(whole.len()));
        assert_eq!(whole.matches("\n+2 é ").count(), n);
        assert!(whole.contains(&format!("+2 é {}\n", n - 1)));
        assert!(!whole.contains('\u{fffd}'), "a character was cut");
    }
}
