//! While SQLite checkpoints a WAL, the checkpoint's reads of the WAL come from a few large
//! reads instead of one call per frame.
//!
//! A checkpoint copies the newest frame of each page into the database in page order, one read
//! per frame: ~12,000 sync-access-handle calls for the 46 MB WAL a 100,000-event restore leaves
//! on OPFS, 2.3 s of closing the engine afterwards (BENCHMARKS.md, issue 17 round five). Page
//! order is not WAL order, but it walks a handful of forward runs through the WAL: an LRU of 16
//! chunks of 256 KiB turned 4,461 frame reads into 111 chunk reads (3,935 into 132 with random
//! row ids), each WAL byte read about once.
//!
//! Scope: only between SQLite's `SQLITE_FCNTL_CKPT_START` and `SQLITE_FCNTL_CKPT_DONE` hints
//! on the database file (this thread's checkpoint) — or inside [`with_chunked_wal_reads`], the
//! first read of a browser database, which recovers a WAL left behind by a tab that died (the
//! same one-read-per-frame pattern) — only on files opened as WALs, only inside
//! the WAL's size taken at the checkpoint's first read. The frames a checkpoint copies do not
//! change while it runs — no connection restarts a WAL a checkpoint is reading — and chunks are
//! never used past their checkpoint: each carries the checkpoint's number, and a write or a
//! truncate of the file drops them (so does its close).

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::ffi;

/// Bytes per chunk.
pub(super) const CHUNK: usize = 256 << 10;
/// Chunks kept per WAL (4 MiB).
pub(super) const CHUNKS: usize = 16;

/// The last checkpoint number given out, process-wide: a connection (and its WAL handle's
/// chunks) may move between threads, so a number must never repeat on another thread either.
static LAST: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The number of the checkpoint running on this thread, if one runs.
    static RUNNING: Cell<Option<u64>> = const { Cell::new(None) };
    static COUNTS: Cell<ReadCounts> = const { Cell::new(ReadCounts { received: 0, sent: 0 }) };
}

/// How many reads the shims were given and how many they sent down (tests, benchmarks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadCounts {
    /// `xRead` calls from SQLite.
    pub received: u64,
    /// Reads sent to the underlying VFS.
    pub sent: u64,
}

/// The read counts so far (of every shim on this thread).
pub fn read_counts() -> ReadCounts {
    COUNTS.with(Cell::get)
}

pub(super) fn count(f: impl FnOnce(&mut ReadCounts)) {
    COUNTS.with(|c| {
        let mut v = c.get();
        f(&mut v);
        c.set(v);
    });
}

/// A checkpoint begins (`SQLITE_FCNTL_CKPT_START`).
pub(super) fn started() {
    let n = LAST.fetch_add(1, Ordering::Relaxed) + 1;
    RUNNING.with(|r| r.set(Some(n)));
}

/// A checkpoint ended (`SQLITE_FCNTL_CKPT_DONE`; SQLite also sends it when its WAL sync failed
/// before the start was announced).
pub(super) fn done() {
    RUNNING.with(|r| r.set(None));
}

/// Runs `f` with this thread's WAL reads served from chunks, as during a checkpoint: for the
/// first read of a database in **exclusive locking mode**, which recovers the WAL a connection
/// closed without a checkpoint left (a tab that died) by reading every frame, one call each
/// otherwise. Only where no other connection can write the WAL meanwhile — in the browser OPFS
/// keeps other workers out of a database's files, one connection per database in exclusive
/// locking mode, and `f` runs synchronously — and this connection's own writes drop the chunks.
// Natively only its test calls it: a native database may have other connections.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub fn with_chunked_wal_reads<T>(f: impl FnOnce() -> T) -> T {
    struct Scope;
    impl Drop for Scope {
        fn drop(&mut self) {
            done(); // also if `f` panics: no later read may use this scope's chunks
        }
    }
    started();
    let _scope = Scope;
    f()
}

/// The WAL chunks one file read during the current checkpoint, most recently used first.
#[derive(Default)]
pub(super) struct Chunks {
    checkpoint: u64,
    size: i64,
    chunks: Vec<(i64, Vec<u8>)>,
}

impl Chunks {
    /// Drops every chunk (the file was written, truncated or closed).
    pub(super) fn clear(&mut self) {
        if self.checkpoint != 0 {
            self.chunks = Vec::new();
            self.checkpoint = 0;
        }
    }

