//! The default backend: one SQLite database file in WAL mode holding owners, events, blob
//! chunks and `relay_meta` (the epoch, the global seq counter and the relay-wide counters).
//!
//! One writer connection behind a mutex serializes every write transaction — that is what makes
//! seqs commit in order (skip-proof pagination) and trust-on-first-use race-free. Reads use a
//! small pool of connections and see consistent WAL snapshots, so pulls never wait for pushes.
//! `synchronous = FULL`: a push is acknowledged only after its commit reached the disk (the
//! stream index's batches alone commit without an fsync of their own: indexer.rs).
//!
//! Counters (per owner: bytes, events, streams; per relay: bytes, events, blobs, owners) are
//! kept by every write in its own transaction, so no request ever counts rows. A full disk (or
//! `MAX_DB_BYTES`) answers [`StoreError::StorageFull`] and a locked database [`StoreError::Busy`];
//! reads go on, and writes resume once space returns.

mod checkpointer;
mod compact;
mod group;
mod hwm;
mod indexer;
mod owners;
mod schema;
mod streams;
#[cfg(test)]
mod test_store;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use simplysync_protocol::wire::{AccountInfo, CloseResponse, CompactResponse};

pub use owners::Registration;
use owners::{apply, charged_total, check_quota, existing_owner, owner_or_register, owner_row, Delta};
use schema::{bump, meta_get, meta_u64, set_meta, COUNTERS};

use super::{
    BlobData, BlobPresence, BlobPutOutcome, CheckpointReport, CompactionReport, Deadline, MayRegister, NewEvent,
    OwnerState, PullPage, PushOutcome, RelayStats, RelayStore, StoreError,
};

const READER_POOL: usize = 8;

/// `relay_meta` key of the orphan sweep's cursor ([`RelayStore::sweep_cursor`]).
const SWEEP_CURSOR: &str = "orphan_sweep_after";

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        match e.sqlite_error_code() {
            Some(ErrorCode::DiskFull) => StoreError::StorageFull(e.to_string()),
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Busy(e.to_string()),
            _ => StoreError::Backend(e.to_string()),
        }
    }
}

/// Quotas the store enforces inside its transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    /// Per-owner bytes.
    pub max_owner_bytes: u64,
    /// Bytes over all owners.
    pub max_total_bytes: u64,
}

/// How the store is opened.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Quotas.
    pub quotas: Quotas,
    /// Who may register.
    pub registration: Registration,
    /// Where the high-water mark lives (default: `<database>.hwm` beside it).
    pub hwm_path: Option<PathBuf>,
    /// A hard cap of the database file's size (SQLite's `max_page_count`), if set.
    pub max_db_bytes: Option<u64>,
    /// How long a write waits for a database another process locked, ms (then `Busy`).
    pub busy_timeout_ms: u64,
}

impl StoreOptions {
    /// Quotas, open registration, the mark beside the database, no size cap.
    pub fn new(quotas: Quotas) -> StoreOptions {
        StoreOptions {
            quotas,
            registration: Registration::default(),
            hwm_path: None,
            max_db_bytes: None,
            busy_timeout_ms: 5000,
        }
    }
}

/// The SQLite relay store.
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    busy_timeout_ms: u64,
    writer: Arc<Mutex<Connection>>,
    readers: Mutex<Vec<Connection>>,
    epoch: String,
    quotas: Quotas,
    registration: Registration,
    mark: hwm::HighWaterMark,
    checkpointer: checkpointer::Checkpointer,
    indexer: indexer::Indexer,
    /// Pushes waiting for the writer (group.rs).
    queue: group::Queue,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere cannot leave a half-done transaction: rusqlite rolls back on drop.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The page size of a new database file. A push writes whole pages into the WAL — one frame,
/// two writes and a checksum each — and 1000-event pushes ran 2–18% faster with 8 KiB pages
/// than with SQLite's 4 KiB, pushes of 10 events within ±4% (16 KiB: faster for big pushes,
/// 3–9% slower for pushes of 10; BENCHMARKS.md round eight). A file keeps the page size it was
/// created with.
const PAGE_SIZE: u32 = 8192;

/// The VFS every connection opens the database through: SQLite's unix VFS behind the
/// write-coalescing shim (`simplysync-coalesce`), so a commit's WAL frames go down as a few
/// writes instead of two per frame (pushes 17–25% faster; BENCHMARKS.md, round
/// twenty-four). The shim needs every commit synced — `synchronous = FULL` on every connection,
/// the stream indexer's batches included — or readers could see frames still held.
const VFS: &str = "simplysync-unix-coalesced";

