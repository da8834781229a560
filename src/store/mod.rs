//! SQLite access through rusqlite: bundled SQLite natively, sqlite-wasm-rs in the browser with
//! the OPFS SyncAccessHandle-pool VFS (dedicated workers only; see [`opfs`]).

use rusqlite::Connection;

pub mod inbox;
#[cfg(target_arch = "wasm32")]
pub mod opfs;
pub mod outbox;
pub mod rows;
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
    Schema(#[from] crate::engine::schema::SchemaError),
}

/// Pragmas applied to every connection the engine opens. `synchronous=FULL` keeps each
/// committed transaction durable on power loss.
pub fn configure(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL; PRAGMA temp_store = MEMORY;")?;
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
