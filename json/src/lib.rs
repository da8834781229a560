//! SimplySync's JSON, in a crate of its own for the npm package's sake: the protocol parses
//! every received payload and writes every sealed one through it, so the package builds this
//! crate for speed while the rest of the protocol is built for size (`Cargo.toml`,
//! `[profile.wasm-release.package.simplysync-json]`). The protocol re-exports each module
//! under its own name (`simplysync_protocol::json`, `::json_parse`, `::canonical`).
//!
//! [`json`] is the tree (strings as WTF-8, so a lone surrogate survives), [`json_parse`] reads
//! JSON text into it as `JSON.parse` does, and [`canonical`] writes it as the protocol's
//! canonical JSON — byte-identical to the spec's `JSON.stringify` of sorted keys.

pub mod canonical;
mod decimal;
pub mod json;
pub mod json_parse;
mod object;
#[doc(hidden)] // for the protocol's envelope check, not an API of this crate
pub mod scan;
pub mod sort;
mod wtf8;
