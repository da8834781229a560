//! The sync engine: local store schema, mutations + outbox, seal/push/pull/apply with
//! row-level LWW, deferral, purge queue and relay status.
//!
//! Contains no networking code and reads no time from the operating system: HTTP, clock,
//! randomness and timers come in through small traits, so the same code runs natively (tests,
//! CLI) and in the browser.
