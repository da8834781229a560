//! Engine tests (native): the local API, and sync against a real relay over real HTTP, with
//! faults injected in front of it where a test needs a relay to misbehave.
#![cfg(not(target_arch = "wasm32"))]

mod harness;
#[path = "../support/sweep.rs"]
mod sweep;

mod budgets;
mod cli_sync;
mod convergence;
mod edges;
mod failures;
mod history;
mod hostile;
mod listeners;
mod live;
mod opener;
mod property;
mod pulled_runs;
mod purge_rekey_blobs;
mod recovery;
mod registration;
mod remember;
mod requests;
mod rules;
mod undeliverable;
mod versions;
