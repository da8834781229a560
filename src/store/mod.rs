//! SQLite access through rusqlite: bundled SQLite natively, sqlite-wasm-rs in the browser with
//! the OPFS SyncAccessHandle-pool VFS (dedicated workers only; see [`opfs`]).

use rusqlite::Connection;

pub mod clocks;
pub mod coalesce;
// Used by the IndexedDB VFS (browser only); its tests run natively too.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
mod dirty_pages;
#[cfg(target_arch = "wasm32")]
pub mod idb;
pub mod inbox;
pub mod kept;
#[cfg(target_arch = "wasm32")]
pub mod opfs;
pub mod outbox;
pub mod purged;
pub mod rows;
pub mod schema;
pub mod set_aside;
pub mod system;
pub mod values;
pub mod write_tx;

/// Why the local database could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite reported an error.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The browser's OPFS storage could not be set up.
    #[error("OPFS storage unavailable: {0}")]
    Opfs(String),
    /// The declared schema conflicts with the database.
    #[error(transparent)]
    Schema(#[from] schema::SchemaError),
    /// A value the engine itself wrote reads back malformed.
    #[error("corrupt local data: {0}")]
    Corrupt(String),
}

/// Pragmas applied to every database file the engine opens: a write-ahead log (one sync per
/// commit instead of a rollback journal's three or four) with `synchronous = FULL`, so each
/// committed transaction stays durable on power loss. In the browser the connection is the
/// OPFS pool's only user, so it takes the lock exclusively: SQLite then keeps the WAL index in
/// memory, which the sahpool VFS (no shared memory) requires. Measured on OPFS: a single-row
/// commit 10.9 ms with the default DELETE journal, 4.2 ms with this (BENCHMARKS.md).
pub fn configure(conn: &Connection) -> Result<(), StoreError> {
    configure_with_page_size(conn, PAGE_SIZE)
}

/// The page size of new databases (an existing database keeps its own): SQLite's default.
/// On OPFS a sync-access-handle call has a fixed cost that dwarfs the bytes it moves, so
/// 64 KiB pages once won there (a 10,000-row transaction: 40k rows/s with 4 KiB pages, 317k
/// with 64 KiB). Since the write-coalescing shim ([`coalesce`]) sends a commit's frames down
/// as one call, the bytes decide instead, and 4 KiB pages write a sixteenth of them per page.
/// Together with `WAL_CHECKPOINT_BYTES` and no clock write per mutation: a single-row engine
/// write's p50 / p99 1.0 / 3.2 ms instead of 2.4 / 20.4, a restore 24k events/s instead of
/// 20k, IndexedDB single-row commits 3–4× faster (BENCHMARKS.md, issue 17 round three).
pub const PAGE_SIZE: u32 = 4096;

/// The WAL's size, in bytes, at which a commit checkpoints it into the database file. SQLite
/// counts the threshold in pages (default 1000); in bytes it keeps a restore's checkpoints as
/// rare with 4 KiB pages as they were with 64 KiB ones (a checkpoint on OPFS is a run of
/// scattered writes that the shim cannot merge). Browser only: natively SQLite's default stays.
#[cfg(target_arch = "wasm32")]
const WAL_CHECKPOINT_BYTES: u32 = 64 << 20;

/// The connection's lookaside: slots of SQLite's own for its small allocations, taken and
/// given back without the allocator. Each text bound to a statement is a copy, and a run of
/// rows binds many at once (a run of 32 rows and one of 64 intents, ~290 strings): past the
/// default's 93 small and 30 large slots each copy was a `malloc` and a `free` (natively ~40%
/// of a bind). 1200-byte slots, 200 of them: 151 large and 459 small ones, 240 KB a connection
/// (the default's 48 KB, +192 KB), allocated when it opens.
const LOOKASIDE: (i32, i32) = (1200, 200);

/// [`LOOKASIDE`] for `conn`, before it runs a statement (SQLite refuses with `SQLITE_BUSY`
/// while any slot is taken, and keeps the default's). The lookaside only makes allocations
/// cheaper: without it (its memory not given) SQLite allocates each one itself.
#[allow(unsafe_code)]
pub(crate) fn size_lookaside(conn: &Connection) {
    // SAFETY: `conn`'s handle is open for the call; SQLite allocates the slots itself (a null
    // buffer, then two C ints, as `sqlite3_db_config` reads them for this option).
    let rc = unsafe {
        rusqlite::ffi::sqlite3_db_config(
            conn.handle(),
            rusqlite::ffi::SQLITE_DBCONFIG_LOOKASIDE,
            std::ptr::null_mut::<std::ffi::c_void>(),
            LOOKASIDE.0,
            LOOKASIDE.1,
        )
    };
    debug_assert_eq!(rc, rusqlite::ffi::SQLITE_OK, "the lookaside is sized before any statement runs");
}

