//! The PostgreSQL backend (`DATABASE_URL=postgres://…`): any number of relay processes share
//! one database.
//!
//! - **Skip-proof pulls across processes.** A push locks its owner's row (`SELECT … FOR
//!   UPDATE`) before it takes seqs from the `event_seq` sequence, and holds it until commit: an
//!   owner's pushes run one after another, so its seqs commit in increasing order and a reader
//!   that saw seq *n* never later sees a new seq below *n* for that owner. (Seqs of different
//!   owners interleave freely; cursors are per owner.)
//! - **Trust on first use** is `INSERT … ON CONFLICT DO NOTHING` on the owner's primary key,
//!   then the same row lock: of racing first pushes through different processes exactly one
//!   token registers; the others get 401.
//! - **Quotas.** The owner quota is checked under the owner's row lock (exact under any
//!   concurrency). `MAX_TOTAL_BYTES` is checked against a relay-wide sum each process re-reads
//!   at most every [`TOTAL_REFRESH`] plus what it added since: an approximation that can
//!   overshoot by what other processes store within that window.
//! - **Timeouts.** Every connection runs with `statement_timeout` = the request timeout and
//!   `lock_timeout` = half of it; a pool wait is bounded the same way. Locks and timeouts
//!   answer `Busy` (503), a full disk `StorageFull` (507).
//! - The trait is blocking (handlers call it on tokio's blocking pool); this backend drives the
//!   async driver (tokio-postgres with a deadpool pool) on the runtime it was opened on.

mod compact;
mod import;
mod schema;
mod tls;

pub use import::ImportReport;

use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Object, Pool, RecyclingMethod, Transaction};
use simplysync_protocol::wire::{AccountInfo, CloseResponse, CompactResponse};
use tokio_postgres::error::SqlState;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::sqlite::{Quotas, Registration};
use super::OWNER_OVERHEAD_BYTES;

/// What registering counts against `MAX_TOTAL_BYTES` ([`OWNER_OVERHEAD_BYTES`]), if this write did.
fn charge_of(registered: bool) -> i64 {
    if registered {
        OWNER_OVERHEAD_BYTES as i64
    } else {
        0
    }
}
use super::{
    BlobData, BlobPresence, BlobPutOutcome, CheckpointReport, CompactionReport, Deadline, MayRegister, NewEvent,
    OwnerState, PullPage, PushOutcome, Refusal, RelayStats, RelayStore, StoreError,
};

/// How stale the relay-wide byte total may be before a process re-reads it.
pub const TOTAL_REFRESH: Duration = Duration::from_secs(5);

/// Maps a driver error: full disk, lock and timeout conditions by their SQLSTATE.
pub(super) fn pg_error(e: tokio_postgres::Error) -> StoreError {
    let text = e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_owned());
    match e.code() {
        Some(c) if *c == SqlState::DISK_FULL => StoreError::StorageFull(text),
        Some(c)
            if *c == SqlState::LOCK_NOT_AVAILABLE
                || *c == SqlState::QUERY_CANCELED
                || *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::T_R_DEADLOCK_DETECTED
                || *c == SqlState::TOO_MANY_CONNECTIONS
                || *c == SqlState::CANNOT_CONNECT_NOW
                || *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::OUT_OF_MEMORY
                || c.code().starts_with("08") =>
        {
            StoreError::Busy(text)
        }
        Some(_) => StoreError::Backend(text),
        // Not the server's answer: the connection failed or was lost.
        None => StoreError::Busy(format!("the database did not answer: {text}")),
    }
}

/// How the PostgreSQL store is opened.
#[derive(Clone)]
pub struct PgOptions {
    /// `postgres://user:password@host:port/database` (never logged: see [`redact`]).
    pub url: String,
    /// The password, when it does not travel in the URL (`DATABASE_PASSWORD_FILE`).
    pub password: Option<String>,
    /// Quotas.
    pub quotas: Quotas,
    /// Who may register.
    pub registration: Registration,
    /// The request timeout, ms: statement timeout, and twice the lock and pool waits.
    pub request_timeout_ms: u64,
    /// Connections in this process's pool.
    pub pool_size: usize,
}

impl std::fmt::Debug for PgOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgOptions").field("url", &redact(&self.url)).finish_non_exhaustive()
    }
}

/// A URL without its password (for logs and errors): the userinfo's and a `password=` query
/// parameter's.
pub fn redact(url: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let base = match (base.find("://"), base.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let userinfo = &base[s + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{}:***{}", &base[..s + 3], user, &base[at..])
        }
        _ => base.to_owned(),
    };
    match query {
        None => base,
        Some(q) => {
            let params: Vec<String> = q
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => p.to_owned(),
                })
                .collect();
            format!("{base}?{}", params.join("&"))
        }
    }
}

