//! One file per command (uv's layout). Each returns an [`ExitStatus`].
//!
//! [`ExitStatus`]: super::ExitStatus

pub mod complete;
pub mod config;
pub mod eval;
pub mod hook;
pub mod jobs;
pub mod run;
pub mod savings;
pub mod setup;
pub mod shim;
pub mod status;
pub mod trust;
pub mod ui;