fn open_connection(path: &Path, busy_timeout_ms: u64) -> Result<Connection, StoreError> {
    // Registered once per process: connections open from several threads at once.
    static INSTALLED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| simplysync_coalesce::install("unix", VFS, simplysync_coalesce::UNIX_HOLD, |e| e))
        .clone()
        .map_err(StoreError::Setup)?;
    let conn = Connection::open_with_flags_and_vfs(path, rusqlite::OpenFlags::default(), VFS)?;
    conn.busy_timeout(std::time::Duration::from_millis(busy_timeout_ms))?;
    // Before WAL mode, which writes the file's first page: only a new file takes the size.
    conn.execute_batch(&format!(
        "PRAGMA page_size = {PAGE_SIZE}; PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;"
    ))?;
    Ok(conn)
}

/// Starts a write transaction, refusing once `deadline` passed (checked again after the
/// database's own write lock was taken, which may have waited for another process).
fn begin(conn: &mut Connection, deadline: Deadline) -> Result<rusqlite::Transaction<'_>, StoreError> {
    let passed = || deadline.is_some_and(|d| Instant::now() >= d);
    if passed() {
        return Err(StoreError::DeadlinePassed);
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if passed() {
        return Err(StoreError::DeadlinePassed); // rolls back on drop
    }
    Ok(tx)
}

/// The mark's path for database `path`.
pub fn default_hwm_path(path: &Path) -> PathBuf {
    PathBuf::from(format!("{}.hwm", path.display()))
}

/// A database whose seq counter is below the high-water mark recorded for its epoch was
/// restored from an older copy: devices may hold cursors beyond its head, and the head may pass
/// them again before they notice. Rotating the epoch makes every device re-seed it.
fn check_rollback(conn: &Connection, hwm_path: &Path, epoch: String) -> Result<String, StoreError> {
    let Some((mark_epoch, mark_seq)) = hwm::read(hwm_path) else { return Ok(epoch) };
    let seq = meta_u64(conn, "seq")?;
    if mark_epoch != epoch || mark_seq <= seq {
        return Ok(epoch);
    }
    let fresh = crate::store::new_epoch()?;
    set_meta(conn, "epoch", &fresh)?;
    tracing::warn!(
        database_seq = seq,
        high_water_mark = mark_seq,
        new_epoch = %fresh,
        "the database is older than this relay's last state (restored from a backup?): new epoch, devices will re-seed"
    );
    Ok(fresh)
}

/// Gives the database at `path` a new epoch (after restoring it from a backup, say): every
/// device then re-seeds it. Returns the old and the new epoch. The relay must not be running.
pub fn rotate_epoch(path: &Path, hwm_path: Option<&Path>) -> Result<(String, String), StoreError> {
    let conn = open_connection(path, 5000)?;
    let old: String = meta_get(&conn, "epoch")?.ok_or_else(|| StoreError::Setup("not a relay database".into()))?;
    let fresh = crate::store::new_epoch()?;
    set_meta(&conn, "epoch", &fresh)?;
    let seq = meta_u64(&conn, "seq")?;
    let mark = hwm_path.map_or_else(|| default_hwm_path(path), Path::to_path_buf);
    hwm::write_now(&mark, &fresh, seq).map_err(|e| StoreError::Setup(format!("{}: {e}", mark.display())))?;
    Ok((old, fresh))
}

