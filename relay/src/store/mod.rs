//! The relay's storage, behind one small trait so another backend (PostgreSQL, for many relay
//! processes) can replace SQLite without touching the HTTP layer.
//!
//! The trait is blocking: handlers call it on tokio's blocking pool. Every method that takes a
//! `token_hash` authenticates inside the same transaction that acts, so trust-on-first-use
//! registration and authentication cannot race.
//!
//! **Skip-proof pagination** is a storage contract: a reader that has seen seq *n* must never
//! later see a newly committed seq below *n*. The SQLite backend gets this from assigning seqs
//! inside its single serialized write transaction; another backend must provide the same
//! guarantee (e.g. by serializing seq assignment with commit).

pub mod sqlite;

use simplysync::protocol::wire::{AccountInfo, CloseResponse, CompactResponse};

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
    /// The database failed.
    #[error("database error: {0}")]
    Database(#[from] rusqlite::Error),
    /// The store could not be set up (directory, randomness).
    #[error("{0}")]
    Setup(String),
}

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
}

/// Relay-wide figures for the ops page and metrics.
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
}

/// The storage contract.
pub trait RelayStore: Send + Sync + 'static {
    /// The database's epoch id (random, fixed when the database was created).
    fn epoch(&self) -> &str;

    /// Stores a validated batch atomically: registers an unknown owner (TOFU), skips duplicates,
    /// and commits nothing if a quota would be exceeded.
    fn push(&self, owner_id: &str, token_hash: &str, events: &[NewEvent], now: &str)
        -> Result<PushOutcome, StoreError>;

    /// Reads up to `limit` events with seq > `after`, in seq order.
    fn pull(&self, owner_id: &str, token_hash: &str, after: u64, limit: u32) -> Result<PullPage, StoreError>;

    /// Deletes every event of the named streams and credits their bytes back.
    fn compact_streams(
        &self,
        owner_id: &str,
        token_hash: &str,
        stream_ids: &[String],
    ) -> Result<CompactResponse, StoreError>;

    /// Deletes the owner's events and blobs and marks it closed (idempotent).
    fn close_owner(&self, owner_id: &str, token_hash: &str, now: &str) -> Result<CloseResponse, StoreError>;

    /// Authenticates and checks whether a chunk is stored, without its bytes.
    fn blob_presence(&self, owner_id: &str, token_hash: &str, hash: &str) -> Result<BlobPresence, StoreError>;

    /// Stores a verified chunk (registers an unknown owner; quota-checked).
    fn put_blob(
        &self,
        owner_id: &str,
        token_hash: &str,
        hash: &str,
        bytes: &[u8],
        now: &str,
    ) -> Result<BlobPutOutcome, StoreError>;

    /// Reads a chunk.
    fn get_blob(&self, owner_id: &str, token_hash: &str, hash: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// The owner's account figures (`quota_bytes` and `used_pct` filled from `quota`).
    fn account(&self, owner_id: &str, token_hash: &str, quota: u64) -> Result<AccountInfo, StoreError>;

    /// Keeps only the newest event (max event id) of each (owner, stream); never reuses a seq.
    fn compact_all(&self, now: &str) -> Result<CompactionReport, StoreError>;

    /// Relay-wide figures.
    fn stats(&self) -> Result<RelayStats, StoreError>;

    /// Flushes the write-ahead log into the database file (on shutdown).
    fn checkpoint(&self) -> Result<(), StoreError>;
}
