//! Blob chunks in S3-compatible object storage (`BLOB_STORE_URL=s3://bucket/prefix`), with
//! their metadata row (owner, hash, size) in the database for presence, quota and close.
//!
//! A wrapper around either database backend: an upload goes to the object store **before** its
//! metadata commits (so a committed row always has its object), keyed
//! `{prefix}/{ownerId}/{hash}` (content-addressed: uploading the same chunk twice writes the
//! same bytes). An upload whose metadata is then refused leaves its object in place: another
//! upload of the same chunk may have committed a row that points at it meanwhile, and deleting
//! a chunk someone holds would lose data, while an orphan only costs storage. Closing an owner
//! deletes its objects (its whole key prefix) right after the rows; the maintenance pass
//! ([`ObjectBlobs::sweep_closed_owners`], at start and every few minutes) deletes the prefixes
//! of closed owners again until they are gone, so an outage during a close is caught up.
//! Every object-store call is bounded by the request timeout; its errors are logged with their
//! details, and clients hear only that the object store did not answer.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use futures_util::StreamExt as _;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use simplysync_protocol::wire::{AccountInfo, CloseResponse, CompactResponse};

use super::{
    BlobData, BlobPresence, BlobPutOutcome, CheckpointReport, CompactionReport, Deadline, MayRegister, NewEvent,
    OwnerState, PullPage, PushOutcome, RelayStats, RelayStore, StoreError,
};

/// Where chunks go: the bucket's store and the key prefix.
pub struct ObjectBlobs {
    inner: Arc<dyn RelayStore>,
    objects: Arc<dyn ObjectStore>,
    prefix: String,
    handle: tokio::runtime::Handle,
    timeout: std::time::Duration,
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
            handle: tokio::runtime::Handle::current(),
            timeout,
        }
    }

    /// Runs one object-store call on the runtime, within the timeout.
    fn call<T>(&self, fut: impl std::future::Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        self.handle.block_on(async {
            tokio::time::timeout(self.timeout, fut).await.unwrap_or_else(|_| {
                tracing::warn!(timeout_ms = self.timeout.as_millis() as u64, "object store call timed out");
                Err(StoreError::Busy("the object store did not answer in time; try again".into()))
            })
        })
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

    /// Deletes the objects of every closed owner (idempotent; after an outage it finishes what
    /// a close could not). Lists each closed owner's prefix: one LIST request per closed owner.
    pub fn sweep_closed_owners(&self) -> Result<u64, StoreError> {
        let mut deleted = 0;
        for owner in self.inner.closed_owners()? {
            deleted += self.call(self.delete_owner_objects(&owner))?;
        }
        Ok(deleted)
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
        if let Err(e) = self.call(self.delete_owner_objects(owner_id)) {
            tracing::warn!(error = %e, "a closed owner's blob objects are not deleted yet; the scheduled pass retries");
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
        self.handle.block_on(self.objects.put(&key, PutPayload::from(bytes.to_vec()))).map_err(object_error)?;
        let stored = self.inner.put_blob(owner_id, token_hash, hash, external, now, register, deadline);
        if stored.is_err() && !matches!(self.inner.blob_presence(owner_id, token_hash, hash), Ok(BlobPresence::Present))
        {
            // Refused (quota, registration, deadline): no row points at the object.
            let _ = self.handle.block_on(self.objects.delete(&key));
        }
        stored
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
        match self.sweep_closed_owners() {
            Ok(n) => {
                if n > 0 {
                    tracing::info!(objects = n, "deleted blob objects of closed owners");
                }
                Ok(n)
            }
            Err(e) => {
                tracing::warn!(error = %e, "closed owners' blob objects not deleted yet; the next pass retries");
                Err(e)
            }
        }
    }

    fn compaction_times(&self) -> Result<(Option<String>, String), StoreError> {
        self.inner.compaction_times()
    }

    fn closed_owners(&self) -> Result<Vec<String>, StoreError> {
        self.inner.closed_owners()
    }

    fn subscribe_heads(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<(String, u64)>> {
        self.inner.subscribe_heads()
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
