//! The write-coalescing VFS shim over the browser VFSes: its own crate (`coalesce/`), shared
//! with the relay, which runs it over SQLite's unix VFS.

#[cfg(target_arch = "wasm32")]
pub(crate) use simplysync_coalesce::with_chunked_wal_reads;
pub use simplysync_coalesce::{read_counts, OPFS_HOLD};

use super::StoreError;

/// Registers VFS `name`, a coalescing shim over the registered VFS `real` that holds at most
/// `cap` bytes per file (see `simplysync_coalesce::install`).
pub fn install(real: &str, name: &str, cap: usize) -> Result<(), StoreError> {
    simplysync_coalesce::install(real, name, cap, StoreError::Opfs)
}
