//! Blob chunks in S3-compatible object storage (`BLOB_STORE_URL=s3://bucket/prefix`), with
//! their metadata row (owner, hash, size) in the database for presence, quota and close.
//!
//! A wrapper around either database backend. An upload puts its object, keyed
//! `{prefix}/{ownerId}/{hash}` (content-addressed: the same chunk always writes the same bytes),
//! **before** its metadata row commits, and the rule that keeps every row's object in place is
//! that **no request ever deletes an object**: an upload whose row is refused or whose commit is
//! uncertain leaves its object behind (another upload of the same chunk may point a row at it).
//! Only two passes delete, each proven safe by the database:
//! - the **orphan sweep** ([`ObjectBlobs::sweep_orphans`]) walks the bucket a batch of keys per
//!   pass and deletes an object older than the grace period (`BLOB_ORPHAN_GRACE_SECS`) only
//!   after the database claimed its key in the same step that found no row for it
//!   ([`RelayStore::claim_orphan`]); while the claim stands (twice the request timeout and a
//!   minute by the database's clock — longer than any upload can take, and an upload re-checks
//!   its deadline after it checked the claims), an upload of that chunk is refused with 503 and
//!   retried, so no row can come to point at an object being deleted. The delete itself goes
//!   out within half the hold of the claim, or waits for a later pass;
//! - closing an owner deletes its prefix after its rows are gone, and the **closed-owner sweep**
//!   ([`ObjectBlobs::sweep_closed_owners`]) finishes what a close could not, recording each
//!   owner once its prefix is empty so it is never listed again; one failure does not stop
//!   the pass.
//!
//! So HEAD 200 ⇒ GET 200 (tests/object_races.rs drives it under delayed puts, failed presence
//! checks and lost commit acknowledgements). Every object-store call runs under the request's
//! deadline (or the request timeout, for the sweeps); its errors are logged with their
//! details, and clients hear only that the object store did not answer.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt as _, PutPayload};
use simplysync_protocol::time::iso8601_from_ms;
use simplysync_protocol::wire::{AccountInfo, CloseResponse, CompactResponse};

use crate::clock::now_ms;

use super::{
    BlobData, BlobPresence, BlobPutOutcome, CheckpointReport, CompactionReport, Deadline, MayRegister, NewEvent,
    OwnerState, PullPage, PushOutcome, RelayStats, RelayStore, StoreError,
};

/// Keys the orphan sweep examines in one pass (a few LIST pages).
pub const ORPHAN_SWEEP_BATCH: usize = 10_000;

/// Where chunks go: the bucket's store and the key prefix.
pub struct ObjectBlobs {
    inner: Arc<dyn RelayStore>,
    objects: Arc<dyn ObjectStore>,
    prefix: String,
    /// The prefix as it appears in listed keys (the object store percent-encodes some
    /// characters of a key's parts, `~` as `%7E`).
    listed_prefix: String,
    handle: tokio::runtime::Handle,
    timeout: Duration,
    /// How old an object without a row must be before the orphan sweep deletes it.
    orphan_grace: Duration,
    claim_hold: Option<Duration>,
    /// When the object store was last probed for readiness, and whether it answered.
    object_store_seen: Mutex<Option<(Instant, bool)>>,
}

/// What one sweep pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Objects deleted.
    pub deleted: u64,
    /// Objects (or closed owners) that could not be handled this pass; the next pass retries.
    pub failed: u64,
}

impl std::fmt::Debug for ObjectBlobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectBlobs").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

/// Maps an object-store failure: details (endpoint, bucket, key, the store's own message) go to
/// the log only. Missing objects and refused credentials are not going to improve by retrying.
fn object_error(e: object_store::Error) -> StoreError {
    tracing::warn!(error = %e, "object store request failed");
    match e {
        object_store::Error::NotFound { .. }
        | object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. }
        | object_store::Error::NotSupported { .. } => StoreError::Backend(format!("object store: {e}")),
        _ => StoreError::Busy("the object store did not answer; try again".into()),
    }
}

