//! The `Engine` class JavaScript sees (inside the dedicated worker the JS facade starts): the
//! engine on SQLite/OPFS with `fetch`, plus the engine's [`Driver`] — the poll timer, a sync
//! after local writes, passes on `focus`/`online` forwarded from the page, and a live channel
//! per relay. `autoSync: false` turns the driver off entirely; `sync()` still runs a full pass.
//! The worker runs in the leader tab only, so an app has one driver (and one live channel per
//! relay) however many tabs it has open.

use std::cell::RefCell;
use std::rc::Rc;

use crate::protocol::json_fields::{wrong_type, FieldError, Fields, FromJson};
use crate::protocol::json_write::{ObjectWriter, ToJson};
use js_sys::{Array, Function, Uint8Array};
use wasm_bindgen::prelude::*;

use super::convert::{array_to_js, from_js, json_to_js, record_to_js};
use super::errors::{engine_error, js_error};
use super::io::{sleep, DateClock, FetchTransport, GlooTimer};
use super::writes::{self, arg_json, bad_arg};
use crate::engine::driver::{AfterPass, MAX_PASSES};
use crate::engine::schema::SchemaDef;
use crate::engine::{
    Driver, DriverOptions, Engine, EngineConfig, EngineError, EngineOptions, Env, ListOptions, Op, Request, SyncTrigger,
};
use crate::protocol::base64url;
use crate::protocol::entropy::OsEntropy;
use crate::protocol::Json;
use crate::store::idb::PageStore;
use crate::store::opfs::open_database;

/// Default poll interval.
pub const DEFAULT_SYNC_INTERVAL_MS: u32 = 5000;

struct OpenOptions {
    relays: Vec<String>,
    schema: SchemaDef,
    db_name: Option<String>,
    sync_interval_ms: Option<u32>,
    auto_sync: Option<bool>,
    /// Keep a live channel to relays that offer one (default true; needs `autoSync`).
    live: Option<bool>,
    /// "auto" (default: OPFS, else IndexedDB, else memory), "opfs", "idb" (fail without it), "memory".
    storage: Option<String>,
    /// The relays' `MAX_EVENT_BYTES` (default 262144).
    max_event_bytes: Option<f64>,
    /// The relays' `MAX_BLOB_BYTES` (default 1048576).
    max_blob_bytes: Option<f64>,
    /// Each request's deadline (default 30000 ms).
    request_timeout_ms: Option<f64>,
    /// `{relayUrl: token}`: the registration tokens of relays with `REGISTRATION=token`.
    registration_tokens: Vec<(String, String)>,
}

/// `registrationTokens`: an object of relay URL to token string.
fn registration_tokens(f: &Fields<'_>) -> Result<Vec<(String, String)>, FieldError> {
    let path = format!("{}.registrationTokens", f.path());
    match f.get("registrationTokens") {
        None | Some(Json::Null) => Ok(Vec::new()),
        Some(Json::Object(o)) => o
            .iter()
            .map(|(url, token)| match token.as_str() {
                Some(t) => Ok((url.to_string_lossy(), t.to_owned())),
                None => Err(wrong_type(&format!("{path}[{:?}]", url.to_string_lossy()), "a string", token)),
            })
            .collect(),
        Some(other) => Err(wrong_type(&path, "an object of relay URL to token", other)),
    }
}

impl FromJson for OpenOptions {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        let f = Fields::of(value, path)?;
        let schema = f.read("schema")?;
        Ok(OpenOptions {
            relays: f.items("relays")?,
            schema,
            db_name: f.opt_string("dbName")?,
            sync_interval_ms: f.opt_u32("syncIntervalMs")?,
            auto_sync: f.opt_bool("autoSync")?,
            live: f.opt_bool("live")?,
            storage: f.opt_string("storage")?,
            max_event_bytes: f.opt_f64("maxEventBytes")?,
            max_blob_bytes: f.opt_f64("maxBlobBytes")?,
            request_timeout_ms: f.opt_f64("requestTimeoutMs")?,
            registration_tokens: registration_tokens(&f)?,
        })
    }
}

/// Reads a whole-number option, or its default.
fn whole(value: Option<f64>, name: &str, default: u64) -> Result<u64, JsValue> {
    match value {
        None => Ok(default),
        Some(v) if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= u32::MAX as f64 => Ok(v as u64),
        Some(v) => Err(bad_arg(format!(
            "{name} must be a whole number of at most {}, got {}",
            u32::MAX,
            super::io::js_string(&v.into())
        ))),
    }
}

/// Where the database lives and how durable it is.
#[derive(Debug, Clone)]
struct StorageInfo {
    mode: &'static str,
    durable: bool,
    reason: Option<String>,
}

impl ToJson for StorageInfo {
    fn write_json(&self, out: &mut String) {
        ObjectWriter::new(out)
            .member("mode", self.mode)
            .member("durable", &self.durable)
            .member("reason", &self.reason)
            .end();
    }
}

