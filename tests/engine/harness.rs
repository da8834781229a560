//! Harness: a real relay (the relay crate's server) on its own thread over real HTTP on
//! loopback; devices (engines) with a settable clock; and a transport wrapper that injects
//! faults in front of the real relay.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use simplysync::engine::io::{HttpRequest, HttpResponse, LocalFuture, ManualClock, Transport, TransportError};
use simplysync::engine::schema::{ColumnDef, ColumnType, SchemaDef, TableDef};
use simplysync::engine::{Engine, EngineConfig, EngineOptions, Env};
use simplysync::native::HttpTransport;
use simplysync::protocol::entropy::OsEntropy;
use simplysync::protocol::Json;

static NEXT: AtomicU64 = AtomicU64::new(0);

pub const T0: u64 = 1_764_504_000_000;

/// The admin token of [`TestRelay::compacting`] relays.
const ADMIN_TOKEN: &str = "test-admin-token-for-compaction";

/// A fresh directory for one test's files. The first call of a run removes what earlier runs
/// left (their relays' and devices' files: ~70 MB a run): those of processes no longer running,
/// untouched for an hour.
pub fn temp_dir(tag: &str) -> PathBuf {
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(|| crate::sweep::remove_dead_runs_dirs("simplysync-engine-"));
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("simplysync-engine-{}-{tag}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A relay server running on its own thread.
pub struct TestRelay {
    pub url: String,
    pub db: PathBuf,
    port: u16,
    vars: Vec<(&'static str, String)>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The relay file's condition for "stored for the owner id `?1`".
const OWNER_IS: &str = "owner_key = (SELECT owner_key FROM owners WHERE owner_id = ?1)";

impl TestRelay {
    pub fn start() -> TestRelay {
        TestRelay::start_with(&[])
    }

    /// A relay with some settings (environment variables of the relay) changed.
    pub fn start_with(vars: &[(&'static str, &str)]) -> TestRelay {
        let db = temp_dir("relay").join("relay.sqlite");
        let vars = vars.iter().map(|(k, v)| (*k, v.to_string())).collect();
        let mut r = TestRelay { url: String::new(), db, port: 0, vars, stop: None, thread: None };
        r.spawn();
        r
    }

    /// A relay whose log compaction [`TestRelay::compact`] runs on demand.
    pub fn compacting() -> TestRelay {
        TestRelay::start_with(&[("ADMIN_TOKEN", ADMIN_TOKEN)])
    }

    /// Runs the relay's log compaction now (`POST /ops/compact`): each stream keeps its newest
    /// event. Returns how many events it deleted.
    pub async fn compact(&self) -> u64 {
        // reqwest is built without a TLS provider: the engine's transport installs one, and a
        // test may compact before any device exists.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let resp = reqwest::Client::new()
            .post(format!("{}/ops/compact", self.url))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "compaction needs a relay started with TestRelay::compacting");
        let report: serde_json::Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
        report["deletedEvents"].as_u64().unwrap()
    }

    /// Events the relay stores for `owner` (its SQLite file keeps them under the owner's key).
    pub fn events_of(&self, owner: &str) -> u64 {
        let db = rusqlite::Connection::open(&self.db).unwrap();
        db.query_row(&format!("SELECT count(*) FROM events WHERE {OWNER_IS}"), [owner], |r| r.get::<_, i64>(0)).unwrap()
            as u64
    }

    /// Whether the relay stores the event `event_id` of `owner`.
    pub fn has_event(&self, owner: &str, event_id: &str) -> bool {
        let db = rusqlite::Connection::open(&self.db).unwrap();
        db.query_row(
            &format!("SELECT count(*) FROM events WHERE {OWNER_IS} AND event_id = ?2"),
            [owner, event_id],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
            > 0
    }

    fn spawn(&mut self) {
        let listener = std::net::TcpListener::bind(("127.0.0.1", self.port)).expect("bind loopback");
        listener.set_nonblocking(true).unwrap();
        self.port = listener.local_addr().unwrap().port();
        self.url = format!("http://127.0.0.1:{}", self.port);
        let db = self.db.clone();
        let vars = self.vars.clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let config = simplysync_relay::config::Config::from_lookup(|k| match k {
                    "DB_PATH" => Some(db.display().to_string()),
                    "COMPACTION_INTERVAL_MS" => Some("0".into()),
                    _ => vars.iter().find(|(name, _)| *name == k).map(|(_, v)| v.clone()),
                })
                .unwrap();
                simplysync_relay::serve_on(listener, None, config, async move {
                    let _ = rx.await;
                })
                .await
                .unwrap();
            });
        });
        self.stop = Some(tx);
        self.thread = Some(thread);
        self.wait_ready();
    }

    /// Waits until the relay answers `/health` (its database exists by then).
    fn wait_ready(&self) {
        use std::io::{Read, Write};
        for _ in 0..500 {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                let mut answer = String::new();
                if s.read_to_string(&mut answer).is_ok() && answer.starts_with("HTTP/1.1 200") {
                    return;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("the test relay did not become ready");
    }

    pub fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }

    /// Starts again on the same port and database.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// Deletes the database file (as an operator losing the disk would) and restarts.
    pub fn wipe_and_restart(&mut self) {
        self.stop();
        for ext in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{ext}", self.db.display()));
        }
        self.spawn();
    }

    /// Copies the (stopped) database aside.
    pub fn backup(&mut self, to: &Path) {
        self.stop();
        std::fs::copy(&self.db, to).unwrap();
        self.spawn();
    }

    /// Restores a backup and restarts: the relay rolls back.
    pub fn restore(&mut self, from: &Path) {
        self.stop();
        for ext in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{ext}", self.db.display()));
        }
        std::fs::copy(from, &self.db).unwrap();
        self.spawn();
    }
}

impl Drop for TestRelay {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A "relay" that accepts connections and never answers (a stalled server or a black hole).
pub struct StalledRelay {
    pub url: String,
    /// Connections it accepted (and holds open).
    pub accepted: std::sync::Arc<AtomicU64>,
}

impl StalledRelay {
    pub fn start() -> StalledRelay {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = std::sync::Arc::new(AtomicU64::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for conn in listener.incoming() {
                let Ok(conn) = conn else { break };
                count.fetch_add(1, Ordering::SeqCst);
                held.push(conn);
            }
        });
        StalledRelay { url, accepted }
    }
}

/// Produces an injected answer.
pub type Responder = Box<dyn Fn(&HttpRequest) -> Result<HttpResponse, TransportError>>;

/// A fault to inject: when `matches(request)`, answer with `respond` instead of the relay.
pub struct Fault {
    pub matches: Box<dyn Fn(&HttpRequest) -> bool>,
    pub respond: Responder,
    /// How many times (None = until removed).
    pub times: Option<u32>,
}

/// A response rewriter applied to real relay answers.
pub type Rewrite = Box<dyn Fn(&HttpRequest, HttpResponse) -> HttpResponse>;

/// The real HTTP transport with injectable faults and rewrites, and a request log.
pub struct FaultyTransport {
    inner: HttpTransport,
    pub faults: RefCell<VecDeque<Fault>>,
    pub rewrite: RefCell<Option<Rewrite>>,
    pub log: RefCell<Vec<(String, String, u16)>>,
    /// Every request as it starts (the log has them as they end).
    pub started: RefCell<Vec<(String, String)>>,
}

impl FaultyTransport {
    pub fn new() -> Rc<FaultyTransport> {
        Rc::new(FaultyTransport {
            inner: HttpTransport::new().unwrap(),
            faults: RefCell::new(VecDeque::new()),
            rewrite: RefCell::new(None),
            log: RefCell::new(Vec::new()),
            started: RefCell::new(Vec::new()),
        })
    }

    /// Answers every request whose URL contains `path` with `status` (JSON error body).
    pub fn fail(&self, path: &'static str, status: u16, times: Option<u32>) {
        self.faults.borrow_mut().push_back(Fault {
            matches: Box::new(move |r| r.url.contains(path)),
            respond: Box::new(move |_| {
                let body = serde_json::json!({"error": "injected", "message": format!("injected {status}")});
                Ok(HttpResponse::new(status, body.to_string()))
            }),
            times,
        });
    }

    /// Answers requests for which `matches` holds with `status` and `body` (and a
    /// `Retry-After` header, if given), instead of the relay.
    pub fn answer(
        &self,
        matches: impl Fn(&HttpRequest) -> bool + 'static,
        status: u16,
        body: &str,
        retry_after: Option<&str>,
        times: Option<u32>,
    ) {
        let (body, retry_after) = (body.to_owned(), retry_after.map(str::to_owned));
        self.faults.borrow_mut().push_back(Fault {
            matches: Box::new(matches),
            respond: Box::new(move |_| {
                Ok(HttpResponse { status, body: body.clone().into_bytes(), retry_after: retry_after.clone() })
            }),
            times,
        });
    }

    /// Requests sent so far whose URL contains `part` (with `method`).
    pub fn sent(&self, method: &str, part: &str) -> usize {
        self.log.borrow().iter().filter(|(m, u, _)| m == method && u.contains(part)).count()
    }

    /// Requests started so far whose URL contains `part` (with `method`), answered or not.
    pub fn started(&self, method: &str, part: &str) -> usize {
        self.started.borrow().iter().filter(|(m, u)| m == method && u.contains(part)).count()
    }

    /// Makes every request fail as if the network were down.
    pub fn go_offline(&self) {
        self.faults.borrow_mut().push_back(Fault {
            matches: Box::new(|_| true),
            respond: Box::new(|_| Err(TransportError("connection refused (injected)".into()))),
            times: None,
        });
    }

    pub fn clear(&self) {
        self.faults.borrow_mut().clear();
        *self.rewrite.borrow_mut() = None;
    }
}

impl Transport for FaultyTransport {
    fn send(&self, req: HttpRequest) -> LocalFuture<'_, Result<HttpResponse, TransportError>> {
        Box::pin(async move {
            self.started.borrow_mut().push((req.method.as_str().into(), req.url.clone()));
            let injected = {
                let mut faults = self.faults.borrow_mut();
                let pos = faults.iter().position(|f| (f.matches)(&req));
                pos.map(|i| {
                    let out = (faults[i].respond)(&req);
                    if let Some(n) = faults[i].times.as_mut() {
                        *n -= 1;
                        if *n == 0 {
                            faults.remove(i);
                        }
                    }
                    out
                })
            };
            let result = match injected {
                Some(r) => r,
                None => {
                    let resp = self.inner.send(req.clone()).await;
                    match (resp, self.rewrite.borrow().as_ref()) {
                        (Ok(r), Some(f)) => Ok(f(&req, r)),
                        (other, _) => other,
                    }
                }
            };
            let status = result.as_ref().map(|r| r.status).unwrap_or(0);
            self.log.borrow_mut().push((req.method.as_str().into(), req.url.clone(), status));
            result
        })
    }
}