impl SqliteStore {
    /// Opens (creating, with its directory, if needed) the database at `path`.
    pub fn open(path: &Path, options: StoreOptions, now: &str) -> Result<SqliteStore, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Setup(format!("cannot create directory {}: {e}", dir.display())))?;
        }
        let mut conn = open_connection(path, options.busy_timeout_ms)?;
        // The writer dirties ~1.5 MB per 1000-event push; SQLite's default 2 MB page cache made
        // it spill mid-transaction (measured: 9 ms → 5 ms of insert time per push).
        conn.execute_batch("PRAGMA cache_size = -65536;")?;
        // Checkpoints run on their own thread; the writer's own is only a safety net.
        let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        let safety_net = checkpointer::SAFETY_NET_BYTES / page.max(512);
        conn.execute_batch(&format!("PRAGMA wal_autocheckpoint = {safety_net};"))?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let rebuilt = schema::migrate(&tx)?;
        let epoch: Option<String> = meta_get(&tx, "epoch")?;
        let epoch = match epoch {
            Some(e) => e,
            None => {
                // A new database: a new epoch, so clients can tell it from the one they knew.
                let e = crate::store::new_epoch()?;
                set_meta(&tx, "epoch", &e)?;
                set_meta(&tx, "created_at", &now)?;
                set_meta(&tx, "seq", &0i64)?;
                set_meta(&tx, "total_bytes", &0i64)?;
                for key in COUNTERS {
                    set_meta(&tx, key, &0i64)?;
                }
                e
            }
        };
        tx.commit()?;
        if rebuilt {
            // The rebuilt table went through the WAL: move it into the file now and give the
            // WAL's room back, instead of leaving a copy-sized WAL until shutdown.
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        }
        if let Some(max) = options.max_db_bytes {
            let pages = (max as i64 / page.max(512)).max(1);
            conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))?;
        }
        let hwm_path = options.hwm_path.clone().unwrap_or_else(|| default_hwm_path(path));
        let epoch = check_rollback(&conn, &hwm_path, epoch)?;
        let seq = meta_u64(&conn, "seq")?;
        let mark = hwm::HighWaterMark::start(hwm_path.clone(), epoch.clone(), seq).map_err(|e| {
            StoreError::Setup(format!(
                "HWM_PATH {}: cannot write the seq high-water mark ({e}); it must be writable",
                hwm_path.display()
            ))
        })?;
        let busy_timeout_ms = options.busy_timeout_ms;
        let checkpointer = checkpointer::Checkpointer::start(path, move |p| open_connection(p, busy_timeout_ms));
        let writer = Arc::new(Mutex::new(conn));
        let indexer = indexer::Indexer::start(writer.clone(), path, move |p| open_connection(p, busy_timeout_ms));
        Ok(SqliteStore {
            path: path.to_owned(),
            busy_timeout_ms: options.busy_timeout_ms,
            writer,
            readers: Mutex::new(Vec::new()),
            epoch,
            quotas: options.quotas,
            registration: options.registration,
            mark,
            checkpointer,
            indexer,
            queue: group::Queue::default(),
        })
    }

    fn read<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let pooled = lock(&self.readers).pop();
        let mut conn = match pooled {
            Some(c) => c,
            None => open_connection(&self.path, self.busy_timeout_ms)?,
        };
        let result = f(&mut conn);
        let mut pool = lock(&self.readers);
        if pool.len() < READER_POOL {
            pool.push(conn);
        }
        result
    }

    /// One write transaction — unless `deadline` passed while it waited for the writer (this
    /// process's, or a lock another process holds on the database).
    fn write<T>(
        &self,
        deadline: Deadline,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = lock(&self.writer);
        let out = (|| {
            let tx = begin(&mut conn, deadline)?;
            let out = f(&tx)?;
            tx.commit()?;
            Ok(out)
        })();
        // After the commit or rollback, the writer still held (see indexer.rs).
        self.indexer.wrote();
        if out.is_ok() {
            self.checkpointer.committed();
        }
        out
    }

    /// Flushes the high-water mark to disk (tests; shutdown does it too).
    pub fn flush_mark(&self) {
        self.mark.flush();
    }
}

/// Whether the orphan sweep holds a claim on this chunk's object key.
fn orphan_claimed(tx: &rusqlite::Transaction<'_>, owner_id: &str, hash: &str) -> Result<bool, StoreError> {
    let mut stmt = tx.prepare_cached("SELECT 1 FROM object_claims WHERE owner_id = ?1 AND hash = ?2")?;
    Ok(stmt.exists(params![owner_id, hash])?)
}

/// A close's transaction: the owner marked closed (nothing of it readable from here on), its
/// blobs' rows deleted and its counters settled; its log is left to [`compact::purge_owner_log`].
/// Returns the answer and, if it was open until now, its key.
fn mark_closed(
    tx: &rusqlite::Transaction<'_>,
    owner_id: &str,
    token_hash: &str,
    now: &str,
) -> Result<(CloseResponse, Option<i64>), StoreError> {
    let owner = owner_row(tx, owner_id)?.ok_or(StoreError::UnknownOwner)?;
    match owners::authorize(&owner, token_hash) {
        Err(StoreError::Closed) => {
            return Ok((CloseResponse { closed: true, deleted_events: 0, deleted_blobs: 0 }, None));
        }
        other => other?,
    }
    let deleted_events = owner.event_count;
    let deleted_blobs = tx.execute("DELETE FROM blobs WHERE owner_id = ?1", [owner_id])? as u64;
    let d = Delta {
        bytes: -(owner.stored_bytes as i64),
        events: -(owner.event_count as i64),
        streams: -(owner.stream_count as i64),
    };
    apply(tx, owner_id, d)?;
    bump(tx, "blobs", -(deleted_blobs as i64))?;
    bump(tx, "closed_owners", 1)?;
    tx.execute("UPDATE owners SET closed_at = ?2 WHERE owner_id = ?1", params![owner_id, now])?;
    Ok((CloseResponse { closed: true, deleted_events, deleted_blobs }, Some(owner.key)))
}