struct Inner {
    /// The IndexedDB page store, when the database lives there (flushed after writes).
    pages: Option<PageStore>,
    db_name: String,
    /// `None` once closed: the database connection is dropped at close, not when the last
    /// background task lets go of `Inner`.
    engine: RefCell<Option<Rc<Engine>>>,
    storage: StorageInfo,
    custody: Option<Custody>,
    /// `None` with `autoSync: false`, and once closed (the driver holds the engine: it must
    /// let go for the database to close).
    driver: RefCell<Option<Rc<Driver>>>,
    callbacks: RefCell<Vec<u64>>,
}

impl Inner {
    /// The engine, unless closed.
    fn current(&self) -> Option<Rc<Engine>> {
        self.engine.borrow().clone()
    }

    /// Makes what was written durable (IndexedDB storage; a no-op on OPFS and in memory).
    async fn flush(&self) -> Result<(), JsValue> {
        match &self.pages {
            Some(p) => crate::store::idb::flush(p, &self.db_name).await.map_err(|e| {
                js_error("STORAGE", &format!("{e}; the change is kept in memory and saved with the next write"))
            }),
            None => Ok(()),
        }
    }
}

/// Key custody, provided by the worker: `wrap(bytes)` and `unwrap(bytes)` seal and open the
/// secret with a non-extractable WebCrypto key kept in IndexedDB (PROTOCOL.md, "Key custody").
/// The engine stores only the wrapped bytes, in its own database.
struct Custody {
    wrap: Function,
    unwrap: Function,
}

impl Custody {
    fn from_js(v: &JsValue) -> Result<Option<Custody>, JsValue> {
        if v.is_undefined() || v.is_null() {
            return Ok(None);
        }
        let f = |name: &str| -> Result<Function, JsValue> {
            js_sys::Reflect::get(v, &name.into())?
                .dyn_into::<Function>()
                .map_err(|_| bad_arg(format!("custody.{name} must be a function")))
        };
        Ok(Some(Custody { wrap: f("wrap")?, unwrap: f("unwrap")? }))
    }

    async fn call(f: &Function, bytes: &[u8]) -> Result<Vec<u8>, JsValue> {
        let promise: js_sys::Promise = f.call1(&JsValue::NULL, &Uint8Array::from(bytes))?.dyn_into()?;
        let out = wasm_bindgen_futures::JsFuture::from(promise).await?;
        Ok(Uint8Array::new(&out).to_vec())
    }

    async fn wrap(&self, secret: &str) -> Result<String, JsValue> {
        Ok(base64url::encode(&Self::call(&self.wrap, secret.as_bytes()).await?))
    }

    async fn unwrap(&self, wrapped: &str) -> Result<String, JsValue> {
        let lost = |why: String| {
            js_error(
                "SECRET_LOST",
                &format!("the secret stored on this device cannot be unlocked ({why}); enter the recovery phrase"),
            )
        };
        let bytes = base64url::decode(wrapped).map_err(|e| lost(e.to_string()))?;
        let plain = Self::call(&self.unwrap, &bytes).await.map_err(|e| lost(super::io::js_message(&e)))?;
        String::from_utf8(plain).map_err(|_| lost("not text".into()))
    }
}

/// The sync engine, for JavaScript.
#[wasm_bindgen(js_name = Engine)]
pub struct WebEngine {
    inner: Rc<Inner>,
}

impl std::fmt::Debug for WebEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebEngine")
            .field("engine", &self.inner.current())
            .field("storage", &self.inner.storage)
            .finish()
    }
}

fn err(e: EngineError) -> JsValue {
    engine_error(&e)
}

fn no_secret(db_name: &str) -> JsValue {
    js_error(
        "NO_SECRET",
        &format!("database {db_name:?} holds no secret on this device: pass options.secret (a recovery phrase)"),
    )
}

/// True for an OPFS error meaning another worker (a closing tab) still holds the database's
/// pool: worth waiting for, never a reason to fall back to another backend (that would fork
/// the data).
fn opfs_busy(e: &str) -> bool {
    e.contains("NoModificationAllowed")
}

/// OPFS sync access handles do not exist here (no API, not supported, not allowed): a reason
/// to use the next backend, unlike a failure of OPFS that does exist.
fn opfs_unsupported(e: &str) -> bool {
    ["NotSupportedError", "SecurityError", "dedicated worker", "not a function", "undefined", "getDirectory"]
        .iter()
        .any(|m| e.contains(m))
}

/// How long to wait for another worker (a closing leader tab) to release the OPFS pool.
const OPFS_BUSY_WAIT_MS: u32 = 10_000;

fn storage_err(e: impl std::fmt::Display) -> JsValue {
    js_error("STORAGE", &e.to_string())
}

/// Opens the database on OPFS, waiting while another worker still holds it.
async fn open_opfs(db_name: &str) -> Result<rusqlite::Connection, String> {
    let mut waited = 0;
    loop {
        let e = match open_database(db_name).await {
            Ok(conn) => return Ok(conn),
            Err(e) => e.to_string(),
        };
        if !opfs_busy(&e) || waited >= OPFS_BUSY_WAIT_MS {
            return Err(e);
        }
        sleep(200).await;
        waited += 200;
    }
}

