//! `simplysync` — the native command line over the same engine the browser runs.
//!
//! ```text
//! simplysync identity <secret> [--show-keys]      ownerId + relayAuth as JSON (keys in hex with --show-keys)
//! simplysync new-key | new-phrase                 mint a secret
//! simplysync sync    --db FILE --relay URL [--once] [--schema FILE]   sync once, or every --interval-ms
//! simplysync restore --db FILE --relay URL [--schema FILE]            fill a new database from the relay
//! simplysync status  --db FILE --relay URL        relay statuses as JSON
//! simplysync export  --db FILE [--include-deleted]  current rows as JSON
//! ```
//! The secret comes from `--secret` or `SIMPLYSYNC_SECRET` (so it need not appear in shell
//! history); relays from `--relay` (repeatable) or `SIMPLYSYNC_RELAYS` (comma-separated).

#[cfg(not(target_arch = "wasm32"))]
mod commands;

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    commands::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {}