/// Splits `s3://bucket/some/prefix` into the bucket and the prefix (without slashes at its ends).
pub fn parse_url(url: &str) -> Result<(String, String), String> {
    let rest = url.strip_prefix("s3://").ok_or("expected s3://bucket/prefix")?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err("the bucket is missing (s3://bucket/prefix)".into());
    }
    Ok((bucket.to_owned(), prefix.trim_matches('/').to_owned()))
}

impl ObjectBlobs {
    /// Wraps `inner`, keeping chunks in the S3 bucket of `url` (credentials, region and
    /// endpoint from the usual `AWS_*` environment variables). Call within a tokio runtime.
    pub fn open(
        inner: Arc<dyn RelayStore>,
        url: &str,
        timeout: std::time::Duration,
    ) -> Result<ObjectBlobs, StoreError> {
        let (bucket, prefix) = parse_url(url).map_err(|e| StoreError::Setup(format!("BLOB_STORE_URL: {e}")))?;
        let s3 = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .build()
            .map_err(|e| StoreError::Setup(format!("BLOB_STORE_URL: {e}")))?;
        Ok(ObjectBlobs::with_store(inner, Arc::new(s3), &prefix, timeout))
    }

    /// Sets how long an orphan claim holds off uploads (tests, with a short request timeout:
    /// it must stay longer than any upload can take).
    pub fn with_claim_hold(mut self, hold: Duration) -> ObjectBlobs {
        self.claim_hold = Some(hold);
        self
    }

    /// Sets how old an object without a metadata row must be before the orphan sweep deletes
    /// it (default one hour).
    pub fn with_orphan_grace(mut self, grace: Duration) -> ObjectBlobs {
        self.orphan_grace = grace;
        self
    }

    /// Wraps `inner` with any object store; each call to it is bounded by `timeout`.
    pub fn with_store(
        inner: Arc<dyn RelayStore>,
        objects: Arc<dyn ObjectStore>,
        prefix: &str,
        timeout: std::time::Duration,
    ) -> ObjectBlobs {
        ObjectBlobs {
            inner,
            objects,
            prefix: prefix.trim_matches('/').to_owned(),
            listed_prefix: Path::from(prefix.trim_matches('/')).as_ref().to_owned(),
            handle: tokio::runtime::Handle::current(),
            timeout,
            orphan_grace: Duration::from_secs(3600),
            claim_hold: None,
            object_store_seen: Mutex::new(None),
        }
    }

    /// Runs one object-store call on the runtime, within the request timeout.
    fn call<T>(&self, fut: impl std::future::Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        self.call_until(None, fut)
    }

