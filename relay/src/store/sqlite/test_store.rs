//! A store in a directory of its own, for this module's unit tests.

use super::{Quotas, SqliteStore, StoreOptions};

/// The test's directory, removed when dropped (also when the test fails). Bind it before
/// the store (`let (_dir, s)`) so the store is dropped first.
pub(super) struct Dir(std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Opens a fresh store under `simplysync-relay-<tag>-<pid>` in the temporary directory.
pub(super) fn open(tag: &str, quotas: Quotas) -> (Dir, SqliteStore) {
    let dir = Dir(std::env::temp_dir().join(format!("simplysync-relay-{tag}-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    let s =
        SqliteStore::open(&dir.0.join("relay.sqlite"), StoreOptions::new(quotas), "2026-12-05T00:00:00.000Z").unwrap();
    (dir, s)
}
