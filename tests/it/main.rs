//! Integration tests, in one binary so the 2-core CI links once.

use localagents_testkit as support;

mod accept;
mod agents;
mod bad_input;
mod cli;
mod config;
mod docs;
mod e2e_script;
mod eval;
mod faults;
mod first_contact;
mod fold_prop;
mod harness_rules;
mod jobs;
mod large_tree;
mod layering;
mod lean;
mod ledger;
mod lmstudio;
mod mcp_stdio;
mod npm;
mod ollama;
mod oneshot;
mod plugin;
mod probe;
mod real_claude;
mod router;
mod sentences;
mod shim;
mod slots;
mod swap;
mod tasks;
mod transport;
mod truncation;
mod trust;
mod ui;
