//! An endpoint's `wire:` key: which API a job's requests reach the server
//! through. Claude Code speaks Anthropic's Messages API; llama.cpp serves it
//! and also OpenAI's chat completions, where `id_slot` pins a request to
//! one slot (`/v1/messages` ignores it). The shim's rule picks one
//! (`crate::shim::chat::choose`); this key overrides it per endpoint.

use serde::Serialize;

/// An endpoint's `wire:` key: Anthropic's `/v1/messages`, as Claude Code
/// sends it, or OpenAI's `/v1/chat/completions`, translated by the shim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WireSetting {
    Messages,
    Chat,
}

impl WireSetting {
    pub fn parse(s: &str) -> Option<WireSetting> {
        match s.trim().to_ascii_lowercase().as_str() {
            "messages" => Some(WireSetting::Messages),
            "chat" => Some(WireSetting::Chat),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            WireSetting::Messages => "messages",
            WireSetting::Chat => "chat",
        }
    }
}
