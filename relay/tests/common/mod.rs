//! Test harness: the real `simplysync-relay` binary on a free loopback port, with its own
//! database, driven over real HTTP; and real sealed envelopes.
//!
//! `SIMPLYSYNC_TEST_BACKEND` picks the store: `sqlite` (default; a file in a temporary
//! directory), `postgres` (a fresh database per relay on the server at `SIMPLYSYNC_TEST_PG`),
//! or `postgres3` (three relay processes on one fresh database, behind a proxy that sends each
//! connection to the next process in turn; the client opens a connection per request, so
//! requests are spread round-robin). `SIMPLYSYNC_TEST_BLOBS=s3` keeps blob chunks in a fresh
//! bucket of the S3-compatible test server at `SIMPLYSYNC_TEST_S3` instead of the database.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use simplysync_protocol::entropy::OsEntropy;
use simplysync_protocol::{encrypt_payload, EventMeta, Identity, Json, SyncEnvelope};

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("simplysync-relay-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Which store the relays under test use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    Postgres3,
}

pub fn backend() -> Backend {
    match std::env::var("SIMPLYSYNC_TEST_BACKEND").as_deref() {
        Ok("postgres") => Backend::Postgres,
        Ok("postgres3") => Backend::Postgres3,
        Ok("sqlite") | Err(_) => Backend::Sqlite,
        Ok(other) => panic!("SIMPLYSYNC_TEST_BACKEND={other}: expected sqlite, postgres or postgres3"),
    }
}

