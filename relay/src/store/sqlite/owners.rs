//! Owners: authentication (constant-time), trust-on-first-use registration under the relay's
//! rules, and the per-owner counters (bytes, events, streams) kept with every write.

use rusqlite::{params, Connection, OptionalExtension};

use super::schema::{bump, meta_u64};
pub(super) use crate::store::check_quota;
use crate::store::{MayRegister, Refusal, StoreError, OWNER_OVERHEAD_BYTES};

/// Who may register (trust on first use).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration {
    /// `REGISTRATION=open` (true) or `closed`.
    pub open: bool,
    /// `MAX_OWNERS`, if set.
    pub max_owners: Option<u64>,
}

impl Default for Registration {
    fn default() -> Self {
        Registration { open: true, max_owners: None }
    }
}

pub(super) struct OwnerRow {
    /// The owner's integer key: what its events are stored under.
    pub key: i64,
    pub token_hash: String,
    pub closed: bool,
    pub stored_bytes: u64,
    pub head_seq: u64,
    pub created_at: String,
    pub event_count: u64,
    pub stream_count: u64,
}

pub(super) fn owner_row(conn: &Connection, owner_id: &str) -> Result<Option<OwnerRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT token_hash, closed_at IS NOT NULL, stored_bytes, head_seq, created_at, event_count, stream_count,
                owner_key
         FROM owners WHERE owner_id = ?1",
    )?;
    Ok(stmt
        .query_row([owner_id], |r| {
            Ok(OwnerRow {
                token_hash: r.get(0)?,
                closed: r.get(1)?,
                stored_bytes: r.get::<_, i64>(2)?.max(0) as u64,
                head_seq: r.get::<_, i64>(3)?.max(0) as u64,
                created_at: r.get(4)?,
                event_count: r.get::<_, i64>(5)?.max(0) as u64,
                stream_count: r.get::<_, i64>(6)?.max(0) as u64,
                key: r.get(7)?,
            })
        })
        .optional()?)
}

/// Authenticates an existing owner (see [`crate::store::authorize`]).
pub(super) fn authorize(owner: &OwnerRow, token_hash: &str) -> Result<(), StoreError> {
    crate::store::authorize(&owner.token_hash, owner.closed, token_hash)
}

pub(super) fn existing_owner(conn: &Connection, owner_id: &str, token_hash: &str) -> Result<OwnerRow, StoreError> {
    let owner = owner_row(conn, owner_id)?.ok_or(StoreError::UnknownOwner)?;
    authorize(&owner, token_hash)?;
    Ok(owner)
}

/// What a write found or made of its owner.
pub(super) struct WriteOwner {
    pub key: i64,
    pub stored_bytes: u64,
    pub registered: bool,
}

/// Finds the owner or registers it with `token_hash` (trust on first use) if the relay's rules
/// and the caller allow. A new owner's key is one past the largest (owners are never deleted,
/// and the writer is one at a time, so keys are never reused).
pub(super) fn owner_or_register(
    conn: &Connection,
    owner_id: &str,
    token_hash: &str,
    now: &str,
    rules: Registration,
    register: MayRegister,
) -> Result<WriteOwner, StoreError> {
    if let Some(owner) = owner_row(conn, owner_id)? {
        authorize(&owner, token_hash)?;
        return Ok(WriteOwner { key: owner.key, stored_bytes: owner.stored_bytes, registered: false });
    }
    if !rules.open {
        return Err(StoreError::RegistrationRefused(Refusal::Closed));
    }
    if let Some(max) = rules.max_owners {
        if meta_u64(conn, "owners")? >= max {
            return Err(StoreError::RegistrationRefused(Refusal::Full(max)));
        }
    }
    if let MayRegister::Refused(why) = register {
        return Err(StoreError::RegistrationRefused(why));
    }
    let key: i64 = conn
        .prepare_cached(
            "INSERT INTO owners (owner_id, token_hash, created_at, owner_key)
             VALUES (?1, ?2, ?3, (SELECT coalesce(max(owner_key), 0) + 1 FROM owners)) RETURNING owner_key",
        )?
        .query_row(params![owner_id, token_hash, now], |r| r.get(0))?;
    bump(conn, "owners", 1)?;
    Ok(WriteOwner { key, stored_bytes: 0, registered: true })
}

/// The relay-wide total a write is checked against: the bytes stored, plus every registered
/// owner's [`OWNER_OVERHEAD_BYTES`] (an owner registered by this transaction included).
pub(super) fn charged_total(conn: &Connection) -> Result<u64, StoreError> {
    let owners = meta_u64(conn, "owners")?;
    Ok(meta_u64(conn, "total_bytes")?.saturating_add(owners.saturating_mul(OWNER_OVERHEAD_BYTES)))
}

/// What a write changed for one owner: bytes, events and streams (each may be negative).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Delta {
    pub bytes: i64,
    pub events: i64,
    pub streams: i64,
}

/// Applies `d` to the owner's counters and the relay's totals.
pub(super) fn apply(conn: &Connection, owner_id: &str, d: Delta) -> Result<(), StoreError> {
    if d.bytes == 0 && d.events == 0 && d.streams == 0 {
        return Ok(());
    }
    conn.prepare_cached(
        "UPDATE owners SET stored_bytes = max(0, stored_bytes + ?2), event_count = max(0, event_count + ?3),
                           stream_count = max(0, stream_count + ?4)
         WHERE owner_id = ?1",
    )?
    .execute(params![owner_id, d.bytes, d.events, d.streams])?;
    bump(conn, "total_bytes", d.bytes)?;
    bump(conn, "events", d.events)
}
