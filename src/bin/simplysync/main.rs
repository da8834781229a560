//! `simplysync` — the native command line over the same engine the browser runs.
//!
//! ```text
//! simplysync identity <secret> [--show-keys]      ownerId + relayAuth as JSON (keys in hex with --show-keys)
//! simplysync new-key | new-phrase                 mint a secret
//! simplysync sync    --db FILE --relay URL [--once] [--schema FILE]   sync once, or every --interval-ms
//! simplysync restore --db FILE --relay URL [--schema FILE]            fill a new database from the relay
//! simplysync status  --db FILE --relay URL        relay statuses as JSON
//! simplysync export  --db FILE [--include-deleted]  current rows as JSON
//! simplysync insert|upsert --db FILE TABLE ROW-JSON  one row (`-`: read the JSON from stdin)
//! simplysync update  --db FILE TABLE ID PATCH-JSON    change columns of a live row
//! simplysync delete  --db FILE TABLE ID               soft delete
//! simplysync purge   --db FILE [TABLE ID...]          hard delete (no ids: every soft-deleted row)
//! simplysync import  --db FILE TABLE FILE.jsonl       upsert every line, one transaction
//! ```
//! The secret comes from `--secret` or `SIMPLYSYNC_SECRET` (so it need not appear in shell
//! history); relays from `--relay` (repeatable) or `SIMPLYSYNC_RELAYS` (comma-separated).

#[cfg(not(target_arch = "wasm32"))]
mod commands;
#[cfg(not(target_arch = "wasm32"))]
mod writes;

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    commands::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {}
