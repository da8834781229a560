//! The relay's storage, behind one small trait with two backends: SQLite (embedded, one
//! process; the default) and PostgreSQL (`DATABASE_URL`, any number of relay processes).
//!
//! The trait is blocking: handlers call it on tokio's blocking pool. Every method that takes a
//! `token_hash` authenticates inside the same transaction that acts, so trust-on-first-use
//! registration and authentication cannot race.
//!
//! **Skip-proof pagination** is a storage contract: a reader that has seen seq *n* must never
//! later see a newly committed seq below *n*. The SQLite backend gets this from assigning seqs
//! inside its single serialized write transaction; another backend must provide the same
//! guarantee (e.g. by serializing seq assignment with commit).

pub mod objects;
pub mod postgres;
pub mod sqlite;

use simplysync_protocol::wire::{AccountInfo, CloseResponse, CompactResponse};

/// Why a store operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The owner is registered with another token.
    #[error("the bearer token does not match this owner")]
    Unauthorized,
    /// The owner has never been registered here.
    #[error("unknown owner")]
    UnknownOwner,
    /// The owner was closed; its valid token is refused for good.
    #[error("this owner was closed")]
    Closed,
    /// The request would exceed the owner's quota.
    #[error("owner quota exceeded: {used} + {adding} bytes > MAX_OWNER_BYTES {quota}")]
    OwnerQuota {
        /// Bytes stored now.
        used: u64,
        /// Bytes the request adds.
        adding: u64,
        /// The quota.
        quota: u64,
    },
    /// The request would exceed the relay-wide ceiling.
    #[error("relay storage full: {used} + {adding} bytes > MAX_TOTAL_BYTES {quota}")]
    TotalQuota {
        /// Bytes stored over all owners.
        used: u64,
        /// Bytes the request adds.
        adding: u64,
        /// The ceiling.
        quota: u64,
    },
    /// This relay does not take new owners (or not from this client right now).
    #[error("{0}")]
    RegistrationRefused(Refusal),
    /// The database (or its disk) is full; nothing was stored. Reads still work.
    #[error("the relay's storage is full ({0}); nothing was stored")]
    StorageFull(String),
    /// The database is busy (locked by another process); try again shortly.
    #[error("the relay's database is busy ({0}); try again")]
    Busy(String),
    /// The request's deadline passed before its write could start: nothing was done.
    #[error("the request's deadline passed before the write started; nothing was stored")]
    DeadlinePassed,
    /// The database failed (the backend's own message; logged, never sent to clients).
    #[error("database error: {0}")]
    Backend(String),
    /// The store could not be set up (directory, randomness).
    #[error("{0}")]
    Setup(String),
}

/// A wrong token is 401 even for a closed owner (a closed owner looks live to anyone without
/// its token); the right token on a closed owner is 410. Compared in constant time.
pub fn authorize(stored_token_hash: &str, closed: bool, token_hash: &str) -> Result<(), StoreError> {
    use subtle::ConstantTimeEq;
    if !bool::from(stored_token_hash.as_bytes().ct_eq(token_hash.as_bytes())) {
        return Err(StoreError::Unauthorized);
    }
    if closed {
        return Err(StoreError::Closed);
    }
    Ok(())
}

/// What each registered owner counts against `MAX_TOTAL_BYTES` besides the bytes it stores: its
/// records (owner row, token hash, counters, index entries, a page's worth). Without it, owners
/// that store nothing could be registered without end and fill a relay for everyone else;
/// with it, `MAX_TOTAL_BYTES` bounds them too. Owners are never deleted (a closed owner's row
/// stays), so neither is their charge.
pub const OWNER_OVERHEAD_BYTES: u64 = 4096;

/// How long a close spends deleting the closed owner's log before it answers; what is left
/// (it is invisible and counts nowhere) goes in the next compaction pass, in batches.
pub const CLOSE_PURGE_BUDGET: std::time::Duration = std::time::Duration::from_secs(2);

/// Refuses `adding` bytes past the owner's quota or the relay-wide ceiling.
pub fn check_quota(quotas: sqlite::Quotas, owner_used: u64, total_used: u64, adding: u64) -> Result<(), StoreError> {
    if owner_used + adding > quotas.max_owner_bytes {
        return Err(StoreError::OwnerQuota { used: owner_used, adding, quota: quotas.max_owner_bytes });
    }
    if total_used + adding > quotas.max_total_bytes {
        return Err(StoreError::TotalQuota { used: total_used, adding, quota: quotas.max_total_bytes });
    }
    Ok(())
}

