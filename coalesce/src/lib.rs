//! A VFS shim that sends SQLite's consecutive writes down as one write (and reads a checkpoint's
//! WAL frames in chunks).
//!
//! SQLite writes each WAL frame as two calls — its 24-byte header, then its page right after
//! it — and the frames of one commit one after another; a rollback journal record is three
//! calls (page number, page, checksum). On OPFS every sync-access-handle call has a fixed cost
//! (~0.6 ms on the project's VM against ~8 ms per MB; BENCHMARKS.md): in a 100,000-event
//! restore 1,485 of the 3,420 write calls were frame headers. The shim holds a write and
//! appends to it each write that starts where the held bytes end, as long as the total stays
//! within the shim's cap (set per underlying VFS: SQLite's unix VFS refuses a write over
//! 128 KiB − 1), so a commit's frames go down as few writes. Any other call on the file — a
//! read, a sync, a size, a truncate, a lock change, a file control, a close, a write elsewhere
//! — first sends down what is held, so the file below sees every byte in the order SQLite wrote
//! it before anything could observe or persist it: a sync still covers every write before it.
//! Held bytes live in memory until then, so the shim relies on `synchronous = FULL` (what
//! the engine and the relay set on every connection): every commit then ends with a sync, and the shim reports
//! power-safe overwrite, so SQLite writes no WAL padding after that sync — when a commit
//! returns, nothing it wrote is held (a VFS below without it would have the padding's tail held,
//! whose loss the WAL's frame checksums detect on recovery). A write that fails stays held and fails every
//! later call until it goes down.
//!
//! That sync is also what other connections to the same database rely on (the relay's
//! readers, its checkpointer): a commit's frames reach the file before SQLite publishes them in
//! the WAL index. A commit without a sync (`synchronous = NORMAL` in WAL mode) would leave its
//! last frames held while readers could already see them: never use one through the shim.
//!
//! Natively, over SQLite's unix VFS, each WAL frame's two `pwrite`s cost a system call and the
//! filesystem's per-call work: the relay's pushes went 17–25% faster through
//! the shim (BENCHMARKS.md, round twenty-four).
//!
//! While SQLite checkpoints a WAL it reads the WAL one frame per call; the shim serves those
//! reads from a few large ones (`checkpoint_reads.rs`).
//!
//! Everything else is the underlying VFS's own: its methods, its app data, its files.
//!
//! A VFS is SQLite's C interface, so this module is `unsafe` code: every pointer it follows is
//! one SQLite or the underlying VFS handed it, for the lifetime SQLite's VFS contract gives.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{c_int, c_void, CString};
use std::sync::Mutex;

use rusqlite::ffi;

mod checkpoint_reads;
pub use checkpoint_reads::{read_counts, with_chunked_wal_reads, ReadCounts};

/// The cap for OPFS sync access handles (no limit of their own): a commit of up to ~15 frames
/// of 64 KiB goes down as one write.
pub const OPFS_HOLD: usize = 1 << 20;

/// The cap over SQLite's unix VFS, which writes at most 128 KiB − 1 bytes per call.
pub const UNIX_HOLD: usize = 0x1ffff;

/// A file of the shim: SQLite's handle, what is held, then the underlying VFS's own file.
#[repr(C)]
struct ShimFile {
    base: ffi::sqlite3_file,
    /// The underlying file (inside this same allocation, right after the header).
    real: *mut ffi::sqlite3_file,
    /// The held writes: their offset and bytes (a `Box`, so SQLite's memory holds a pointer).
    held: *mut Held,
}

struct Held {
    /// The most bytes held (and sent as one write).
    cap: usize,
    offset: i64,
    bytes: Vec<u8>,
    /// Whether `bytes` holds a write waiting to go down.
    pending: bool,
    /// Whether the file is a WAL (its checkpoints read it in chunks: `checkpoint_reads`).
    wal: bool,
    /// The WAL chunks read during the current checkpoint.
    chunks: checkpoint_reads::Chunks,
}

/// How many writes the shims were given and how many they sent down (tests, benchmarks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteCounts {
    /// `xWrite` calls from SQLite.
    pub received: u64,
    /// Writes sent to the underlying VFS.
    pub sent: u64,
}

/// A registered shim: SQLite's VFS struct (a copy of the underlying one's, but for `xOpen`,
/// `szOsFile` and the name), then the underlying VFS.
#[repr(C)]
struct ShimVfs {
    base: ffi::sqlite3_vfs,
    real: *mut ffi::sqlite3_vfs,
    /// The most bytes a file of this shim holds.
    cap: usize,
}

thread_local! {
    static COUNTS: RefCell<WriteCounts> = const { RefCell::new(WriteCounts { received: 0, sent: 0 }) };
}