/// The PostgreSQL relay store.
pub struct PgStore {
    pool: Pool,
    handle: tokio::runtime::Handle,
    epoch: String,
    quotas: Quotas,
    registration: Registration,
    /// The relay-wide byte total as last read, when (never: `None`), and what this process
    /// added since.
    total: Mutex<(i64, Option<Instant>, i64)>,
    request_timeout: Duration,
    /// How to open the connection that listens for other processes' heads.
    listen_config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    /// Owners, closed owners, events, blobs and bytes summed over the owners, and when.
    owner_totals: Mutex<Option<(Instant, [u64; 5])>>,
}

/// How long the relay-wide sums over owners (`/metrics`, `/ops/stats`) are reused.
const STATS_TTL: Duration = Duration::from_secs(30);

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("epoch", &self.epoch).finish_non_exhaustive()
    }
}

struct OwnerRow {
    token_hash: String,
    closed: bool,
    stored_bytes: i64,
    head_seq: i64,
    created_at: String,
    event_count: i64,
    stream_count: i64,
}

const OWNER_COLUMNS: &str =
    "token_hash, closed_at IS NOT NULL, stored_bytes, head_seq, created_at, event_count, stream_count";

fn owner_from(r: &tokio_postgres::Row) -> OwnerRow {
    OwnerRow {
        token_hash: r.get(0),
        closed: r.get(1),
        stored_bytes: r.get(2),
        head_seq: r.get(3),
        created_at: r.get(4),
        event_count: r.get(5),
        stream_count: r.get(6),
    }
}

fn authorize(owner: &OwnerRow, token_hash: &str) -> Result<(), StoreError> {
    super::authorize(&owner.token_hash, owner.closed, token_hash)
}

async fn owner_row(c: &impl GenericClient, owner_id: &str, lock: bool) -> Result<Option<OwnerRow>, StoreError> {
    let sql =
        format!("SELECT {OWNER_COLUMNS} FROM owners WHERE owner_id = $1{}", if lock { " FOR UPDATE" } else { "" });
    let statement = c.prepare_cached(&sql).await.map_err(pg_error)?;
    Ok(c.query_opt(&statement, &[&owner_id]).await.map_err(pg_error)?.as_ref().map(owner_from))
}

async fn existing_owner(
    c: &impl GenericClient,
    owner_id: &str,
    token_hash: &str,
    lock: bool,
) -> Result<OwnerRow, StoreError> {
    let owner = owner_row(c, owner_id, lock).await?.ok_or(StoreError::UnknownOwner)?;
    authorize(&owner, token_hash)?;
    Ok(owner)
}

/// The connection settings of `DATABASE_URL` and its TLS (`sslmode`, `sslrootcert`: tls.rs),
/// with the password from `DATABASE_PASSWORD_FILE` if one was given (the configuration refuses
/// a URL that carries one too).
pub fn pg_config(url: &str, password: Option<&str>) -> Result<(tokio_postgres::Config, MakeRustlsConnect), StoreError> {
    let (driver_url, mode, root) =
        tls::split_ssl_params(url).map_err(|e| StoreError::Setup(format!("DATABASE_URL: {e}")))?;
    let connector =
        tls::connector(mode, root.as_deref()).map_err(|e| StoreError::Setup(format!("DATABASE_URL: {e}")))?;
    let mut config: tokio_postgres::Config =
        driver_url.parse().map_err(|e| StoreError::Setup(format!("DATABASE_URL {}: {e}", redact(url))))?;
    if let Some(password) = password {
        config.password(password);
    }
    Ok((config, connector))
}

/// An error and its causes in one line (a driver's connection error names only its kind; the
/// reason — a certificate's issuer, the server's refusal — is in its sources).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let part = cause.to_string();
        if !text.contains(&part) {
            text = format!("{text}: {part}");
        }
        next = cause.source();
    }
    text
}

/// A transaction-scoped lock on one chunk's object key, shared by uploads and the orphan sweep.
async fn lock_object_key(tx: &Transaction<'_>, owner_id: &str, hash: &str) -> Result<(), StoreError> {
    let key = format!("{owner_id}/{hash}");
    tx.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", &[&key]).await.map_err(pg_error)?;
    Ok(())
}

fn passed(deadline: Deadline) -> Result<(), StoreError> {
    match deadline {
        Some(d) if Instant::now() >= d => Err(StoreError::DeadlinePassed),
        _ => Ok(()),
    }
}

