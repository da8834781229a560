//! The relay database's tables, their migration from earlier layouts, and `relay_meta`.

use rusqlite::{params, Connection, OptionalExtension};

use crate::store::StoreError;

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS relay_meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS owners (
    owner_id     TEXT PRIMARY KEY,
    token_hash   TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    closed_at    TEXT,
    stored_bytes INTEGER NOT NULL DEFAULT 0,
    head_seq     INTEGER NOT NULL DEFAULT 0,
    event_count  INTEGER NOT NULL DEFAULT 0,
    stream_count INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    seq       INTEGER PRIMARY KEY,
    owner_id  TEXT NOT NULL,
    event_id  TEXT NOT NULL,
    stream_id TEXT,
    envelope  TEXT NOT NULL,
    bytes     INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS events_by_owner_event ON events (owner_id, event_id);
CREATE INDEX IF NOT EXISTS events_by_owner_seq ON events (owner_id, seq);
CREATE INDEX IF NOT EXISTS events_by_owner_stream ON events (owner_id, stream_id, event_id) WHERE stream_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS blobs (
    owner_id   TEXT NOT NULL,
    hash       TEXT NOT NULL,
    data       BLOB NOT NULL,
    bytes      INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (owner_id, hash)
);
";

/// The relay-wide counters kept in `relay_meta` (so no request ever counts rows).
pub(super) const COUNTERS: [&str; 4] = ["events", "blobs", "owners", "closed_owners"];

/// The schema version this relay writes (`PRAGMA user_version`): 1 the first layout, 2 with
/// maintained counters.
pub(super) const SCHEMA_VERSION: i64 = 2;

/// Brings a database made by an earlier relay up to [`SCHEMA`]: per-owner event and stream
/// counts, and the relay-wide counters, computed once from the rows. A database a newer relay
/// wrote is refused (this relay would not know its layout).
pub(super) fn migrate(conn: &Connection) -> Result<(), StoreError> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::Setup(format!(
            "the database has schema version {version}, written by a newer relay; this relay knows up to {SCHEMA_VERSION}"
        )));
    }
    let has_counts: bool =
        conn.query_row("SELECT count(*) FROM pragma_table_info('owners') WHERE name = 'event_count'", [], |r| {
            r.get::<_, i64>(0).map(|n| n > 0)
        })?;
    if !has_counts {
        conn.execute_batch(
            "ALTER TABLE owners ADD COLUMN event_count INTEGER NOT NULL DEFAULT 0;
             ALTER TABLE owners ADD COLUMN stream_count INTEGER NOT NULL DEFAULT 0;
             UPDATE owners SET
               event_count = (SELECT count(*) FROM events WHERE events.owner_id = owners.owner_id),
               stream_count = (SELECT count(DISTINCT stream_id) FROM events WHERE events.owner_id = owners.owner_id);",
        )?;
    }
    if meta_get::<i64>(conn, "events")?.is_none() {
        let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0));
        set_meta(conn, "events", &count("SELECT count(*) FROM events")?)?;
        set_meta(conn, "blobs", &count("SELECT count(*) FROM blobs")?)?;
        set_meta(conn, "owners", &count("SELECT count(*) FROM owners")?)?;
        set_meta(conn, "closed_owners", &count("SELECT count(*) FROM owners WHERE closed_at IS NOT NULL")?)?;
    }
    if version != SCHEMA_VERSION {
        conn.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}"))?;
    }
    Ok(())
}

pub(super) fn meta_get<T: rusqlite::types::FromSql>(conn: &Connection, key: &str) -> Result<Option<T>, StoreError> {
    Ok(conn.prepare_cached("SELECT value FROM relay_meta WHERE key = ?1")?.query_row([key], |r| r.get(0)).optional()?)
}

pub(super) fn meta_u64(conn: &Connection, key: &str) -> Result<u64, StoreError> {
    Ok(meta_get::<i64>(conn, key)?.unwrap_or(0).max(0) as u64)
}

pub(super) fn set_meta(conn: &Connection, key: &str, value: &dyn rusqlite::ToSql) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO relay_meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = ?2",
    )?
    .execute(params![key, value])?;
    Ok(())
}

/// Adds `delta` to the relay-wide counter `key` (never below zero).
pub(super) fn bump(conn: &Connection, key: &str, delta: i64) -> Result<(), StoreError> {
    if delta == 0 {
        return Ok(());
    }
    conn.prepare_cached(
        "INSERT INTO relay_meta (key, value) VALUES (?1, max(0, ?2))
         ON CONFLICT (key) DO UPDATE SET value = max(0, value + ?2)",
    )?
    .execute(params![key, delta])?;
    Ok(())
}
