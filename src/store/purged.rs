//! Purge records: a purged row's last version (its HLC), kept until every relay acknowledged
//! the compaction of its stream **and** [`RETENTION_MS`] passed, so an older event of that row
//! — still on a relay that has not compacted, or pushed late by a device that was offline —
//! cannot bring it back. An event newer than the record (a later write on another device) is
//! a new row version and applies.

/// How long a purge record outlives the last relay's acknowledgement (7 days).
pub const RETENTION_MS: u64 = 7 * 24 * 3600 * 1000;

use rusqlite::{params, Connection, OptionalExtension};

use super::StoreError;

/// Remembers that `(table, row_id)` was purged at version `hlc`, and the streams whose
/// compaction it queued (`stream_id` holds them separated by spaces: one for a whole-row row,
/// one per cell more for a column-merge row).
pub fn record(
    conn: &Connection,
    table: &str,
    row_id: &str,
    streams: &[String],
    hlc: &str,
    now: u64,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO _sync_purged (table_name, row_id, stream_id, hlc, at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (table_name, row_id) DO UPDATE SET hlc = max(hlc, ?4), stream_id = ?3, at = ?5",
    )?
    .execute(params![table, row_id, streams.join(" "), hlc, now as i64])?;
    Ok(())
}

/// The version a row was purged at, if a record is kept.
pub fn purged_at(conn: &Connection, table: &str, row_id: &str) -> Result<Option<String>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT hlc FROM _sync_purged WHERE table_name = ?1 AND row_id = ?2")?
        .query_row(params![table, row_id], |r| r.get(0))
        .optional()?)
}

/// A purged row was written again (a newer version arrived): forgets its record and cancels the
/// compactions still queued for its streams, which would drop that newer version on the relays.
pub fn revived(conn: &Connection, table: &str, row_id: &str) -> Result<(), StoreError> {
    let streams: Option<String> = conn
        .prepare_cached("SELECT stream_id FROM _sync_purged WHERE table_name = ?1 AND row_id = ?2")?
        .query_row(params![table, row_id], |r| r.get(0))
        .optional()?;
    for stream in streams.iter().flat_map(|s| s.split(' ')) {
        conn.prepare_cached("DELETE FROM _sync_purge WHERE stream_id = ?1")?.execute([stream])?;
    }
    conn.prepare_cached("DELETE FROM _sync_purged WHERE table_name = ?1 AND row_id = ?2")?
        .execute(params![table, row_id])?;
    Ok(())
}

/// Drops the records older than [`RETENTION_MS`] whose streams no relay still has to compact.
/// Returns how many remain.
pub fn release_acknowledged(conn: &Connection, now: u64) -> Result<u64, StoreError> {
    conn.execute(
        "DELETE FROM _sync_purged WHERE at < ?1
           AND NOT EXISTS (SELECT 1 FROM _sync_purge p
                           WHERE instr(' ' || _sync_purged.stream_id || ' ', ' ' || p.stream_id || ' ') > 0)",
        [now.saturating_sub(RETENTION_MS) as i64],
    )?;
    Ok(conn.query_row("SELECT count(*) FROM _sync_purged", [], |r| r.get::<_, i64>(0))? as u64)
}

/// Whether any record is kept.
pub fn any(conn: &Connection) -> Result<bool, StoreError> {
    Ok(conn.prepare_cached("SELECT 1 FROM _sync_purged LIMIT 1")?.exists([])?)
}