impl PgStore {
    /// Connects, runs the migrations and reads the epoch. Call from within a tokio runtime
    /// (multi-threaded): the store keeps using it.
    pub async fn open(options: PgOptions, fresh_epoch: &str, now: &str) -> Result<PgStore, StoreError> {
        let (mut config, tls) = pg_config(&options.url, options.password.as_deref())?;
        let statement = options.request_timeout_ms.max(100);
        config.options(format!("-c statement_timeout={statement} -c lock_timeout={}", (statement / 2).max(50)));
        config.connect_timeout(Duration::from_millis(statement.min(10_000)));
        let listen_config = config.clone();
        let manager =
            Manager::from_config(config, tls.clone(), ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_millis((statement / 2).max(50))))
            .create_timeout(Some(Duration::from_millis(statement.min(10_000))))
            .build()
            .map_err(|e| StoreError::Setup(format!("PostgreSQL pool: {e}")))?;
        let mut client = pool.get().await.map_err(|e| {
            StoreError::Setup(format!("cannot connect to {}: {}", redact(&options.url), error_chain(&e)))
        })?;
        let epoch = schema::migrate(&mut client, fresh_epoch, now).await?;
        drop(client);
        Ok(PgStore {
            pool,
            handle: tokio::runtime::Handle::current(),
            epoch,
            quotas: options.quotas,
            registration: options.registration,
            total: Mutex::new((0, None, 0)),
            request_timeout: Duration::from_millis(statement),
            listen_config,
            tls,
            owner_totals: Mutex::new(None),
        })
    }

    fn run<T>(&self, fut: impl std::future::Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        self.handle.block_on(fut)
    }

    async fn client(&self) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(e) => pg_error(e),
            other => StoreError::Busy(format!("no database connection free: {other}")),
        })
    }

    /// Finds the owner under its row lock, or registers it (trust on first use) within the
    /// relay's rules; returns its stored bytes and whether it registered.
    async fn owner_or_register(
        &self,
        tx: &Transaction<'_>,
        owner_id: &str,
        token_hash: &str,
        now: &str,
        register: MayRegister,
    ) -> Result<(i64, bool), StoreError> {
        if let Some(owner) = owner_row(tx, owner_id, true).await? {
            authorize(&owner, token_hash)?;
            return Ok((owner.stored_bytes, false));
        }
        let rules = self.registration;
        if !rules.open {
            return Err(StoreError::RegistrationRefused(Refusal::Closed));
        }
        if let Some(max) = rules.max_owners {
            // Registrations take turns while a cap applies, so concurrent ones cannot overshoot it.
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&schema::LOCK_REGISTER]).await.map_err(pg_error)?;
            let n: i64 = tx.query_one("SELECT count(*) FROM owners", &[]).await.map_err(pg_error)?.get(0);
            if n as u64 >= max {
                return Err(StoreError::RegistrationRefused(Refusal::Full(max)));
            }
        }
        if let MayRegister::Refused(why) = register {
            return Err(StoreError::RegistrationRefused(why));
        }
        let inserted = tx
            .execute(
                "INSERT INTO owners (owner_id, token_hash, created_at) VALUES ($1, $2, $3)
                 ON CONFLICT (owner_id) DO NOTHING",
                &[&owner_id, &token_hash, &now],
            )
            .await
            .map_err(pg_error)?;
        // Another process may have registered it first: its token wins, ours is checked.
        let owner = owner_row(tx, owner_id, true).await?.ok_or(StoreError::UnknownOwner)?;
        authorize(&owner, token_hash)?;
        Ok((owner.stored_bytes, inserted == 1))
    }

    /// The relay-wide total a write in `c` is checked against — bytes stored plus each owner's
    /// [`OWNER_OVERHEAD_BYTES`], the owner `c` is registering (`registering`) included —
    /// re-read at most every [`TOTAL_REFRESH`].
    async fn total_bytes(&self, c: &impl GenericClient, registering: bool) -> Result<i64, StoreError> {
        {
            let t = self.total.lock().unwrap_or_else(|p| p.into_inner());
            if t.1.is_some_and(|at| at.elapsed() < TOTAL_REFRESH) {
                return Ok(t.0 + t.2 + charge_of(registering));
            }
        }
        let sum: i64 = c
            .query_one(
                "SELECT (coalesce(sum(stored_bytes), 0) + count(*) * $1)::BIGINT FROM owners",
                &[&(OWNER_OVERHEAD_BYTES as i64)],
            )
            .await
            .map_err(pg_error)?
            .get::<_, i64>(0);
        // The sum saw this transaction's own new owner row: the cache keeps what is committed.
        let committed = sum - charge_of(registering);
        *self.total.lock().unwrap_or_else(|p| p.into_inner()) = (committed, Some(Instant::now()), 0);
        Ok(sum)
    }

    fn added_total(&self, bytes: i64) {
        self.total.lock().unwrap_or_else(|p| p.into_inner()).2 += bytes;
    }

    /// Drops the cached sums over owners (after a compaction pass: the next read sums afresh).
    pub(super) fn forget_totals(&self) {
        *self.owner_totals.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Moves the cached sums over owners (see [`STATS_TTL`]) by what this process just
    /// committed: `[owners, closed owners, events, blobs, bytes]`. Other processes' writes show
    /// when the cache is next refreshed.
    fn adjust_totals(&self, delta: [i64; 5]) {
        if let Some((_, totals)) = self.owner_totals.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            for (t, d) in totals.iter_mut().zip(delta) {
                *t = (*t as i64).saturating_add(d).max(0) as u64;
            }
        }
    }

    fn check_quota(&self, owner_used: i64, total_used: i64, adding: i64) -> Result<(), StoreError> {
        super::check_quota(self.quotas, owner_used.max(0) as u64, total_used.max(0) as u64, adding.max(0) as u64)
    }

    async fn push_async(
        &self,
        owner_id: &str,
        token_hash: &str,
        events: &[NewEvent],
        now: &str,
        register: MayRegister,
        deadline: Deadline,
    ) -> Result<PushOutcome, StoreError> {
        passed(deadline)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let (owner_bytes, registered) = self.owner_or_register(&tx, owner_id, token_hash, now, register).await?;
        // The row lock may have waited for another push of this owner.
        passed(deadline)?;
        let mut out = PushOutcome { registered, ..PushOutcome::default() };
        let ids: Vec<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
        let stored: std::collections::HashMap<String, String> = tx
            .query(
                &tx.prepare_cached("SELECT event_id, envelope FROM events WHERE owner_id = $1 AND event_id = ANY($2)")
                    .await
                    .map_err(pg_error)?,
                &[&owner_id, &ids],
            )
            .await
            .map_err(pg_error)?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let mut batch: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
        let mut fresh: Vec<&NewEvent> = Vec::new();
        for ev in events {
            let known =
                stored.get(&ev.event_id).map(String::as_str).or_else(|| batch.get(ev.event_id.as_str()).copied());
            match known {
                Some(json) => {
                    out.duplicate += 1;
                    out.forged += u64::from(json != ev.json);
                }
                None => {
                    batch.insert(&ev.event_id, &ev.json);
                    fresh.push(ev);
                }
            }
        }
        let added: i64 = fresh.iter().map(|e| e.json.len() as i64).sum();
        let total = self.total_bytes(&tx, registered).await?;
        self.check_quota(owner_bytes, total, added)?;
        if !fresh.is_empty() {
            let stream_ids: Vec<&str> = fresh.iter().filter_map(|e| e.stream_id.as_deref()).collect();
            let known_streams: std::collections::HashSet<String> = tx
                .query(
                    &tx.prepare_cached(
                        "SELECT DISTINCT stream_id FROM events WHERE owner_id = $1 AND stream_id = ANY($2)",
                    )
                    .await
                    .map_err(pg_error)?,
                    &[&owner_id, &stream_ids],
                )
                .await
                .map_err(pg_error)?
                .iter()
                .map(|r| r.get(0))
                .collect();
            let new_streams: std::collections::HashSet<&str> =
                stream_ids.iter().copied().filter(|s| !known_streams.contains(*s)).collect();
            let event_ids: Vec<&str> = fresh.iter().map(|e| e.event_id.as_str()).collect();
            let streams: Vec<Option<&str>> = fresh.iter().map(|e| e.stream_id.as_deref()).collect();
            let envelopes: Vec<&str> = fresh.iter().map(|e| e.json.as_str()).collect();
            let sizes: Vec<i64> = fresh.iter().map(|e| e.json.len() as i64).collect();
            // Seqs in batch order, taken only now (under the owner's lock). The conflict target
            // is the (owner, event id) key alone: any other conflict is an error.
            let head: Option<i64> = tx
                .query_one(
                    &tx.prepare_cached(
                        "WITH ins AS (
                       INSERT INTO events (seq, owner_id, event_id, stream_id, envelope, bytes)
                       SELECT nextval('event_seq'), $1, e.event_id, e.stream_id, e.envelope, e.bytes
                       FROM (SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[])
                               WITH ORDINALITY AS u(event_id, stream_id, envelope, bytes, ord)
                             ORDER BY ord) AS e
                       ON CONFLICT (owner_id, event_id) DO NOTHING
                       RETURNING seq)
                     SELECT max(seq) FROM ins",
                    )
                    .await
                    .map_err(pg_error)?,
                    &[&owner_id, &event_ids, &streams, &envelopes, &sizes],
                )
                .await
                .map_err(pg_error)?
                .get(0);
            out.accepted = fresh.len() as u64;
            out.head_seq = head.unwrap_or(0).max(0) as u64;
            // Delivered at commit to every relay process listening (live waiters).
            tx.execute(
                &tx.prepare_cached("SELECT pg_notify('simplysync_heads', $1)").await.map_err(pg_error)?,
                &[&format!("{owner_id} {}", out.head_seq)],
            )
            .await
            .map_err(pg_error)?;
            out.added_bytes = added as u64;
            tx.execute(
                &tx.prepare_cached(
                    "UPDATE owners SET stored_bytes = stored_bytes + $2, event_count = event_count + $3,
                                   stream_count = stream_count + $4, head_seq = greatest(head_seq, $5)
                 WHERE owner_id = $1",
                )
                .await
                .map_err(pg_error)?,
                &[&owner_id, &added, &(fresh.len() as i64), &(new_streams.len() as i64), &head.unwrap_or(0)],
            )
            .await
            .map_err(pg_error)?;
        }
        tx.commit().await.map_err(pg_error)?;
        self.added_total(added + charge_of(registered));
        self.adjust_totals([i64::from(registered), 0, out.accepted as i64, 0, added]);
        Ok(out)
    }

    async fn pull_async(
        &self,
        owner_id: &str,
        token_hash: &str,
        after: u64,
        limit: u32,
        max_bytes: usize,
    ) -> Result<PullPage, StoreError> {
        let mut client = self.client().await?;
        // One snapshot for the owner row and the page, so headSeq and events agree.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(pg_error)?;
        let owner = existing_owner(&tx, owner_id, token_hash, false).await?;
        let mut page = PullPage { head_seq: owner.head_seq.max(0) as u64, ..PullPage::default() };
        let page_query = tx
            .prepare_cached("SELECT seq, envelope FROM events WHERE owner_id = $1 AND seq > $2 ORDER BY seq LIMIT $3")
            .await
            .map_err(pg_error)?;
        let rows = tx
            .query(&page_query, &[&owner_id, &(after.min(i64::MAX as u64) as i64), &i64::from(limit)])
            .await
            .map_err(pg_error)?;
        let mut size = 0usize;
        for row in rows {
            let envelope: String = row.get(1);
            // A page stops before passing MAX_PULL_BYTES (it always has one event).
            if !page.events.is_empty() && size + envelope.len() > max_bytes {
                break;
            }
            size += envelope.len() + 1;
            page.last_seq = Some(row.get::<_, i64>(0) as u64);
            page.events.push(envelope);
        }
        tx.commit().await.map_err(pg_error)?;
        Ok(page)
    }
}