/// Opens the database: `opfs`, `idb` or `memory` as asked; `auto` takes the first that works of
/// OPFS (sync access handles), IndexedDB (the mirror VFS) and memory, and says why in `reason`.
async fn open_storage(
    mode: &str,
    db_name: &str,
    pages: Option<&PageStore>,
) -> Result<(rusqlite::Connection, StorageInfo), JsValue> {
    let idb = |reason: Option<String>, durable: bool| async move {
        let pages = pages.ok_or_else(|| "no IndexedDB page store was given".to_owned())?;
        let conn = crate::store::idb::open_database(pages, db_name, crate::store::PAGE_SIZE)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((conn, StorageInfo { mode: "idb", durable, reason }))
    };
    let memory = |reason: String| {
        let conn = crate::store::open_memory().map_err(storage_err)?;
        Ok((conn, StorageInfo { mode: "memory", durable: false, reason: Some(reason) }))
    };
    match mode {
        "memory" => memory("memory storage was requested".into()),
        "opfs" => open_opfs(db_name)
            .await
            .map(|conn| (conn, StorageInfo { mode: "opfs", durable: true, reason: None }))
            .map_err(|e| storage_err(format!("OPFS storage is unavailable: {e}"))),
        "idb" => idb(None, true).await.map_err(|e| storage_err(format!("IndexedDB storage is unavailable: {e}"))),
        "auto" => {
            // A database already in IndexedDB stays there (it was created where OPFS sync
            // access handles were missing): opening an empty one on OPFS would orphan it.
            if let Some(p) = pages {
                if p.holds(db_name).await {
                    let why = "this database lives in IndexedDB (it was created where OPFS sync access handles were unavailable)";
                    return idb(Some(why.into()), true)
                        .await
                        .map_err(|e| storage_err(format!("IndexedDB storage failed: {e}")));
                }
            }
            let opfs_error = match open_opfs(db_name).await {
                Ok(conn) => return Ok((conn, StorageInfo { mode: "opfs", durable: true, reason: None })),
                Err(e) if opfs_busy(&e) => {
                    return Err(storage_err(format!("another tab still holds {db_name:?} on OPFS: {e}")))
                }
                Err(e) => e,
            };
            // OPFS failed. Where it is simply not available here, go on to IndexedDB; where it
            // failed otherwise (a quota, a transient error) but holds this database, falling
            // back would open an empty copy beside it: fail instead, and let the app retry.
            if let Some(p) = pages.filter(|_| !opfs_unsupported(&opfs_error)) {
                if p.opfs_holds(db_name).await {
                    return Err(storage_err(format!(
                        "{db_name:?} is stored on OPFS, which failed to open ({opfs_error}); not opening an \
                         empty copy elsewhere — try again"
                    )));
                }
            }
            let why = format!("OPFS sync access handles are unavailable here ({opfs_error})");
            // OPFS refused for security while IndexedDB works: a private window (Firefox's),
            // whose IndexedDB is deleted when the private session ends.
            let (durable, where_) = if opfs_error.contains("SecurityError") {
                (
                    false,
                    "; the database lives in IndexedDB, which this browser keeps only for the session (a private \
                     window?): it is deleted when the session ends",
                )
            } else {
                (true, "; the database lives in IndexedDB")
            };
            match idb(Some(format!("{why}{where_}")), durable).await {
                Ok(opened) => Ok(opened),
                Err(idb_error) => memory(format!(
                    "{why}, and so is IndexedDB ({idb_error}); data lives in memory and is lost when the page \
                     closes"
                )),
            }
        }
        other => Err(bad_arg(format!("storage {other:?}: use \"auto\", \"opfs\", \"idb\" or \"memory\""))),
    }
}

/// A JavaScript promise of `f`. Every async export goes through this one boxed future type,
/// so the module holds one copy of `future_to_promise`'s machinery instead of one per method
/// (−23 KB of code before wasm-opt).
fn promise(f: impl std::future::Future<Output = Result<JsValue, JsValue>> + 'static) -> js_sys::Promise {
    let f: std::pin::Pin<Box<dyn std::future::Future<Output = Result<JsValue, JsValue>>>> = Box::pin(f);
    wasm_bindgen_futures::future_to_promise(f)
}

/// After every automatic pass, what it wrote is made durable (IndexedDB storage; failures
/// are kept in memory and saved with the next write).
fn flush_after_pass(pages: Option<PageStore>, db_name: String) -> Option<AfterPass> {
    let pages = Rc::new(pages?);
    Some(Box::new(move || {
        let (pages, db_name) = (pages.clone(), db_name.clone());
        Box::pin(async move {
            let _ = crate::store::idb::flush(&pages, &db_name).await;
        })
    }))
}

#[wasm_bindgen(js_class = Engine)]
impl WebEngine {
    /// Opens the engine: `options` = `{relays, schema, dbName?, syncIntervalMs?, autoSync?,
    /// storage?, maxEventBytes?, maxBlobBytes?, requestTimeoutMs?}`. Without `secret`, the
    /// secret stored in the database (sealed by `custody`) is used; with `custody`, the secret
    /// the engine runs with is stored sealed on every open (durable storage only).
    #[wasm_bindgen(js_name = open)]
    pub fn open_js(secret: Option<String>, options: JsValue, custody: JsValue, pages: JsValue) -> js_sys::Promise {
        promise(async move { Self::open(secret, options, custody, pages).await.map(JsValue::from) })
    }

