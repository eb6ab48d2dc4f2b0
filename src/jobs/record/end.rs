//! A job's end, the one core every end goes through: an agent job's, a
//! batch's, and one decided outside the run. A child of `record` so that
//! these named methods, and only they and their kin in `record.rs`, write
//! the private fields of [`JobRecord`].

use super::*;

/// A job's end: what changed, its figures, its status. Every end, an
/// agent job's or a batch's, goes through [`JobRecord::finish`]'s core
/// (`JobRecord::end`); an end decided outside the run through
/// [`JobRecord::end_outside`].
impl JobRecord {
    /// The delegate was nudged after it announced `n.after`.
    pub fn nudged(&mut self, n: pending::Nudge) {
        self.last_activity = Some(format!("nudged after: {}", n.after));
        self.ending.nudges.push(n);
    }

    /// The job ends with work pending: never `succeeded`.
    pub fn ended_incomplete(&mut self, i: pending::Incomplete) {
        self.ending.incomplete = Some(i);
    }

    /// The files the session changed in the tree.
    pub fn tree_changed(&mut self, files: Vec<String>) {
        self.files_changed = files;
    }

    /// Its worktree as the job leaves it (kept or removed, its diffstat
    /// or a note).
    pub fn worktree_ended(&mut self, w: WorktreeInfo) {
        self.worktree = Some(w);
    }

    /// The figures of the job's end: its usage and what it would have
    /// cost, its first turn, the model's faults and what the session did
    /// (`answered`: it ended with its own report), and the sentences
    /// about the model and the server's cache (`llama_cpp`: name
    /// llama-server's flags as the fix).
    pub fn set_figures(
        &mut self,
        m: metrics::JobMetrics,
        config: &Config,
        answered: bool,
        llama_cpp: bool,
    ) {
        self.priced(m.usage, config);
        self.first_turn = m.first_turn;
        let outcome = faults::Outcome::of(self.tool_calls, self.files_changed.len(), answered);
        self.model_faults = Some(m.faults.clone());
        self.model_note = faults::note(&m.faults, &outcome);
        self.cache_note = m.cache_note(llama_cpp);
        self.outcome = Some(outcome);
        self.metrics = Some(m);
    }

    /// `usage`, and what it would have cost at the reference model's list
    /// prices.
    fn priced(&mut self, usage: Usage, config: &Config) {
        self.usage = usage;
        self.equivalent_usd = config.equivalent_usd(usage.input, usage.cache_read, usage.output);
        self.reference_model = Some(config.defaults.reference_model.clone());
    }

    /// The job's end: its status, its error (when there is one), when it
    /// finished and how long it took since `started`.
    pub fn finish(&mut self, status: Status, error: Option<String>, started: Instant) {
        self.end(status, error, started.elapsed());
    }

    /// The end of a job that ran its session ([`JobRecord::finish`]); what
    /// it does now says how long it took ("succeeded after 42s").
    pub fn finish_session(&mut self, status: Status, error: Option<String>, started: Instant) {
        let took = started.elapsed();
        self.end(status, error, took);
        self.last_activity = Some(format!(
            "{} after {:.0}s",
            status.as_str(),
            took.as_secs_f64()
        ));
    }

    /// A job stopped while it waited for a slot ([`JobRecord::finish`]).
    pub fn stopped_in_queue(&mut self, status: Status, error: String, started: Instant) {
        self.finish(status, Some(error), started);
        self.last_activity = Some(format!("{} while queued", status.as_str()));
    }

    /// A job whose checkout failed, or that was stopped while git checked
    /// out its worktree ([`JobRecord::finish`]): the worktree is not kept.
    pub fn stopped_in_checkout(&mut self, status: Status, error: String, started: Instant) {
        if let Some(w) = self.worktree.as_mut() {
            w.kept = false;
            w.note = Some(match status {
                Status::Failed => "not created: worktree and branch removed".into(),
                _ => "stopped during the checkout: git removes the worktree and its branch as soon as its checkout returns".into(),
            });
        }
        self.finish(status, Some(error), started);
        self.last_activity = Some(format!("{} while preparing", status.as_str()));
    }

    /// A batch's end: its items' usage at list prices, its one-line
    /// result, how many items it did, and the end as
    /// [`JobRecord::finish`] writes it.
    pub fn batch_ended(&mut self, b: BatchEnd, config: &Config) {
        self.priced(b.usage, config);
        self.result = Some(b.result);
        self.last_activity = Some(batch_line(b.done, b.total));
        self.end(b.status, b.error, b.elapsed);
    }

    /// The core of every end: the status, the error (when there is one;
    /// an earlier one stays otherwise), when it finished and how long it
    /// took.
    fn end(&mut self, status: Status, error: Option<String>, took: Duration) {
        self.status = status;
        if error.is_some() {
            self.error = error;
        }
        self.finished = Some(now_ts());
        self.elapsed_s = Some(took.as_secs_f64());
    }

    /// An end decided outside the job's run (its owner is gone, its final
    /// record could not be written, its run stopped before it finished
    /// it): `status` and its sentence; when it finished is kept if the
    /// record has it.
    pub fn end_outside(&mut self, status: Status, error: String) {
        self.status = status;
        self.error = Some(error);
        self.finished.get_or_insert_with(now_ts);
    }

    /// A lost job's delegate was looked for and stopped
    /// ([`crate::jobs::store::Store::reap_lost`]).
    pub fn mark_reaped(&mut self) {
        self.reaped = true;
    }
}