/// `usedPct`: used ÷ quota × 100, rounded to 2 decimals (0 without a quota).
pub fn used_pct(used: u64, quota: u64) -> f64 {
    let pct = if quota == 0 { 0.0 } else { used as f64 * 100.0 / quota as f64 };
    (pct * 100.0).round() / 100.0
}

/// A new random epoch id (base64url of 16 bytes).
pub fn new_epoch() -> Result<String, StoreError> {
    use simplysync_protocol::entropy::{random_bytes, OsEntropy};
    let bytes = random_bytes::<16>(&mut OsEntropy).map_err(|e| StoreError::Setup(e.to_string()))?;
    Ok(simplysync_protocol::base64url::encode(&bytes))
}

impl StoreError {
    /// A short name of the kind, for metrics (`simplysync_db_errors_total{kind}`).
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::StorageFull(_) => "full",
            StoreError::Busy(_) => "busy",
            StoreError::Backend(_) => "other",
            StoreError::Setup(_) => "setup",
            _ => "none",
        }
    }
}

/// Why a new owner was not registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `REGISTRATION=closed`: only owners already known may push.
    Closed,
    /// `MAX_OWNERS` reached.
    Full(u64),
    /// This client registered too many owners lately (the HTTP layer's per-IP limit).
    RateLimited,
    /// `REGISTRATION=token` and the write's token was missing or not accepted.
    Token(crate::registration::TokenProblem),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Closed => f.write_str("this relay takes no new owners (REGISTRATION=closed)"),
            Refusal::Full(max) => write!(f, "this relay holds its maximum of {max} owners (MAX_OWNERS)"),
            Refusal::RateLimited => f.write_str("too many new owners from this client; try again later"),
            Refusal::Token(problem) => write!(f, "{problem}"),
        }
    }
}

/// Whether a request may register an unknown owner (trust on first use).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MayRegister {
    /// Yes, within the store's own rules (`REGISTRATION`, `MAX_OWNERS`).
    Yes,
    /// No, for this reason (the HTTP layer's: rate, token); an owner already known still writes.
    Refused(Refusal),
}

/// When a write must start by, if at all: a request the HTTP layer already answered (408)
/// must not still write once the writer gets to it.
pub type Deadline = Option<std::time::Instant>;

/// One validated envelope, ready to store.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// The envelope's event id.
    pub event_id: String,
    /// The envelope's stream id, if any.
    pub stream_id: Option<String>,
    /// The envelope as stored and served (serialized JSON).
    pub json: String,
}

/// What a push did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PushOutcome {
    /// Newly stored.
    pub accepted: u64,
    /// Already stored (same owner and event id), including forged ones.
    pub duplicate: u64,
    /// Duplicates whose envelope differs from the stored one: never overwritten.
    pub forged: u64,
    /// True when this push registered the owner.
    pub registered: bool,
    /// Bytes added to the owner's usage.
    pub added_bytes: u64,
    /// The owner's head seq after the push (0 when it stored nothing).
    pub head_seq: u64,
}

/// Whether an owner is known here (authentication without any write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerState {
    /// Registered, and the token matches.
    Known,
    /// Never registered: a push or blob upload would register it.
    Unknown,
}

/// One page of a pull.
#[derive(Debug, Clone, Default)]
pub struct PullPage {
    /// The stored envelopes, in seq order.
    pub events: Vec<String>,
    /// The seq of the last event returned.
    pub last_seq: Option<u64>,
    /// The last seq ever assigned to this owner.
    pub head_seq: u64,
}

/// Whether a blob chunk is already stored, checked before reading an upload's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobPresence {
    /// The owner has this chunk.
    Present,
    /// The owner exists (token verified) but lacks the chunk.
    Absent,
    /// The owner is unknown: an upload will register it (trust on first use).
    UnknownOwner,
}