    /// Runs a full pass now (also with `autoSync: false`) and resolves with its report.
    #[wasm_bindgen(js_name = sync)]
    pub fn sync_js(&self) -> js_sys::Promise {
        let this = self.handle();
        promise(async move { this.sync().await })
    }

    /// Every relay's status, refreshed from `/v1/status`.
    #[wasm_bindgen(js_name = relayStatuses)]
    pub fn relay_statuses_js(&self) -> js_sys::Promise {
        let this = self.handle();
        promise(async move { this.relay_statuses().await })
    }

    /// Every relay's status as this device knows it, asking no relay.
    #[wasm_bindgen(js_name = relayStatusesLocal)]
    pub fn relay_statuses_local(&self) -> Result<JsValue, JsValue> {
        Ok(record_to_js(&self.engine()?.relay_statuses_local().map_err(err)?))
    }

    /// A whole blob's bytes.
    #[wasm_bindgen(js_name = getBlob)]
    pub fn get_blob_js(&self, blob_id: String) -> js_sys::Promise {
        let this = self.handle();
        promise(async move { this.get_blob(blob_id).await.map(JsValue::from) })
    }

    /// One chunk's bytes.
    #[wasm_bindgen(js_name = getBlobChunk)]
    pub fn get_blob_chunk_js(&self, blob_id: String, index: u32) -> js_sys::Promise {
        let this = self.handle();
        promise(async move { this.get_blob_chunk(blob_id, index).await.map(JsValue::from) })
    }

    /// Moves everything to a new secret and pushes it; the old owner stays open until
    /// `confirmRekey()`. With key custody the new secret is stored (sealed) in the same
    /// transaction as the switch. At most once per `requestId`.
    #[wasm_bindgen(js_name = rekey)]
    pub fn rekey_js(&self, new_secret: String, request_id: Option<String>) -> js_sys::Promise {
        let this = self.handle();
        promise(async move { this.rekey(new_secret, request_id).await })
    }

    /// Finishes a re-key: closes the old owner on every relay. At most once per `requestId`.
    #[wasm_bindgen(js_name = confirmRekey)]
    pub fn confirm_rekey_js(&self, request_id: Option<String>) -> js_sys::Promise {
        let this = self.handle();
        promise(async move { this.confirm_rekey(request_id).await })
    }

    /// Resolves once everything written so far is durable (the worker awaits it after every
    /// call; a no-op unless the database lives in IndexedDB).
    #[wasm_bindgen(js_name = flush)]
    pub fn flush_js(&self) -> js_sys::Promise {
        let this = self.handle();
        promise(async move { this.flush().await.map(|()| JsValue::UNDEFINED) })
    }

    /// Whether any tab of the app is visible: hidden, automatic polls are rarer
    /// ([`crate::engine::driver::HIDDEN_POLL_FACTOR`]).
    #[wasm_bindgen(js_name = setVisible)]
    pub fn set_visible(&self, visible: bool) {
        if let Some(d) = self.driver() {
            d.set_visible(visible);
        }
    }

    fn after_write(&self) {
        if let Some(d) = self.driver() {
            d.request(SyncTrigger::Write);
        }
    }

    fn write_op(&self, op: Op) -> Result<JsValue, JsValue> {
        let rows = self.engine()?.transaction(std::slice::from_ref(&op)).map_err(err)?;
        self.after_write();
        Ok(rows.first().map_or(JsValue::NULL, json_to_js))
    }

    /// The public owner id.
    #[wasm_bindgen(getter, js_name = ownerId)]
    pub fn owner_id(&self) -> String {
        self.inner.current().map(|e| e.owner_id()).unwrap_or_default()
    }

    /// This device's id.
    #[wasm_bindgen(getter, js_name = deviceId)]
    pub fn device_id(&self) -> String {
        self.inner.current().map(|e| e.device_id().to_owned()).unwrap_or_default()
    }

    /// `{mode: "opfs" | "idb" | "memory", durable, reason}`.
    pub fn storage(&self) -> JsValue {
        record_to_js(&self.inner.storage)
    }

    /// Creates a row.
    pub fn insert(&self, table: String, row: JsValue) -> Result<JsValue, JsValue> {
        self.write_op(Op::Insert { table, row: arg_json(&row, "row")? })
    }

    /// Changes the given columns of a live row.
    pub fn update(&self, table: String, id: String, patch: JsValue) -> Result<JsValue, JsValue> {
        self.write_op(Op::Update { table, id, patch: arg_json(&patch, "patch")? })
    }

    /// Writes a whole row.
    pub fn upsert(&self, table: String, row: JsValue) -> Result<JsValue, JsValue> {
        self.write_op(Op::Upsert { table, row: arg_json(&row, "row")? })
    }

    /// Soft-deletes a live row.
    pub fn delete(&self, table: String, id: String) -> Result<JsValue, JsValue> {
        self.write_op(Op::Delete { table, id })
    }