impl RelayStore for SqliteStore {
    fn epoch(&self) -> String {
        self.epoch.clone()
    }

    fn authenticate(&self, owner_id: &str, token_hash: &str) -> Result<OwnerState, StoreError> {
        self.read(|conn| match owner_row(conn, owner_id)? {
            None => Ok(OwnerState::Unknown),
            Some(o) => owners::authorize(&o, token_hash).map(|()| OwnerState::Known),
        })
    }

    fn push(
        &self,
        owner_id: &str,
        token_hash: &str,
        events: Vec<NewEvent>,
        now: &str,
        register: MayRegister,
        deadline: Deadline,
    ) -> Result<PushOutcome, StoreError> {
        let job = Arc::new(group::PushJob::new(owner_id, token_hash, events, now, register, deadline));
        let _leading = match self.queue.join(&job) {
            Ok(answer) => return answer,
            Err(leading) => leading,
        };
        let mut conn = lock(&self.writer);
        // Answered while this push waited for the writer (only a test does that).
        match job.take_result() {
            Some(answer) => answer,
            None => self.store_group(&mut conn, &job),
        }
    }

    fn pull(
        &self,
        owner_id: &str,
        token_hash: &str,
        after: u64,
        limit: u32,
        max_bytes: usize,
    ) -> Result<PullPage, StoreError> {
        self.read(|conn| {
            // One snapshot for the owner row and the page, so headSeq and events agree.
            let tx = conn.transaction()?;
            let owner = existing_owner(&tx, owner_id, token_hash)?;
            let mut page = PullPage { head_seq: owner.head_seq, ..PullPage::default() };
            {
                let mut stmt = tx.prepare_cached(
                    "SELECT seq, envelope FROM events WHERE owner_key = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                )?;
                let mut rows = stmt.query(params![owner.key, after.min(i64::MAX as u64) as i64, limit])?;
                let mut size = 0usize;
                while let Some(row) = rows.next()? {
                    let envelope: String = row.get(1)?;
                    // A page stops before passing MAX_PULL_BYTES (it always has one event).
                    if !page.events.is_empty() && size + envelope.len() > max_bytes {
                        break;
                    }
                    size += envelope.len() + 1;
                    page.last_seq = Some(row.get::<_, i64>(0)? as u64);
                    page.events.push(envelope);
                }
            }
            tx.commit()?;
            Ok(page)
        })
    }

    fn compact_streams(
        &self,
        owner_id: &str,
        token_hash: &str,
        stream_ids: &[String],
        deadline: Deadline,
    ) -> Result<CompactResponse, StoreError> {
        self.write(deadline, |tx| {
            let owner = existing_owner(tx, owner_id, token_hash)?;
            streams::index_tail(tx, 0)?;
            let mut delete = tx.prepare_cached(
                "DELETE FROM events WHERE seq IN (
                   SELECT seq FROM event_streams WHERE owner_key = ?1 AND stream_id = ?2) RETURNING bytes",
            )?;
            let mut unindex = tx.prepare_cached("DELETE FROM event_streams WHERE owner_key = ?1 AND stream_id = ?2")?;
            let mut out = CompactResponse { deleted_events: 0, reclaimed_bytes: 0 };
            let mut streams = 0i64;
            for stream in stream_ids {
                let mut rows = delete.query(params![owner.key, stream])?;
                let mut any = false;
                while let Some(row) = rows.next()? {
                    any = true;
                    out.deleted_events += 1;
                    out.reclaimed_bytes += row.get::<_, i64>(0)? as u64;
                }
                drop(rows);
                unindex.execute(params![owner.key, stream])?;
                streams += i64::from(any);
            }
            let d =
                Delta { bytes: -(out.reclaimed_bytes as i64), events: -(out.deleted_events as i64), streams: -streams };
            apply(tx, owner_id, d)?;
            Ok(out)
        })
    }

