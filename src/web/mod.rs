//! The wasm-bindgen edge: the only place that knows about JavaScript.
//!
//! Errors cross as `Error` objects carrying a stable `code` property (see [`errors`]).

mod errors;
mod protocol_api;