/// Every shim registered, by address: a VFS found under a name is one of ours only if it is
/// here (then it is a `ShimVfs`).
static SHIMS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Our method table for each underlying one (underlying → ours), built once (SQLite's
/// registry is process-wide, so this is too). A list: there is one per VFS wrapped.
static METHODS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// The write counts so far (of every shim on this thread).
pub fn write_counts() -> WriteCounts {
    COUNTS.with(|c| *c.borrow())
}

const HEADER: usize = {
    // The underlying file starts on an 8-byte boundary after ours.
    let n = std::mem::size_of::<ShimFile>();
    (n + 7) & !7
};

/// The range a cap must be in: at least SQLite's smallest page, at most what a file may hold in
/// memory before its writes go down.
pub const CAP_RANGE: std::ops::RangeInclusive<usize> = 512..=(64 << 20);

/// Registers VFS `name`, a coalescing shim over the registered VFS `real` that holds at most
/// `cap` bytes per file (and never sends a merged write larger) — once per name: installing
/// the same shim again does nothing, and a name taken by another VFS, or by a shim over
/// another VFS or with another cap, is an error. An error is `error` of its message (the
/// caller's own error type, built where it is called).
pub fn install<E>(real: &str, name: &str, cap: usize, error: impl Fn(String) -> E) -> Result<(), E> {
    if !CAP_RANGE.contains(&cap) {
        return Err(error(format!("a cap of {cap} bytes: use {} to {} bytes", CAP_RANGE.start(), CAP_RANGE.end())));
    }
    let real_c = CString::new(real).map_err(|_| error(format!("VFS name {real:?} contains NUL")))?;
    let name_c = CString::new(name).map_err(|_| error(format!("VFS name {name:?} contains NUL")))?;
    // SAFETY: sqlite3_vfs_find only reads the registry; the pointer it returns stays valid
    // while the VFS is registered (pools are never unregistered while the worker lives).
    let real_vfs = unsafe { ffi::sqlite3_vfs_find(real_c.as_ptr()) };
    if real_vfs.is_null() {
        return Err(error(format!("no VFS named {real:?} to wrap")));
    }
    let mut shims = SHIMS.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: as above.
    let taken = unsafe { ffi::sqlite3_vfs_find(name_c.as_ptr()) };
    if !taken.is_null() {
        let ours = shims.contains(&(taken as usize));
        // SAFETY: a VFS in SHIMS was registered below as a leaked ShimVfs (its first field the
        // sqlite3_vfs, repr(C)) and is never unregistered.
        let same = ours && {
            let shim = unsafe { &*taken.cast::<ShimVfs>() };
            shim.real == real_vfs && shim.cap == cap
        };
        return if same {
            Ok(())
        } else {
            Err(error(format!(
                "VFS {name:?} is registered already, and not as this shim over {real:?} with a cap of {cap} bytes"
            )))
        };
    }
    // SAFETY: real_vfs points at a registered, initialized sqlite3_vfs. The copy keeps its
    // app data and every method but xOpen, so its methods find their state as before.
    let mut vfs: ffi::sqlite3_vfs = unsafe { std::ptr::read(real_vfs) };
    vfs.szOsFile += HEADER as c_int;
    vfs.pNext = std::ptr::null_mut();
    vfs.zName = name_c.into_raw();
    vfs.xOpen = Some(shim_open);
    let shim = Box::into_raw(Box::new(ShimVfs { base: vfs, real: real_vfs, cap }));
    // SAFETY: shim is a valid, leaked ShimVfs whose first field is the sqlite3_vfs (SQLite
    // keeps the pointer while registered).
    let rc = unsafe { ffi::sqlite3_vfs_register(shim.cast(), 0) };
    if rc != ffi::SQLITE_OK {
        return Err(error(format!("cannot register VFS {name:?} (SQLite code {rc})")));
    }
    shims.push(shim as usize);
    Ok(())
}

/// Our methods for files whose underlying methods are `real` (same version, same optional
/// methods present, each forwarding after sending down what is held).
fn methods_for(real: *const ffi::sqlite3_io_methods) -> *const ffi::sqlite3_io_methods {
    {
        let mut m = METHODS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&(_, ours)) = m.iter().find(|(r, _)| *r == real as usize) {
            return ours as *const ffi::sqlite3_io_methods;
        }
        let ptr = {
            // SAFETY: real is the method table of a file the underlying VFS just opened.
            let r = unsafe { &*real };
            let ours = ffi::sqlite3_io_methods {
                iVersion: r.iVersion,
                xClose: Some(x_close),
                xRead: Some(x_read),
                xWrite: Some(x_write),
                xTruncate: Some(x_truncate),
                xSync: Some(x_sync),
                xFileSize: Some(x_file_size),
                xLock: Some(x_lock),
                xUnlock: Some(x_unlock),
                xCheckReservedLock: Some(x_check_reserved_lock),
                xFileControl: Some(x_file_control),
                xSectorSize: Some(x_sector_size),
                xDeviceCharacteristics: Some(x_device_characteristics),
                // Only the fields the underlying table's version has are read.
                xShmMap: r.xShmMap.filter(|_| r.iVersion >= 2).map(|_| x_shm_map as _),
                xShmLock: r.xShmLock.filter(|_| r.iVersion >= 2).map(|_| x_shm_lock as _),
                xShmBarrier: r.xShmBarrier.filter(|_| r.iVersion >= 2).map(|_| x_shm_barrier as _),
                xShmUnmap: r.xShmUnmap.filter(|_| r.iVersion >= 2).map(|_| x_shm_unmap as _),
                xFetch: r.xFetch.filter(|_| r.iVersion >= 3).map(|_| x_fetch as _),
                xUnfetch: r.xUnfetch.filter(|_| r.iVersion >= 3).map(|_| x_unfetch as _),
            };
            Box::into_raw(Box::new(ours)) as usize
        };
        m.push((real as usize, ptr));
        ptr as *const ffi::sqlite3_io_methods
    }
}

