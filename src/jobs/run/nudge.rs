//! The nudges of a job without an acceptance command: while the delegate
//! ends a session announcing a step it did not take, and nudges and turns
//! remain, resume the same session with [`pending::NUDGE`]
//! ([`crate::jobs::pending`] says why a resume).

use crate::jobs::pending::{self, Nudge};
use crate::jobs::run::{JobRun, Live, SessionEnd};

impl Live<'_, '_> {
    /// Nudge the delegate while it stops after announcing a step
    /// (`defaults.nudges` times at most). Each nudge round has the turns
    /// the job has left. Returns how the last session ended; a nudge round
    /// that says nothing keeps the report before it.
    pub(super) async fn nudges(&mut self, mut end: SessionEnd) -> SessionEnd {
        let cap = self.run.job.target.config.defaults.nudges as usize;
        let max_turns = self.run.rec.max_turns();
        let rt = self.run.rt;
        let mut used = turns_of(&end);
        loop {
            if self.run.rec.ending().nudges.len() >= cap || used >= max_turns {
                break;
            }
            let Some(step) = self.due(&end) else {
                break;
            };
            let Some(session) = self.run.rec.session_id().map(str::to_string) else {
                break;
            };
            let left = max_turns - used;
            let next = self.session(pending::NUDGE, Some(session), left).await;
            used = used.saturating_add(turns_of(&next));
            let JobRun { rec, .. } = &mut *self.run;
            rec.nudged(Nudge {
                after: step,
                resumed: next.tool_calls > 0,
            });
            rt.keep(rec);
            let keep = end.result.take();
            end = SessionEnd {
                result: next.result.or(keep),
                ..next
            };
            if end.stop.is_some() || self.reg.route.guard.fatal().is_some() {
                break;
            }
        }
        end
    }

    /// The step to nudge after: the session ended on its own (`success`),
    /// on an answer that was not cut at `max_tokens`, with words that
    /// announce a step ([`pending::announced`]).
    fn due(&self, end: &SessionEnd) -> Option<String> {
        if end.stop.is_some() || self.reg.route.guard.fatal().is_some() {
            return None;
        }
        if self.reg.route.log.last_stop_reason().as_deref() == Some("max_tokens") {
            return None;
        }
        end.announced_step()
    }
}

/// The turns a session took, by Claude Code's count (1 when it did not
/// say: a session that ran took one at least).
fn turns_of(end: &SessionEnd) -> u32 {
    end.result
        .as_ref()
        .and_then(|r| r.num_turns)
        .map_or(1, |n| u32::try_from(n).unwrap_or(u32::MAX))
}
