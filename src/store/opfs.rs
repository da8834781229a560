//! Durable browser storage: SQLite's OPFS SyncAccessHandle-pool VFS ("sahpool").
//!
//! Works only inside a **dedicated Worker** in a secure context, and the pool is exclusive per
//! origin and directory: while one worker holds it, another worker cannot open the same files.
//! The engine therefore runs in one worker per origin (the JS facade elects it).

use std::cell::RefCell;

use rusqlite::{Connection, OpenFlags};
use sqlite_wasm_rs::vfs::VfsFilesManager as _;
use sqlite_wasm_vfs::sahpool::{install, OpfsSAHPoolCfgBuilder, OpfsSAHPoolUtil};

use super::StoreError;

/// The VFS name the engine registers.
pub const VFS_NAME: &str = "simplysync-opfs";
/// Free slots kept beyond the files in use: a database, its journal, and one spare.
const SPARE_SLOTS: usize = 3;

thread_local! {
    static POOL: RefCell<Option<OpfsSAHPoolUtil>> = const { RefCell::new(None) };
}

fn opfs_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Opfs(e.to_string())
}

/// Installs (or reuses) the OPFS pool rooted at `directory`.
pub async fn install_opfs(directory: &str) -> Result<OpfsSAHPoolUtil, StoreError> {
    let cfg = OpfsSAHPoolCfgBuilder::new().vfs_name(VFS_NAME).directory(directory).build();
    let pool = install::<sqlite_wasm_rs::WasmOsCallback>(&cfg, false).await.map_err(opfs_err)?;
    POOL.with(|p| *p.borrow_mut() = Some(pool.clone()));
    Ok(pool)
}

/// Opens (creating if needed) database `name` on the installed OPFS pool, growing the pool so
/// the database and its journal have slots.
pub async fn open_opfs(name: &str) -> Result<Connection, StoreError> {
    open_opfs_with_page_size(name, super::PAGE_SIZE).await
}

/// Like [`open_opfs`], with a page size for a database that does not exist yet.
pub async fn open_opfs_with_page_size(name: &str, page_size: u32) -> Result<Connection, StoreError> {
    let pool = POOL.with(|p| p.borrow().clone()).ok_or_else(|| opfs_err("the OPFS pool is not installed"))?;
    let needed = pool.len().map_err(opfs_err)? + SPARE_SLOTS;
    if pool.capacity() < needed {
        pool.ensure_capacity(needed).await.map_err(opfs_err)?;
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags_and_vfs(name, flags, VFS_NAME)?;
    super::configure_with_page_size(&conn, page_size)?;
    Ok(conn)
}