    fn close_owner(
        &self,
        owner_id: &str,
        token_hash: &str,
        now: &str,
        deadline: Deadline,
    ) -> Result<CloseResponse, StoreError> {
        // Marked closed (nothing of it readable from here on) and its counters settled in one
        // transaction; its log is then deleted in batches, so a large log never holds the writer
        // for long (a crash midway leaves the rest to the next compaction pass).
        let (closed, owner_key) = self.write(deadline, |tx| mark_closed(tx, owner_id, token_hash, now))?;
        if let Some(key) = owner_key {
            let mut report = CompactionReport::default();
            let until = Some(Instant::now() + crate::store::CLOSE_PURGE_BUDGET);
            match compact::purge_owner_log(self, key, &AtomicBool::new(false), until, &mut report) {
                Ok(true) => {}
                Ok(false) => tracing::info!("a closed owner's log is large: the next compaction pass deletes the rest"),
                Err(e) => {
                    tracing::warn!(error = %e, "a closed owner's log is not all deleted yet; the next compaction pass goes on")
                }
            }
        }
        Ok(closed)
    }

    fn blob_presence(&self, owner_id: &str, token_hash: &str, hash: &str) -> Result<BlobPresence, StoreError> {
        self.read(|conn| {
            let Some(owner) = owner_row(conn, owner_id)? else { return Ok(BlobPresence::UnknownOwner) };
            owners::authorize(&owner, token_hash)?;
            let found = conn
                .prepare_cached("SELECT 1 FROM blobs WHERE owner_id = ?1 AND hash = ?2")?
                .exists(params![owner_id, hash])?;
            Ok(if found { BlobPresence::Present } else { BlobPresence::Absent })
        })
    }