    /// Runs one object-store call on the runtime, within the request timeout and before
    /// `deadline` (the request's, if any).
    fn call_until<T>(
        &self,
        deadline: Deadline,
        fut: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let budget = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()).min(self.timeout),
            None => self.timeout,
        };
        if budget.is_zero() {
            return Err(StoreError::DeadlinePassed);
        }
        self.handle.block_on(async {
            tokio::time::timeout(budget, fut).await.unwrap_or_else(|_| {
                tracing::warn!(timeout_ms = budget.as_millis() as u64, "object store call timed out");
                Err(StoreError::Busy("the object store did not answer in time; try again".into()))
            })
        })
    }

    /// How long an orphan claim holds off uploads of its chunk: longer than any upload that
    /// began before the claim can still take to commit (the request timeout), twice, and a
    /// minute — unless set by [`ObjectBlobs::with_claim_hold`].
    fn claim_hold(&self) -> Duration {
        self.claim_hold.unwrap_or(self.timeout * 2 + Duration::from_secs(60))
    }

    fn owner_prefix(&self, owner_id: &str) -> Path {
        if self.prefix.is_empty() {
            Path::from(owner_id)
        } else {
            Path::from(format!("{}/{owner_id}", self.prefix))
        }
    }

    fn key(&self, owner_id: &str, hash: &str) -> Path {
        self.owner_prefix(owner_id).join(hash)
    }

    /// Deletes every object under the owner's prefix; returns how many.
    async fn delete_owner_objects(&self, owner_id: &str) -> Result<u64, StoreError> {
        let prefix = self.owner_prefix(owner_id);
        let mut listing = self.objects.list(Some(&prefix));
        let mut keys = Vec::new();
        while let Some(meta) = listing.next().await {
            keys.push(meta.map_err(object_error)?.location);
        }
        for key in &keys {
            match self.objects.delete(key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(object_error(e)),
            }
        }
        Ok(keys.len() as u64)
    }

    /// Deletes the objects of every closed owner not yet swept, and records each one whose
    /// prefix is then empty (it is never listed again). A failure for one owner is logged and
    /// counted; the pass goes on with the others.
    pub fn sweep_closed_owners(&self) -> Result<SweepReport, StoreError> {
        let mut report = SweepReport::default();
        for owner in self.inner.closed_owners()? {
            match self.call(self.delete_owner_objects(&owner)) {
                Ok(n) => {
                    report.deleted += n;
                    if let Err(e) = self.inner.mark_objects_swept(&owner, &iso8601_from_ms(now_ms())) {
                        report.failed += 1;
                        tracing::warn!(error = %e, "could not record a closed owner's objects as deleted; the next pass checks again");
                    }
                }
                Err(e) => {
                    report.failed += 1;
                    tracing::warn!(error = %e, "a closed owner's blob objects are not deleted yet; the next pass retries");
                }
            }
        }
        Ok(report)
    }

    /// The owner id and hash of an object key this relay wrote (`{prefix}/{owner}/{hash}`),
    /// or None for a key of any other shape (left alone).
    fn parse_key(&self, key: &Path) -> Option<(String, String)> {
        let key = key.as_ref();
        let rest =
            if self.prefix.is_empty() { key } else { key.strip_prefix(&self.listed_prefix)?.strip_prefix('/')? };
        let (owner, hash) = rest.split_once('/')?;
        let b64 = |s: &str, len: usize| {
            s.len() == len && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        (b64(owner, 22) && b64(hash, 43)).then(|| (owner.to_owned(), hash.to_owned()))
    }

    /// Examines the next [`ORPHAN_SWEEP_BATCH`] keys of the bucket (wrapping around at its
    /// end) and deletes each object that is older than the grace period and that no metadata
    /// row points at, once the database has claimed its key. Also drops claims old enough
    /// that no upload they held off can still be running.
    pub fn sweep_orphans(&self) -> Result<SweepReport, StoreError> {
        let now = now_ms();
        self.inner.release_orphan_claims()?;
        // Stored as the key's text: parsed back as is (`Path::from` would encode it again).
        let after = self.inner.sweep_cursor()?.and_then(|k| Path::parse(k).ok());
        let root = (!self.prefix.is_empty()).then(|| Path::from(self.prefix.as_str()));
        let batch: Vec<ObjectMeta> = self.call(async {
            let mut listing = match &after {
                Some(after) => self.objects.list_with_offset(root.as_ref(), after),
                None => self.objects.list(root.as_ref()),
            };
            let mut batch = Vec::new();
            while batch.len() < ORPHAN_SWEEP_BATCH {
                match listing.next().await {
                    Some(meta) => batch.push(meta.map_err(object_error)?),
                    None => break,
                }
            }
            Ok(batch)
        })?;
        // S3 lists in key order; the largest key is the cursor either way.
        let next =
            if batch.len() < ORPHAN_SWEEP_BATCH { None } else { batch.iter().map(|m| &m.location).max().cloned() };
        if next != after {
            self.inner.set_sweep_cursor(next.as_ref().map(|p| p.as_ref()))?;
        }
        let old_enough = now.saturating_sub(self.orphan_grace.as_millis() as u64) as i64;
        let mut report = SweepReport::default();
        for meta in batch {
            if meta.last_modified.timestamp_millis() > old_enough {
                continue;
            }
            let Some((owner, hash)) = self.parse_key(&meta.location) else { continue };
            let hold = self.claim_hold();
            let claimed_at = Instant::now();
            match self.inner.claim_orphan(&owner, &hash, hold) {
                Ok(false) => {}
                // The delete goes out well inside the claim's hold, or not at all (a pass that
                // stalled — a paused process — leaves the object to a later one).
                Ok(true) => match self.call_until(Some(claimed_at + hold / 2), async {
                    match self.objects.delete(&meta.location).await {
                        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                        Err(e) => Err(object_error(e)),
                    }
                }) {
                    Ok(()) => report.deleted += 1,
                    Err(_) => report.failed += 1,
                },
                Err(e) => {
                    report.failed += 1;
                    tracing::warn!(error = %e, "could not claim an unreferenced blob object; the next pass retries");
                }
            }
        }
        Ok(report)
    }
}