unsafe extern "C" fn shim_open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    (*file).pMethods = std::ptr::null();
    let real_vfs = (*vfs.cast::<ShimVfs>()).real;
    let Some(open) = (*real_vfs).xOpen else { return ffi::SQLITE_CANTOPEN };
    let shim = file.cast::<ShimFile>();
    let real = file.cast::<u8>().add(HEADER).cast::<ffi::sqlite3_file>();
    (*real).pMethods = std::ptr::null();
    let rc = open(real_vfs, name, real, flags, out_flags);
    if rc != ffi::SQLITE_OK {
        // A file the underlying VFS half-opened is closed here: SQLite will not call our xClose.
        if let Some(close) = (*real).pMethods.as_ref().and_then(|m| m.xClose) {
            close(real);
        }
        return rc;
    }
    std::ptr::addr_of_mut!((*shim).real).write(real);
    std::ptr::addr_of_mut!((*shim).held).write(Box::into_raw(Box::new(Held {
        cap: (*vfs.cast::<ShimVfs>()).cap,
        offset: 0,
        bytes: Vec::new(),
        pending: false,
        wal: flags & ffi::SQLITE_OPEN_WAL != 0,
        chunks: checkpoint_reads::Chunks::default(),
    })));
    (*file).pMethods = methods_for((*real).pMethods);
    ffi::SQLITE_OK
}

unsafe fn parts<'a>(
    file: *mut ffi::sqlite3_file,
) -> (*mut ffi::sqlite3_file, &'a ffi::sqlite3_io_methods, &'a mut Held) {
    let shim = file.cast::<ShimFile>();
    let real = (*shim).real;
    (real, &*(*real).pMethods, &mut *(*shim).held)
}

fn count(f: impl FnOnce(&mut WriteCounts)) {
    COUNTS.with(|c| f(&mut c.borrow_mut()));
}

/// Sends down what is held, if anything.
unsafe fn send_held(file: *mut ffi::sqlite3_file) -> c_int {
    let (real, m, held) = parts(file);
    if !held.pending {
        return ffi::SQLITE_OK;
    }
    let Some(write) = m.xWrite else { return ffi::SQLITE_IOERR_WRITE };
    count(|c| c.sent += 1);
    let rc = write(real, held.bytes.as_ptr().cast(), held.bytes.len() as c_int, held.offset);
    // A write that failed stays held: every later call on the file tries it again and fails
    // until it succeeds, so no read, size or sync ever passes over the hole it would leave.
    held.pending = rc != ffi::SQLITE_OK;
    rc
}

macro_rules! after_held {
    ($file:expr, $method:ident, $($arg:expr),*) => {{
        let rc = send_held($file);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        let (real, m, _) = parts($file);
        match m.$method {
            Some(f) => f(real, $($arg),*),
            None => ffi::SQLITE_IOERR,
        }
    }};
}

/// For a call that gives something up — an unlock, a shared-memory unlock or unmap: it reaches
/// the file below even when what is held cannot go down (SQLite ignores an unlock's error, so
/// a lock kept here would be kept for good: every later checkpoint or write of every connection
/// busy), and the held write's error is what it returns.
macro_rules! releasing {
    ($file:expr, $method:ident, $($arg:expr),*) => {{
        let sent = send_held($file);
        let (real, m, _) = parts($file);
        let rc = match m.$method {
            Some(f) => f(real, $($arg),*),
            None => ffi::SQLITE_IOERR,
        };
        if sent != ffi::SQLITE_OK { sent } else { rc }
    }};
}

unsafe extern "C" fn x_write(file: *mut ffi::sqlite3_file, buf: *const c_void, amt: c_int, offset: i64) -> c_int {
    count(|c| c.received += 1);
    let Ok(len) = usize::try_from(amt) else { return ffi::SQLITE_IOERR_WRITE };
    let data = std::slice::from_raw_parts(buf.cast::<u8>(), len);
    let (real, m, held) = parts(file);
    held.chunks.clear();
    let Some(write) = m.xWrite else { return ffi::SQLITE_IOERR_WRITE };
    if held.pending && held.offset + held.bytes.len() as i64 == offset && held.bytes.len() + len <= held.cap {
        held.bytes.extend_from_slice(data);
        return ffi::SQLITE_OK; // the next write may continue it too
    }
    let rc = send_held(file);
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    let (_, _, held) = parts(file);
    if len < held.cap {
        held.bytes.clear();
        held.bytes.extend_from_slice(data);
        held.offset = offset;
        held.pending = true;
        return ffi::SQLITE_OK;
    }
    count(|c| c.sent += 1);
    write(real, buf, amt, offset)
}

unsafe extern "C" fn x_close(file: *mut ffi::sqlite3_file) -> c_int {
    let sent = send_held(file);
    let (real, m, _) = parts(file);
    let closed = m.xClose.map_or(ffi::SQLITE_OK, |close| close(real));
    let shim = file.cast::<ShimFile>();
    drop(Box::from_raw((*shim).held));
    (*shim).held = std::ptr::null_mut();
    (*file).pMethods = std::ptr::null();
    if sent != ffi::SQLITE_OK {
        sent
    } else {
        closed
    }
}