/// A fresh PostgreSQL database on the test server; returns its URL.
pub fn fresh_pg_database() -> String {
    let admin = std::env::var("SIMPLYSYNC_TEST_PG").expect("SIMPLYSYNC_TEST_PG: the test PostgreSQL server's URL");
    let name = format!("relay_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let out = Command::new("psql")
        .arg(&admin)
        .args(["-v", "ON_ERROR_STOP=1", "-q", "-c", &format!("CREATE DATABASE {name}")])
        .output()
        .expect("psql runs");
    assert!(out.status.success(), "CREATE DATABASE: {}", String::from_utf8_lossy(&out.stderr));
    let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
    format!("{base}/{name}")
}

/// Whether blob chunks go to the S3 test server.
pub fn s3_blobs() -> bool {
    std::env::var("SIMPLYSYNC_TEST_BLOBS").as_deref() == Ok("s3")
}

/// The S3 test server's endpoint.
pub fn s3_endpoint() -> String {
    std::env::var("SIMPLYSYNC_TEST_S3").expect("SIMPLYSYNC_TEST_S3: the S3-compatible test server's URL")
}

/// A fresh bucket on the S3 test server; returns the relay settings that use it.
pub fn fresh_bucket_settings() -> Vec<(String, String)> {
    let endpoint = s3_endpoint();
    let bucket = format!("relay-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let status = Command::new("curl")
        .args(["-sf", "-o", "/dev/null", "-X", "PUT", &format!("{endpoint}/{bucket}")])
        .status()
        .expect("curl runs");
    assert!(status.success(), "creating bucket {bucket} on {endpoint}");
    [
        ("BLOB_STORE_URL", format!("s3://{bucket}/chunks")),
        ("AWS_ENDPOINT_URL", endpoint),
        ("AWS_ALLOW_HTTP", "true".into()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_REGION", "us-east-1".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// The keys stored under `prefix` in `bucket` of the S3 test server.
pub fn bucket_keys(bucket: &str, prefix: &str) -> Vec<String> {
    let out = Command::new("curl")
        .args(["-sf", &format!("{}/{bucket}?list-type=2&prefix={prefix}", s3_endpoint())])
        .output()
        .expect("curl runs");
    assert!(out.status.success(), "listing {bucket}");
    let xml = String::from_utf8(out.stdout).unwrap();
    xml.split("<Key>").skip(1).filter_map(|k| k.split("</Key>").next()).map(str::to_owned).collect()
}

/// Accepts on a loopback port and hands each connection to the next of `backends`.
fn round_robin_proxy(backends: Vec<String>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for (i, inbound) in listener.incoming().enumerate() {
            let Ok(inbound) = inbound else { continue };
            let Ok(outbound) = std::net::TcpStream::connect(&backends[i % backends.len()]) else { continue };
            let (mut a, mut b) = (inbound.try_clone().unwrap(), outbound.try_clone().unwrap());
            let (mut c, mut d) = (inbound, outbound);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut a, &mut b);
                let _ = b.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut d, &mut c);
                let _ = c.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    format!("http://{addr}")
}

/// A running relay (one process, or three on one PostgreSQL database).
pub struct Relay {
    pub url: String,
    /// The metrics listener's URL, when `METRICS_ADDR` is set.
    pub metrics_url: Option<String>,
    pub db: PathBuf,
    env: Vec<(String, String)>,
    child: Option<Child>,
    /// The second and third process (`postgres3`).
    others: Vec<Child>,
    backend: Backend,
    pub log: Arc<Mutex<String>>,
    dir: Arc<TempDir>,
}

/// Small limits so the contract can reach them cheaply.
pub const SMALL_LIMITS: &[(&str, &str)] = &[
    ("MAX_EVENTS_PER_PUSH", "20"),
    ("MAX_EVENT_BYTES", "4096"),
    ("MAX_OWNER_BYTES", "200000"),
    ("MAX_TOTAL_BYTES", "1000000"),
    ("MAX_BLOB_BYTES", "2048"),
    ("MAX_EVENTS_PER_PULL", "50"),
    ("DEFAULT_EVENTS_PER_PULL", "10"),
    ("MAX_STREAMS_PER_COMPACT", "5"),
    ("COMPACTION_INTERVAL_MS", "0"),
];

impl Relay {
    /// Starts a relay with [`SMALL_LIMITS`] plus `extra` settings, on the backend under test.
    pub fn start(extra: &[(&str, &str)]) -> Relay {
        Relay::start_on(backend(), extra)
    }

    /// Starts a relay on a given backend.
    pub fn start_on(backend: Backend, extra: &[(&str, &str)]) -> Relay {
        let dir = Arc::new(TempDir::new("db"));
        let mut env: Vec<(String, String)> = SMALL_LIMITS.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        for (k, v) in extra {
            env.retain(|(ek, _)| ek != k);
            env.push((k.to_string(), v.to_string()));
        }
        let db = dir.0.join("relay.sqlite");
        if backend != Backend::Sqlite && !env.iter().any(|(k, _)| k == "DATABASE_URL") {
            env.push(("DATABASE_URL".into(), fresh_pg_database()));
        }
        if s3_blobs() && !env.iter().any(|(k, _)| k == "BLOB_STORE_URL") {
            env.extend(fresh_bucket_settings());
        }
        let mut relay = Relay {
            url: String::new(),
            metrics_url: None,
            db,
            env,
            child: None,
            others: Vec::new(),
            backend,
            log: Default::default(),
            dir,
        };
        relay.spawn_all();
        relay
    }

    fn spawn_all(&mut self) {
        if self.backend != Backend::Postgres3 {
            self.spawn();
            return;
        }
        let mut urls = Vec::new();
        for _ in 0..3 {
            self.spawn();
            urls.push(self.url.trim_start_matches("http://").to_owned());
            self.others.extend(self.child.take());
        }
        self.child = Some(self.others.remove(0));
        self.url = round_robin_proxy(urls);
    }

    /// Changes (or adds) a setting for the next [`Relay::restart`].
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_owned(), value.to_owned()));
    }

    /// Runs `simplysync-relay ARGS` with this relay's settings (its database included); returns
    /// the parsed JSON it prints.
    pub fn command(&self, args: &[&str]) -> Value {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_simplysync-relay"));
        cmd.args(args).env("DB_PATH", &self.db);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// A setting the relay runs with.
    pub fn setting(&self, key: &str) -> Option<&str> {
        self.env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The PostgreSQL database URL, when the relay uses one.
    pub fn database_url(&self) -> Option<&str> {
        self.env.iter().find(|(k, _)| k == "DATABASE_URL").map(|(_, v)| v.as_str())
    }

    /// The relay process's id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// How many file descriptors the relay process holds open (Linux).
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid())).map(|d| d.count()).unwrap_or(0)
    }

    /// `host:port` of the API listener.
    pub fn addr(&self) -> &str {
        self.url.strip_prefix("http://").unwrap()
    }

    /// Sends `request` on a new socket and returns everything read until the relay closes it
    /// (or `wait` passes).
    pub async fn raw(&self, request: &[u8], wait: Duration) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tcp = tokio::net::TcpStream::connect(self.addr()).await.unwrap();
        tcp.write_all(request).await.unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(wait, tcp.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    pub fn dir(&self) -> &Path {
        &self.dir.0
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_simplysync-relay"));
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOST", "127.0.0.1")
            .env("PORT", "0")
            .env("DB_PATH", &self.db)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start simplysync-relay");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).expect("relay prints its address");
        let url = line.trim().strip_prefix("simplysync-relay listening on ").unwrap_or_else(|| {
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("relay did not start: {line:?} {err}")
        });
        self.url = url.to_owned();
        if self.env.iter().any(|(k, _)| k == "METRICS_ADDR") {
            line.clear();
            stdout.read_line(&mut line).expect("relay prints its metrics address");
            self.metrics_url = line.trim().strip_prefix("simplysync-relay metrics on ").map(str::to_owned);
        }
        let mut stderr = child.stderr.take().unwrap();
        let log = self.log.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                log.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        self.child = Some(child);
    }

    /// Stops with SIGKILL (no chance to clean up).
    pub fn kill9(&mut self) {
        for mut c in self.child.take().into_iter().chain(self.others.drain(..)) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGTERM without waiting (to every process).
    pub fn send_sigterm(&self) {
        for c in self.child.iter().chain(self.others.iter()) {
            assert!(Command::new("kill").arg("-TERM").arg(c.id().to_string()).status().unwrap().success());
        }
    }

    /// Waits (up to 10 s) for every process to exit; returns the first one's status.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let first = Self::wait_child(self.child.take().expect("running"));
        for c in std::mem::take(&mut self.others) {
            Self::wait_child(c);
        }
        first
    }

    fn wait_child(mut c: Child) -> std::process::ExitStatus {
        for _ in 0..400 {
            if let Some(status) = c.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = c.kill();
        panic!("relay did not exit within 10 s");
    }

    pub fn stop(&mut self) {
        self.kill9();
    }

    /// Starts again on the same database.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn_all();
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Whether the log shows `needle` within 5 s (stderr is read by a thread of its own, so a
    /// line written before a response may arrive after it).
    pub fn log_shows(&self, needle: &str) -> bool {
        for _ in 0..100 {
            if self.log_text().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// An owner with real keys.
#[derive(Clone)]
pub struct Owner {
    pub id: Arc<Identity>,
    pub device: String,
}

impl Owner {
    pub fn new() -> Owner {
        let key = simplysync_protocol::create_recovery_key(&mut OsEntropy).unwrap();
        Owner { id: Arc::new(Identity::from_secret(&key).unwrap()), device: "devA".into() }
    }

    pub fn owner_id(&self) -> &str {
        self.id.owner_id()
    }

    pub fn token(&self) -> &str {
        self.id.relay_auth()
    }

    /// A sealed envelope for row `row` of table `todos`, version `n`.
    pub fn event(&self, row: &str, n: u64) -> SyncEnvelope {
        self.event_sized(row, n, 8)
    }

    pub fn event_sized(&self, row: &str, n: u64, pad: usize) -> SyncEnvelope {
        let hlc = format!("{:015}-{:06}-{}", 1_764_504_000_000u64 + n, 0, self.device);
        let payload = Json::object([
            ("schemaVersion", Json::from(1u32)),
            ("table", Json::from("todos")),
            ("rowId", Json::from(row)),
            ("hlc", Json::from(hlc.as_str())),
            ("deleted", Json::Bool(false)),
            ("row", Json::object([("title", Json::from("x".repeat(pad)))])),
        ]);
        let meta = EventMeta {
            event_id: hlc,
            device_id: self.device.clone(),
            created_at: "2025-11-30T12:00:00.000Z".into(),
            stream_id: Some(self.id.stream_id("todos", row)),
        };
        encrypt_payload(&self.id, &meta, &payload, &mut OsEntropy).unwrap()
    }
}

/// A response: status, headers and body (JSON when it parses).
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub bytes: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap_or_else(|e| {
            panic!("status {} body is not JSON ({e}): {:?}", self.status, String::from_utf8_lossy(&self.bytes))
        })
    }

    /// Asserts an error status with the `{error, message}` body.
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status.as_u16(), status, "body: {}", String::from_utf8_lossy(&self.bytes));
        let v = self.json();
        assert_eq!(v["error"], code, "{v}");
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    }
}

/// One shared client: building one loads the system's root certificates (tens of ms).
pub fn client() -> reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let builder = reqwest::Client::builder().timeout(Duration::from_secs(30));
            // Three processes behind a per-connection round-robin: a connection per request.
            let builder = if backend() == Backend::Postgres3 { builder.pool_max_idle_per_host(0) } else { builder };
            builder.build().unwrap()
        })
        .clone()
}

