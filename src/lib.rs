//! # SimplySync
//!
//! An end-to-end-encrypted, local-first sync engine. The app's data lives in SQLite on the
//! device; every local write becomes an encrypted event that relays store as ciphertext; other
//! devices pull, decrypt and apply those events with row-level last-writer-wins by HLC.
//!
//! Layers, each depending only on the ones before it:
//! - [`protocol`] — pure and deterministic: identity, canonical JSON, envelopes, blobs, HLC,
//!   wire types (shared with the relay).
//! - [`engine`] — sync logic with no browser types, no `std::time`, no sockets.
//! - [`store`] — SQLite through rusqlite (bundled natively, sqlite-wasm-rs + OPFS in browsers).
//! - `web` — the only wasm-bindgen edge (wasm32 only).

pub mod engine;
pub use simplysync_protocol as protocol;
pub mod store;

#[cfg(not(target_arch = "wasm32"))]
pub mod native;
#[cfg(target_arch = "wasm32")]
pub mod web;

/// The crate version, as reported to relays and in diagnostics.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
