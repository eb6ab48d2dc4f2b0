//! The shim between a headless Claude Code session and a local backend.
//!
//! One HTTP server per localagents process, bound to 127.0.0.1 on a port the
//! kernel picks (we never pick a port and release it). Each job gets a route
//! prefix `/j/<token>` whose token carries 128 random bits, so no other local
//! process can guess its way to a backend. Only three paths are forwarded:
//! `POST /v1/messages`, `POST /v1/messages/count_tokens`, `GET /v1/models`;
//! anything else, and any unknown token, gets an Anthropic-shaped 404. The
//! backend's API key is added on the way out and is never logged.
//!
//! Requests are folded ([`fold`]), `max_tokens` is kept within the window,
//! errors are put in the form Claude Code acts on ([`errors`]), streams are
//! relayed as they arrive ([`sse`]), and every request is logged ([`log`]).
//! The model's own faults are handled on the way: tool calls that came
//! back as text become `tool_use` again ([`repair`]), a model that repeats
//! itself gets a note and then is stopped ([`loops`]), an answer that
//! runs away (a line or its template's markers over and over) is cut off
//! and its backend request closed ([`runaway`]), and thinking blocks in
//! the history are kept or dropped as the backend needs ([`Guard`]). On a
//! small window, old tool results are sent as one-line stubs ([`clear`]).
//! In a job's last three turns the delegate reads how many remain
//! ([`turns`]). On llama.cpp a job's requests go to `/v1/chat/completions`
//! pinned to its slot, translated at the edge ([`chat`]).

//!
//! The route and its guard are in [`route`], the server and route table in
//! [`server`], a request's common path in [`pipeline`], `/v1/messages` in
//! [`reply`], `count_tokens` and `models` in [`count`]; this file declares
//! them and re-exports their public items.

pub mod chat;
pub mod clear;
pub mod errors;
pub mod fold;
pub mod fold_images;
pub mod log;
pub mod loops;
pub mod repair;
pub mod runaway;
#[cfg(test)]
#[path = "runaway_fixtures.rs"]
pub mod runaway_fixtures;
pub mod sse;
pub mod truncation;
pub mod turns;

pub mod count;
pub mod pipeline;
pub mod reply;
pub mod route;
pub mod server;

pub use count::{BYTES_PER_TOKEN, estimate_tokens, tokens_of_bytes};
pub use reply::relay_messages;
pub use chat::Wire;
pub use route::{Failing, Guard, Policy, Route, first_byte_timeout};
pub use server::{Registration, Shim, new_token};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_faults_is_counted_until_an_answer() {
        let g = Guard::default();
        assert_eq!(g.backend_failing(), None);
        g.backend_failed("backend http://b sent nothing.");
        let f = g.backend_failing().unwrap();
        assert_eq!(f.why, "backend http://b sent nothing (1 try)");
        g.backend_failed("llama.cpp at http://b: bad gateway");
        let f2 = g.backend_failing().unwrap();
        assert_eq!(f2.why, "llama.cpp at http://b: bad gateway (2 tries)");
        assert!(f2.for_ >= f.for_, "the run is timed from its first fault");
        g.backend_answered();
        assert_eq!(g.backend_failing(), None);
    }
}
