//! Durable browser storage: SQLite's OPFS SyncAccessHandle-pool VFS ("sahpool").
//!
//! Works only inside a **dedicated Worker** in a secure context, and the pool is exclusive per
//! origin and directory: while one worker holds it, another worker cannot open the same files.
//! The engine therefore runs in one worker per origin (the JS facade elects it).

use rusqlite::{Connection, OpenFlags};
use sqlite_wasm_vfs::sahpool::{install, OpfsSAHPoolCfgBuilder, OpfsSAHPoolUtil};

use super::{configure, StoreError};

/// The VFS name the engine registers.
pub const VFS_NAME: &str = "simplysync-opfs";
/// Slots to keep available: each database and its journal take one.
const MIN_CAPACITY: usize = 8;

/// Installs (or reuses) the OPFS pool rooted at `directory`.
pub async fn install_opfs(directory: &str) -> Result<OpfsSAHPoolUtil, StoreError> {
    let cfg = OpfsSAHPoolCfgBuilder::new().vfs_name(VFS_NAME).directory(directory).build();
    let pool =
        install::<sqlite_wasm_rs::WasmOsCallback>(&cfg, false).await.map_err(|e| StoreError::Opfs(e.to_string()))?;
    pool.ensure_capacity(MIN_CAPACITY).await.map_err(|e| StoreError::Opfs(e.to_string()))?;
    Ok(pool)
}

/// Opens (creating if needed) database `name` on the installed OPFS pool.
pub fn open_opfs(name: &str) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags_and_vfs(name, flags, VFS_NAME)?;
    configure(&conn)?;
    Ok(conn)
}
