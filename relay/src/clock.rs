//! The relay's wall clock, shared by the HTTP layer, compaction and the store.

use std::time::{SystemTime, UNIX_EPOCH};

use simplysync_protocol::time::iso8601_from_ms;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// The wall clock as ISO-8601.
pub fn now_iso() -> String {
    iso8601_from_ms(now_ms())
}
