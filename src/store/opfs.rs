//! Durable browser storage: SQLite's OPFS SyncAccessHandle-pool VFS ("sahpool").
//!
//! Works only inside a **dedicated Worker** in a secure context. A pool holds sync access
//! handles on every file of its directory, exclusively: while one worker holds a pool, no other
//! worker can open those files. So each database gets **its own pool**, in its own OPFS
//! directory (`simplysync/<dbName>/`), registered as its own VFS: two tabs with different
//! databases work at once, and one tab (the JS facade elects it) runs each database.

use std::cell::RefCell;

use rusqlite::{Connection, OpenFlags};
use sqlite_wasm_rs::vfs::VfsFilesManager as _;
use sqlite_wasm_vfs::sahpool::{install, OpfsSAHPoolCfgBuilder, OpfsSAHPoolUtil};

use super::StoreError;

/// The OPFS directory under which every database's pool lives.
pub const ROOT_DIRECTORY: &str = "simplysync";
/// Free slots kept beyond the files in use: a database, its journal, and one spare.
const SPARE_SLOTS: usize = 3;

thread_local! {
    /// The pools installed in this worker, by database name (a list: a worker opens one or two).
    static POOLS: RefCell<Vec<(String, OpfsSAHPoolUtil)>> = const { RefCell::new(Vec::new()) };
}

/// The pool installed for `db_name`, if any.
fn installed_pool(db_name: &str) -> Option<OpfsSAHPoolUtil> {
    POOLS.with(|p| p.borrow().iter().find(|(name, _)| name == db_name).map(|(_, pool)| pool.clone()))
}

fn opfs_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Opfs(e.to_string())
}

/// The OPFS directory of `db_name`'s pool.
pub fn pool_directory(db_name: &str) -> String {
    format!("{ROOT_DIRECTORY}/{db_name}")
}

fn vfs_name(db_name: &str) -> String {
    format!("simplysync-opfs:{db_name}")
}

/// The VFS databases are opened with: the pool's, behind the write-coalescing shim
/// ([`super::coalesce`]; a commit's WAL frames go down as one OPFS write).
fn coalesced_vfs_name(db_name: &str) -> String {
    format!("simplysync-opfs-coalesced:{db_name}")
}

/// Installs (or reuses) the pool of `db_name`.
pub async fn database_pool(db_name: &str) -> Result<OpfsSAHPoolUtil, StoreError> {
    if let Some(pool) = installed_pool(db_name) {
        if pool.is_paused() {
            pool.resume().await.map_err(opfs_err)?;
        }
        return Ok(pool);
    }
    let cfg = OpfsSAHPoolCfgBuilder::new().vfs_name(&vfs_name(db_name)).directory(&pool_directory(db_name)).build();
    let pool = install::<sqlite_wasm_rs::WasmOsCallback>(&cfg, false).await.map_err(opfs_err)?;
    POOLS.with(|p| {
        let mut pools = p.borrow_mut();
        match pools.iter_mut().find(|(name, _)| name == db_name) {
            Some(slot) => slot.1 = pool.clone(),
            None => pools.push((db_name.to_owned(), pool.clone())),
        }
    });
    Ok(pool)
}

/// Opens (creating if needed) database `db_name` in its own OPFS pool.
pub async fn open_database(db_name: &str) -> Result<Connection, StoreError> {
    open_database_with_page_size(db_name, super::PAGE_SIZE).await
}

/// Like [`open_database`], with a page size for a database that does not exist yet.
pub async fn open_database_with_page_size(db_name: &str, page_size: u32) -> Result<Connection, StoreError> {
    open_with(db_name, page_size, true).await
}

/// [`open_database`] with a WAL left behind recovered one read per frame, as before chunked
/// recovery: the benchmark's comparison.
#[cfg(feature = "bench")]
pub async fn open_database_frame_by_frame(db_name: &str) -> Result<Connection, StoreError> {
    open_with(db_name, super::PAGE_SIZE, false).await
}

async fn open_with(db_name: &str, page_size: u32, chunked_recovery: bool) -> Result<Connection, StoreError> {
    let pool = database_pool(db_name).await?;
    let needed = pool.len().map_err(opfs_err)? + SPARE_SLOTS;
    if pool.capacity() < needed {
        pool.ensure_capacity(needed).await.map_err(opfs_err)?;
    }
    // Once per pool (a no-op after), and tried again by the next open if it ever failed.
    super::coalesce::install(&vfs_name(db_name), &coalesced_vfs_name(db_name), super::coalesce::OPFS_HOLD)?;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags_and_vfs(db_name, flags, coalesced_vfs_name(db_name).as_str())?;
    // The first read recovers the WAL a tab that died left behind (no checkpoint on close): in
    // chunks, not one OPFS read per frame; the connection is in exclusive locking mode by then.
    let first_read = || {
        super::configure_with_page_size(&conn, page_size)?;
        conn.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))?;
        Ok::<_, StoreError>(())
    };
    if chunked_recovery {
        super::coalesce::with_chunked_wal_reads(first_read)?;
    } else {
        first_read()?;
    }
    Ok(conn)
}

/// Deletes every file of `db_name`'s pool (the database and its WAL) and releases the pool's
/// handles. Every connection to the database must be closed first.
pub fn wipe_database(db_name: &str) -> Result<(), StoreError> {
    let Some(pool) = installed_pool(db_name) else { return Ok(()) };
    pool.clear().map_err(opfs_err)?;
    pool.pause().map_err(opfs_err)?;
    Ok(())
}

/// Releases the handles of `db_name`'s pool (keeping its files), so another worker can open the
/// database. Every connection to it must be closed first.
pub fn release_database(db_name: &str) -> Result<(), StoreError> {
    let Some(pool) = installed_pool(db_name) else { return Ok(()) };
    pool.pause().map_err(opfs_err)
}