unsafe extern "C" fn x_read(file: *mut ffi::sqlite3_file, buf: *mut c_void, amt: c_int, offset: i64) -> c_int {
    checkpoint_reads::count(|c| c.received += 1);
    let rc = send_held(file);
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    let (real, m, held) = parts(file);
    if held.wal {
        if let Some(rc) = held.chunks.read(real, m, buf, amt, offset) {
            return rc;
        }
    }
    checkpoint_reads::count(|c| c.sent += 1);
    m.xRead.map_or(ffi::SQLITE_IOERR, |read| read(real, buf, amt, offset))
}

unsafe extern "C" fn x_truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    parts(file).2.chunks.clear();
    after_held!(file, xTruncate, size)
}

unsafe extern "C" fn x_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    after_held!(file, xSync, flags)
}

unsafe extern "C" fn x_file_size(file: *mut ffi::sqlite3_file, size: *mut i64) -> c_int {
    after_held!(file, xFileSize, size)
}

unsafe extern "C" fn x_lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    after_held!(file, xLock, level)
}

unsafe extern "C" fn x_unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    releasing!(file, xUnlock, level)
}

unsafe extern "C" fn x_check_reserved_lock(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    after_held!(file, xCheckReservedLock, out)
}

/// SQLite's hints around a checkpoint's copying (`sqlite3.h`; stable since 3.32).
const FCNTL_CKPT_DONE: c_int = 37;
const FCNTL_CKPT_START: c_int = 39;

unsafe extern "C" fn x_file_control(file: *mut ffi::sqlite3_file, op: c_int, arg: *mut c_void) -> c_int {
    match op {
        FCNTL_CKPT_START => checkpoint_reads::started(),
        FCNTL_CKPT_DONE => checkpoint_reads::done(),
        _ => {}
    }
    after_held!(file, xFileControl, op, arg)
}

unsafe extern "C" fn x_sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    let (real, m, _) = parts(file);
    m.xSectorSize.map_or(4096, |f| f(real))
}

unsafe extern "C" fn x_device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    let (real, m, _) = parts(file);
    // Held writes reach the file later than SQLite wrote them: never promise it the ordering
    // that would let it skip a sync.
    let below = m.xDeviceCharacteristics.map_or(0, |f| f(real))
        & !(ffi::SQLITE_IOCAP_SEQUENTIAL | ffi::SQLITE_IOCAP_SAFE_APPEND);
    // Power-safe overwrite, as SQLite's own unix and Windows VFSes assume of the same disks
    // (`SQLITE_POWERSAFE_OVERWRITE`, on by default): OPFS files are the browser's files on
    // them. Without it SQLite pads every WAL commit to the next 4 KiB sector with copies of
    // its last frame — one frame of 4 KiB + 24 more written per commit, part of it after the
    // commit's sync (BENCHMARKS.md, issue 17 round twenty-three).
    below | ffi::SQLITE_IOCAP_POWERSAFE_OVERWRITE
}

unsafe extern "C" fn x_shm_map(
    file: *mut ffi::sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    after_held!(file, xShmMap, region, size, extend, out)
}

unsafe extern "C" fn x_shm_lock(file: *mut ffi::sqlite3_file, offset: c_int, n: c_int, flags: c_int) -> c_int {
    if flags & ffi::SQLITE_SHM_UNLOCK != 0 {
        releasing!(file, xShmLock, offset, n, flags)
    } else {
        after_held!(file, xShmLock, offset, n, flags)
    }
}

unsafe extern "C" fn x_shm_barrier(file: *mut ffi::sqlite3_file) {
    let _ = send_held(file);
    let (real, m, _) = parts(file);
    if let Some(f) = m.xShmBarrier {
        f(real);
    }
}

unsafe extern "C" fn x_shm_unmap(file: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    releasing!(file, xShmUnmap, delete)
}

unsafe extern "C" fn x_fetch(file: *mut ffi::sqlite3_file, offset: i64, amt: c_int, out: *mut *mut c_void) -> c_int {
    after_held!(file, xFetch, offset, amt, out)
}

unsafe extern "C" fn x_unfetch(file: *mut ffi::sqlite3_file, offset: i64, page: *mut c_void) -> c_int {
    after_held!(file, xUnfetch, offset, page)
}

#[cfg(test)]
mod tests {
    use rusqlite::{Connection, OpenFlags};

    use super::*;

    const UNIX_CAP: usize = UNIX_HOLD;

    fn open(path: &std::path::Path, vfs: &str) -> Connection {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
        Connection::open_with_flags_and_vfs(path, flags, vfs).unwrap()
    }

    /// A database path in a directory of the test's own, removed when the test ends (passed
    /// or failed). Bind it before the connections, so they are dropped first.
    pub(super) struct TempDb {
        dir: std::path::PathBuf,
        path: std::path::PathBuf,
    }

    impl std::ops::Deref for TempDb {
        type Target = std::path::Path;
        fn deref(&self) -> &std::path::Path {
            &self.path
        }
    }

    impl AsRef<std::path::Path> for TempDb {
        fn as_ref(&self) -> &std::path::Path {
            &self.path
        }
    }

