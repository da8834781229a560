//! Items one relay refused on their own (a single event or blob chunk answered 413): set aside
//! for that relay only, with the reason, so the rest of the outbox keeps flowing. Nothing is
//! deleted — the event stays in the outbox (unacknowledged by that relay) and the chunk stays
//! local; [`clear`] puts them back in line (the engine does on open and on
//! `retrySetAside()`).

use rusqlite::{params, Connection, OptionalExtension};

use super::StoreError;

/// What kind of item was set aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An outbox event (item = event id).
    Event,
    /// A blob chunk (item = its hash).
    Chunk,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Event => "event",
            Kind::Chunk => "chunk",
        }
    }
}

/// Sets `item` aside for `relay`.
pub fn set_aside(
    conn: &Connection,
    relay: &str,
    kind: Kind,
    item: &str,
    reason: &str,
    now: u64,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO _sync_set_aside (relay, kind, item, reason, at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (relay, kind, item) DO UPDATE SET reason = ?4, at = ?5",
    )?
    .execute(params![relay, kind.as_str(), item, reason, now as i64])?;
    Ok(())
}

/// How many events and chunks are set aside for `relay`, and the latest reason.
pub fn summary(conn: &Connection, relay: &str) -> Result<(u64, u64, Option<String>), StoreError> {
    let count = |kind: Kind| -> Result<u64, StoreError> {
        Ok(conn
            .prepare_cached("SELECT count(*) FROM _sync_set_aside WHERE relay = ?1 AND kind = ?2")?
            .query_row(params![relay, kind.as_str()], |r| r.get::<_, i64>(0))? as u64)
    };
    let reason = conn
        .prepare_cached("SELECT reason FROM _sync_set_aside WHERE relay = ?1 ORDER BY at DESC, item LIMIT 1")?
        .query_row([relay], |r| r.get(0))
        .optional()?;
    Ok((count(Kind::Event)?, count(Kind::Chunk)?, reason))
}

/// Puts everything set aside (for every relay, or one) back in line.
pub fn clear(conn: &Connection, relay: Option<&str>) -> Result<u64, StoreError> {
    let n = match relay {
        Some(r) => conn.execute("DELETE FROM _sync_set_aside WHERE relay = ?1", [r])?,
        None => conn.execute("DELETE FROM _sync_set_aside", [])?,
    };
    Ok(n as u64)
}