pub fn todo_schema(version: u32, extra_tables: &[&str]) -> SchemaDef {
    let mut tables = vec![TableDef {
        name: "todos".into(),
        columns: vec![
            ColumnDef::new("title", ColumnType::Text),
            ColumnDef::new("done", ColumnType::Boolean),
            ColumnDef::new("position", ColumnType::Integer),
            ColumnDef::new("image", ColumnType::Blob),
            ColumnDef::new("meta", ColumnType::Json),
        ],
        merge: Default::default(),
        indexes: Vec::new(),
    }];
    for t in extra_tables {
        tables.push(TableDef::new(t, vec![ColumnDef::new("body", ColumnType::Text)]));
    }
    SchemaDef { schema_version: version, tables }
}

/// One device: an engine with its own database, clock and faulty transport.
pub struct Device {
    pub engine: Rc<Engine>,
    pub clock: Rc<ManualClock>,
    pub net: Rc<FaultyTransport>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("engine", &self.engine).finish()
    }
}

pub struct DeviceSpec<'a> {
    pub secret: &'a str,
    pub relays: Vec<String>,
    pub schema: SchemaDef,
    pub db_path: Option<PathBuf>,
    pub clock_ms: u64,
}

impl<'a> DeviceSpec<'a> {
    /// A device with the todo schema on the database file `path`, its clock at `clock_ms`.
    pub fn on_file(secret: &'a str, relays: &[&str], path: &Path, clock_ms: u64) -> DeviceSpec<'a> {
        DeviceSpec {
            secret,
            relays: relays.iter().map(|s| s.to_string()).collect(),
            schema: todo_schema(1, &[]),
            db_path: Some(path.to_owned()),
            clock_ms,
        }
    }
}

/// Puts `envelope` (received from `relay`) into the quarantine of the closed database at
/// `path`, as an older engine with a bug would have left it.
pub fn quarantine_by_hand(path: &Path, relay: &str, envelope: &str, at: i64) {
    let id = serde_json::from_str::<serde_json::Value>(envelope).unwrap()["eventId"].as_str().unwrap().to_owned();
    rusqlite::Connection::open(path)
        .unwrap()
        .execute(
            "INSERT INTO _sync_quarantine (relay, event_id, envelope_json, reason, detail, at)
             VALUES (?1, ?2, ?3, 'AUTH_FAILED', 'old bug', ?4)",
            rusqlite::params![relay, id, envelope, at],
        )
        .unwrap();
}

impl Device {
    pub fn open(spec: DeviceSpec<'_>) -> Device {
        Device::try_open(spec).unwrap()
    }