    /// Applies `[{op: "insert"|"update"|"upsert"|"delete", table, row?, id?, patch?}]` atomically.
    /// With a `requestId`, at most once: a repeated id returns the first call's rows.
    /// `opsJson`, if given, is `JSON.stringify(ops)` made by the worker when `ops` hold only
    /// plain data (`plainJson`): the faster way across. `firstSend` true says no call with this
    /// `requestId` was sent before, to this engine or another tab's: its record is not looked
    /// for (a re-send leaves it out).
    pub fn transaction(
        &self,
        ops: JsValue,
        request_id: Option<String>,
        ops_json: Option<String>,
        first_send: Option<bool>,
    ) -> Result<JsValue, JsValue> {
        let request = request_id.as_deref().map(|id| Request { id, first_send: first_send == Some(true) });
        let rows = writes::transaction(&*self.engine()?, &ops, ops_json.as_deref(), request)?;
        self.after_write();
        Ok(rows)
    }

    /// A live row or `null`.
    pub fn get(&self, table: String, id: String) -> Result<JsValue, JsValue> {
        Ok(self.engine()?.get(&table, &id).map_err(err)?.as_ref().map_or(JsValue::NULL, json_to_js))
    }

    /// Rows of a table: `{where?, orderBy?, limit?, includeDeleted?}`.
    pub fn list(&self, table: String, options: JsValue) -> Result<JsValue, JsValue> {
        let o = arg_json(&options, "options")?;
        let opts = ListOptions {
            filter: o.get("where").cloned(),
            order_by: o.get("orderBy").and_then(|v| v.as_str()).map(str::to_owned),
            limit: o.get("limit").and_then(|v| v.as_f64()).map(|n| n.clamp(0.0, u32::MAX as f64) as u32),
            include_deleted: o.get("includeDeleted").and_then(|v| v.as_bool()).unwrap_or(false),
        };
        let rows = self.engine()?.list(&table, &opts).map_err(err)?;
        Ok(array_to_js(&rows))
    }

    /// One read-only SQL statement of the app with positional parameters (the engine's own
    /// tables and SQLite's are refused). `options.raw`: values as SQLite has them.
    pub fn query(&self, sql: String, params: JsValue, options: JsValue) -> Result<JsValue, JsValue> {
        let params = query_params(&params)?;
        let raw = arg_json(&options, "options")?.get("raw").and_then(|v| v.as_bool()).unwrap_or(false);
        let engine = self.engine()?;
        let rows = if raw { engine.query_raw(&sql, &params) } else { engine.query(&sql, &params) }.map_err(err)?;
        Ok(array_to_js(&rows))
    }

    /// [`Engine::query`] that may read the engine's own tables: for inspection and tests. The
    /// package's worker does not answer it to a page.
    #[wasm_bindgen(js_name = inspectQuery)]
    pub fn inspect_query(&self, sql: String, params: JsValue) -> Result<JsValue, JsValue> {
        let params = query_params(&params)?;
        let rows = self.engine()?.inspect_query(&sql, &params).map_err(err)?;
        Ok(array_to_js(&rows))
    }

    /// The schema tables a read-only SQL statement reads (what a live query watches).
    #[wasm_bindgen(js_name = queryTables)]
    pub fn query_tables(&self, sql: String) -> Result<JsValue, JsValue> {
        let tables = self.engine()?.tables_read(&sql).map_err(err)?;
        Ok(tables.iter().map(|t| JsValue::from_str(t)).collect::<Array>().into())
    }

    /// The page regained focus or the network: sync now (unless `autoSync` is off).
    pub fn notify(&self, event: String) -> Result<(), JsValue> {
        let trigger = match event.as_str() {
            "focus" => SyncTrigger::Focus,
            "online" => SyncTrigger::Online,
            other => return Err(bad_arg(format!("notify({other:?}): expected \"focus\" or \"online\""))),
        };
        if let Some(d) = self.driver() {
            d.request(trigger);
        }
        Ok(())
    }

    /// Adds a relay (backfilled on its first pass). At most once per `requestId`.
    #[wasm_bindgen(js_name = addRelay)]
    pub fn add_relay(&self, url: String, request_id: Option<String>) -> Result<(), JsValue> {
        let e = &self.engine()?;
        e.once(request_id.as_deref(), || e.add_relay(&url)).map_err(err)?;
        if let Some(d) = self.driver() {
            d.relays_changed();
        }
        self.after_write();
        Ok(())
    }

    /// Gives (or with `null` drops) the registration token for the relay at `url`, which a
    /// relay with `REGISTRATION=token` needs before it registers this owner (memory only).
    #[wasm_bindgen(js_name = setRegistrationToken)]
    pub fn set_registration_token(&self, url: String, token: Option<String>) -> Result<(), JsValue> {
        self.engine()?.set_registration_token(&url, token);
        if let Some(d) = self.driver() {
            d.request(SyncTrigger::Manual);
        }
        Ok(())
    }

    /// Removes a relay and what this device knew about it. At most once per `requestId`.
    #[wasm_bindgen(js_name = removeRelay)]
    pub fn remove_relay(&self, url: String, request_id: Option<String>) -> Result<(), JsValue> {
        let e = &self.engine()?;
        e.once(request_id.as_deref(), || e.remove_relay(&url)).map_err(err)?;
        if let Some(d) = self.driver() {
            d.relays_changed();
        }
        Ok(())
    }

    /// Hard-deletes every soft-deleted row; returns the count. At most once per `requestId`.
    #[wasm_bindgen(js_name = purgeDeleted)]
    pub fn purge_deleted(&self, request_id: Option<String>) -> Result<u32, JsValue> {
        let e = &self.engine()?;
        let n = e.once(request_id.as_deref(), || e.purge_deleted()).map_err(err)?;
        self.after_write();
        Ok(n as u32)
    }