    impl Drop for TempDb {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    pub(super) fn temp_db(tag: &str) -> TempDb {
        let dir = std::env::temp_dir().join(format!("simplysync-coalesce-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDb { path: dir.join("db.sqlite"), dir }
    }

    fn fill(conn: &Connection, from: i64, n: i64) {
        let tx = conn.unchecked_transaction().unwrap();
        for i in from..from + n {
            tx.execute("INSERT INTO t (id, body) VALUES (?1, ?2)", (i, format!("row {i} {}", "x".repeat(300))))
                .unwrap();
        }
        tx.commit().unwrap();
    }

    #[test]
    fn wal_frames_go_down_as_one_write_each_and_the_file_reads_back_without_the_shim() {
        install("unix", "coalesce-test-wal", UNIX_CAP, |e| e).unwrap();
        let path = temp_db("wal");
        {
            let conn = open(&path, "coalesce-test-wal");
            conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT);").unwrap();
            let before = write_counts();
            for k in 0..20 {
                fill(&conn, k * 100, 100);
            }
            let after = write_counts();
            let (received, sent) = (after.received - before.received, after.sent - before.sent);
            // Each WAL frame is a 24-byte header and a page: half the writes are merged away.
            assert!(received >= 40, "SQLite wrote {received} times");
            assert!(sent * 2 <= received + 2, "{received} writes from SQLite went down as {sent}");
            // Another connection, without the shim, sees every commit while this one is open.
            let plain = open(&path, "unix");
            let n: i64 = plain.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
            assert_eq!(n, 2000, "committed rows are in the files before the shim's connection closes");
        }
        // The bytes on disk are exactly SQLite's: the plain VFS reads every row back.
        let conn = open(&path, "unix");
        let n: i64 = conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 2000);
        let ok: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(ok, "ok");
    }

    #[test]
    fn a_commit_is_not_padded_to_a_sector_even_over_a_file_that_does_not_promise_power_safe_overwrite() {
        install("unix", "coalesce-test-psow", UNIX_CAP, |e| e).unwrap();
        let path = temp_db("psow");
        // `psow=0`: the unix VFS's file then reports no power-safe overwrite, as OPFS's does.
        let uri = format!("file:{}?psow=0", path.display());
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags_and_vfs(&uri, flags, "coalesce-test-psow").unwrap();
        conn.execute_batch(
            "PRAGMA page_size = 4096; PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA wal_autocheckpoint = 0;
             CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER); INSERT INTO t VALUES (1, 0);",
        )
        .unwrap();
        let frames = || (std::fs::metadata(format!("{}-wal", path.display())).unwrap().len() - 32) / (4096 + 24);
        let before = frames();
        for n in 1..=10 {
            // One page changes: one frame per commit, not two (the second a copy up to the sector).
            conn.execute("UPDATE t SET n = ?1 WHERE id = 1", [n]).unwrap();
        }
        assert_eq!(frames() - before, 10);
    }

    /// Writes `rounds` commits of rows in scattered order, so the WAL's order is not page order.
    pub(super) fn scatter(conn: &Connection, version: &str, rounds: i64) {
        for round in 0..rounds {
            let tx = conn.unchecked_transaction().unwrap();
            for i in 0..200i64 {
                let id = (i * 7919 + round * 104_729) % 4001;
                tx.execute(
                    "INSERT INTO t (id, body) VALUES (?1, ?2) ON CONFLICT (id) DO UPDATE SET body = ?2",
                    (id, format!("{version} {id} {}", "x".repeat(300))),
                )
                .unwrap();
            }
            tx.commit().unwrap();
        }
    }

