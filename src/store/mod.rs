//! SQLite access through rusqlite: bundled SQLite natively, sqlite-wasm-rs in the browser with
//! the OPFS SyncAccessHandle-pool VFS (dedicated workers only; see [`opfs`]).

use rusqlite::Connection;

pub mod coalesce;
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

/// The page size of new databases (an existing database keeps its own). On OPFS every
/// sync-access-handle call has a fixed cost that dwarfs the bytes it moves, so large pages
/// win: a 10,000-row transaction ran at 40k rows/s with 4 KiB pages and 317k rows/s with
/// 64 KiB pages, while a single-row commit cost the same (BENCHMARKS.md). Natively SQLite's
/// default is kept.
#[cfg(target_arch = "wasm32")]
pub const PAGE_SIZE: u32 = 65536;
/// The page size of new databases (an existing database keeps its own).
#[cfg(not(target_arch = "wasm32"))]
pub const PAGE_SIZE: u32 = 4096;

/// [`configure`] with a page size for a database not created yet.
pub fn configure_with_page_size(conn: &Connection, page_size: u32) -> Result<(), StoreError> {
    conn.execute_batch(&format!("PRAGMA page_size = {page_size};"))?;
    #[cfg(target_arch = "wasm32")]
    conn.execute_batch("PRAGMA locking_mode = EXCLUSIVE;")?;
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