    /// Hard-deletes the given rows; returns the count. At most once per `requestId`.
    #[wasm_bindgen(js_name = purgeRows)]
    pub fn purge_rows(&self, table: String, ids: Vec<String>, request_id: Option<String>) -> Result<u32, JsValue> {
        let e = &self.engine()?;
        let n = e.once(request_id.as_deref(), || e.purge_rows(&table, &ids)).map_err(err)?;
        self.after_write();
        Ok(n as u32)
    }

    /// Stores bytes as an encrypted blob; returns its manifest. At most once per `requestId`.
    /// `progress(bytesSealed, byteSize)` is called after each chunk is encrypted (its errors
    /// are ignored).
    #[wasm_bindgen(js_name = putBlob)]
    pub fn put_blob(
        &self,
        bytes: Uint8Array,
        mime_type: String,
        chunk_size: Option<u32>,
        request_id: Option<String>,
        progress: Option<js_sys::Function>,
    ) -> Result<JsValue, JsValue> {
        let e = &self.engine()?;
        let data = bytes.to_vec();
        let mut tell = |done: u64, total: u64| {
            if let Some(f) = &progress {
                let _ = f.call2(&JsValue::NULL, &JsValue::from_f64(done as f64), &JsValue::from_f64(total as f64));
            }
        };
        let m = e
            .put_blob_once(request_id.as_deref(), &data, &mime_type, chunk_size.map(|c| c as usize), &mut tell)
            .map_err(err)?;
        self.after_write();
        Ok(record_to_js(&m))
    }

    /// A blob's manifest.
    #[wasm_bindgen(js_name = blobManifest)]
    pub fn blob_manifest(&self, blob_id: String) -> Result<JsValue, JsValue> {
        Ok(record_to_js(&self.engine()?.blob_manifest(&blob_id).map_err(err)?))
    }

    /// The recovery phrase (or key), to show to its owner.
    #[wasm_bindgen(js_name = recoveryPhrase)]
    pub fn recovery_phrase(&self) -> Result<String, JsValue> {
        Ok(self.engine()?.recovery_secret())
    }

    /// The owner id a re-key waiting for `confirmRekey()` moved to, or `null`.
    #[wasm_bindgen(js_name = pendingRekey)]
    pub fn pending_rekey(&self) -> Result<JsValue, JsValue> {
        Ok(self.engine()?.pending_rekey().map_err(err)?.map_or(JsValue::NULL, |o| JsValue::from_str(&o)))
    }

    /// Puts items relays refused on their own back in line; returns how many. At most once
    /// per `requestId`.
    #[wasm_bindgen(js_name = retrySetAside)]
    pub fn retry_set_aside(&self, request_id: Option<String>) -> Result<u32, JsValue> {
        let e = &self.engine()?;
        let n = e.once(request_id.as_deref(), || e.retry_set_aside()).map_err(err)?;
        self.after_write();
        Ok(n as u32)
    }

    /// Re-processes quarantined events; returns how many were released. At most once per
    /// `requestId`.
    #[wasm_bindgen(js_name = retryQuarantined)]
    pub fn retry_quarantined(&self, request_id: Option<String>) -> Result<u32, JsValue> {
        let e = &self.engine()?;
        Ok(e.once(request_id.as_deref(), || e.retry_quarantined()).map_err(err)? as u32)
    }

    /// Quarantined events (`{eventId, relay, reason, detail, at}`).
    pub fn quarantined(&self) -> Result<JsValue, JsValue> {
        let held = self.engine()?.quarantined().map_err(err)?;
        Ok(held_to_js(&held))
    }

    /// Deferred events (`{eventId, relay, reason, detail, at}`).
    pub fn deferred(&self) -> Result<JsValue, JsValue> {
        let held = self.engine()?.deferred().map_err(err)?;
        Ok(held_to_js(&held))
    }

    /// Calls `callback({source, tables, rows})` after each committed batch of changes.
    #[wasm_bindgen(js_name = onChange)]
    pub fn on_change(&self, callback: Function) -> Result<f64, JsValue> {
        let id = forward_changes(&*self.engine()?, callback);
        self.inner.callbacks.borrow_mut().push(id);
        Ok(id as f64)
    }

    /// Calls `callback(statuses)` whenever a relay's status changes.
    #[wasm_bindgen(js_name = onStatus)]
    pub fn on_status(&self, callback: Function) -> Result<f64, JsValue> {
        let id = self.engine()?.on_status(move |s| {
            let _ = callback.call1(&JsValue::NULL, &record_to_js(&s));
        });
        Ok(id as f64)
    }

    /// Calls `callback(progress)` during pulls.
    #[wasm_bindgen(js_name = onProgress)]
    pub fn on_progress(&self, callback: Function) -> Result<f64, JsValue> {
        Ok(forward_progress(&*self.engine()?, callback) as f64)
    }

    /// Removes a callback registered with `onChange`, `onStatus` or `onProgress`.
    pub fn unsubscribe(&self, id: f64) -> bool {
        self.inner.current().is_some_and(|e| e.unsubscribe(id as u64))
    }