    fn checkpoint(conn: &Connection, mode: &str) -> ReadCounts {
        let before = read_counts();
        let busy: i64 = conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| r.get(0)).unwrap();
        assert_eq!(busy, 0, "the checkpoint ran to completion");
        let after = read_counts();
        ReadCounts { received: after.received - before.received, sent: after.sent - before.sent }
    }

    fn versions(path: &std::path::Path) -> (i64, i64, String) {
        let conn = open(path, "unix");
        let rows: i64 = conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
        let v2: i64 = conn.query_row("SELECT count(*) FROM t WHERE body LIKE 'v2 %'", [], |r| r.get(0)).unwrap();
        let ok: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        (rows, v2, ok)
    }

    #[test]
    fn a_checkpoint_reads_the_wal_in_chunks_and_copies_every_page_as_last_written() {
        install("unix", "coalesce-test-ckpt", UNIX_CAP, |e| e).unwrap();
        let path = temp_db("ckpt");
        {
            let conn = open(&path, "coalesce-test-ckpt");
            conn.execute_batch(
                "PRAGMA locking_mode = EXCLUSIVE; PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;
                 CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT);",
            )
            .unwrap();
            scatter(&conn, "v1", 20);
            let reads = checkpoint(&conn, "TRUNCATE");
            assert!(reads.received >= 150, "the checkpoint read {} frames", reads.received);
            assert!(reads.sent * 10 <= reads.received, "{} frame reads went down as {}", reads.received, reads.sent);
            // The WAL starts over at the same offsets: nothing of the first checkpoint's chunks
            // may be copied by the second.
            rewrite_all(&conn);
            checkpoint(&conn, "TRUNCATE");
        }
        let (rows, v2, ok) = versions(&path);
        assert_eq!((v2, ok.as_str()), (rows, "ok"), "every row's last version is in the database file");
    }

    /// Two connections on one new WAL database through shim `vfs`, without automatic
    /// checkpoints: the first creates the table.
    fn two_connections(vfs: &str, tag: &str) -> (TempDb, Connection, Connection) {
        install("unix", vfs, UNIX_CAP, |e| e).unwrap();
        let path = temp_db(tag);
        let a = open(&path, vfs);
        a.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0; CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT);",
        )
        .unwrap();
        let b = open(&path, vfs);
        b.execute_batch("PRAGMA wal_autocheckpoint = 0;").unwrap();
        (path, a, b)
    }

    /// Writes version 2 of every row through `conn`.
    fn rewrite_all(conn: &Connection) {
        scatter(conn, "v2", 20);
        conn.execute("UPDATE t SET body = 'v2 ' || id WHERE body NOT LIKE 'v2 %'", []).unwrap();
    }

    #[test]
    fn a_checkpoint_never_copies_wal_bytes_read_before_another_connection_rewrote_them() {
        let (path, a, b) = two_connections("coalesce-test-ckpt-two", "ckpt-two");
        scatter(&a, "v1", 20);
        // A passive checkpoint leaves the WAL in place: A's WAL handle keeps what it read.
        assert!(checkpoint(&a, "PASSIVE").sent > 0);
        // B restarts the WAL through its own handle and writes new frames where the old were.
        rewrite_all(&b);
        checkpoint(&a, "PASSIVE");
        checkpoint(&b, "TRUNCATE");
        drop((a, b));
        let (rows, v2, ok) = versions(&path);
        assert_eq!((v2, ok.as_str()), (rows, "ok"), "the database file holds B's writes, not A's stale chunks");
    }

    #[test]
    fn a_connection_moved_to_another_thread_never_reuses_the_chunks_of_its_last_checkpoint() {
        let (path, a, b) = two_connections("coalesce-test-ckpt-threads", "ckpt-threads");
        // The first checkpoint of a fresh thread each time: numbers kept per thread would match.
        let a = std::thread::spawn(move || {
            scatter(&a, "v1", 20);
            assert!(checkpoint(&a, "PASSIVE").sent > 0);
            a
        })
        .join()
        .unwrap();
        rewrite_all(&b);
        let a = std::thread::spawn(move || {
            checkpoint(&a, "PASSIVE");
            a
        })
        .join()
        .unwrap();
        checkpoint(&b, "TRUNCATE");
        drop((a, b));
        let (rows, v2, ok) = versions(&path);
        assert_eq!((v2, ok.as_str()), (rows, "ok"), "the database file holds B's writes, not A's stale chunks");
    }

    #[test]
    fn a_rollback_journal_through_the_shim_still_undoes_a_transaction() {
        install("unix", "coalesce-test-journal", UNIX_CAP, |e| e).unwrap();
        let path = temp_db("journal");
        let conn = open(&path, "coalesce-test-journal");
        conn.execute_batch("PRAGMA journal_mode = DELETE; CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT);")
            .unwrap();
        fill(&conn, 0, 500);
        let before = write_counts();
        conn.execute_batch("BEGIN; UPDATE t SET body = 'changed'; DELETE FROM t WHERE id % 2 = 0;").unwrap();
        // Force the changes (and their journal records) out of the cache before rolling back.
        conn.execute_batch(
            "PRAGMA cache_spill = ON; PRAGMA cache_size = 2; UPDATE t SET body = body || '!'; ROLLBACK;",
        )
        .unwrap();
        let merged = write_counts().received - before.received - (write_counts().sent - before.sent);
        assert!(merged > 0, "journal records (page number, page, checksum) were not merged");
        let changed: i64 = conn
            .query_row("SELECT count(*) FROM t WHERE body = 'changed' OR body LIKE '%!'", [], |r| r.get(0))
            .unwrap();
        let n: i64 = conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!((n, changed), (500, 0));
        drop(conn);
        let ok: String = open(&path, "unix").query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(ok, "ok");
    }

    /// Opens `path` through shim `name` directly at the VFS level; returns the VFS and the file.
    unsafe fn raw_open(name: &str, path: &std::path::Path) -> (*mut ffi::sqlite3_vfs, *mut ffi::sqlite3_file, CString) {
        raw_open_with(name, path, ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_CREATE | ffi::SQLITE_OPEN_MAIN_DB)
    }

    /// The memory of a file of `vfs` (`szOsFile` bytes).
    unsafe fn file_layout(vfs: *mut ffi::sqlite3_vfs) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align((*vfs).szOsFile as usize, 8).unwrap()
    }

    unsafe fn raw_open_with(
        name: &str,
        path: &std::path::Path,
        flags: c_int,
    ) -> (*mut ffi::sqlite3_vfs, *mut ffi::sqlite3_file, CString) {
        let vfs = ffi::sqlite3_vfs_find(CString::new(name).unwrap().as_ptr());
        assert!(!vfs.is_null());
        let file = std::alloc::alloc_zeroed(file_layout(vfs)).cast::<ffi::sqlite3_file>();
        let zname = CString::new(path.to_str().unwrap()).unwrap();
        let mut out = 0;
        assert_eq!((*vfs).xOpen.unwrap()(vfs, zname.as_ptr(), file, flags, &mut out), ffi::SQLITE_OK);
        (vfs, file, zname)
    }

    /// Closes a file [`raw_open_with`] opened and frees its memory; the close's result code.
    unsafe fn raw_close(vfs: *mut ffi::sqlite3_vfs, file: *mut ffi::sqlite3_file) -> c_int {
        let rc = (*(*file).pMethods).xClose.unwrap()(file);
        std::alloc::dealloc(file.cast(), file_layout(vfs));
        rc
    }

    #[test]
    fn a_held_write_goes_down_before_any_read_size_or_sync_could_miss_it() {
        install("unix", "coalesce-test-raw", UNIX_CAP, |e| e).unwrap();
        let path = temp_db("raw");
        unsafe {
            let (vfs, file, _name) = raw_open("coalesce-test-raw", &path);
            let m = &*(*file).pMethods;
            let before = write_counts();
            assert_eq!(m.xWrite.unwrap()(file, b"small".as_ptr().cast(), 5, 0), ffi::SQLITE_OK);
            assert_eq!(write_counts().sent, before.sent, "a small write is held");
            let mut size = 0i64;
            assert_eq!(m.xFileSize.unwrap()(file, &mut size), ffi::SQLITE_OK);
            assert_eq!(size, 5, "the size counts the held write");
            assert_eq!(m.xWrite.unwrap()(file, b"tail".as_ptr().cast(), 4, 100), ffi::SQLITE_OK);
            let mut buf = [0u8; 4];
            assert_eq!(m.xRead.unwrap()(file, buf.as_mut_ptr().cast(), 4, 100), ffi::SQLITE_OK);
            assert_eq!(&buf, b"tail", "a read sees the held write");
            // A header and the pages continuing it go down as one write, at the next other call.
            let sent = write_counts().sent;
            assert_eq!(m.xWrite.unwrap()(file, b"head".as_ptr().cast(), 4, 200), ffi::SQLITE_OK);
            let page = vec![7u8; 4096];
            assert_eq!(m.xWrite.unwrap()(file, page.as_ptr().cast(), 2048, 204), ffi::SQLITE_OK);
            assert_eq!(m.xWrite.unwrap()(file, page.as_ptr().cast(), 2048, 2252), ffi::SQLITE_OK);
            assert_eq!(write_counts().sent, sent, "held until another call");
            assert_eq!(m.xFileSize.unwrap()(file, &mut size), ffi::SQLITE_OK);
            assert_eq!(write_counts().sent, sent + 1, "three writes, one sent");
            assert_eq!(size, 4300);
            // Never more than the cap in one write: what is held goes first.
            let big = vec![9u8; UNIX_CAP];
            assert_eq!(m.xWrite.unwrap()(file, big.as_ptr().cast(), 100, 10_000), ffi::SQLITE_OK);
            assert_eq!(m.xWrite.unwrap()(file, big.as_ptr().cast(), UNIX_CAP as c_int, 10_100), ffi::SQLITE_OK);
            assert_eq!(write_counts().sent, sent + 3, "the held 100 bytes, then the write at the cap");
            // A lock change, a truncate and a file control each send a held write down first.
            let on_disk = |at: usize, len: usize| std::fs::read(&path).unwrap().get(at..at + len).map(<[u8]>::to_vec);
            assert_eq!(m.xWrite.unwrap()(file, b"lockme".as_ptr().cast(), 6, 5000), ffi::SQLITE_OK);
            assert_eq!(m.xLock.unwrap()(file, ffi::SQLITE_LOCK_SHARED), ffi::SQLITE_OK);
            assert_eq!(on_disk(5000, 6).as_deref(), Some(&b"lockme"[..]));
            assert_eq!(m.xUnlock.unwrap()(file, ffi::SQLITE_LOCK_NONE), ffi::SQLITE_OK);
            assert_eq!(m.xWrite.unwrap()(file, b"trunc".as_ptr().cast(), 5, 6000), ffi::SQLITE_OK);
            assert_eq!(m.xTruncate.unwrap()(file, 8192), ffi::SQLITE_OK);
            assert_eq!(on_disk(6000, 5).as_deref(), Some(&b"trunc"[..]));
            assert_eq!(m.xWrite.unwrap()(file, b"fcntl".as_ptr().cast(), 5, 7000), ffi::SQLITE_OK);
            let _ = m.xFileControl.unwrap()(file, ffi::SQLITE_FCNTL_SYNC_OMITTED, std::ptr::null_mut());
            assert_eq!(on_disk(7000, 5).as_deref(), Some(&b"fcntl"[..]));
            assert_eq!(m.xWrite.unwrap()(file, b"last".as_ptr().cast(), 4, 9000), ffi::SQLITE_OK);
            assert_eq!(m.xSync.unwrap()(file, ffi::SQLITE_SYNC_FULL), ffi::SQLITE_OK);
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(&bytes[0..5], b"small");
            assert_eq!(&bytes[100..104], b"tail");
            assert_eq!(&bytes[200..204], b"head");
            assert!(bytes[204..4300].iter().all(|&b| b == 7));
            assert_eq!(bytes.get(9000..9004), Some(&b"last"[..]), "the held write went down before the sync");
            assert_eq!(raw_close(vfs, file), ffi::SQLITE_OK);
        }
    }

    /// A database file opened read-only through shim `vfs` (installed here): every write that
    /// reaches it fails. Keep the `TempDb` until the file is closed.
    unsafe fn read_only_through(
        vfs: &str,
        tag: &str,
    ) -> (TempDb, *mut ffi::sqlite3_vfs, *mut ffi::sqlite3_file, CString) {
        install("unix", vfs, UNIX_CAP, |e| e).unwrap();
        let path = temp_db(tag);
        std::fs::write(&path, vec![0u8; 8192]).unwrap();
        let (vfs, file, name) = raw_open_with(vfs, &path, ffi::SQLITE_OPEN_READONLY | ffi::SQLITE_OPEN_MAIN_DB);
        (path, vfs, file, name)
    }

    #[test]
    fn a_held_write_that_fails_keeps_failing_every_later_call_instead_of_leaving_a_hole() {
        unsafe {
            let (_path, vfs, file, _name) = read_only_through("coalesce-test-failing", "failing");
            let m = &*(*file).pMethods;
            assert_eq!(m.xWrite.unwrap()(file, b"held".as_ptr().cast(), 4, 0), ffi::SQLITE_OK, "held, not yet sent");
            assert_ne!(
                m.xSync.unwrap()(file, ffi::SQLITE_SYNC_FULL),
                ffi::SQLITE_OK,
                "the sync reports the failed write"
            );
            assert_ne!(m.xSync.unwrap()(file, ffi::SQLITE_SYNC_FULL), ffi::SQLITE_OK, "and so does the next one");
            let mut buf = [0u8; 4];
            assert_ne!(m.xRead.unwrap()(file, buf.as_mut_ptr().cast(), 4, 0), ffi::SQLITE_OK, "no read past the hole");
            let _ = raw_close(vfs, file);
        }
    }

    #[test]
    fn a_held_write_that_fails_never_keeps_a_lock() {
        unsafe {
            // Through the shim on a read-only handle (its writes fail), a shared lock, then a
            // held write.
            let (path, vfs, file, _name) = read_only_through("coalesce-test-unlock", "unlock");
            let m = &*(*file).pMethods;
            assert_eq!(m.xLock.unwrap()(file, ffi::SQLITE_LOCK_SHARED), ffi::SQLITE_OK);
            assert_eq!(m.xWrite.unwrap()(file, b"held".as_ptr().cast(), 4, 0), ffi::SQLITE_OK);
            assert_ne!(m.xUnlock.unwrap()(file, ffi::SQLITE_LOCK_NONE), ffi::SQLITE_OK, "the unlock reports the write");
            // The lock is gone all the same: another handle gets the file exclusively.
            let (plain_vfs, other, _other_name) =
                raw_open_with("unix", &path, ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_MAIN_DB);
            let o = &*(*other).pMethods;
            for level in [ffi::SQLITE_LOCK_SHARED, ffi::SQLITE_LOCK_RESERVED, ffi::SQLITE_LOCK_EXCLUSIVE] {
                assert_eq!(o.xLock.unwrap()(other, level), ffi::SQLITE_OK, "lock level {level}");
            }
            assert_eq!(o.xUnlock.unwrap()(other, ffi::SQLITE_LOCK_NONE), ffi::SQLITE_OK);
            assert_eq!(raw_close(plain_vfs, other), ffi::SQLITE_OK);
            let _ = raw_close(vfs, file);
        }
    }

    #[test]
    fn a_shim_over_a_missing_vfs_is_an_error() {
        let err = install("no-such-vfs", "coalesce-test-missing", UNIX_CAP, |e| e).unwrap_err();
        assert!(err.to_string().contains("no-such-vfs"), "{err}");
    }

    #[test]
    fn the_same_shim_installs_twice_and_a_name_taken_otherwise_is_an_error() {
        install("unix", "coalesce-test-twice", UNIX_CAP, |e| e).unwrap();
        install("unix", "coalesce-test-twice", UNIX_CAP, |e| e).unwrap();
        for (real, name, cap) in [
            ("unix", "coalesce-test-twice", 4096),
            ("unix-none", "coalesce-test-twice", UNIX_CAP),
            ("unix-none", "unix", UNIX_CAP),
        ] {
            let err = install(real, name, cap, |e| e).unwrap_err();
            assert!(err.contains(&format!("VFS {name:?} is registered already")), "{real} {name} {cap}: {err}");
        }
        // The shim still works as first installed.
        let db = temp_db("twice");
        let conn = open(&db, "coalesce-test-twice");
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)").unwrap();
        fill(&conn, 0, 10);
        assert_eq!(conn.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0)).unwrap(), 10);
    }

    #[test]
    fn a_cap_below_a_page_or_above_64_mib_is_an_error_that_names_the_range() {
        for cap in [0, 511, (64 << 20) + 1] {
            let err = install("unix", "coalesce-test-cap", cap, |e| e).unwrap_err();
            assert!(err.contains(&format!("a cap of {cap} bytes: use 512 to 67108864 bytes")), "{err}");
        }
        install("unix", "coalesce-test-cap", 512, |e| e).unwrap();
    }
}
