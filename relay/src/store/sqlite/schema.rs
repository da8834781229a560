//! The relay database's tables, their migration from earlier layouts, and `relay_meta`.

use rusqlite::{params, Connection, OptionalExtension};

use crate::store::StoreError;

/// The columns of `events` (layout 3), shared by [`SCHEMA`] and the layout 2 → 3 rebuild.
macro_rules! events_columns {
    () => {
        "seq INTEGER PRIMARY KEY, owner_key INTEGER NOT NULL, event_id TEXT NOT NULL, stream_id TEXT,
         envelope TEXT NOT NULL, bytes INTEGER NOT NULL"
    };
}

pub(super) const SCHEMA: &str = concat!(
    "
CREATE TABLE IF NOT EXISTS relay_meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS owners (
    owner_id     TEXT PRIMARY KEY,
    token_hash   TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    closed_at    TEXT,
    stored_bytes INTEGER NOT NULL DEFAULT 0,
    head_seq     INTEGER NOT NULL DEFAULT 0,
    event_count  INTEGER NOT NULL DEFAULT 0,
    stream_count INTEGER NOT NULL DEFAULT 0,
    owner_key    INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS owners_by_key ON owners (owner_key);
CREATE TABLE IF NOT EXISTS events (",
    events_columns!(),
    ");
CREATE UNIQUE INDEX IF NOT EXISTS events_by_owner_event ON events (owner_key, event_id);
CREATE INDEX IF NOT EXISTS events_by_owner_seq ON events (owner_key, seq);
CREATE TABLE IF NOT EXISTS event_streams (
    owner_key INTEGER NOT NULL,
    stream_id TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    PRIMARY KEY (owner_key, stream_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS blobs (
    owner_id   TEXT NOT NULL,
    hash       TEXT NOT NULL,
    data       BLOB NOT NULL,
    bytes      INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (owner_id, hash)
);
-- Object-store keys the orphan sweep is deleting (objects.rs): while a key is claimed, an
-- upload of that chunk is refused, so no row can come to point at an object being deleted.
CREATE TABLE IF NOT EXISTS object_claims (
    owner_id   TEXT NOT NULL,
    hash       TEXT NOT NULL,
    expires_ms INTEGER NOT NULL,
    PRIMARY KEY (owner_id, hash)
) WITHOUT ROWID;
-- Closed owners whose blob objects are known to be gone (the sweep stops listing them).
CREATE TABLE IF NOT EXISTS swept_owners (owner_id TEXT PRIMARY KEY, swept_at TEXT NOT NULL) WITHOUT ROWID;
"
);

/// The relay-wide counters kept in `relay_meta` (so no request ever counts rows).
pub(super) const COUNTERS: [&str; 4] = ["events", "blobs", "owners", "closed_owners"];

/// The schema version this relay writes (`PRAGMA user_version`): 1 the first layout, 2 with
/// maintained counters, 3 with events keyed by the owner's integer key instead of its id, 4 with
/// the stream index in its own table, kept in batches (`streams.rs`) instead of an index on events.
pub(super) const SCHEMA_VERSION: i64 = 4;

/// Creates the tables of a new database, or brings one made by an earlier relay up to
/// [`SCHEMA`] — events re-keyed by owner (layout 3), then the per-owner event and stream counts
/// and the relay-wide counters, computed once from the rows. A database a newer relay wrote is
/// refused (this relay would not know its layout). Runs inside the opening transaction.
/// Returns whether the events table was rebuilt (the WAL then holds a copy of it).
pub(super) fn migrate(conn: &Connection) -> Result<bool, StoreError> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::Setup(format!(
            "the database has schema version {version}, written by a newer relay; this relay knows up to {SCHEMA_VERSION}"
        )));
    }
    let has_column = |table: &str, column: &str| -> Result<bool, StoreError> {
        Ok(conn.query_row(
            "SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2",
            params![table, column],
            |r| r.get::<_, i64>(0),
        )? > 0)
    };
    let has_counts = !has_column("owners", "owner_id")? || has_column("owners", "event_count")?;
    let rebuilt = has_column("events", "owner_id")?;
    if rebuilt {
        key_events_by_owner(conn)?;
    }
    let has_stream_table: bool =
        conn.query_row("SELECT count(*) FROM sqlite_schema WHERE name = 'event_streams'", [], |r| r.get::<_, i64>(0))?
            > 0;
    conn.execute_batch(SCHEMA)?;
    if !has_stream_table {
        index_streams_once(conn)?;
    }
    if !has_counts {
        // The counts come from the rows, so every row is in the stream index from here on.
        super::streams::index_tail_uncounted(conn)?;
        conn.execute_batch(
            "ALTER TABLE owners ADD COLUMN event_count INTEGER NOT NULL DEFAULT 0;
             ALTER TABLE owners ADD COLUMN stream_count INTEGER NOT NULL DEFAULT 0;
             UPDATE owners SET
               event_count = (SELECT count(*) FROM events WHERE events.owner_key = owners.owner_key),
               stream_count = (SELECT count(DISTINCT stream_id) FROM events WHERE events.owner_key = owners.owner_key);",
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
    Ok(rebuilt)
}

/// Layout 4: the stream index moves from an index on `events` (kept with every push) to the
/// `event_streams` table, filled here with every stored event; the stream counts stay as they are.
fn index_streams_once(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch("DROP INDEX IF EXISTS events_by_owner_stream;")?;
    super::streams::index_tail_uncounted(conn)
}

/// Layout 3: each owner gets an integer key (in registration order) and the events table is
/// rebuilt with it in place of the 22-character owner id — every index of the table starts with
/// the owner, and the narrower keys made pushes 5–7% faster (BENCHMARKS.md, round eight). An event whose
/// owner has no row (a damaged database) stops the migration rather than being dropped.
fn key_events_by_owner(conn: &Connection) -> Result<(), StoreError> {
    let orphans: i64 = conn.query_row(
        "SELECT count(*) FROM events WHERE NOT EXISTS (SELECT 1 FROM owners o WHERE o.owner_id = events.owner_id)",
        [],
        |r| r.get(0),
    )?;
    if orphans > 0 {
        return Err(StoreError::Setup(format!(
            "{orphans} stored events belong to no owner row; the database is damaged (restore it from a backup, \
             or delete those events to drop them knowingly)"
        )));
    }
    tracing::info!("re-keying the events table by owner (relay database layout 3); this runs once");
    conn.execute_batch(concat!(
        "ALTER TABLE owners ADD COLUMN owner_key INTEGER NOT NULL DEFAULT 0;
         UPDATE owners SET owner_key = k.n
           FROM (SELECT owner_id, row_number() OVER (ORDER BY created_at, owner_id) AS n FROM owners) AS k
           WHERE k.owner_id = owners.owner_id;
         CREATE TABLE events_by_key (",
        events_columns!(),
        ");
         INSERT INTO events_by_key (seq, owner_key, event_id, stream_id, envelope, bytes)
           SELECT e.seq, o.owner_key, e.event_id, e.stream_id, e.envelope, e.bytes
           FROM events AS e JOIN owners AS o ON o.owner_id = e.owner_id ORDER BY e.seq;
         DROP TABLE events;
         ALTER TABLE events_by_key RENAME TO events;"
    ))?;
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
