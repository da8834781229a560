//! Blob chunks in an object store under races and faults, driven in-process: uploads of the
//! same chunks whose object puts are delayed, whose presence checks fail and whose commit
//! acknowledgements are lost, while the orphan sweep runs with no grace period. Whatever
//! interleaving happens, a chunk the relay says it holds (HEAD 200) can be read (GET 200).
//! On SQLite, or on PostgreSQL with `SIMPLYSYNC_TEST_BACKEND=postgres` (scripts/test.sh runs both).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt as _,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use simplysync_protocol::identity::sha256_base64url;
use simplysync_protocol::wire::{AccountInfo, CloseResponse, CompactResponse};
use simplysync_relay::store::objects::ObjectBlobs;
use simplysync_relay::store::postgres::{PgOptions, PgStore};
use simplysync_relay::store::sqlite::{Quotas, Registration, SqliteStore, StoreOptions};
use simplysync_relay::store::{
    BlobData, BlobPresence, BlobPutOutcome, CheckpointReport, CompactionReport, Deadline, MayRegister, NewEvent,
    OwnerState, PullPage, PushOutcome, RelayStats, RelayStore, StoreError,
};

/// A tiny deterministic generator (each thread its own seed).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// An in-memory bucket whose puts take a while, and whose deletes fail for keys containing
/// `fail_deletes_of` (when set).
#[derive(Debug)]
struct SlowBucket {
    inner: Arc<InMemory>,
    put_delay_ms: AtomicU64,
    fail_deletes_of: std::sync::Mutex<Option<String>>,
}

impl std::fmt::Display for SlowBucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SlowBucket")
    }
}