    pub fn try_open(spec: DeviceSpec<'_>) -> Result<Device, simplysync::engine::EngineError> {
        Device::try_open_with(spec, EngineOptions::default())
    }

    pub fn try_open_with(
        spec: DeviceSpec<'_>,
        options: EngineOptions,
    ) -> Result<Device, simplysync::engine::EngineError> {
        let clock = Rc::new(ManualClock::new(spec.clock_ms));
        let net = FaultyTransport::new();
        let conn = match &spec.db_path {
            Some(p) => simplysync::store::open_path(p.to_str().unwrap()).unwrap(),
            None => simplysync::store::open_memory().unwrap(),
        };
        let mut config = EngineConfig::new(spec.secret, spec.relays, spec.schema);
        config.options = options;
        let env = Env { transport: net.clone(), clock: clock.clone(), entropy: Box::new(OsEntropy) };
        let engine = Engine::open(conn, config, env)?;
        Ok(Device { engine: Rc::new(engine), clock, net })
    }

    /// A device on `relays` with the todo schema, an in-memory database and `options`.
    pub fn with_options(secret: &str, relays: &[&str], options: EngineOptions) -> Device {
        Device::try_open_with(
            DeviceSpec {
                secret,
                relays: relays.iter().map(|s| s.to_string()).collect(),
                schema: todo_schema(1, &[]),
                db_path: None,
                clock_ms: T0,
            },
            options,
        )
        .unwrap()
    }