/// [`configure`] with a page size for a database not created yet.
pub fn configure_with_page_size(conn: &Connection, page_size: u32) -> Result<(), StoreError> {
    size_lookaside(conn);
    conn.execute_batch(&format!("PRAGMA page_size = {page_size};"))?;
    #[cfg(target_arch = "wasm32")]
    {
        conn.execute_batch("PRAGMA locking_mode = EXCLUSIVE;")?;
        // The database's own page size: an existing file keeps the one it was created with.
        let actual: u32 = conn.pragma_query_value(None, "page_size", |r| r.get(0))?;
        // As text: rusqlite's `pragma_update` would bring in the formatting of doubles.
        conn.execute_batch(&format!("PRAGMA wal_autocheckpoint = {};", WAL_CHECKPOINT_BYTES / actual.max(512)))?;
    }
    // A 32 MiB page cache: large transactions (a 10,000-row batch, a 1000-event pulled page)
    // otherwise spill dirty pages mid-transaction, doubling the I/O.
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY;
         PRAGMA cache_size = -32768;",
    )?;
    Ok(())
}

/// Opens a private in-memory database (tests, ephemeral engines).
pub fn open_memory() -> Result<Connection, StoreError> {
    let conn = Connection::open_in_memory()?;
    configure(&conn)?;
    Ok(conn)
}

/// Opens (creating if needed) a database file natively, or on the installed default VFS in
/// the browser.
pub fn open_path(path: &str) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)?;
    configure(&conn)?;
    Ok(conn)
}

/// Whether `e` is the refusal of a key already in its table (an `INSERT OR FAIL` of many rows
/// stopped there, keeping — and counting in `changes()` — the rows before it).
pub(crate) fn is_taken_id(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY)
}

#[cfg(test)]
#[allow(unsafe_code)]
mod lookaside {
    use rusqlite::types::Value;

    use super::rows::{RowData, RowWriter, WriteMode};
    use super::schema::{ColumnDef, ColumnType, Schema, SchemaDef, TableDef};

    /// Allocations the lookaside could not take for want of a free slot, since the last call.
    fn misses_for_a_full_lookaside(conn: &rusqlite::Connection) -> i32 {
        let (mut current, mut highest) = (0, 0);
        // SAFETY: `conn` is open; SQLite writes the two counters it is given.
        let rc = unsafe {
            rusqlite::ffi::sqlite3_db_status(
                conn.handle(),
                rusqlite::ffi::SQLITE_DBSTATUS_LOOKASIDE_MISS_FULL,
                &mut current,
                &mut highest,
                1,
            )
        };
        assert_eq!(rc, rusqlite::ffi::SQLITE_OK);
        highest
    }

    #[test]
    fn a_run_of_rows_and_one_of_intents_bind_their_texts_without_the_allocator() {
        let mut conn = super::open_memory().unwrap();
        let columns = vec![ColumnDef::new("title", ColumnType::Text)];
        let schema = Schema::new(SchemaDef { schema_version: 1, tables: vec![TableDef::new("t", columns)] }).unwrap();
        super::system::create_system_tables(&conn).unwrap();
        super::system::create_system_tables(&conn).unwrap();
        super::system::migrate_app_tables(&mut conn, &schema, None).unwrap();
        let t = schema.table("t").unwrap();
        let hlc = |i: u64| format!("{:015}-000000-devicedevicedevice00", 1_764_504_000_000 + i);
        let rows: Vec<RowData> = (0..64)
            .map(|i| RowData {
                id: format!("0b8e7f9c-2d4a-4c1e-9f3b-{i:012}"),
                updated_at: hlc(i),
                deleted: false,
                values: vec![Value::Text(format!("todo number {i} with a realistic title"))],
            })
            .collect();
        let tx = conn.transaction().unwrap();
        let mut writer = RowWriter::new(&tx);
        let mut intents = super::outbox::Enqueuer::new(&tx);
        misses_for_a_full_lookaside(&tx);
        let refs: Vec<&RowData> = rows.iter().collect();
        writer.write_all(t, &refs, WriteMode::Replace, &mut Vec::new()).unwrap();
        let listed: Vec<super::outbox::Intent<'_>> =
            rows.iter().map(|r| (r.updated_at.as_str(), "t", r.id.as_str())).collect();
        assert_eq!(intents.enqueue_all(&listed, 1).unwrap(), 64);
        assert_eq!(misses_for_a_full_lookaside(&tx), 0);
    }
}
