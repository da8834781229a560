//! SQLite access through rusqlite: bundled SQLite natively, sqlite-wasm-rs in the browser with
//! the OPFS SyncAccessHandle-pool VFS (dedicated workers only; see [`opfs`]).

use rusqlite::Connection;

pub mod coalesce;
// Used by the IndexedDB VFS (browser only); its tests run natively too.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
mod dirty_pages;
#[cfg(target_arch = "wasm32")]
pub mod idb;
pub mod inbox;
#[cfg(target_arch = "wasm32")]
pub mod opfs;
pub mod outbox;
pub mod purged;
pub mod rows;
pub mod schema;
pub mod set_aside;
pub mod system;

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

/// [`configure`] with a page size for a database not created yet.
pub fn configure_with_page_size(conn: &Connection, page_size: u32) -> Result<(), StoreError> {
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