/// A chunk's bytes as the database keeps them.
#[derive(Debug, Clone, Copy)]
pub enum BlobData<'a> {
    /// The bytes themselves (blobs in the database, the default).
    Inline(&'a [u8]),
    /// Only the size: the bytes were uploaded to the object store first.
    External {
        /// The chunk's length.
        size: u64,
    },
}

impl BlobData<'_> {
    /// The chunk's length.
    pub fn size(&self) -> u64 {
        match self {
            BlobData::Inline(b) => b.len() as u64,
            BlobData::External { size } => *size,
        }
    }

    /// What the database's data column holds (nothing for an external chunk).
    pub fn stored(&self) -> &[u8] {
        match self {
            BlobData::Inline(b) => b,
            BlobData::External { .. } => &[],
        }
    }
}

/// What a blob upload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobPutOutcome {
    /// True if it was already stored.
    pub duplicate: bool,
    /// True when this upload registered the owner.
    pub registered: bool,
}

/// What a compaction pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactionReport {
    /// Owners examined.
    pub owners: u64,
    /// Events removed.
    pub deleted_events: u64,
    /// Bytes reclaimed.
    pub reclaimed_bytes: u64,
    /// Wall time taken, ms.
    pub duration_ms: u64,
    /// The longest single write transaction of the pass, ms (how long it held the writer).
    pub longest_batch_ms: u64,
    /// False when it stopped early (shutdown); the next pass goes on.
    pub complete: bool,
}

/// What closing the database's write-ahead log into its file did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckpointReport {
    /// A reader or writer kept it from finishing.
    pub busy: bool,
    /// Frames in the log.
    pub log_frames: i64,
    /// Frames moved into the database.
    pub checkpointed_frames: i64,
}

/// Relay-wide figures for the ops page and metrics (maintained counters, never a scan).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Registered owners (open and closed).
    pub owners: u64,
    /// Closed owners.
    pub closed_owners: u64,
    /// Events stored.
    pub events: u64,
    /// Blob chunks stored.
    pub blobs: u64,
    /// Bytes stored over all owners.
    pub total_bytes: u64,
    /// Last seq assigned.
    pub head_seq: u64,
    /// When the last compaction ran (ISO), if ever.
    pub last_compaction_at: Option<String>,
    /// Events the last compaction removed.
    pub last_compaction_deleted: u64,
    /// How long the last compaction took, ms.
    pub last_compaction_ms: u64,
    /// The database file's size, bytes.
    pub database_bytes: u64,
    /// The write-ahead log's size, bytes.
    pub wal_bytes: u64,
}

/// The refusal of an upload whose object the orphan sweep is deleting (retry shortly).
pub fn object_being_swept() -> StoreError {
    StoreError::Busy("this chunk's storage is being cleaned up; upload it again in a minute".into())
}