    /// The device's relay status for relay `i`.
    pub fn status(&self, i: usize) -> simplysync::engine::RelayStatus {
        self.engine.relay_statuses_local().unwrap().swap_remove(i)
    }

    /// Counts rows of a system table.
    pub fn count(&self, table: &str) -> u64 {
        let rows = self.engine.inspect_query(&format!("SELECT count(*) AS n FROM {table}"), &[]).unwrap();
        rows[0].get("n").unwrap().as_f64().unwrap() as u64
    }

    /// A device on `relays` with the todo schema and an in-memory database.
    pub fn new(secret: &str, relays: &[&str]) -> Device {
        Device::open(DeviceSpec {
            secret,
            relays: relays.iter().map(|s| s.to_string()).collect(),
            schema: todo_schema(1, &[]),
            db_path: None,
            clock_ms: T0,
        })
    }

    pub async fn sync(&self) -> simplysync::engine::SyncReport {
        self.engine.sync(simplysync::engine::SyncTrigger::Manual).await.unwrap()
    }

    /// Every todo (deleted ones included) as `(id, title, deleted, updatedAt)`.
    pub fn todos(&self) -> Vec<(String, Json, bool, String)> {
        let opts = simplysync::engine::ListOptions { include_deleted: true, ..Default::default() };
        self.engine
            .list("todos", &opts)
            .unwrap()
            .into_iter()
            .map(|r| {
                (
                    r.get("id").unwrap().as_str().unwrap().to_owned(),
                    r.get("title").cloned().unwrap_or(Json::Null),
                    r.get("deleted").unwrap().as_bool().unwrap(),
                    r.get("updatedAt").unwrap().as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// Full snapshot of every table, for convergence checks.
    pub fn snapshot(&self) -> Vec<Json> {
        let opts = simplysync::engine::ListOptions { include_deleted: true, ..Default::default() };
        let mut all = Vec::new();
        for t in self.engine.schema().tables() {
            all.extend(self.engine.list(&t.name, &opts).unwrap());
        }
        all
    }
}

pub fn todo(id: &str, title: &str) -> Json {
    Json::object([("id", Json::from(id)), ("title", Json::from(title)), ("done", Json::Bool(false))])
}

pub fn phrase() -> String {
    simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap()
}

/// Alters the first character of an envelope's (JSON) ciphertext: it no longer authenticates.
pub fn alter_ciphertext(envelope: &mut serde_json::Value) {
    alter_field(envelope, "ciphertext");
}

/// `field` of an envelope changed by one character (its first, flipped between `A` and `B`).
pub fn alter_field(envelope: &mut serde_json::Value, field: &str) {
    let text = envelope[field].as_str().unwrap();
    let flipped = if text.starts_with('A') { "B" } else { "A" };
    envelope[field] = format!("{flipped}{}", &text[1..]).into();
}
