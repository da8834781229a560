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
//! on the database file (this thread's checkpoint), only on files opened as WALs, only inside
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