pub async fn send(method: Method, url: &str, token: Option<&str>, body: Option<Vec<u8>>) -> Resp {
    send_with(&client(), method, url, token, body).await
}

pub async fn send_with(
    c: &reqwest::Client,
    method: Method,
    url: &str,
    token: Option<&str>,
    body: Option<Vec<u8>>,
) -> Resp {
    let mut req = c.request(method, url);
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    if let Some(b) = body {
        req = req.header("Content-Type", "application/json").body(b);
    }
    let r = req.send().await.expect("request reaches the relay");
    let status = r.status();
    let headers = r.headers().clone();
    let bytes = r.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
    Resp { status, headers, bytes }
}

impl Relay {
    pub async fn push(&self, owner: &Owner, events: &[SyncEnvelope]) -> Resp {
        self.push_as(owner.owner_id(), owner.token(), events).await
    }

    pub async fn push_as(&self, owner_id: &str, token: &str, events: &[SyncEnvelope]) -> Resp {
        let body = json!({ "ownerId": owner_id, "events": events }).to_string().into_bytes();
        send(Method::POST, &format!("{}/v1/events", self.url), Some(token), Some(body)).await
    }

    pub async fn pull(&self, owner: &Owner, after: &str, limit: Option<u32>) -> Resp {
        let mut url = format!("{}/v1/events?ownerId={}&after={after}", self.url, owner.owner_id());
        if let Some(l) = limit {
            url.push_str(&format!("&limit={l}"));
        }
        send(Method::GET, &url, Some(owner.token()), None).await
    }

