//! The wasm-bindgen edge: the only place that knows about JavaScript.
//!
//! [`engine`] is the `Engine` class the worker drives; [`protocol_api`] exports the protocol
//! functions (identity handles, envelopes, blobs) for advanced use. Errors cross as `Error`
//! objects carrying a stable `code` property.

#[cfg(feature = "bench")]
pub mod bench;
pub mod convert;
pub mod engine;
mod errors;
pub mod io;
pub mod opener;
mod panic;
pub mod protocol_api;
mod writes;