impl RelayStore for PgStore {
    fn epoch(&self) -> String {
        self.epoch.clone()
    }

    fn authenticate(&self, owner_id: &str, token_hash: &str) -> Result<OwnerState, StoreError> {
        self.run(async {
            let client = self.client().await?;
            match owner_row(&client, owner_id, false).await? {
                None => Ok(OwnerState::Unknown),
                Some(o) => authorize(&o, token_hash).map(|()| OwnerState::Known),
            }
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
        self.run(self.push_async(owner_id, token_hash, &events, now, register, deadline))
    }

    fn pull(
        &self,
        owner_id: &str,
        token_hash: &str,
        after: u64,
        limit: u32,
        max_bytes: usize,
    ) -> Result<PullPage, StoreError> {
        self.run(self.pull_async(owner_id, token_hash, after, limit, max_bytes))
    }

    fn compact_streams(
        &self,
        owner_id: &str,
        token_hash: &str,
        stream_ids: &[String],
        deadline: Deadline,
    ) -> Result<CompactResponse, StoreError> {
        self.run(async {
            passed(deadline)?;
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_error)?;
            existing_owner(&tx, owner_id, token_hash, true).await?;
            passed(deadline)?;
            let rows = tx
                .query(
                    "DELETE FROM events WHERE owner_id = $1 AND stream_id = ANY($2) RETURNING stream_id, bytes",
                    &[&owner_id, &stream_ids],
                )
                .await
                .map_err(pg_error)?;
            let bytes: i64 = rows.iter().map(|r| r.get::<_, i64>(1)).sum();
            let streams: std::collections::HashSet<String> = rows.iter().map(|r| r.get(0)).collect();
            tx.execute(
                "UPDATE owners SET stored_bytes = greatest(0, stored_bytes - $2), event_count = greatest(0, event_count - $3),
                                   stream_count = greatest(0, stream_count - $4)
                 WHERE owner_id = $1",
                &[&owner_id, &bytes, &(rows.len() as i64), &(streams.len() as i64)],
            )
            .await
            .map_err(pg_error)?;
            tx.commit().await.map_err(pg_error)?;
            self.added_total(-bytes);
            self.adjust_totals([0, 0, -(rows.len() as i64), 0, -bytes]);
            Ok(CompactResponse { deleted_events: rows.len() as u64, reclaimed_bytes: bytes as u64 })
        })
    }

    fn close_owner(
        &self,
        owner_id: &str,
        token_hash: &str,
        now: &str,
        deadline: Deadline,
    ) -> Result<CloseResponse, StoreError> {
        self.run(async {
            passed(deadline)?;
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_error)?;
            let owner = owner_row(&tx, owner_id, true).await?.ok_or(StoreError::UnknownOwner)?;
            match authorize(&owner, token_hash) {
                Err(StoreError::Closed) => {
                    return Ok(CloseResponse { closed: true, deleted_events: 0, deleted_blobs: 0 })
                }
                other => other?,
            }
            passed(deadline)?;
            // Marked closed and its counters zeroed here; its log goes after the commit, in
            // batches (a statement over a large log would outlast the statement timeout).
            let deleted_events = owner.event_count.max(0) as u64;
            let deleted_blobs =
                tx.execute("DELETE FROM blobs WHERE owner_id = $1", &[&owner_id]).await.map_err(pg_error)?;
            tx.execute(
                "UPDATE owners SET closed_at = $2, stored_bytes = 0, event_count = 0, stream_count = 0, blob_count = 0
                 WHERE owner_id = $1",
                &[&owner_id, &now],
            )
            .await
            .map_err(pg_error)?;
            tx.commit().await.map_err(pg_error)?;
            self.added_total(-owner.stored_bytes);
            self.adjust_totals([0, 1, -owner.event_count, -(deleted_blobs as i64), -owner.stored_bytes]);
            let until = Some(std::time::Instant::now() + super::CLOSE_PURGE_BUDGET);
            match compact::purge_owner_log(&client, owner_id, &AtomicBool::new(false), until).await {
                Ok(true) => {}
                Ok(false) => tracing::info!("a closed owner's log is large: the next compaction pass deletes the rest"),
                Err(e) => tracing::warn!(error = %e, "a closed owner's log is not all deleted yet; the next compaction pass goes on"),
            }
            Ok(CloseResponse { closed: true, deleted_events, deleted_blobs })
        })
    }