    /// Pulls every page; returns the envelopes and the cursors seen.
    pub async fn pull_all(&self, owner: &Owner) -> (Vec<SyncEnvelope>, Vec<u64>) {
        let (mut events, mut cursors) = (Vec::new(), Vec::new());
        let mut after = String::new();
        loop {
            let r = self.pull(owner, &after, Some(50)).await;
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.bytes));
            let v = r.json();
            let page: Vec<SyncEnvelope> = serde_json::from_value(v["events"].clone()).unwrap();
            let next = v["nextCursor"].as_str().unwrap().to_owned();
            if page.is_empty() {
                return (events, cursors);
            }
            cursors.push(next.parse().unwrap());
            events.extend(page);
            after = next;
        }
    }

    pub async fn post_json(&self, path: &str, token: Option<&str>, body: Value) -> Resp {
        send(Method::POST, &format!("{}{path}", self.url), token, Some(body.to_string().into_bytes())).await
    }

    pub async fn get(&self, path: &str, token: Option<&str>) -> Resp {
        send(Method::GET, &format!("{}{path}", self.url), token, None).await
    }

    pub async fn put_blob(&self, owner: &Owner, hash: &str, bytes: Vec<u8>) -> Resp {
        let url = format!("{}/v1/blobs/{hash}?ownerId={}", self.url, owner.owner_id());
        let r = client()
            .put(url)
            .header("Authorization", format!("Bearer {}", owner.token()))
            .body(bytes)
            .send()
            .await
            .unwrap();
        let status = r.status();
        let headers = r.headers().clone();
        Resp { status, headers, bytes: r.bytes().await.unwrap().to_vec() }
    }

    pub async fn blob(&self, method: Method, owner: &Owner, hash: &str) -> Resp {
        let url = format!("{}/v1/blobs/{hash}?ownerId={}", self.url, owner.owner_id());
        send(method, &url, Some(owner.token()), None).await
    }

    /// `POST /v1/streams/compact` for `owner`'s `streams`.
    pub async fn compact_streams(&self, owner: &Owner, streams: &[String]) -> Resp {
        let body = json!({"ownerId": owner.owner_id(), "streamIds": streams});
        self.post_json("/v1/streams/compact", Some(owner.token()), body).await
    }

    pub async fn status_of(&self, owner: &Owner) -> Resp {
        self.get(&format!("/v1/status?ownerId={}", owner.owner_id()), Some(owner.token())).await
    }
}

