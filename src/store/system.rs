//! The engine's own tables (all prefixed `_sync_`) and the creation/extension of app tables
//! from a [`Schema`]. Migration is additive only: missing tables and columns are created;
//! nothing is dropped or retyped.

use rusqlite::{Connection, OptionalExtension};

use rusqlite::types::Value;

use super::kept;
use super::schema::{index_name, quote, Merge, Schema, SchemaDef, SchemaError, Table};
use super::StoreError;

const SYSTEM_DDL: &str = "
CREATE TABLE IF NOT EXISTS _sync_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _sync_outbox (
    event_id      TEXT PRIMARY KEY NOT NULL,
    table_name    TEXT NOT NULL,
    row_id        TEXT NOT NULL,
    envelope_json TEXT,
    created_at    INTEGER NOT NULL,
    pushed_at     INTEGER,
    request_id     TEXT,
    request_result TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _sync_acks (
    relay    TEXT NOT NULL,
    event_id TEXT NOT NULL,
    PRIMARY KEY (relay, event_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _sync_seen (event_id TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _sync_deferred (
    event_id      TEXT PRIMARY KEY,
    relay         TEXT NOT NULL,
    envelope_json TEXT NOT NULL,
    reason        TEXT NOT NULL,
    detail        TEXT NOT NULL,
    retry_at      INTEGER,
    attempts      INTEGER NOT NULL DEFAULT 0,
    first_seen_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _sync_quarantine (
    relay         TEXT NOT NULL,
    event_id      TEXT NOT NULL,
    envelope_json TEXT NOT NULL,
    reason        TEXT NOT NULL,
    detail        TEXT NOT NULL,
    at            INTEGER NOT NULL,
    PRIMARY KEY (relay, event_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _sync_purge (
    relay       TEXT NOT NULL,
    stream_id   TEXT NOT NULL,
    enqueued_at INTEGER NOT NULL,
    PRIMARY KEY (relay, stream_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _sync_blob_chunks (
    hash    TEXT PRIMARY KEY,
    blob_id TEXT NOT NULL,
    idx     INTEGER NOT NULL,
    bytes   BLOB NOT NULL,
    local   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS _sync_requests (
    id     TEXT PRIMARY KEY,
    result TEXT NOT NULL,
    at     INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _sync_set_aside (
    relay  TEXT NOT NULL,
    kind   TEXT NOT NULL,
    item   TEXT NOT NULL,
    reason TEXT NOT NULL,
    at     INTEGER NOT NULL,
    PRIMARY KEY (relay, kind, item)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _sync_purged (
    table_name TEXT NOT NULL,
    row_id     TEXT NOT NULL,
    stream_id  TEXT NOT NULL,
    hlc        TEXT NOT NULL,
    at         INTEGER NOT NULL,
    PRIMARY KEY (table_name, row_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _sync_blob_uploads (
    relay TEXT NOT NULL,
    hash  TEXT NOT NULL,
    PRIMARY KEY (relay, hash)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _sync_kept (
    table_name TEXT NOT NULL,
    row_id     TEXT NOT NULL,
    col_name   TEXT NOT NULL,
    value      TEXT NOT NULL,
    PRIMARY KEY (table_name, row_id, col_name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _sync_clocks (
    table_name TEXT NOT NULL,
    row_id     TEXT NOT NULL,
    clocks     TEXT NOT NULL,
    PRIMARY KEY (table_name, row_id)
) WITHOUT ROWID;
";

/// A request's record kept on its transaction's last outbox intent (`Engine::write_rows`)
/// moves to `_sync_requests` when that intent leaves the outbox — pushed and acknowledged,
/// superseded, purged or cleared by a re-key — so no path that deletes intents loses it.
const REQUESTS_TRIGGER: &str = "
CREATE TRIGGER IF NOT EXISTS _sync_outbox_keeps_requests BEFORE DELETE ON _sync_outbox
WHEN old.request_id IS NOT NULL
BEGIN
    INSERT OR IGNORE INTO _sync_requests (id, result, at) VALUES (old.request_id, old.request_result, old.created_at);
END;
";

/// Creates the engine's tables, and moves an outbox of the first layout to the current one.
///
/// The outbox's first layout (up to issue 17's round twenty-three) was a rowid table ordered by
/// a `seq` with a second b-tree for `event_id UNIQUE`: every local write touched both. It is
/// now clustered by `event_id` alone — a local HLC, so the order of writes (PROTOCOL.md, "The
/// engine's local storage"). The old table is renamed, the new one made by the DDL, the rows
/// copied across (intents, envelopes and push times kept; the acknowledgements refer to event
/// ids and stay as they are) and the old table dropped — all in one savepoint.
pub fn create_system_tables(conn: &Connection) -> Result<(), StoreError> {
    // Only the first layout has a `seq` column (and a new database no outbox at all).
    if conn.prepare("SELECT seq FROM _sync_outbox").is_err() {
        conn.execute_batch(SYSTEM_DDL)?;
        add_request_columns(conn)?;
        return Ok(());
    }
    // Nothing of the move stays if a step fails; the old outbox is as it was.
    in_savepoint(conn, "outbox_layout", || {
        conn.execute_batch("ALTER TABLE _sync_outbox RENAME TO _sync_outbox_first")?;
        conn.execute_batch(SYSTEM_DDL)?;
        conn.execute_batch(
            "INSERT INTO _sync_outbox (event_id, table_name, row_id, envelope_json, created_at, pushed_at)
                 SELECT event_id, table_name, row_id, envelope_json, created_at, pushed_at FROM _sync_outbox_first;
             DROP TABLE _sync_outbox_first;",
        )?;
        conn.execute_batch(REQUESTS_TRIGGER)
    })
}

/// Runs `f` in the savepoint `name`: all of its changes stay, or — when it fails — none.
fn in_savepoint(conn: &Connection, name: &str, f: impl FnOnce() -> rusqlite::Result<()>) -> Result<(), StoreError> {
    conn.execute_batch(&format!("SAVEPOINT {name}"))?;
    if let Err(e) = f() {
        let _ = conn.execute_batch(&format!("ROLLBACK TO {name}; RELEASE {name}"));
        return Err(e.into());
    }
    conn.execute_batch(&format!("RELEASE {name}"))?;
    Ok(())
}

/// Adds the request columns and their trigger to an outbox made before issue 17's round
/// twenty-nine (additive: its rows read the columns as NULL, no request recorded there) — each
/// column checked on its own, and all in one savepoint, so an open cut short between them leaves
/// the outbox as it was or as it should be, never with one column.
fn add_request_columns(conn: &Connection) -> Result<(), StoreError> {
    let missing = |column: &str| conn.prepare(&format!("SELECT {column} FROM _sync_outbox")).is_err();
    let (id, result) = (missing("request_id"), missing("request_result"));
    in_savepoint(conn, "request_columns", || {
        if id {
            conn.execute_batch("ALTER TABLE _sync_outbox ADD COLUMN request_id TEXT")?;
        }
        if result {
            conn.execute_batch("ALTER TABLE _sync_outbox ADD COLUMN request_result TEXT")?;
        }
        conn.execute_batch(REQUESTS_TRIGGER)
    })
}

/// A column of an app table as SQLite has it: name, type, default (its SQL text).
struct ExistingColumn {
    name: String,
    sql_type: String,
    default: Option<String>,
}

fn existing_columns(conn: &Connection, table: &str) -> Result<Vec<ExistingColumn>, StoreError> {
    let mut stmt = conn.prepare(&format!("PRAGMA table_info({})", quote(table)))?;
    let cols = stmt
        .query_map([], |r| Ok(ExistingColumn { name: r.get(1)?, sql_type: r.get(2)?, default: r.get(4)? }))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(cols)
}

/// `value` as an SQL literal (a column's `DEFAULT`): what `PRAGMA table_info` then shows.
fn sql_literal(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::Integer(i) => Some(i.to_string()),
        // (JavaScript's `Number#toString` text, as canonical JSON writes numbers: the package
        // has no float formatting of Rust's own.)
        Value::Real(x) => Some(crate::protocol::canonical::format_number(*x)),
        Value::Text(t) => Some(format!("'{}'", t.replace('\'', "''"))),
        Value::Blob(_) => None,
    }
}

/// A column's definition in `CREATE TABLE` and `ALTER TABLE … ADD COLUMN`.
fn column_ddl(table: &Table, i: usize) -> String {
    let c = &table.columns[i];
    match sql_literal(&table.defaults[i]) {
        Some(literal) => format!("{} {} DEFAULT {literal}", quote(&c.name), c.column_type.sql_type()),
        None => format!("{} {}", quote(&c.name), c.column_type.sql_type()),
    }
}

/// Brings the app tables to `schema` in one transaction: creates missing tables, adds missing
/// columns (with their defaults), creates the declared indexes and drops the engine's
/// undeclared ones, and moves the values of columns a row holds but the app does not declare
/// (`_sync_kept`, see [`kept`]): into their columns once declared, out of columns that a
/// later schema no longer declares (an older app opening a newer app's database).
/// `prior` is the schema the database was last opened with.
pub fn migrate_app_tables(conn: &mut Connection, schema: &Schema, prior: Option<&SchemaDef>) -> Result<(), StoreError> {
    let tx = conn.transaction()?;
    for table in schema.tables() {
        let existing = existing_columns(&tx, &table.name)?;
        if existing.is_empty() {
            let mut ddl = format!(
                "CREATE TABLE {} (id TEXT PRIMARY KEY NOT NULL, updatedAt TEXT NOT NULL, deleted INTEGER NOT NULL DEFAULT 0",
                quote(&table.name)
            );
            for i in 0..table.columns.len() {
                ddl.push_str(", ");
                ddl.push_str(&column_ddl(table, i));
            }
            // Clustered by id: a row write touches one b-tree, not a table plus its key index.
            ddl.push_str(") WITHOUT ROWID");
            tx.execute_batch(&ddl)?;
        }
        for (i, c) in table.columns.iter().enumerate() {
            match existing.iter().find(|e| e.name.eq_ignore_ascii_case(&c.name)) {
                Some(e) if !e.sql_type.eq_ignore_ascii_case(c.column_type.sql_type()) => {
                    return Err(StoreError::Schema(SchemaError::TypeChanged {
                        table: table.name.clone(),
                        column: c.name.clone(),
                        existing: e.sql_type.clone(),
                        declared: c.column_type.sql_type().into(),
                    }));
                }
                Some(e) if e.default != sql_literal(&table.defaults[i]) => {
                    let shown = |d: Option<String>| d.unwrap_or_else(|| "none".into());
                    return Err(StoreError::Schema(SchemaError::DefaultChanged {
                        table: table.name.clone(),
                        column: c.name.clone(),
                        existing: shown(e.default.clone()),
                        declared: shown(sql_literal(&table.defaults[i])),
                    }));
                }
                Some(_) => {}
                None if existing.is_empty() => {}
                None => tx.execute_batch(&format!(
                    "ALTER TABLE {} ADD COLUMN {}",
                    quote(&table.name),
                    column_ddl(table, i)
                ))?,
            }
        }
        migrate_indexes(&tx, table)?;
        // Columns the last schema declared and this one does not.
        let prior_table = prior.and_then(|p| p.tables.iter().find(|t| t.name == table.name));
        for e in &existing {
            let dropped = prior_table.and_then(|t| t.columns.iter().find(|c| c.name == e.name));
            if let Some(c) = dropped.filter(|_| !table.columns.iter().any(|c| c.name.eq_ignore_ascii_case(&e.name))) {
                let keep_defaults = table.merge == Merge::Column;
                kept::undeclare(&tx, &table.name, &e.name, c.column_type, e.default.as_deref(), keep_defaults)?;
            }
        }
        kept::declare(&tx, table)?;
    }
    tx.commit()?;
    Ok(())
}

/// Creates `table`'s declared indexes that are missing and drops the engine's indexes of it
/// that are no longer declared ([`index_name`]).
fn migrate_indexes(tx: &Connection, table: &Table) -> Result<(), StoreError> {
    let declared: Vec<String> = table.indexes.iter().map(|cols| index_name(&table.name, cols)).collect();
    let prefix = index_name(&table.name, &[]);
    let mut stmt = tx.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?1 AND substr(name, 1, length(?2)) = ?2",
    )?;
    let existing: Vec<String> =
        stmt.query_map(rusqlite::params![table.name, prefix], |r| r.get(0))?.collect::<Result<_, _>>()?;
    for name in existing.iter().filter(|n| !declared.contains(n)) {
        tx.execute_batch(&format!("DROP INDEX {}", quote(name)))?;
    }
    for (cols, name) in table.indexes.iter().zip(&declared) {
        if !existing.contains(name) {
            let cols: Vec<String> = cols.iter().map(|c| quote(c)).collect();
            tx.execute_batch(&format!("CREATE INDEX {} ON {} ({})", quote(name), quote(&table.name), cols.join(", ")))?;
        }
    }
    Ok(())
}

/// Reads a `_sync_meta` value.
pub fn meta_get(conn: &Connection, key: &str) -> Result<Option<String>, StoreError> {
    Ok(conn.prepare_cached("SELECT value FROM _sync_meta WHERE key = ?1")?.query_row([key], |r| r.get(0)).optional()?)
}

/// Reads a `_sync_meta` value of a database that may not have the engine's tables yet.
pub fn meta_get_if_table(conn: &Connection, key: &str) -> Result<Option<String>, StoreError> {
    let exists =
        conn.prepare_cached("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sync_meta'")?.exists([])?;
    if !exists {
        return Ok(None);
    }
    meta_get(conn, key)
}

/// Writes a `_sync_meta` value.
pub fn meta_set(conn: &Connection, key: &str, value: &str) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO _sync_meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = ?2",
    )?
    .execute([key, value])?;
    Ok(())
}

/// Deletes a `_sync_meta` value.
pub fn meta_delete(conn: &Connection, key: &str) -> Result<(), StoreError> {
    conn.prepare_cached("DELETE FROM _sync_meta WHERE key = ?1")?.execute([key])?;
    Ok(())
}

/// The recorded result of a request id in `_sync_requests` (see `Engine::once`).
pub fn meta_request(conn: &Connection, id: &str) -> Result<Option<String>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT result FROM _sync_requests WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?)
}

/// The recorded result of a transaction's request id, in `_sync_requests` or on an outbox
/// intent written at `since_ms` or later (see `Engine::write_rows`). The outbox has no index on
/// `request_id` — one would be a b-tree more to write per commit — so its part reads the
/// intents from `since_ms` on (event ids are HLCs, whose text starts with their time, never
/// before the write's): only a call that may have been sent before asks.
pub fn transaction_request(conn: &Connection, id: &str, since_ms: u64) -> Result<Option<String>, StoreError> {
    if let Some(result) = meta_request(conn, id)? {
        return Ok(Some(result));
    }
    Ok(conn
        .prepare_cached("SELECT request_result FROM _sync_outbox WHERE event_id >= ?2 AND request_id = ?1")?
        .query_row(rusqlite::params![id, format!("{since_ms:015}")], |r| r.get(0))
        .optional()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_savepoint_keeps_every_step_or_none_when_one_fails() {
        let conn = Connection::open_in_memory().unwrap();
        let tables = || conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get::<_, i64>(0)).unwrap();
        let failed = in_savepoint(&conn, "step", || {
            conn.execute_batch("CREATE TABLE a (x)")?;
            conn.execute_batch("ALTER TABLE missing ADD COLUMN y")
        });
        assert!(failed.is_err());
        assert_eq!(tables(), 0, "the first step was undone");
        assert!(conn.is_autocommit(), "and the savepoint released");
        in_savepoint(&conn, "step", || conn.execute_batch("CREATE TABLE a (x); CREATE TABLE b (x)")).unwrap();
        assert_eq!(tables(), 2);
        assert!(conn.is_autocommit());
    }
}