    fn blob_presence(&self, owner_id: &str, token_hash: &str, hash: &str) -> Result<BlobPresence, StoreError> {
        self.run(async {
            let client = self.client().await?;
            let Some(owner) = owner_row(&client, owner_id, false).await? else { return Ok(BlobPresence::UnknownOwner) };
            authorize(&owner, token_hash)?;
            let found = client
                .query_opt("SELECT 1 FROM blobs WHERE owner_id = $1 AND hash = $2", &[&owner_id, &hash])
                .await
                .map_err(pg_error)?
                .is_some();
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
        self.run(async {
            passed(deadline)?;
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_error)?;
            let (owner_bytes, registered) = self.owner_or_register(&tx, owner_id, token_hash, now, register).await?;
            passed(deadline)?;
            let exists = tx
                .query_opt("SELECT 1 FROM blobs WHERE owner_id = $1 AND hash = $2", &[&owner_id, &hash])
                .await
                .map_err(pg_error)?
                .is_some();
            if exists {
                tx.commit().await.map_err(pg_error)?;
                self.adjust_totals([i64::from(registered), 0, 0, 0, 0]);
                return Ok(BlobPutOutcome { duplicate: true, registered });
            }
            if matches!(data, BlobData::External { .. }) {
                // Takes turns with the orphan sweep's claim of this key (see claim_orphan).
                lock_object_key(&tx, owner_id, hash).await?;
                let claimed = tx
                    .query_opt("SELECT 1 FROM object_claims WHERE owner_id = $1 AND hash = $2", &[&owner_id, &hash])
                    .await
                    .map_err(pg_error)?
                    .is_some();
                let raced = tx
                    .query_opt("SELECT 1 FROM blobs WHERE owner_id = $1 AND hash = $2", &[&owner_id, &hash])
                    .await
                    .map_err(pg_error)?
                    .is_some();
                if raced {
                    tx.commit().await.map_err(pg_error)?;
                    self.added_total(charge_of(registered));
                    self.adjust_totals([i64::from(registered), 0, 0, 0, 0]);
                    return Ok(BlobPutOutcome { duplicate: true, registered });
                }
                if claimed {
                    return Err(super::object_being_swept());
                }
                // The lock and the checks may have waited: a write past its deadline could come
                // after a claim's hold was measured to outlast it.
                passed(deadline)?;
            }
            let (size, bytes) = (data.size() as i64, data.stored());
            let total = self.total_bytes(&tx, registered).await?;
            self.check_quota(owner_bytes, total, size)?;
            tx.execute(
                "INSERT INTO blobs (owner_id, hash, data, bytes, created_at) VALUES ($1, $2, $3, $4, $5)",
                &[&owner_id, &hash, &bytes, &size, &now],
            )
            .await
            .map_err(pg_error)?;
            tx.execute(
                "UPDATE owners SET stored_bytes = stored_bytes + $2, blob_count = blob_count + 1 WHERE owner_id = $1",
                &[&owner_id, &size],
            )
            .await
            .map_err(pg_error)?;
            tx.commit().await.map_err(pg_error)?;
            self.added_total(size + charge_of(registered));
            self.adjust_totals([i64::from(registered), 0, 0, 1, size]);
            Ok(BlobPutOutcome { duplicate: false, registered })
        })
    }

    fn get_blob(&self, owner_id: &str, token_hash: &str, hash: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.run(async {
            let client = self.client().await?;
            existing_owner(&client, owner_id, token_hash, false).await?;
            Ok(client
                .query_opt("SELECT data FROM blobs WHERE owner_id = $1 AND hash = $2", &[&owner_id, &hash])
                .await
                .map_err(pg_error)?
                .and_then(|r| r.get::<_, Option<Vec<u8>>>(0)))
        })
    }

    fn account(&self, owner_id: &str, token_hash: &str, quota: u64) -> Result<AccountInfo, StoreError> {
        self.run(async {
            let client = self.client().await?;
            let owner = existing_owner(&client, owner_id, token_hash, false).await?;
            let used = owner.stored_bytes.max(0) as u64;
            Ok(AccountInfo {
                owner_id: owner_id.to_owned(),
                quota_bytes: quota,
                used_bytes: used,
                used_pct: super::used_pct(used, quota),
                head_seq: owner.head_seq.max(0) as u64,
                streams: owner.stream_count.max(0) as u64,
                events: owner.event_count.max(0) as u64,
                created_at: owner.created_at,
            })
        })
    }

    fn compact_all(&self, now: &str, cancel: &AtomicBool) -> Result<CompactionReport, StoreError> {
        self.run(compact::compact_all(self, now, cancel))
    }

    fn compaction_times(&self) -> Result<(Option<String>, String), StoreError> {
        self.run(async {
            let client = self.client().await?;
            let last = schema::meta(&client, "last_compaction_at").await?;
            let created = schema::meta(&client, "created_at").await?;
            Ok((last, created.unwrap_or_default()))
        })
    }

    fn closed_owners(&self) -> Result<Vec<String>, StoreError> {
        self.run(async {
            let client = self.client().await?;
            let rows = client
                .query(
                    "SELECT owner_id FROM owners WHERE closed_at IS NOT NULL
                     AND NOT EXISTS (SELECT 1 FROM swept_owners s WHERE s.owner_id = owners.owner_id)",
                    &[],
                )
                .await
                .map_err(pg_error)?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    fn sweep_cursor(&self) -> Result<Option<String>, StoreError> {
        self.run(async {
            let client = self.client().await?;
            Ok(schema::meta(&client, "orphan_sweep_after").await?.filter(|k| !k.is_empty()))
        })
    }

    fn set_sweep_cursor(&self, key: Option<&str>) -> Result<(), StoreError> {
        self.run(async {
            let client = self.client().await?;
            schema::set_meta(&client, "orphan_sweep_after", key.unwrap_or("")).await
        })
    }

    fn mark_objects_swept(&self, owner_id: &str, now: &str) -> Result<(), StoreError> {
        self.run(async {
            let client = self.client().await?;
            client
                .execute(
                    "INSERT INTO swept_owners (owner_id, swept_at) VALUES ($1, $2) ON CONFLICT (owner_id) DO NOTHING",
                    &[&owner_id, &now],
                )
                .await
                .map_err(pg_error)?;
            Ok(())
        })
    }

    fn claim_orphan(&self, owner_id: &str, hash: &str, hold: Duration) -> Result<bool, StoreError> {
        self.run(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_error)?;
            // The same lock an upload of this key takes before it checks the claims and writes
            // its row: the two take turns, so neither can miss the other's write.
            lock_object_key(&tx, owner_id, hash).await?;
            let held = tx
                .query_opt("SELECT 1 FROM blobs WHERE owner_id = $1 AND hash = $2", &[&owner_id, &hash])
                .await
                .map_err(pg_error)?
                .is_some();
            if !held {
                // The database's clock, whichever process claims or releases; a renewal never
                // shortens a claim.
                let hold_ms = hold.as_millis() as f64;
                tx.execute(
                    "INSERT INTO object_claims (owner_id, hash, expires_at)
                     VALUES ($1, $2, now() + make_interval(secs => $3::float8 / 1000.0))
                     ON CONFLICT (owner_id, hash) DO UPDATE SET expires_at = greatest(object_claims.expires_at, EXCLUDED.expires_at)",
                    &[&owner_id, &hash, &hold_ms],
                )
                .await
                .map_err(pg_error)?;
            }
            tx.commit().await.map_err(pg_error)?;
            Ok(!held)
        })
    }

    fn release_orphan_claims(&self) -> Result<u64, StoreError> {
        self.run(async {
            let client = self.client().await?;
            client.execute("DELETE FROM object_claims WHERE expires_at < now()", &[]).await.map_err(pg_error)
        })
    }

    fn ready(&self) -> Result<(), StoreError> {
        self.run(async {
            let client = self.client().await?;
            client.query_one("SELECT 1", &[]).await.map_err(pg_error)?;
            Ok(())
        })
    }

    fn stats(&self) -> Result<RelayStats, StoreError> {
        self.run(async {
            let client = self.client().await?;
            // The figures summed over every owner are read at most every STATS_TTL (a scrape
            // every few seconds must not scan the owners each time); the rest is fresh.
            let cached = *self.owner_totals.lock().unwrap_or_else(|p| p.into_inner());
            let totals = match cached {
                Some((at, totals)) if at.elapsed() < STATS_TTL => totals,
                _ => {
                    let r = client
                        .query_one(
                            "SELECT count(*), count(closed_at), coalesce(sum(event_count), 0)::BIGINT,
                                    coalesce(sum(blob_count), 0)::BIGINT, coalesce(sum(stored_bytes), 0)::BIGINT
                             FROM owners",
                            &[],
                        )
                        .await
                        .map_err(pg_error)?;
                    let totals = [0, 1, 2, 3, 4].map(|i| r.get::<_, i64>(i).max(0) as u64);
                    *self.owner_totals.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), totals));
                    totals
                }
            };
            let r = client
                .query_one(
                    "SELECT CASE WHEN is_called THEN last_value ELSE 0 END, pg_database_size(current_database())
                     FROM event_seq",
                    &[],
                )
                .await
                .map_err(pg_error)?;
            let n = |i: usize| r.get::<_, i64>(i).max(0) as u64;
            let meta_n = |v: Option<String>| v.and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
            Ok(RelayStats {
                owners: totals[0],
                closed_owners: totals[1],
                events: totals[2],
                blobs: totals[3],
                total_bytes: totals[4],
                head_seq: n(0),
                last_compaction_at: schema::meta(&client, "last_compaction_at").await?,
                last_compaction_deleted: meta_n(schema::meta(&client, "last_compaction_deleted").await?),
                last_compaction_ms: meta_n(schema::meta(&client, "last_compaction_ms").await?),
                database_bytes: n(1),
                wal_bytes: 0,
            })
        })
    }

    fn subscribe_heads(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<(String, u64)>> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.handle.spawn(listen_for_heads(self.listen_config.clone(), self.tls.clone(), tx));
        Some(rx)
    }

    fn checkpoint(&self) -> Result<CheckpointReport, StoreError> {
        // PostgreSQL checkpoints its own WAL; closing the pool is all a process does.
        self.pool.close();
        Ok(CheckpointReport::default())
    }
}

