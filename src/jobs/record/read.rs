//! Reading a job record: one accessor a field of [`JobRecord`], named as
//! its key in `job.json`. A child of `record` so that it sees the private
//! fields; it changes none of them.

use super::*;

/// Reading a record: one accessor a field, named as its key in
/// `job.json` (the field's comment there says more). Only the methods
/// below change a record.
impl JobRecord {
    pub fn id(&self) -> &str {
        &self.id
    }
    /// `batch` for a `local_batch` run.
    pub fn kind(&self) -> JobKind {
        self.kind
    }
    /// The first 300 characters; the whole task is in `task.txt`.
    pub fn task(&self) -> &str {
        &self.task
    }
    /// The name asked for.
    pub fn model(&self) -> &str {
        &self.model
    }
    pub fn served_id(&self) -> &str {
        &self.served_id
    }
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
    pub fn base_url(&self) -> &str {
        &self.base_url
    }
    /// Where the delegate ran (inside the worktree for worktree jobs).
    pub fn cwd(&self) -> &Path {
        &self.cwd
    }
    /// The caller's directory.
    pub fn origin_cwd(&self) -> &Path {
        &self.origin_cwd
    }
    pub fn isolation(&self) -> Isolation {
        self.isolation
    }
    pub fn status(&self) -> Status {
        self.status
    }
    pub fn created(&self) -> &str {
        &self.created
    }
    pub fn started(&self) -> Option<&str> {
        self.started.as_deref()
    }
    pub fn finished(&self) -> Option<&str> {
        self.finished.as_deref()
    }
    pub fn elapsed_s(&self) -> Option<f64> {
        self.elapsed_s
    }
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }
    pub fn result(&self) -> Option<&str> {
        self.result.as_deref()
    }
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
    pub fn num_turns(&self) -> Option<u64> {
        self.num_turns
    }
    pub fn tool_calls(&self) -> u64 {
        self.tool_calls
    }
    pub fn usage(&self) -> Usage {
        self.usage
    }
    pub fn files_touched(&self) -> &[String] {
        &self.files_touched
    }
    pub fn files_changed(&self) -> &[String] {
        &self.files_changed
    }
    pub fn worktree(&self) -> Option<&WorktreeInfo> {
        self.worktree.as_ref()
    }
    /// The checkout of a new worktree, the job's first phase.
    pub fn prepare(&self) -> Option<&Prepare> {
        self.prepare.as_ref()
    }
    pub fn last_activity(&self) -> Option<&str> {
        self.last_activity.as_deref()
    }
    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }
    /// The per-slot window the session was told.
    pub fn context(&self) -> Option<u64> {
        self.context
    }
    /// Where the job's window went.
    pub fn window(&self) -> &WindowUse {
        &self.window
    }
    /// Its nudges, and what was pending when it ended incomplete.
    pub fn ending(&self) -> &pending::Ending {
        &self.ending
    }
    pub fn metrics(&self) -> Option<&metrics::JobMetrics> {
        self.metrics.as_ref()
    }
    /// What the first request cost: prompt tokens, cached, time.
    pub fn first_turn(&self) -> Option<metrics::FirstTurn> {
        self.first_turn
    }
    /// Set when every slot was busy at start.
    pub fn queued_note(&self) -> Option<&str> {
        self.queued_note.as_deref()
    }
    /// "loaded gemma-3-270m in 1.7 s" when the job had to load its model.
    pub fn load_note(&self) -> Option<&str> {
        self.load_note.as_deref()
    }
    /// The acceptance command's last run, when the job has one.
    pub fn acceptance(&self) -> Option<&accept::Acceptance> {
        self.acceptance.as_ref()
    }
    /// `usage` at the reference model's list prices, set when the job ends.
    pub fn equivalent_usd(&self) -> Option<f64> {
        self.equivalent_usd
    }
    pub fn reference_model(&self) -> Option<&str> {
        self.reference_model.as_deref()
    }
    /// The model's faults over the job, set when it ends.
    pub fn model_faults(&self) -> Option<&faults::ModelFaults> {
        self.model_faults.as_ref()
    }
    /// What the session did, set when it ends.
    pub fn outcome(&self) -> Option<faults::Outcome> {
        self.outcome
    }
    /// The sentence about the model.
    pub fn model_note(&self) -> Option<&str> {
        self.model_note.as_deref()
    }
    /// The sentence about the server's cache, when it lost the job's
    /// conversation.
    pub fn cache_note(&self) -> Option<&str> {
        self.cache_note.as_deref()
    }
    pub fn permission_mode(&self) -> &str {
        &self.permission_mode
    }
    pub fn max_turns(&self) -> u32 {
        self.max_turns
    }
    pub fn timeout_s(&self) -> u64 {
        self.timeout_s
    }
    pub fn allowed_tools(&self) -> &[String] {
        &self.allowed_tools
    }
    pub fn disallowed_tools(&self) -> &[String] {
        &self.disallowed_tools
    }
    pub fn system_prompt_append(&self) -> Option<&str> {
        self.system_prompt_append.as_deref()
    }
    pub fn resumed_from(&self) -> Option<&str> {
        self.resumed_from.as_deref()
    }
    /// The user's subagent profile the delegate ran as.
    pub fn agent(&self) -> Option<&AgentUse> {
        self.agent.as_ref()
    }
    /// The id of the tool call that started the job.
    pub fn tool_use_id(&self) -> Option<&str> {
        self.tool_use_id.as_deref()
    }
    /// The job guard's pid (= the process group of guard and delegate).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }
    /// Who that pid was.
    pub fn guard(&self) -> Option<&process::Identity> {
        self.guard.as_ref()
    }
    /// The localagents process that runs it.
    pub fn owner_pid(&self) -> u32 {
        self.owner_pid
    }
    /// Who the owner was (boot id, start time).
    pub fn owner(&self) -> Option<&process::Identity> {
        self.owner.as_ref()
    }
    /// A lost job's delegate was looked for and stopped.
    pub fn reaped(&self) -> bool {
        self.reaped
    }

    /// The built-in tools the delegate is offered: its subagent's, else
    /// the allowed ones less those denied.
    pub fn offered_tools(&self) -> Vec<String> {
        match &self.agent {
            Some(a) => a.tools.clone(),
            None => crate::runner::offered_tools(&self.allowed_tools, &self.disallowed_tools),
        }
    }
}