    /// Serves a read of the WAL `real` during a checkpoint from chunks, reading the chunks it
    /// lacks. `None`: not a checkpoint's read, or beyond the WAL's size (read it as usual; a
    /// short read keeps SQLite's own semantics), or a chunk could not be read.
    ///
    /// # Safety
    /// `real` is an open file whose methods are `m`; `buf` holds `amt` bytes.
    pub(super) unsafe fn read(
        &mut self,
        real: *mut ffi::sqlite3_file,
        m: &ffi::sqlite3_io_methods,
        buf: *mut c_void,
        amt: c_int,
        offset: i64,
    ) -> Option<c_int> {
        let checkpoint = RUNNING.with(Cell::get)?;
        let (read, size_of) = (m.xRead?, m.xFileSize?);
        let len = usize::try_from(amt).ok()?;
        if self.checkpoint != checkpoint {
            self.clear();
            let mut size = 0i64;
            if size_of(real, &mut size) != ffi::SQLITE_OK {
                return None;
            }
            (self.checkpoint, self.size) = (checkpoint, size);
        }
        let end = offset.checked_add(len as i64)?;
        if offset < 0 || end > self.size {
            return None;
        }
        let out = std::slice::from_raw_parts_mut(buf.cast::<u8>(), len);
        let mut at = offset;
        while at < end {
            let index = at / CHUNK as i64;
            let start = index * CHUNK as i64;
            let pos = match self.chunks.iter().position(|(i, _)| *i == index) {
                Some(pos) => pos,
                None => {
                    let want = (self.size - start).min(CHUNK as i64) as usize;
                    let mut data = if self.chunks.len() >= CHUNKS { self.chunks.pop().map(|(_, d)| d) } else { None }
                        .unwrap_or_default();
                    // Out of memory is a normal read instead, never an abort.
                    if data.try_reserve_exact(want.saturating_sub(data.len())).is_err() {
                        self.clear();
                        return None;
                    }
                    data.resize(want, 0);
                    count(|c| c.sent += 1);
                    if read(real, data.as_mut_ptr().cast(), want as c_int, start) != ffi::SQLITE_OK {
                        self.clear();
                        return None;
                    }
                    self.chunks.push((index, data));
                    self.chunks.len() - 1
                }
            };
            let hit = self.chunks.remove(pos);
            let from = (at - start) as usize;
            let n = ((end - at) as usize).min(hit.1.len().saturating_sub(from));
            if n == 0 {
                // Cannot happen (a chunk spans the WAL's size), but never loop without progress.
                self.clear();
                return None;
            }
            let copied = (at - offset) as usize;
            out[copied..copied + n].copy_from_slice(&hit.1[from..from + n]);
            self.chunks.insert(0, hit);
            at += n as i64;
        }
        Some(ffi::SQLITE_OK)
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::config::DbConfig;
    use rusqlite::{Connection, OpenFlags};

    use super::super::tests::{scatter, temp_db, TempDb};
    use super::*;

    const VFS: &str = "coalesce-test-recovery";

    /// Opens `path` through the shim in exclusive locking mode; its first read (recovering a
    /// WAL left behind, if any) runs inside `first_read`.
    fn open(path: &std::path::Path, first_read: impl FnOnce(&mut dyn FnMut())) -> (Connection, ReadCounts) {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
        let conn = Connection::open_with_flags_and_vfs(path, flags, VFS).unwrap();
        let before = read_counts();
        first_read(&mut || {
            conn.execute_batch(
                "PRAGMA locking_mode = EXCLUSIVE; PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;",
            )
            .unwrap();
            conn.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(())).unwrap();
        });
        let after = read_counts();
        (conn, ReadCounts { received: after.received - before.received, sent: after.sent - before.sent })
    }

    /// A database whose WAL holds 30 commits of scattered rows (15 of version v1, then 15 of
    /// v2 over the same ids), closed the way a tab that died leaves it (no checkpoint); a copy
    /// of its two files as well.
    fn left_behind() -> (TempDb, std::path::PathBuf) {
        super::super::install("unix", VFS, 0x1ffff, |e| e).unwrap();
        let path = temp_db("recovery");
        let copy = path.with_file_name("copy.sqlite");
        {
            let (conn, _) = open(&path, |read| read());
            conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)").unwrap();
            scatter(&conn, "v1", 15);
            scatter(&conn, "v2", 15);
            conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true).unwrap();
        }
        let wal = |p: &std::path::Path| p.with_file_name(format!("{}-wal", p.file_name().unwrap().to_str().unwrap()));
        assert!(std::fs::metadata(wal(&path)).unwrap().len() > 1 << 20, "the WAL was left behind");
        std::fs::copy(&path, &copy).unwrap();
        std::fs::copy(wal(&path), wal(&copy)).unwrap();
        (path, copy)
    }

    #[test]
    fn reopening_after_a_tab_died_recovers_its_wal_in_chunks_and_every_commit_is_there() {
        let (path, copy) = left_behind();
        let (plain, frame_by_frame) = open(&path, |read| read());
        let (conn, chunked) = open(&copy, |read| with_chunked_wal_reads(read));
        assert!(frame_by_frame.sent >= 500, "recovery read the WAL in {} calls", frame_by_frame.sent);
        assert_eq!(chunked.received, frame_by_frame.received, "SQLite asked for the same reads");
        assert!(chunked.sent * 10 <= chunked.received, "{} reads went down as {}", chunked.received, chunked.sent);
        let state = |c: &Connection| {
            let rows: i64 = c.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
            let last: i64 = c.query_row("SELECT count(*) FROM t WHERE body LIKE 'v2 %'", [], |r| r.get(0)).unwrap();
            let ok: String = c.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
            (rows, last, ok)
        };
        assert_eq!(state(&conn), state(&plain), "the same rows, last versions included");
        assert_eq!(state(&conn).1, state(&conn).0, "every row's last version");
        assert_eq!(state(&conn).2, "ok");
        // A commit inside the scope after the recovery drops the chunks: its rows read back.
        with_chunked_wal_reads(|| {
            conn.execute("UPDATE t SET body = 'after ' || id", []).unwrap();
            conn.execute_batch("PRAGMA shrink_memory").unwrap(); // the reads go to the files
            let after: i64 =
                conn.query_row("SELECT count(*) FROM t WHERE body LIKE 'after %'", [], |r| r.get(0)).unwrap();
            assert_eq!(after, state(&plain).0);
            assert_eq!(conn.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0)).unwrap(), "ok");
        });
    }
}