/// Listens for `simplysync_heads` notices (`"<ownerId> <headSeq>"`, sent by every push that
/// stored events) on a connection of its own and forwards them; reconnects with backoff until
/// the receiver is gone. A notice missed while reconnecting only delays a waiter to its timeout.
async fn listen_for_heads(
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    out: tokio::sync::mpsc::UnboundedSender<(String, u64)>,
) {
    let mut backoff = Duration::from_millis(100);
    while !out.is_closed() {
        match config.connect(tls.clone()).await {
            Ok((client, mut connection)) => {
                let forward = out.clone();
                let driver = tokio::spawn(async move {
                    while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                        match message {
                            Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                                let parsed = n
                                    .payload()
                                    .split_once(' ')
                                    .and_then(|(o, h)| Some((o.to_owned(), h.parse().ok()?)));
                                if let Some(notice) = parsed {
                                    if forward.send(notice).is_err() {
                                        return;
                                    }
                                }
                            }
                            Ok(_) => {}
                            Err(_) => return,
                        }
                    }
                });
                if client.batch_execute("LISTEN simplysync_heads").await.is_ok() {
                    backoff = Duration::from_millis(100);
                    let _ = driver.await;
                } else {
                    driver.abort();
                }
                tracing::warn!("the connection listening for other relay processes' pushes ended; reconnecting");
            }
            Err(e) => tracing::warn!(error = %pg_error(e), "cannot listen for other relay processes' pushes yet"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Gives the PostgreSQL database a new epoch (after restoring it from a backup): every device
/// then re-seeds it. Returns the old and the new epoch. Stop every relay process first.
pub async fn rotate_epoch(url: &str, password: Option<&str>, fresh: &str) -> Result<(String, String), StoreError> {
    let (config, tls) = pg_config(url, password)?;
    let (client, connection) = config
        .connect(tls)
        .await
        .map_err(|e| StoreError::Setup(format!("cannot connect to {}: {}", redact(url), error_chain(&e))))?;
    let task = tokio::spawn(connection);
    let old: String = client
        .query_opt("SELECT value FROM relay_meta WHERE key = 'epoch'", &[])
        .await
        .map_err(pg_error)?
        .ok_or_else(|| StoreError::Setup("not a relay database".into()))?
        .get(0);
    client.execute("UPDATE relay_meta SET value = $1 WHERE key = 'epoch'", &[&fresh]).await.map_err(pg_error)?;
    drop(client);
    let _ = task.await;
    Ok((old, fresh.to_owned()))
}

impl PgStore {
    /// The request timeout the connections run with.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// A pooled connection (compaction).
    pub(super) async fn connection(&self) -> Result<Object, StoreError> {
        self.client().await
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn urls_lose_their_password_in_logs() {
        assert_eq!(redact("postgres://relay:s3cret@db:5432/relay"), "postgres://relay:***@db:5432/relay");
        assert_eq!(redact("postgres://db/relay"), "postgres://db/relay");
        assert!(!redact("postgres://u:p@ss@h/d").contains("p@ss"));
        assert_eq!(
            redact("postgres://h/d?user=relay&password=s3cret&sslmode=disable"),
            "postgres://h/d?user=relay&password=***&sslmode=disable"
        );
    }
}
