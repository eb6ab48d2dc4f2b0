//! The shim's guard for a job's route, from the config's defaults: one
//! place, used by a job's run and by the prewarm (whose request is folded
//! as a job's is).

/// The shim's guard for a job's route (the prewarm's too, so its request
/// is folded as a job's is).
pub fn job_policy(d: &crate::config::Defaults) -> crate::shim::Policy {
    crate::shim::Policy {
        loop_limit: d.loop_limit,
        runaway_limit: d.runaway_limit,
        thinking: d.thinking,
        repair: true,
        stop_on_fatal: true,
        clear: d.clear_tool_results,
    }
}