#[async_trait::async_trait]
impl ObjectStore for SlowBucket {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let delay = self.put_delay_ms.load(Ordering::Relaxed);
        if delay > 0 {
            // Varies per key so that puts of one chunk overtake each other.
            let jitter = location.as_ref().len() as u64 % 7;
            tokio::time::sleep(Duration::from_millis(delay + jitter)).await;
        }
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let failing = self.fail_deletes_of.lock().unwrap().clone();
        use futures_util::StreamExt as _;
        match failing {
            None => self.inner.delete_stream(locations),
            Some(part) => {
                let inner = self.inner.clone();
                locations
                    .then(move |loc| {
                        let (inner, part) = (inner.clone(), part.clone());
                        async move {
                            let loc = loc?;
                            if loc.as_ref().contains(&part) {
                                return Err(object_store::Error::Generic {
                                    store: "SlowBucket",
                                    source: "the bucket refused this delete".into(),
                                });
                            }
                            let one = futures_util::stream::once(async move { Ok(loc) }).boxed();
                            inner.delete_stream(one).next().await.expect("one result")
                        }
                    })
                    .boxed()
            }
        }
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// A database whose presence checks sometimes fail and whose blob commits sometimes lose
/// their acknowledgement (the row is written; the caller hears an error).
struct FlakyDatabase {
    inner: Arc<dyn RelayStore>,
    faults: AtomicBool,
    calls: AtomicU64,
    /// Rolls to use first, in order (a scripted interleaving).
    script: std::sync::Mutex<std::collections::VecDeque<u64>>,
}

impl FlakyDatabase {
    /// 0..6 for this call, scattered (splitmix64 of a call counter) so that every pairing of
    /// faults comes up; 6 (no fault) while faults are off.
    fn roll(&self) -> u64 {
        if let Some(scripted) = self.script.lock().unwrap().pop_front() {
            return scripted;
        }
        let mut z = self.calls.fetch_add(1, Ordering::Relaxed).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        if self.faults.load(Ordering::Relaxed) {
            (z ^ (z >> 31)) % 6
        } else {
            6
        }
    }
}

fn lost() -> StoreError {
    StoreError::Busy("the database connection dropped before the answer".into())
}

impl RelayStore for FlakyDatabase {
    fn epoch(&self) -> String {
        self.inner.epoch()
    }
    fn authenticate(&self, o: &str, t: &str) -> Result<OwnerState, StoreError> {
        self.inner.authenticate(o, t)
    }
    fn push(
        &self,
        o: &str,
        t: &str,
        e: Vec<NewEvent>,
        now: &str,
        r: MayRegister,
        d: Deadline,
    ) -> Result<PushOutcome, StoreError> {
        self.inner.push(o, t, e, now, r, d)
    }
    fn pull(&self, o: &str, t: &str, after: u64, limit: u32, max: usize) -> Result<PullPage, StoreError> {
        self.inner.pull(o, t, after, limit, max)
    }
    fn compact_streams(&self, o: &str, t: &str, s: &[String], d: Deadline) -> Result<CompactResponse, StoreError> {
        self.inner.compact_streams(o, t, s, d)
    }
    fn close_owner(&self, o: &str, t: &str, now: &str, d: Deadline) -> Result<CloseResponse, StoreError> {
        self.inner.close_owner(o, t, now, d)
    }
    fn blob_presence(&self, o: &str, t: &str, h: &str) -> Result<BlobPresence, StoreError> {
        if self.roll() < 2 {
            return Err(lost());
        }
        self.inner.blob_presence(o, t, h)
    }
    fn put_blob(
        &self,
        o: &str,
        t: &str,
        h: &str,
        data: BlobData<'_>,
        now: &str,
        r: MayRegister,
        d: Deadline,
    ) -> Result<BlobPutOutcome, StoreError> {
        match self.roll() {
            // Refused before it commits (as a quota or a passed deadline would).
            0 => Err(StoreError::DeadlinePassed),
            // Committed, but the answer is lost.
            1 | 2 => self.inner.put_blob(o, t, h, data, now, r, d).and(Err(lost())),
            _ => self.inner.put_blob(o, t, h, data, now, r, d),
        }
    }
    fn get_blob(&self, o: &str, t: &str, h: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get_blob(o, t, h)
    }
    fn account(&self, o: &str, t: &str, q: u64) -> Result<AccountInfo, StoreError> {
        self.inner.account(o, t, q)
    }
    fn compact_all(&self, now: &str, c: &AtomicBool) -> Result<CompactionReport, StoreError> {
        self.inner.compact_all(now, c)
    }
    fn compaction_times(&self) -> Result<(Option<String>, String), StoreError> {
        self.inner.compaction_times()
    }
    fn closed_owners(&self) -> Result<Vec<String>, StoreError> {
        self.inner.closed_owners()
    }
    fn mark_objects_swept(&self, o: &str, now: &str) -> Result<(), StoreError> {
        self.inner.mark_objects_swept(o, now)
    }
    fn claim_orphan(&self, o: &str, h: &str, hold: Duration) -> Result<bool, StoreError> {
        self.inner.claim_orphan(o, h, hold)
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
    fn ready(&self) -> Result<(), StoreError> {
        self.inner.ready()
    }
    fn stats(&self) -> Result<RelayStats, StoreError> {
        self.inner.stats()
    }
    fn checkpoint(&self) -> Result<CheckpointReport, StoreError> {
        self.inner.checkpoint()
    }
}

struct Setup {
    _runtime: tokio::runtime::Runtime,
    dir: std::path::PathBuf,
    database: Arc<FlakyDatabase>,
    bucket: Arc<SlowBucket>,
    blobs: Arc<ObjectBlobs>,
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn setup(tag: &str, grace: Duration, hold: Duration) -> Setup {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = std::env::temp_dir().join(format!("simplysync-object-races-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let quotas = Quotas { max_owner_bytes: 1 << 30, max_total_bytes: 1 << 34 };
    let now = "2026-12-07T00:00:00.000Z";
    let inner: Arc<dyn RelayStore> = match common::backend() {
        common::Backend::Sqlite => {
            Arc::new(SqliteStore::open(&dir.join("relay.sqlite"), StoreOptions::new(quotas), now).unwrap())
        }
        _ => {
            let options = PgOptions {
                url: common::fresh_pg_database(),
                password: None,
                quotas,
                registration: Registration::default(),
                request_timeout_ms: 5000,
                pool_size: 8,
            };
            Arc::new(runtime.block_on(PgStore::open(options, "object-races", now)).unwrap())
        }
    };
    let database = Arc::new(FlakyDatabase {
        inner,
        faults: AtomicBool::new(false),
        calls: AtomicU64::new(0),
        script: Default::default(),
    });
    let bucket = Arc::new(SlowBucket {
        inner: Arc::new(InMemory::new()),
        put_delay_ms: AtomicU64::new(0),
        fail_deletes_of: std::sync::Mutex::new(None),
    });
    let blobs = {
        let _entered = runtime.enter();
        ObjectBlobs::with_store(database.clone(), bucket.clone(), "chunks", Duration::from_millis(500))
            .with_orphan_grace(grace)
            .with_claim_hold(hold)
    };
    Setup { _runtime: runtime, dir, database, bucket, blobs: Arc::new(blobs) }
}

const OWNER: &str = "AAAAAAAAAAAAAAAAAAAAAA";
const TOKEN_HASH: &str = "token-hash";
const NOW: &str = "2026-12-07T00:00:00.000Z";

fn chunk(i: u64) -> (String, Vec<u8>) {
    let bytes = format!("sealed chunk number {i}").into_bytes();
    (sha256_base64url(&bytes), bytes)
}

fn put(blobs: &ObjectBlobs, i: u64) -> Result<BlobPutOutcome, StoreError> {
    let (hash, bytes) = chunk(i);
    blobs.put_blob(OWNER, TOKEN_HASH, &hash, BlobData::Inline(&bytes), NOW, MayRegister::Yes, None)
}

/// Every chunk the database says it holds can be read back, with its bytes.
fn assert_held_chunks_readable(s: &Setup, chunks: u64) -> u64 {
    let mut held = 0;
    for i in 0..chunks {
        let (hash, bytes) = chunk(i);
        if s.database.inner.blob_presence(OWNER, TOKEN_HASH, &hash).unwrap() == BlobPresence::Present {
            held += 1;
            let got = s.blobs.get_blob(OWNER, TOKEN_HASH, &hash);
            assert_eq!(got.ok().flatten(), Some(bytes), "chunk {i}: HEAD answers 200, so GET must too");
        }
    }
    held
}

#[test]
fn a_held_chunk_stays_readable_under_delayed_puts_failed_checks_lost_acks_and_the_orphan_sweep() {
    // No grace at all: the sweep races every upload. Its claims hold uploads off for 800 ms, far
    // longer than an upload takes here (a put of ~20 ms, bounded by the 500 ms timeout).
    let s = setup("invariant", Duration::ZERO, Duration::from_millis(800));
    s.bucket.put_delay_ms.store(15, Ordering::Relaxed);
    s.database.faults.store(true, Ordering::Relaxed);
    const CHUNKS: u64 = 24;
    let stop = Arc::new(AtomicBool::new(false));
    let outcomes = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let mut workers = Vec::new();
    for seed in 1..=4u64 {
        let (blobs, stop, outcomes) = (s.blobs.clone(), stop.clone(), outcomes.clone());
        workers.push(std::thread::spawn(move || {
            let mut rng = Rng(seed * 0x9E37_79B9);
            while !stop.load(Ordering::Relaxed) {
                let ok = put(&blobs, rng.below(CHUNKS)).is_ok();
                outcomes[usize::from(!ok)].fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let sweeps = Arc::new(AtomicU64::new(0));
    {
        let (blobs, stop, sweeps) = (s.blobs.clone(), stop.clone(), sweeps.clone());
        workers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                sweeps.fetch_add(blobs.sweep_orphans().unwrap().deleted, Ordering::Relaxed);
                // Passes back to back on a slow database would hold every chunk claimed.
                std::thread::sleep(Duration::from_millis(20));
            }
        }));
    }
    let started = std::time::Instant::now();
    let mut checks = 0;
    // At least 4 s, and until both sides happened a few times (a loaded machine is slower).
    let enough = || outcomes[0].load(Ordering::Relaxed) >= 20 && sweeps.load(Ordering::Relaxed) >= 20;
    while started.elapsed() < Duration::from_secs(4) || (!enough() && started.elapsed() < Duration::from_secs(40)) {
        assert_held_chunks_readable(&s, CHUNKS);
        checks += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let held = assert_held_chunks_readable(&s, CHUNKS);
    let (ok, failed) = (outcomes[0].load(Ordering::Relaxed), outcomes[1].load(Ordering::Relaxed));
    eprintln!(
        "{ok} uploads answered, {failed} failed, {} orphans swept, {checks} checks, {held} held",
        sweeps.load(Ordering::Relaxed)
    );
    // The run exercised what it claims to: uploads on both sides of the faults, and the sweep.
    assert!(ok > 0 && failed > 0, "{ok} answered, {failed} failed");
    assert!(sweeps.load(Ordering::Relaxed) > 0, "the sweep deleted orphans left by failed uploads");
    assert!(held > 0);
}

#[test]
fn an_upload_whose_commit_answer_is_lost_and_whose_recheck_fails_keeps_its_object() {
    let s = setup("lost-ack", Duration::from_secs(3600), Duration::from_millis(300));
    // The presence check finds nothing, the commit's answer is lost, a check after it fails.
    s.database.script.lock().unwrap().extend([6, 1, 0]);
    assert!(put(&s.blobs, 3).is_err());
    assert_eq!(assert_held_chunks_readable(&s, 4), 1, "the row committed, and its object is there");
    // Refused before the commit: the object stays for the sweep, no row points at it.
    s.database.script.lock().unwrap().extend([6, 0, 0]);
    assert!(put(&s.blobs, 2).is_err());
    assert_eq!(assert_held_chunks_readable(&s, 4), 1);
}

#[test]
fn an_upload_is_refused_while_the_sweep_holds_its_chunk_and_goes_through_after() {
    // A long grace: the sweep below only releases the claim (the refused upload's object is young).
    let s = setup("claim", Duration::from_secs(3600), Duration::from_millis(300));
    let (hash, _) = chunk(1);
    assert!(s.database.claim_orphan(OWNER, &hash, Duration::from_millis(300)).unwrap());
    let refused = put(&s.blobs, 1).unwrap_err();
    assert!(matches!(refused, StoreError::Busy(_)), "{refused:?}");
    assert_eq!(s.database.inner.blob_presence(OWNER, TOKEN_HASH, &hash).unwrap(), BlobPresence::UnknownOwner);
    std::thread::sleep(Duration::from_millis(400));
    s.blobs.sweep_orphans().unwrap();
    assert!(!put(&s.blobs, 1).unwrap().duplicate);
    assert_eq!(assert_held_chunks_readable(&s, 2), 1);
    // A chunk with a row is never claimed.
    assert!(!s.database.claim_orphan(OWNER, &hash, Duration::from_millis(300)).unwrap());
}

#[test]
fn an_orphan_is_kept_through_its_grace_period_and_swept_after() {
    let s = setup("grace", Duration::from_millis(400), Duration::from_millis(300));
    let key = Path::from(format!("chunks/{OWNER}/{}", chunk(7).0));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(s.bucket.put(&key, PutPayload::from(b"left by a refused upload".to_vec()))).unwrap();
    let foreign = Path::from("chunks/not-ours/readme.txt");
    rt.block_on(s.bucket.put(&foreign, PutPayload::from(b"an operator's file".to_vec()))).unwrap();
    assert_eq!(s.blobs.sweep_orphans().unwrap().deleted, 0, "too young");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(s.blobs.sweep_orphans().unwrap().deleted, 1);
    assert!(rt.block_on(s.bucket.head(&key)).is_err());
    assert!(rt.block_on(s.bucket.head(&foreign)).is_ok(), "keys of another shape are left alone");
}

#[test]
fn the_orphan_sweep_goes_on_from_the_cursor_the_database_keeps_across_restarts() {
    let s = setup("cursor", Duration::ZERO, Duration::from_millis(300));
    let key = Path::from(format!("chunks/{OWNER}/{}", chunk(3).0));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(s.bucket.put(&key, PutPayload::from(b"left by a refused upload".to_vec()))).unwrap();
    // A process that sweeps after a restart finds the walk where the last pass left it: at
    // this key, so this pass goes on after it (finding nothing), and the walk wraps around.
    s.database.set_sweep_cursor(Some(key.as_ref())).unwrap();
    assert_eq!(s.blobs.sweep_orphans().unwrap().deleted, 0, "keys before the cursor wait for the next round");
    assert_eq!(s.database.sweep_cursor().unwrap(), None, "a short batch: the walk starts over");
    assert_eq!(s.blobs.sweep_orphans().unwrap().deleted, 1);
    assert!(rt.block_on(s.bucket.head(&key)).is_err());
}

#[test]
fn the_sweep_cursor_comes_back_as_the_key_it_was_even_where_keys_are_percent_encoded() {
    let s = setup("cursor-encoded", Duration::ZERO, Duration::from_millis(300));
    let rt = tokio::runtime::Runtime::new().unwrap();
    // A prefix with a character the object store encodes (`~` → `%7E`).
    let blobs = {
        let _entered = rt.enter();
        ObjectBlobs::with_store(s.database.clone(), s.bucket.clone(), "relay~prod", Duration::from_millis(500))
            .with_orphan_grace(Duration::ZERO)
    };
    let key = Path::from(format!("relay~prod/{OWNER}/{}", chunk(4).0));
    rt.block_on(s.bucket.put(&key, PutPayload::from(b"left by a refused upload".to_vec()))).unwrap();
    s.database.set_sweep_cursor(Some(key.as_ref())).unwrap();
    assert_eq!(blobs.sweep_orphans().unwrap().deleted, 0, "the walk goes on after the cursor's key");
    assert_eq!(blobs.sweep_orphans().unwrap().deleted, 1, "and wraps around to it");
}

#[test]
fn the_closed_owner_sweep_records_what_it_finished_and_goes_on_past_a_failure() {
    let s = setup("closed", Duration::from_secs(3600), Duration::from_millis(300));
    let owners = ["BBBBBBBBBBBBBBBBBBBBBB", "CCCCCCCCCCCCCCCCCCCCCC", "DDDDDDDDDDDDDDDDDDDDDD"];
    for (n, owner) in owners.iter().enumerate() {
        let bytes = vec![n as u8 + 1; 64];
        let hash = sha256_base64url(&bytes);
        s.blobs.put_blob(owner, TOKEN_HASH, &hash, BlobData::Inline(&bytes), NOW, MayRegister::Yes, None).unwrap();
        // Closed in the database only (as if the object store was down during the close).
        s.database.inner.close_owner(owner, TOKEN_HASH, NOW, None).unwrap();
    }
    *s.bucket.fail_deletes_of.lock().unwrap() = Some(owners[0].to_owned());
    let report = s.blobs.sweep_closed_owners().unwrap();
    assert_eq!((report.deleted, report.failed), (2, 1), "the failure did not stop the others");
    assert_eq!(s.database.closed_owners().unwrap(), vec![owners[0].to_owned()], "only the failed one is listed again");
    *s.bucket.fail_deletes_of.lock().unwrap() = None;
    assert_eq!(s.blobs.sweep_closed_owners().unwrap().deleted, 1);
    assert!(s.database.closed_owners().unwrap().is_empty(), "nothing left to list");
    assert_eq!(s.blobs.sweep_closed_owners().unwrap(), Default::default());
}