    /// Stops the driver and closes the database now (a call still running keeps it open until
    /// it ends). Later calls fail with `CLOSED`.
    pub fn close(&self) {
        if let Some(d) = self.inner.driver.borrow_mut().take() {
            d.stop();
        }
        self.inner.engine.borrow_mut().take();
    }

    /// The driver, unless `autoSync` is off or the engine closed.
    fn driver(&self) -> Option<Rc<Driver>> {
        self.inner.driver.borrow().clone()
    }

    fn engine(&self) -> Result<Rc<Engine>, JsValue> {
        self.inner.current().ok_or_else(|| js_error("CLOSED", "the engine is closed"))
    }

    /// Hands the pulls the engine sends ahead to an opener worker (`{pull(request, ownerId)}`,
    /// js/opener.js), which fetches and decrypts each page while the page before applies;
    /// `null` goes back to doing everything in this worker.
    #[wasm_bindgen(js_name = setPageOpener)]
    pub fn set_page_opener(&self, opener: JsValue) -> Result<(), JsValue> {
        let opener =
            if opener.is_null() || opener.is_undefined() { None } else { Some(super::opener::from_js(&opener)?) };
        self.engine()?.set_page_opener(opener);
        Ok(())
    }

    /// The secret as stored (sealed by key custody), if any: what an opener worker unseals.
    #[wasm_bindgen(js_name = storedWrappedSecret)]
    pub fn stored_wrapped_secret(&self) -> Result<Option<String>, JsValue> {
        self.engine()?.wrapped_secret().map_err(err)
    }
}

/// The async methods of [`WebEngine`] behind their JavaScript promises.
impl WebEngine {
    /// Another handle on the same engine, for a promise that outlives the call.
    fn handle(&self) -> WebEngine {
        WebEngine { inner: self.inner.clone() }
    }

    /// `open()` of JavaScript, as a Rust future (what the browser tests await).
    pub async fn open(
        secret: Option<String>,
        options: JsValue,
        custody: JsValue,
        pages: JsValue,
    ) -> Result<WebEngine, JsValue> {
        let opts: OpenOptions = from_js(&options, "options").map_err(bad_arg)?;
        let custody = Custody::from_js(&custody)?;
        let db_name = opts.db_name.unwrap_or_else(|| "simplysync.db".into());
        if db_name.is_empty()
            || db_name.len() > 200
            || db_name.contains(['/', '\\', '\0'])
            || db_name == "."
            || db_name == ".."
        {
            return Err(bad_arg(format!("dbName {db_name:?}: 1–200 characters, no '/', '\\' or NUL, not '.' or '..'")));
        }
        let pages = if pages.is_undefined() || pages.is_null() {
            None
        } else {
            Some(PageStore::from_js(&pages).map_err(|e| bad_arg(e.to_string()))?)
        };
        let (conn, storage) = open_storage(opts.storage.as_deref().unwrap_or("auto"), &db_name, pages.as_ref()).await?;
        let pages = pages.filter(|_| storage.mode == "idb");
        let secret = match (secret, &custody) {
            (Some(s), _) => s,
            (None, Some(c)) => match crate::engine::stored_wrapped_secret(&conn).map_err(err)? {
                Some(wrapped) => c.unwrap(&wrapped).await?,
                None => return Err(no_secret(&db_name)),
            },
            (None, None) => return Err(no_secret(&db_name)),
        };
        let env = Env { transport: Rc::new(FetchTransport), clock: Rc::new(DateClock), entropy: Box::new(OsEntropy) };
        let defaults = EngineOptions::default();
        let options = EngineOptions {
            max_event_bytes: whole(opts.max_event_bytes, "maxEventBytes", defaults.max_event_bytes as u64)? as usize,
            max_blob_bytes: whole(opts.max_blob_bytes, "maxBlobBytes", defaults.max_blob_bytes as u64)? as usize,
            request_timeout_ms: whole(opts.request_timeout_ms, "requestTimeoutMs", defaults.request_timeout_ms.into())?
                as u32,
        };
        let config = EngineConfig { secret, relays: Some(opts.relays), schema: opts.schema, options };
        let engine = Engine::open(conn, config, env).map_err(err)?;
        for (url, token) in opts.registration_tokens {
            engine.set_registration_token(&url, Some(token));
        }
        let custody = custody.filter(|_| storage.mode != "memory");
        if let Some(c) = &custody {
            let wrapped = c.wrap(&engine.recovery_secret()).await?;
            engine.set_wrapped_secret(&wrapped).map_err(err)?;
        }
        if let Some(p) = &pages {
            crate::store::idb::flush(p, &db_name).await.map_err(storage_err)?;
        }
        let interval_ms = opts.sync_interval_ms.unwrap_or(DEFAULT_SYNC_INTERVAL_MS).max(100);
        let engine = Rc::new(engine);
        let driver = opts.auto_sync.unwrap_or(true).then(|| {
            let options = DriverOptions { interval_ms: interval_ms.into(), live: opts.live.unwrap_or(true) };
            let after_pass = flush_after_pass(pages.clone(), db_name.clone());
            Driver::new(engine.clone(), Rc::new(GlooTimer), options, after_pass)
        });
        if let Some(d) = &driver {
            wasm_bindgen_futures::spawn_local(d.clone().run());
        }
        let inner = Rc::new(Inner {
            pages,
            db_name,
            engine: RefCell::new(Some(engine)),
            storage,
            custody,
            driver: RefCell::new(driver),
            callbacks: RefCell::new(Vec::new()),
        });
        Ok(WebEngine { inner })
    }