impl RelayStore for ObjectBlobs {
    fn epoch(&self) -> String {
        self.inner.epoch()
    }

    fn authenticate(&self, owner_id: &str, token_hash: &str) -> Result<OwnerState, StoreError> {
        self.inner.authenticate(owner_id, token_hash)
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
        self.inner.push(owner_id, token_hash, events, now, register, deadline)
    }

    fn pull(
        &self,
        owner_id: &str,
        token_hash: &str,
        after: u64,
        limit: u32,
        max_bytes: usize,
    ) -> Result<PullPage, StoreError> {
        self.inner.pull(owner_id, token_hash, after, limit, max_bytes)
    }

    fn compact_streams(
        &self,
        owner_id: &str,
        token_hash: &str,
        stream_ids: &[String],
        deadline: Deadline,
    ) -> Result<CompactResponse, StoreError> {
        self.inner.compact_streams(owner_id, token_hash, stream_ids, deadline)
    }

    fn close_owner(
        &self,
        owner_id: &str,
        token_hash: &str,
        now: &str,
        deadline: Deadline,
    ) -> Result<CloseResponse, StoreError> {
        let closed = self.inner.close_owner(owner_id, token_hash, now, deadline)?;
        match self.call_until(deadline, self.delete_owner_objects(owner_id)) {
            Ok(_) => {
                if let Err(e) = self.inner.mark_objects_swept(owner_id, now) {
                    tracing::warn!(error = %e, "could not record a closed owner's objects as deleted; the pass checks again");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "a closed owner's blob objects are not deleted yet; the scheduled pass retries")
            }
        }
        Ok(closed)
    }

    fn blob_presence(&self, owner_id: &str, token_hash: &str, hash: &str) -> Result<BlobPresence, StoreError> {
        self.inner.blob_presence(owner_id, token_hash, hash)
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
        let BlobData::Inline(bytes) = data else {
            return self.inner.put_blob(owner_id, token_hash, hash, data, now, register, deadline);
        };
        let external = BlobData::External { size: bytes.len() as u64 };
        if self.inner.blob_presence(owner_id, token_hash, hash)? == BlobPresence::Present {
            return self.inner.put_blob(owner_id, token_hash, hash, external, now, register, deadline);
        }
        let key = self.key(owner_id, hash);
        let payload = PutPayload::from(bytes.to_vec());
        self.call_until(deadline, async { self.objects.put(&key, payload).await.map(|_| ()).map_err(object_error) })?;
        // Whatever the outcome, the object stays: a refused or uncertain commit leaves an orphan
        // for the sweep, never a row without its object (see the module's comment).
        self.inner.put_blob(owner_id, token_hash, hash, external, now, register, deadline)
    }

    fn get_blob(&self, owner_id: &str, token_hash: &str, hash: &str) -> Result<Option<Vec<u8>>, StoreError> {
        match self.inner.get_blob(owner_id, token_hash, hash)? {
            Some(inline) if !inline.is_empty() => Ok(Some(inline)),
            Some(_) => {
                let key = self.key(owner_id, hash);
                let bytes = self.call(async {
                    let got = self.objects.get(&key).await.map_err(|e| match e {
                        object_store::Error::NotFound { .. } => {
                            StoreError::Backend(format!("blob object {key} is missing from the object store"))
                        }
                        other => object_error(other),
                    })?;
                    got.bytes().await.map_err(object_error)
                })?;
                Ok(Some(bytes.to_vec()))
            }
            None => Ok(None),
        }
    }