    fn put_blob(
        &self,
        owner_id: &str,
        token_hash: &str,
        hash: &str,
        data: BlobData<'_>,
        now: &str,
        register: MayRegister,
        deadline: Deadline,
    ) -> Result<BlobPutOutcome, StoreError> {
        let (quotas, rules) = (self.quotas, self.registration);
        self.write(deadline, |tx| {
            let owner = owner_or_register(tx, owner_id, token_hash, now, rules, register)?;
            let registered = owner.registered;
            let exists = tx
                .prepare_cached("SELECT 1 FROM blobs WHERE owner_id = ?1 AND hash = ?2")?
                .exists(params![owner_id, hash])?;
            if exists {
                return Ok(BlobPutOutcome { duplicate: true, registered });
            }
            if matches!(data, BlobData::External { .. }) && orphan_claimed(tx, owner_id, hash)? {
                return Err(super::object_being_swept());
            }
            let (size, bytes) = (data.size(), data.stored());
            check_quota(quotas, owner.stored_bytes, charged_total(tx)?, size)?;
            tx.prepare_cached(
                "INSERT INTO blobs (owner_id, hash, data, bytes, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![owner_id, hash, bytes, size as i64, now])?;
            apply(tx, owner_id, Delta { bytes: size as i64, ..Delta::default() })?;
            bump(tx, "blobs", 1)?;
            Ok(BlobPutOutcome { duplicate: false, registered })
        })
    }

    fn get_blob(&self, owner_id: &str, token_hash: &str, hash: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.read(|conn| {
            existing_owner(conn, owner_id, token_hash)?;
            Ok(conn
                .prepare_cached("SELECT data FROM blobs WHERE owner_id = ?1 AND hash = ?2")?
                .query_row(params![owner_id, hash], |r| r.get(0))
                .optional()?)
        })
    }

    fn account(&self, owner_id: &str, token_hash: &str, quota: u64) -> Result<AccountInfo, StoreError> {
        self.read(|conn| {
            // One snapshot for the owner row and the stream index's tail.
            let tx = conn.transaction()?;
            let owner = existing_owner(&tx, owner_id, token_hash)?;
            let streams = owner.stream_count + streams::pending_new_streams(&tx, owner.key)?;
            tx.commit()?;
            Ok(AccountInfo {
                owner_id: owner_id.to_owned(),
                quota_bytes: quota,
                used_bytes: owner.stored_bytes,
                used_pct: super::used_pct(owner.stored_bytes, quota),
                head_seq: owner.head_seq,
                streams,
                events: owner.event_count,
                created_at: owner.created_at,
            })
        })
    }

    fn compact_all(&self, now: &str, cancel: &AtomicBool) -> Result<CompactionReport, StoreError> {
        compact::compact_all(self, now, cancel)
    }

    fn compaction_times(&self) -> Result<(Option<String>, String), StoreError> {
        self.read(|conn| {
            let last: Option<String> = meta_get(conn, "last_compaction_at")?;
            let created: Option<String> = meta_get(conn, "created_at")?;
            Ok((last, created.unwrap_or_default()))
        })
    }

    fn closed_owners(&self) -> Result<Vec<String>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT owner_id FROM owners WHERE closed_at IS NOT NULL
                 AND NOT EXISTS (SELECT 1 FROM swept_owners s WHERE s.owner_id = owners.owner_id)",
            )?;
            let ids = stmt.query_map([], |r| r.get(0))?.collect::<Result<Vec<String>, _>>()?;
            Ok(ids)
        })
    }

    fn sweep_cursor(&self) -> Result<Option<String>, StoreError> {
        self.read(|conn| Ok(meta_get::<String>(conn, SWEEP_CURSOR)?.filter(|k| !k.is_empty())))
    }

    fn set_sweep_cursor(&self, key: Option<&str>) -> Result<(), StoreError> {
        self.write(None, |tx| set_meta(tx, SWEEP_CURSOR, &key.unwrap_or("")))
    }

    fn mark_objects_swept(&self, owner_id: &str, now: &str) -> Result<(), StoreError> {
        self.write(None, |tx| {
            tx.prepare_cached("INSERT OR IGNORE INTO swept_owners (owner_id, swept_at) VALUES (?1, ?2)")?
                .execute(params![owner_id, now])?;
            Ok(())
        })
    }

    fn claim_orphan(&self, owner_id: &str, hash: &str, hold: std::time::Duration) -> Result<bool, StoreError> {
        // One write transaction: the check and the claim cannot interleave with an upload's row.
        // One process writes this database, so its clock is the database's.
        let expires = (crate::clock::now_ms() + hold.as_millis() as u64) as i64;
        self.write(None, |tx| {
            let held = tx
                .prepare_cached("SELECT 1 FROM blobs WHERE owner_id = ?1 AND hash = ?2")?
                .exists(params![owner_id, hash])?;
            if held {
                return Ok(false);
            }
            // A renewal never shortens a claim.
            tx.prepare_cached(
                "INSERT INTO object_claims (owner_id, hash, expires_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT (owner_id, hash) DO UPDATE SET expires_ms = max(expires_ms, excluded.expires_ms)",
            )?
            .execute(params![owner_id, hash, expires])?;
            Ok(true)
        })
    }

    fn release_orphan_claims(&self) -> Result<u64, StoreError> {
        let now = crate::clock::now_ms() as i64;
        self.write(None, |tx| {
            Ok(tx.prepare_cached("DELETE FROM object_claims WHERE expires_ms < ?1")?.execute(params![now])? as u64)
        })
    }

    fn ready(&self) -> Result<(), StoreError> {
        self.read(|conn| {
            Ok(conn.query_row("SELECT count(*) FROM relay_meta", [], |r| r.get::<_, i64>(0)).map(|_| ())?)
        })
    }

    fn stats(&self) -> Result<RelayStats, StoreError> {
        let file_len = |p: PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let wal = PathBuf::from(format!("{}-wal", self.path.display()));
        self.read(|conn| {
            let tx = conn.transaction()?;
            let stats = RelayStats {
                owners: meta_u64(&tx, "owners")?,
                closed_owners: meta_u64(&tx, "closed_owners")?,
                events: meta_u64(&tx, "events")?,
                blobs: meta_u64(&tx, "blobs")?,
                total_bytes: meta_u64(&tx, "total_bytes")?,
                head_seq: meta_u64(&tx, "seq")?,
                last_compaction_at: meta_get(&tx, "last_compaction_at")?,
                last_compaction_deleted: meta_u64(&tx, "last_compaction_deleted")?,
                last_compaction_ms: meta_u64(&tx, "last_compaction_ms")?,
                database_bytes: file_len(self.path.clone()),
                wal_bytes: file_len(wal.clone()),
            };
            tx.commit()?;
            Ok(stats)
        })
    }

    fn checkpoint(&self) -> Result<CheckpointReport, StoreError> {
        self.mark.flush();
        self.indexer.stop();
        self.checkpointer.stop();
        lock(&self.readers).clear();
        let conn = lock(&self.writer);
        let (busy, log, done): (i64, i64, i64) =
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(CheckpointReport { busy: busy != 0, log_frames: log, checkpointed_frames: done })
    }
}