    /// `sync()` of JavaScript, as a Rust future (what the browser tests await).
    pub async fn sync(&self) -> Result<JsValue, JsValue> {
        let report = self.engine()?.sync_all(SyncTrigger::Manual, MAX_PASSES).await.map_err(err)?;
        Ok(record_to_js(&report))
    }

    /// `relayStatuses()` of JavaScript, as a Rust future (what the browser tests await).
    pub async fn relay_statuses(&self) -> Result<JsValue, JsValue> {
        Ok(record_to_js(&self.engine()?.relay_statuses().await.map_err(err)?))
    }

    /// `getBlob()` of JavaScript, as a Rust future (what the browser tests await).
    pub async fn get_blob(&self, blob_id: String) -> Result<Uint8Array, JsValue> {
        let (_, bytes) = self.engine()?.get_blob(&blob_id).await.map_err(err)?;
        Ok(Uint8Array::from(bytes.as_slice()))
    }

    /// `getBlobChunk()` of JavaScript, as a Rust future (what the browser tests await).
    pub async fn get_blob_chunk(&self, blob_id: String, index: u32) -> Result<Uint8Array, JsValue> {
        let bytes = self.engine()?.get_blob_chunk(&blob_id, index as usize).await.map_err(err)?;
        Ok(Uint8Array::from(bytes.as_slice()))
    }

    /// `rekey()` of JavaScript, as a Rust future (what the browser tests await).
    pub async fn rekey(&self, new_secret: String, request_id: Option<String>) -> Result<JsValue, JsValue> {
        let e = &self.engine()?;
        let wrapped = match &self.inner.custody {
            Some(c) => {
                let parsed = crate::protocol::Secret::parse(&new_secret).map_err(|x| err(x.into()))?;
                Some(c.wrap(parsed.expose()).await?)
            }
            None => None,
        };
        let report = e
            .once_async(
                request_id.as_deref(),
                |id| e.rekey_storing(&new_secret, wrapped.as_deref(), id),
                || e.sync(SyncTrigger::Manual),
            )
            .await
            .map_err(err)?;
        Ok(record_to_js(&report))
    }

    /// `confirmRekey()` of JavaScript, as a Rust future (what the browser tests await).
    pub async fn confirm_rekey(&self, request_id: Option<String>) -> Result<JsValue, JsValue> {
        let e = &self.engine()?;
        let report = e
            .once_async(request_id.as_deref(), |id| e.confirm_rekey_request(id), || e.sync(SyncTrigger::Manual))
            .await
            .map_err(err)?;
        Ok(record_to_js(&report))
    }

    /// `flush()` of JavaScript, as a Rust future (what the browser tests await).
    pub async fn flush(&self) -> Result<(), JsValue> {
        self.inner.flush().await
    }
}

/// Calls `callback({source, tables, rows})` after each committed batch of changes of `engine`
/// (`Engine.onChange`; the benchmark's restore uses it too).
pub(crate) fn forward_changes(engine: &crate::engine::Engine, callback: Function) -> u64 {
    engine.subscribe(None, move |e| {
        // A change event names every row it touched: thousands after a bulk write or a page.
        let _ = callback.call1(&JsValue::NULL, &record_to_js(e));
    })
}

/// Calls `callback(progress)` during `engine`'s pulls (`Engine.onProgress`).
pub(crate) fn forward_progress(engine: &crate::engine::Engine, callback: Function) -> u64 {
    engine.on_progress(move |p| {
        let _ = callback.call1(&JsValue::NULL, &record_to_js(p));
    })
}

/// Deletes the files of database `dbName` (OPFS pool of this worker) and forgets its
/// IndexedDB mirror. Close and free the engine first.
#[wasm_bindgen(js_name = wipeDatabase)]
pub fn wipe_database(db_name: String) -> Result<(), JsValue> {
    crate::store::idb::forget(&db_name);
    crate::store::opfs::wipe_database(&db_name).map_err(|e| js_error("STORAGE", &e.to_string()))
}

fn held_to_js(held: &[crate::store::inbox::HeldEvent]) -> JsValue {
    struct Held<'a>(&'a crate::store::inbox::HeldEvent);
    impl ToJson for Held<'_> {
        fn write_json(&self, out: &mut String) {
            let h = self.0;
            ObjectWriter::new(out)
                .member("eventId", &h.event_id)
                .member("relay", &h.relay)
                .member("reason", &h.reason)
                .member("detail", &h.detail)
                .member("at", &h.at)
                .end();
        }
    }
    record_to_js(&held.iter().map(Held).collect::<Vec<_>>())
}

/// A query's parameters: an array, or nothing.
fn query_params(params: &JsValue) -> Result<Vec<Json>, JsValue> {
    match arg_json(params, "params")? {
        Json::Null => Ok(vec![]),
        Json::Array(p) => Ok(p),
        _ => Err(bad_arg("params must be an array".into())),
    }
}