    fn account(&self, owner_id: &str, token_hash: &str, quota: u64) -> Result<AccountInfo, StoreError> {
        self.inner.account(owner_id, token_hash, quota)
    }

    fn compact_all(&self, now: &str, cancel: &AtomicBool) -> Result<CompactionReport, StoreError> {
        let report = self.inner.compact_all(now, cancel);
        let _ = self.maintain();
        report
    }

    fn maintain(&self) -> Result<u64, StoreError> {
        let mut removed = 0;
        let mut first_error = None;
        for (what, pass) in [
            ("closed owners' blob objects", Self::sweep_closed_owners as fn(&Self) -> Result<SweepReport, StoreError>),
            ("unreferenced blob objects", Self::sweep_orphans),
        ] {
            match pass(self) {
                Ok(report) => {
                    if report.deleted > 0 || report.failed > 0 {
                        tracing::info!(deleted = report.deleted, failed = report.failed, "swept {what}");
                    }
                    removed += report.deleted;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not sweep {what}; the next pass retries");
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if removed == 0 => Err(e),
            _ => Ok(removed),
        }
    }

    fn compaction_times(&self) -> Result<(Option<String>, String), StoreError> {
        self.inner.compaction_times()
    }

    fn closed_owners(&self) -> Result<Vec<String>, StoreError> {
        self.inner.closed_owners()
    }

    fn mark_objects_swept(&self, owner_id: &str, now: &str) -> Result<(), StoreError> {
        self.inner.mark_objects_swept(owner_id, now)
    }

    fn claim_orphan(&self, owner_id: &str, hash: &str, hold: Duration) -> Result<bool, StoreError> {
        self.inner.claim_orphan(owner_id, hash, hold)
    }

    fn release_orphan_claims(&self) -> Result<u64, StoreError> {
        self.inner.release_orphan_claims()
    }

    fn sweep_cursor(&self) -> Result<Option<String>, StoreError> {
        self.inner.sweep_cursor()
    }

    fn set_sweep_cursor(&self, key: Option<&str>) -> Result<(), StoreError> {
        self.inner.set_sweep_cursor(key)
    }

    fn subscribe_heads(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<(String, u64)>> {
        self.inner.subscribe_heads()
    }

    fn ready(&self) -> Result<(), StoreError> {
        self.inner.ready()?;
        // One request to the bucket per couple of seconds at most, however often probes come;
        // its answer (either way) is reused meanwhile, and no probe waits behind another's.
        let cached = *self.object_store_seen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, answered)) = cached.filter(|(at, _)| at.elapsed() < Duration::from_secs(2)) {
            return if answered {
                Ok(())
            } else {
                Err(StoreError::Busy("the object store did not answer; try again".into()))
            };
        }
        let probe = match self.prefix.is_empty() {
            true => Path::from(".ready"),
            false => Path::from(format!("{}/.ready", self.prefix)),
        };
        let answer = self.call_until(Some(Instant::now() + Duration::from_secs(5)), async {
            match self.objects.head(&probe).await {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(object_error(e)),
            }
        });
        *self.object_store_seen.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), answer.is_ok()));
        answer
    }

    fn stats(&self) -> Result<RelayStats, StoreError> {
        self.inner.stats()
    }

    fn checkpoint(&self) -> Result<CheckpointReport, StoreError> {
        self.inner.checkpoint()
    }
}

#[cfg(test)]
mod tests {
    use super::parse_url;

    #[test]
    fn the_url_names_a_bucket_and_a_prefix() {
        assert_eq!(parse_url("s3://chunks/relay/eu/").unwrap(), ("chunks".into(), "relay/eu".into()));
        assert_eq!(parse_url("s3://chunks").unwrap(), ("chunks".into(), String::new()));
        assert!(parse_url("https://chunks").is_err());
        assert!(parse_url("s3:///x").is_err());
    }
}