/// Row a: 3 versions, row b: 2, row c: 1 — pushed out of HLC order on purpose.
pub async fn versions_of_three_rows(relay: &Relay, alice: &Owner) -> Vec<SyncEnvelope> {
    let events = vec![
        alice.event("a", 3),
        alice.event("a", 1),
        alice.event("b", 5),
        alice.event("a", 2),
        alice.event("b", 4),
        alice.event("c", 6),
    ];
    relay.push(alice, &events).await;
    events
}

/// Turns a database this relay wrote back into layout 3: the stream index an index on `events`
/// kept with every push, no `event_streams` table, every owner's stream count exact.
pub fn downgrade_to_layout_3(db: &std::path::Path) {
    let c = rusqlite::Connection::open(db).unwrap();
    c.execute_batch(
        "DROP TABLE event_streams;
         DELETE FROM relay_meta WHERE key = 'streams_indexed_seq';
         UPDATE owners SET stream_count =
           (SELECT count(DISTINCT stream_id) FROM events WHERE events.owner_key = owners.owner_key);
         CREATE INDEX events_by_owner_stream ON events (owner_key, stream_id, event_id) WHERE stream_id IS NOT NULL;
         PRAGMA user_version = 3;",
    )
    .unwrap();
}

/// Turns a database this relay wrote back into layout 2 (events under the 22-character owner
/// id, the indexes of that layout, no owner keys) — and, with `counters: false`, layout 1 (whose
/// files carry no `user_version`: 0).
pub fn downgrade_to_layout(db: &std::path::Path, counters: bool) {
    downgrade_to_layout_3(db);
    let c = rusqlite::Connection::open(db).unwrap();
    c.execute_batch(
        "CREATE TABLE events_v2 (
             seq       INTEGER PRIMARY KEY,
             owner_id  TEXT NOT NULL,
             event_id  TEXT NOT NULL,
             stream_id TEXT,
             envelope  TEXT NOT NULL,
             bytes     INTEGER NOT NULL
         );
         INSERT INTO events_v2 SELECT e.seq, o.owner_id, e.event_id, e.stream_id, e.envelope, e.bytes
           FROM events AS e JOIN owners AS o ON o.owner_key = e.owner_key;
         DROP TABLE events;
         ALTER TABLE events_v2 RENAME TO events;
         CREATE UNIQUE INDEX events_by_owner_event ON events (owner_id, event_id);
         CREATE INDEX events_by_owner_seq ON events (owner_id, seq);
         CREATE INDEX events_by_owner_stream ON events (owner_id, stream_id, event_id) WHERE stream_id IS NOT NULL;
         DROP INDEX owners_by_key;
         ALTER TABLE owners DROP COLUMN owner_key;
         PRAGMA user_version = 2;",
    )
    .unwrap();
    if !counters {
        c.execute_batch(
            "ALTER TABLE owners DROP COLUMN event_count; ALTER TABLE owners DROP COLUMN stream_count;
             DELETE FROM relay_meta WHERE key IN ('events', 'blobs', 'owners', 'closed_owners');
             PRAGMA user_version = 0;",
        )
        .unwrap();
    }
}