/// The storage contract.
pub trait RelayStore: Send + Sync + 'static {
    /// The database's epoch id (random, fixed when the database was created).
    fn epoch(&self) -> String;

    /// Authenticates without writing: `Known` (the token matches), `Unknown` (not registered),
    /// or `Unauthorized` / `Closed`. Lets the HTTP layer answer 401/410 before it validates a
    /// body; the write re-checks in its own transaction.
    fn authenticate(&self, owner_id: &str, token_hash: &str) -> Result<OwnerState, StoreError>;

    /// Stores a validated batch atomically: registers an unknown owner (TOFU, if `register`
    /// and the relay's registration rules allow), skips duplicates, and commits nothing if a
    /// quota would be exceeded or `deadline` passed before the write could start.
    fn push(
        &self,
        owner_id: &str,
        token_hash: &str,
        events: Vec<NewEvent>,
        now: &str,
        register: MayRegister,
        deadline: Deadline,
    ) -> Result<PushOutcome, StoreError>;

    /// Reads up to `limit` events with seq > `after`, in seq order, stopping before the page
    /// passes `max_bytes` (always at least one event).
    fn pull(
        &self,
        owner_id: &str,
        token_hash: &str,
        after: u64,
        limit: u32,
        max_bytes: usize,
    ) -> Result<PullPage, StoreError>;

    /// Deletes every event of the named streams and credits their bytes back.
    fn compact_streams(
        &self,
        owner_id: &str,
        token_hash: &str,
        stream_ids: &[String],
        deadline: Deadline,
    ) -> Result<CompactResponse, StoreError>;

    /// Deletes the owner's events and blobs and marks it closed (idempotent).
    fn close_owner(
        &self,
        owner_id: &str,
        token_hash: &str,
        now: &str,
        deadline: Deadline,
    ) -> Result<CloseResponse, StoreError>;

    /// Authenticates and checks whether a chunk is stored, without its bytes.
    fn blob_presence(&self, owner_id: &str, token_hash: &str, hash: &str) -> Result<BlobPresence, StoreError>;

    /// Stores a verified chunk (registers an unknown owner like [`RelayStore::push`]; quota-checked):
    /// its bytes, or — when an object store holds them — only its size.
    #[allow(clippy::too_many_arguments)]
    fn put_blob(
        &self,
        owner_id: &str,
        token_hash: &str,
        hash: &str,
        data: BlobData<'_>,
        now: &str,
        register: MayRegister,
        deadline: Deadline,
    ) -> Result<BlobPutOutcome, StoreError>;

    /// Reads a chunk. An empty value means its bytes live in the object store (a stored chunk
    /// is never empty: uploads of zero bytes are refused).
    fn get_blob(&self, owner_id: &str, token_hash: &str, hash: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// The owner's account figures (`quota_bytes` and `used_pct` filled from `quota`), from
    /// maintained counters.
    fn account(&self, owner_id: &str, token_hash: &str, quota: u64) -> Result<AccountInfo, StoreError>;

    /// Keeps only the newest event (max event id) of each (owner, stream), in short batches;
    /// never reuses a seq. Stops at a safe point when `cancel` is set.
    fn compact_all(&self, now: &str, cancel: &std::sync::atomic::AtomicBool) -> Result<CompactionReport, StoreError>;

    /// When the last compaction ran (ISO), if ever; and when the database was created.
    fn compaction_times(&self) -> Result<(Option<String>, String), StoreError>;

    /// The ids of closed owners whose blob objects are not yet known to be gone.
    fn closed_owners(&self) -> Result<Vec<String>, StoreError>;

    /// Records that a closed owner's blob objects are all deleted (the sweep stops listing it).
    fn mark_objects_swept(&self, owner_id: &str, now: &str) -> Result<(), StoreError>;

    /// Claims the object-store key of a chunk no blob row points at, so the orphan sweep may
    /// delete its object: true (a claim that stands for `hold` from now, by the database's
    /// clock; a renewal never shortens it) when no row exists; false when one does. The check
    /// and the claim are one atomic step against uploads, and while the claim stands an upload
    /// of that chunk is refused ([`object_being_swept`]), so no row can come to point at an
    /// object the sweep is deleting.
    fn claim_orphan(&self, owner_id: &str, hash: &str, hold: std::time::Duration) -> Result<bool, StoreError>;

    /// Drops the claims whose hold has passed (by the database's clock); returns how many.
    fn release_orphan_claims(&self) -> Result<u64, StoreError>;

    /// The last object-store key the orphan sweep examined (it goes on after it), kept in the
    /// database: a restart does not send the sweep back to the bucket's start, and the relay's
    /// processes share one walk. None: from the start.
    fn sweep_cursor(&self) -> Result<Option<String>, StoreError>;

    /// Records where the orphan sweep goes on from (None: it wrapped around to the start).
    fn set_sweep_cursor(&self, key: Option<&str>) -> Result<(), StoreError>;

    /// Heads other relay processes commit, as `(owner, head seq)` notices (the PostgreSQL
    /// backend listens for them; a single-process store has none). Call within the runtime.
    fn subscribe_heads(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<(String, u64)>> {
        None
    }

    /// Periodic upkeep beyond compaction (deleting closed owners' blob objects); returns how
    /// many things it removed. Nothing to do by default.
    fn maintain(&self) -> Result<u64, StoreError> {
        Ok(0)
    }

    /// Whether the storage answers (`GET /ready`): the database, and the object store if one
    /// holds blob chunks. Cheap: one trivial query (and one cached object-store request).
    fn ready(&self) -> Result<(), StoreError>;

    /// Relay-wide figures.
    fn stats(&self) -> Result<RelayStats, StoreError>;

    /// Flushes the write-ahead log into the database file (on shutdown).
    fn checkpoint(&self) -> Result<CheckpointReport, StoreError>;
}
