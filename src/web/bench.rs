//! Browser benchmarks (feature `bench`; driven by `bench/run.mjs`). Each function measures one
//! thing in the dedicated worker, on OPFS — or, given an IndexedDB page store, on the IndexedDB
//! storage, where a write counts as done once its flush committed (as the package acknowledges
//! it) — and returns raw samples; the driver repeats runs and computes medians and spreads.
//! Nothing here is a test.

use std::rc::Rc;

use aes_gcm::aead::Aead;
use aes_gcm::{Aes256Gcm, KeyInit};
use rusqlite::params;
use serde::Serialize;
use wasm_bindgen::prelude::*;

use js_sys::{Array, Object, Reflect};

use super::convert::{array_to_js, record_to_js, to_js};
use super::io::{sleep, DateClock, FetchTransport};
use crate::engine::io::Clock;
use crate::engine::schema::{ColumnDef, ColumnType, SchemaDef, TableDef};
use crate::engine::{ChangeEvent, ChangeSource, Engine, EngineConfig, Env, Op, Request, RowChange, SyncTrigger};
use crate::protocol::entropy::{random_bytes, OsEntropy};
use crate::protocol::{base64url, Json};
use crate::store::idb::{self, PageStore};
use crate::store::opfs::{self, open_database};

const KEY: &str = "sf1_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";

fn js_err(e: impl std::fmt::Display) -> JsValue {
    JsValue::from_str(&e.to_string())
}

/// The bench's own results (serde values; the package itself writes with `ToJson`) for the page.
fn serde_to_js<T: Serialize>(v: &T) -> JsValue {
    serde_json::to_string(v).ok().and_then(|text| js_sys::JSON::parse(&text).ok()).unwrap_or(JsValue::NULL)
}

fn now() -> f64 {
    DateClock.precise_ms()
}

fn unique(tag: &str) -> String {
    format!("bench-{tag}-{}.db", base64url::encode(&random_bytes::<6>(&mut OsEntropy).unwrap_or([0; 6])))
}

fn schema() -> SchemaDef {
    SchemaDef {
        schema_version: 1,
        tables: vec![TableDef {
            name: "todos".into(),
            columns: vec![
                ColumnDef::new("title", ColumnType::Text),
                ColumnDef::new("done", ColumnType::Boolean),
                ColumnDef::new("position", ColumnType::Integer),
            ],
            merge: Default::default(),
            indexes: Vec::new(),
        }],
    }
}

async fn connection(tag: &str) -> Result<rusqlite::Connection, JsValue> {
    open_database(&unique(tag)).await.map_err(js_err)
}

/// Where a benchmark's databases live: OPFS, or IndexedDB through `pages` (a `{load, store}`
/// page store from `js/idb-pages.js`).
struct Storage(Option<PageStore>);

impl Storage {
    fn from_js(pages: &JsValue) -> Result<Storage, JsValue> {
        if pages.is_undefined() || pages.is_null() {
            return Ok(Storage(None));
        }
        Ok(Storage(Some(PageStore::from_js(pages).map_err(js_err)?)))
    }

    /// A new database and its name.
    async fn open(&self, tag: &str) -> Result<(rusqlite::Connection, String), JsValue> {
        let name = unique(tag);
        let conn = match &self.0 {
            None => open_database(&name).await,
            Some(p) => idb::open_database(p, &name, crate::store::PAGE_SIZE).await,
        };
        Ok((conn.map_err(js_err)?, name))
    }

    /// Makes `name`'s writes durable (IndexedDB: its flush; OPFS commits are durable already).
    async fn durable(&self, name: &str) -> Result<(), JsValue> {
        match &self.0 {
            None => Ok(()),
            Some(p) => idb::flush(p, name).await.map_err(js_err),
        }
    }

    async fn engine(&self, secret: &str, relays: Vec<String>, tag: &str) -> Result<(Engine, String), JsValue> {
        let (conn, name) = self.open(tag).await?;
        let env = Env { transport: Rc::new(FetchTransport), clock: Rc::new(DateClock), entropy: Box::new(OsEntropy) };
        let e = Engine::open(conn, EngineConfig::new(secret, relays, schema()), env).map_err(js_err)?;
        self.durable(&name).await?;
        Ok((e, name))
    }
}

async fn engine(secret: &str, relays: Vec<String>, tag: &str) -> Result<Engine, JsValue> {
    Ok(Storage(None).engine(secret, relays, tag).await?.0)
}

/// What js/worker.js sends with `ops`: the package's `plainJson(ops)` (given as `plain_json`).
fn ops_text(plain_json: &JsValue, ops: &JsValue) -> Result<Option<String>, JsValue> {
    match plain_json.dyn_ref::<js_sys::Function>() {
        Some(f) => Ok(f.call1(&JsValue::NULL, ops)?.as_string()),
        None => Ok(None),
    }
}

/// `{op: "insert", table: "todos", row}` as the worker receives it.
fn js_op(row: &Json) -> JsValue {
    let op = Object::new();
    for (k, v) in [("op", JsValue::from_str("insert")), ("table", JsValue::from_str("todos")), ("row", to_js(row))] {
        let _ = Reflect::set(&op, &JsValue::from_str(k), &v);
    }
    op.into()
}

fn todo(i: u32) -> Json {
    todo_as(format!("row-{i:08}"), i)
}

/// Row `i` under `id`.
fn todo_as(id: String, i: u32) -> Json {
    Json::object([
        ("id", Json::from(id)),
        ("title", Json::from(format!("todo number {i} with a realistic title"))),
        ("done", Json::Bool(i % 3 == 0)),
        ("position", Json::from(i)),
    ])
}

/// What the bench worker counted of OPFS writes and flushes since the last call: `null` when it
/// does not count (`--only writes` and `--only restore` do), zeros on the IndexedDB storage (no
/// OPFS files).
fn opfs_io() -> serde_json::Value {
    let counter = js_sys::Reflect::get(&js_sys::global(), &JsValue::from_str("__opfsWrites")).unwrap_or(JsValue::NULL);
    if counter.is_undefined() || counter.is_null() {
        return serde_json::Value::Null;
    }
    let take = js_sys::Reflect::get(&counter, &JsValue::from_str("take"))
        .ok()
        .and_then(|f| f.dyn_into::<js_sys::Function>().ok());
    let Some(taken) = take.and_then(|f| f.call0(&counter).ok()) else { return serde_json::Value::Null };
    js_sys::JSON::stringify(&taken)
        .ok()
        .and_then(|s| s.as_string())
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// The floors' table (a todo's columns without the engine's) and its bare INSERT.
const RAW_TABLE: &str = "CREATE TABLE t (id TEXT PRIMARY KEY, title TEXT, done INTEGER, position INTEGER)";
const RAW_INSERT: &str = "INSERT INTO t (id, title, done, position) VALUES (?1, ?2, ?3, ?4)";

/// `n` durable single-row writes: a bare autocommit INSERT (the floor), the engine's row and
/// intent by hand, an engine insert (row + outbox intent in one transaction), and the same
/// through the package's path (`plain_json`: the package's `plainJson`). Latencies in ms.
/// `pages`: see [`Storage`].
///
/// The paths are interleaved, commit by commit, in an order rotated per commit: measured one
/// after another (200 commits each), a path met another machine state than the floor's, and
/// the ratio of the same build moved between ×0.98 and ×1.44 in one session (BENCHMARKS.md,
/// issue 17 round thirty).
#[wasm_bindgen(js_name = benchLocalWrite)]
pub async fn bench_local_write(n: u32, pages: JsValue, plain_json: JsValue) -> Result<JsValue, JsValue> {
    let storage = Storage::from_js(&pages)?;
    let (raw, raw_name) = storage.open("raw-single").await?;
    raw.execute_batch(RAW_TABLE).map_err(js_err)?;
    // The engine's writes by hand: the row and an outbox-shaped intent in one transaction,
    // the same tables and indexes as the engine's, without its code (what the pages cost).
    let (by_hand, hand_name) = storage.open("hand-single").await?;
    by_hand
        .execute_batch(
            "CREATE TABLE t (id TEXT PRIMARY KEY, updatedAt TEXT, deleted INTEGER, title TEXT, done INTEGER, position INTEGER) WITHOUT ROWID;
             CREATE TABLE o (event_id TEXT PRIMARY KEY NOT NULL, table_name TEXT NOT NULL, row_id TEXT NOT NULL, envelope_json TEXT, created_at INTEGER NOT NULL, pushed_at INTEGER) WITHOUT ROWID;",
        )
        .map_err(js_err)?;
    let (e, name) = storage.engine(KEY, vec![], "engine-single").await?;
    // The package's path for one row: a JS op, its JSON text (`plainJson`), a request id sent
    // for the first time (the answer recorded in the same commit, on the row's outbox intent),
    // the row back as a JS object.
    let (api, api_name) = storage.engine(KEY, vec![], "api-single").await?;
    // The package's path again, timed by step (a fifth path, so the clock readings between
    // the steps stay out of the fourth's time): ops to JSON text (JS), parse into ops, the
    // write, the answer's text and `JSON.parse`, the flush.
    let (split, split_name) = storage.engine(KEY, vec![], "api-single-split").await?;
    let mut steps = [0.0f64; 5];
    opfs_io();
    let mut ms: [Vec<f64>; 5] = Default::default();
    let mut io: [Option<IoSum>; 5] = [Some(IoSum::default()); 5];
    for i in 0..n {
        for k in 0..5 {
            let path = (i as usize + k) % 5;
            // Inputs made before the clock starts; JS values only for the paths that take
            // them (garbage the others made would be collected inside the package's path).
            let op: JsValue = if path >= 3 { Array::of1(&js_op(&todo(i))).into() } else { JsValue::NULL };
            let request = format!("bench:{i}");
            let hlc = format!("{:015}-000000-devicedevicedevice00", 1_764_504_000_000u64 + u64::from(i));
            let id = format!("row-{i:08}");
            let t0 = now();
            match path {
                0 => {
                    raw.prepare_cached(RAW_INSERT)
                        .and_then(|mut s| s.execute(params![id, format!("todo number {i}"), i % 3 == 0, i]))
                        .map_err(js_err)?;
                    storage.durable(&raw_name).await?;
                }
                1 => {
                    // Begun and committed through cached statements, as the engine's are.
                    by_hand.prepare_cached("BEGIN").and_then(|mut s| s.execute([])).map_err(js_err)?;
                    by_hand
                        .prepare_cached("INSERT INTO t VALUES (?1, ?2, 0, ?3, ?4, ?5)")
                        .and_then(|mut s| {
                            s.execute(params![
                                id,
                                hlc,
                                format!("todo number {i} with a realistic title"),
                                i % 3 == 0,
                                i
                            ])
                        })
                        .map_err(js_err)?;
                    by_hand
                        .prepare_cached(
                            "INSERT INTO o (event_id, table_name, row_id, created_at) VALUES (?1, 'todos', ?2, ?3)",
                        )
                        .and_then(|mut s| s.execute(params![hlc, id, i64::from(i)]))
                        .map_err(js_err)?;
                    by_hand.prepare_cached("COMMIT").and_then(|mut s| s.execute([])).map_err(js_err)?;
                    storage.durable(&hand_name).await?;
                }
                2 => {
                    e.insert("todos", todo(i)).map_err(js_err)?;
                    storage.durable(&name).await?;
                }
                3 => {
                    let text = ops_text(&plain_json, &op)?;
                    super::writes::transaction(&api, &op, text.as_deref(), Some(Request::first(&request)))?;
                    storage.durable(&api_name).await?;
                }
                _ => {
                    let text = ops_text(&plain_json, &op)?;
                    let t1 = now();
                    let ops = super::writes::parse_ops(super::writes::ops_as_json(&op, text.as_deref())?)?;
                    let t2 = now();
                    let written = split.write_rows(&ops, Some(Request::first(&request))).map_err(js_err)?;
                    let t3 = now();
                    js_sys::JSON::parse(&written.into_canonical_json())?;
                    let t4 = now();
                    storage.durable(&split_name).await?;
                    let t5 = now();
                    for (step, d) in steps.iter_mut().zip([t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4]) {
                        *step += d;
                    }
                }
            }
            ms[path].push(now() - t0);
            io[path] = io[path].and_then(IoSum::take);
        }
    }
    let [raw_ms, hand_ms, engine_ms, api_ms, split_ms] = ms;
    let io = io.map(|sum| sum.map(IoSum::to_json));
    let step = |k: usize| steps[k] / f64::from(n.max(1));
    Ok(serde_to_js(&serde_json::json!({
        "raw": raw_ms, "byHand": hand_ms, "engine": engine_ms, "api": api_ms, "apiSplit": split_ms,
        "apiSteps": { "text": step(0), "parse": step(1), "write": step(2), "answer": step(3), "flush": step(4) },
        "io": { "raw": io[0], "byHand": io[1], "engine": io[2], "api": io[3], "apiSplit": io[4] },
    })))
}

/// What [`opfs_io`] counted, summed over commits.
#[derive(Debug, Default, Clone, Copy)]
struct IoSum([f64; 6]);

impl IoSum {
    const KEYS: [&'static str; 6] = ["calls", "small", "bytes", "ms", "flushes", "flushMs"];

    /// `self` plus what the bench worker counted since the last call (as [`opfs_io`], read
    /// field by field: no JSON text a commit); `None` when it does not count.
    fn take(mut self) -> Option<IoSum> {
        let counter = Reflect::get(&js_sys::global(), &JsValue::from_str("__opfsWrites")).ok()?;
        let take = Reflect::get(&counter, &JsValue::from_str("take")).ok()?.dyn_into::<js_sys::Function>().ok()?;
        let taken = take.call0(&counter).ok()?;
        for (sum, key) in self.0.iter_mut().zip(Self::KEYS) {
            *sum += Reflect::get(&taken, &JsValue::from_str(key)).ok()?.as_f64()?;
        }
        Some(self)
    }

    fn to_json(self) -> serde_json::Value {
        Self::KEYS.iter().zip(self.0).map(|(k, v)| (k.to_string(), serde_json::Value::from(v))).collect()
    }
}

/// Row `i`'s id in no order, shaped as `crypto.randomUUID()` makes ids (a fixed mix of `i`, so
/// runs and builds compare).
fn scattered_id(i: u32) -> String {
    let mut x = u64::from(i).wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    let y = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
    format!(
        "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
        x >> 32,
        (x >> 16) & 0xffff,
        x & 0xfff,
        y >> 52,
        y & 0xffff_ffff_ffff
    )
}

/// `n` bare prepared INSERTs of rows `id(i)` in one transaction on a database of its own, made
/// durable: ms.
async fn raw_bulk(storage: &Storage, name: &str, n: u32, id: fn(u32) -> String) -> Result<f64, JsValue> {
    let (mut raw, raw_name) = storage.open(name).await?;
    raw.execute_batch(RAW_TABLE).map_err(js_err)?;
    let t0 = now();
    let tx = raw.transaction().map_err(js_err)?;
    {
        let mut stmt = tx.prepare(RAW_INSERT).map_err(js_err)?;
        for i in 0..n {
            stmt.execute(params![id(i), format!("todo number {i} with a realistic title"), i % 3 == 0, i])
                .map_err(js_err)?;
        }
    }
    tx.commit().map_err(js_err)?;
    storage.durable(&raw_name).await?;
    Ok(now() - t0)
}

/// `js_ops` through the package's path on a database of its own — as js/worker.js calls it: the
/// ops as JSON text when they are plain data (`plainJson`), a request id, the rows as JS objects
/// out — made durable: ms, and the engine.
async fn api_bulk(
    storage: &Storage,
    tag: &str,
    js_ops: &Array,
    plain_json: &JsValue,
) -> Result<(f64, Engine), JsValue> {
    let (api, name) = storage.engine(KEY, vec![], tag).await?;
    let t0 = now();
    let text = ops_text(plain_json, js_ops)?;
    let rows = super::writes::transaction(&api, js_ops, text.as_deref(), Some(Request::first("bench-request")))?;
    storage.durable(&name).await?;
    let ms = now() - t0;
    if Array::from(&rows).length() != js_ops.length() {
        return Err(js_err(format!("the API answered with a different number of rows ({tag})")));
    }
    Ok((ms, api))
}

/// [`api_bulk`] again on a database of its own, split into its steps (ms): the ops' JSON text
/// in JavaScript, its parse into ops, the write (rows, intents, the request's record, the
/// commit), the answer's text and its `JSON.parse`, the storage's flush.
async fn api_steps(
    storage: &Storage,
    tag: &str,
    js_ops: &Array,
    plain_json: &JsValue,
) -> Result<serde_json::Value, JsValue> {
    let (split, split_name) = storage.engine(KEY, vec![], tag).await?;
    let t0 = now();
    let text = ops_text(plain_json, js_ops)?;
    let t1 = now();
    let ops = super::writes::parse_ops(super::writes::ops_as_json(js_ops, text.as_deref())?)?;
    let t2 = now();
    let written = split.write_rows(&ops, Some(Request::first("bench-request"))).map_err(js_err)?;
    let t3 = now();
    let answer = js_sys::JSON::parse(&written.into_canonical_json())?;
    let t4 = now();
    storage.durable(&split_name).await?;
    let t5 = now();
    if Array::from(&answer).length() != js_ops.length() {
        return Err(js_err(format!("the split path answered with a different number of rows ({tag})")));
    }
    Ok(serde_json::json!({
        "text": t1 - t0, "parse": t2 - t1, "write": t3 - t2, "answer": t4 - t3, "flush": t5 - t4,
    }))
}

/// `n` rows in one transaction: bare prepared INSERTs vs engine mutations vs the package's path
/// (`plain_json`: the package's `plainJson`, as its worker uses it). Durations in ms.
#[wasm_bindgen(js_name = benchBulk)]
pub async fn bench_bulk(n: u32, pages: JsValue, plain_json: JsValue) -> Result<JsValue, JsValue> {
    let storage = Storage::from_js(&pages)?;
    let raw_ms = raw_bulk(&storage, "raw-bulk", n, |i| format!("row-{i:08}")).await?;
    let (e, name) = storage.engine(KEY, vec![], "engine-bulk").await?;
    let ops: Vec<Op> = (0..n).map(|i| Op::Insert { table: "todos".into(), row: todo(i) }).collect();
    let t0 = now();
    e.transaction(&ops).map_err(js_err)?;
    storage.durable(&name).await?;
    let engine_ms = now() - t0;
    let t0 = now();
    let sealed = e.seal_pending_outbox().map_err(js_err)?;
    let seal_ms = now() - t0;
    // The package's path: JS ops in, a request id (every call from a tab carries one), the
    // rows as JS objects out — what `db.transaction(ops)` costs inside the worker.
    let js_ops: Array = (0..n).map(|i| js_op(&todo(i))).collect();
    let (api_ms, api) = api_bulk(&storage, "api-bulk", &js_ops, &plain_json).await?;
    // The same with ids in no order (random UUIDs, as many apps make them): the floor, and the
    // package's path. Each row of the floor's lands on a page of its own in the index's b-tree
    // (the package's path writes a run's rows in id order).
    let raw_scattered_ms = raw_bulk(&storage, "raw-bulk-scattered", n, scattered_id).await?;
    let js_ops_scattered: Array = (0..n).map(|i| js_op(&todo_as(scattered_id(i), i))).collect();
    let (api_scattered_ms, _) = api_bulk(&storage, "api-bulk-scattered", &js_ops_scattered, &plain_json).await?;
    let steps = api_steps(&storage, "api-bulk-split", &js_ops, &plain_json).await?;
    let scattered_steps = api_steps(&storage, "api-bulk-scattered-split", &js_ops_scattered, &plain_json).await?;
    // Reading them back (`list`): the engine's read, then the two ways to JS values — one call
    // out of the module per key and value (`to_js`), or one text through `JSON.parse`
    // (`array_to_js`, what `Engine.list` and `query` use).
    let t0 = now();
    let rows = api.list("todos", &Default::default()).map_err(js_err)?;
    let list_ms = now() - t0;
    let t0 = now();
    let by_value: Array = rows.iter().map(to_js).collect();
    let by_value_ms = now() - t0;
    let t0 = now();
    let by_text = Array::from(&array_to_js(&rows));
    let by_text_ms = now() - t0;
    if by_value.length() != n || by_text.length() != n {
        return Err(js_err("list answered with a different number of rows"));
    }
    // The change event such a transaction sends to the worker's listener, both ways.
    let changes = rows
        .iter()
        .map(|r| RowChange { table: "todos".into(), id: r.get("id").and_then(Json::as_str).unwrap_or("").into() })
        .collect();
    let event = ChangeEvent::new(ChangeSource::Local, changes);
    let t0 = now();
    // serde-wasm-bindgen (what the package used before round fifteen) against the JSON text
    // the package writes (`ToJson`).
    let by_value = event.serialize(&serde_wasm_bindgen::Serializer::json_compatible()).map_err(js_err)?;
    let event_by_value_ms = now() - t0;
    let t0 = now();
    let by_text = record_to_js(&event);
    let event_by_text_ms = now() - t0;
    if js_sys::JSON::stringify(&by_value)? != js_sys::JSON::stringify(&by_text)? {
        return Err(js_err("the two change events differ"));
    }
    Ok(serde_to_js(&serde_json::json!({
        "rawMs": raw_ms, "engineMs": engine_ms, "apiMs": api_ms, "apiSteps": steps, "apiScatteredSteps": scattered_steps, "sealMs": seal_ms, "sealed": sealed,
        "rawScatteredMs": raw_scattered_ms, "apiScatteredMs": api_scattered_ms,
        "listMs": list_ms, "listByValueMs": by_value_ms, "listByTextMs": by_text_ms,
        "eventByValueMs": event_by_value_ms, "eventByTextMs": event_by_text_ms,
    })))
}

/// What a status costs with `n` events queued for a relay and sealed (as a pass leaves them
/// when the relay is unreachable; none acknowledged) — `status()`, and the status every sync
/// pass emits: ms for one `relay_statuses_local`, `reps` times. The relay is never contacted.
#[wasm_bindgen(js_name = benchStatus)]
pub async fn bench_status(n: u32, reps: u32) -> Result<JsValue, JsValue> {
    let relay = "http://127.0.0.1:9/never-contacted".to_string();
    let (e, name) = Storage(None).engine(KEY, vec![relay], "status").await?;
    let ops: Vec<Op> = (0..n).map(|i| Op::Insert { table: "todos".into(), row: todo(i) }).collect();
    for chunk in ops.chunks(10_000) {
        e.transaction(chunk).map_err(js_err)?;
    }
    let sealed = e.seal_pending_outbox().map_err(js_err)?;
    if sealed != u64::from(n) {
        return Err(js_err(format!("sealed {sealed} of the {n} queued events")));
    }
    Storage(None).durable(&name).await?;
    let mut ms = Vec::new();
    for _ in 0..reps {
        let t0 = now();
        let statuses = e.relay_statuses_local().map_err(js_err)?;
        ms.push(now() - t0);
        let pending = statuses.first().map(|s| s.pending);
        if pending != Some(u64::from(n)) {
            return Err(js_err(format!("status counted {pending:?} pending events, not {n}")));
        }
    }
    Ok(serde_to_js(&serde_json::json!({ "queued": n, "ms": ms })))
}

/// Opening a database after a tab died with `n` rows in its WAL (~42 MB for 100,000) — closed without the
/// checkpoint a close makes — recovered one read per frame (as before) and in chunks (as
/// `open_database` does now), each on its own database: ms, and reads asked and sent down.
#[wasm_bindgen(js_name = benchReopen)]
pub async fn bench_reopen(n: u32) -> Result<JsValue, JsValue> {
    let mut out = serde_json::Map::new();
    for chunked in [false, true] {
        let name = unique("reopen");
        let mut conn = open_database(&name).await.map_err(js_err)?;
        conn.execute_batch("CREATE TABLE t (id TEXT PRIMARY KEY, body TEXT) WITHOUT ROWID").map_err(js_err)?;
        for start in (0..n).step_by(1000) {
            let tx = conn.transaction().map_err(js_err)?;
            {
                let mut stmt = tx.prepare_cached("INSERT INTO t (id, body) VALUES (?1, ?2)").map_err(js_err)?;
                for i in start..(start + 1000).min(n) {
                    stmt.execute(params![format!("row-{i:08}"), format!("{i} {}", "x".repeat(300))]).map_err(js_err)?;
                }
            }
            tx.commit().map_err(js_err)?;
        }
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true).map_err(js_err)?;
        drop(conn); // as a tab that died leaves it: the WAL stays
        let before = crate::store::coalesce::read_counts();
        let t0 = now();
        let conn = if chunked { open_database(&name).await } else { opfs::open_database_frame_by_frame(&name).await }
            .map_err(js_err)?;
        let ms = now() - t0;
        let after = crate::store::coalesce::read_counts();
        let rows: u32 = conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).map_err(js_err)?;
        if rows != n {
            return Err(js_err(format!("reopened with {rows} rows of {n}")));
        }
        drop(conn);
        opfs::wipe_database(&name).map_err(js_err)?; // ~42 MB of OPFS each
        let key = if chunked { "chunked" } else { "frameByFrame" };
        out.insert(
            key.into(),
            serde_json::json!({ "ms": ms, "asked": after.received - before.received, "sent": after.sent - before.sent }),
        );
    }
    Ok(serde_to_js(&serde_json::Value::Object(out)))
}

/// AES-256-GCM (the crate, in wasm) over `size`-byte messages for at least `min_ms`: bytes/ms.
#[wasm_bindgen(js_name = benchAes)]
pub fn bench_aes(size: u32, min_ms: f64) -> f64 {
    let cipher = Aes256Gcm::new_from_slice(&[7u8; 32]).expect("32-byte key");
    let msg = vec![0x5Au8; size as usize];
    let (t0, mut bytes) = (now(), 0f64);
    let mut nonce = [0u8; 12];
    while now() - t0 < min_ms {
        nonce[0] = nonce[0].wrapping_add(1);
        let out = cipher
            .encrypt(&aes_gcm::Nonce::from(nonce), aes_gcm::aead::Payload { msg: &msg, aad: b"" })
            .expect("AES-GCM encryption only fails for inputs beyond 64 GiB");
        bytes += out.len() as f64 - 16.0;
    }
    bytes / (now() - t0)
}

/// The floor a restore is compared with: `n` rows written by bare prepared INSERTs into a fresh
/// database, one commit per 1000 rows (a restore commits once per 1000-event page), no HTTP,
/// crypto or LWW. `{rows, ms}`.
#[wasm_bindgen(js_name = benchRawLoad)]
pub async fn bench_raw_load(n: u32, pages: JsValue) -> Result<JsValue, JsValue> {
    let storage = Storage::from_js(&pages)?;
    let (mut raw, raw_name) = storage.open("raw-load").await?;
    raw.execute_batch(RAW_TABLE).map_err(js_err)?;
    let t0 = now();
    for start in (0..n).step_by(1000) {
        let tx = raw.transaction().map_err(js_err)?;
        {
            let mut stmt = tx.prepare_cached(RAW_INSERT).map_err(js_err)?;
            for i in start..(start + 1000).min(n) {
                stmt.execute(params![format!("row-{i:08}"), format!("todo number {i}"), i % 3 == 0, i])
                    .map_err(js_err)?;
            }
        }
        tx.commit().map_err(js_err)?;
    }
    storage.durable(&raw_name).await?;
    Ok(serde_to_js(&serde_json::json!({ "rows": n, "ms": now() - t0 })))
}

/// A fresh device restores everything `secret` has on `relay`. With `listeners`
/// (`{change, progress}` functions), the engine tells them as the package's worker is told
/// (`onChange`, `onProgress`: each page's change event and progress as JS values); with
/// `opener` (js/opener.js's), pages sent ahead are fetched and decrypted in the opener worker.
#[wasm_bindgen(js_name = benchRestore)]
pub async fn bench_restore(
    secret: String,
    relay: String,
    pages: JsValue,
    listeners: JsValue,
    opener: JsValue,
) -> Result<JsValue, JsValue> {
    let storage = Storage::from_js(&pages)?;
    let (e, name) = storage.engine(&secret, vec![relay], "restore").await?;
    if !opener.is_undefined() && !opener.is_null() {
        e.set_page_opener(Some(super::opener::from_js(&opener)?));
    }
    let listener = |key: &str| Reflect::get(&listeners, &JsValue::from_str(key)).ok().and_then(|f| f.dyn_into().ok());
    if let Some(f) = listener("change") {
        super::engine::forward_changes(&e, f);
    }
    if let Some(f) = listener("progress") {
        super::engine::forward_progress(&e, f);
    }
    let t0 = now();
    let report = e.sync(SyncTrigger::Manual).await.map_err(js_err)?;
    storage.durable(&name).await?;
    let ms = now() - t0;
    let r = &report.relays[0];
    if let Some(err) = &r.error {
        return Err(js_err(&err.message));
    }
    // The OPFS writes of the restore itself, taken before the close's (when the worker counts).
    let writes = opfs_io();
    // Closing the engine afterwards: SQLite checkpoints the WAL into the database on close
    // (outside the restore's own time, but what an app pays when it closes the engine).
    let t0 = now();
    drop(e);
    let close_ms = now() - t0;
    Ok(serde_to_js(&serde_json::json!({
        "events": r.received, "applied": r.applied, "ms": ms, "timings": r.timings, "closeMs": close_ms,
        "writes": writes, "closeWrites": opfs_io(),
    })))
}

/// Write on A → visible on B, with `sync()` called on both; `reps` samples in ms.
#[wasm_bindgen(js_name = benchSyncLatency)]
pub async fn bench_sync_latency(secret: String, relay: String, reps: u32) -> Result<JsValue, JsValue> {
    let a = engine(&secret, vec![relay.clone()], "lat-a").await?;
    let b = engine(&secret, vec![relay], "lat-b").await?;
    a.sync(SyncTrigger::Manual).await.map_err(js_err)?;
    b.sync(SyncTrigger::Manual).await.map_err(js_err)?;
    let mut samples = Vec::new();
    for i in 0..reps {
        let id = format!("lat-{i}");
        let t0 = now();
        a.insert("todos", Json::object([("id", Json::from(id.as_str())), ("title", Json::from("x"))]))
            .map_err(js_err)?;
        a.sync(SyncTrigger::Manual).await.map_err(js_err)?;
        b.sync(SyncTrigger::Manual).await.map_err(js_err)?;
        if b.get("todos", &id).map_err(js_err)?.is_none() {
            return Err(js_err("the row did not arrive"));
        }
        samples.push(now() - t0);
    }
    Ok(serde_to_js(&samples))
}

/// Write on A (which syncs after writes) → visible on B, which only polls every `interval_ms`.
#[wasm_bindgen(js_name = benchPollLatency)]
pub async fn bench_poll_latency(
    secret: String,
    relay: String,
    interval_ms: u32,
    reps: u32,
) -> Result<JsValue, JsValue> {
    let a = engine(&secret, vec![relay.clone()], "poll-a").await?;
    let b = Rc::new(engine(&secret, vec![relay], "poll-b").await?);
    b.sync(SyncTrigger::Manual).await.map_err(js_err)?;
    let poller = b.clone();
    let stop = Rc::new(std::cell::Cell::new(false));
    let stopped = stop.clone();
    wasm_bindgen_futures::spawn_local(async move {
        while !stopped.get() {
            sleep(interval_ms).await;
            let _ = poller.sync(SyncTrigger::Poll).await;
        }
    });
    let mut samples = Vec::new();
    for i in 0..reps {
        // Start at a random phase of B's poll cycle.
        sleep((js_sys::Math::random() * f64::from(interval_ms)) as u32).await;
        let id = format!("poll-{i}");
        let t0 = now();
        a.insert("todos", Json::object([("id", Json::from(id.as_str()))])).map_err(js_err)?;
        a.sync(SyncTrigger::Write).await.map_err(js_err)?;
        while b.get("todos", &id).map_err(js_err)?.is_none() {
            sleep(5).await;
        }
        samples.push(now() - t0);
    }
    stop.set(true);
    Ok(serde_to_js(&samples))
}

/// Single-row autocommit INSERT latency (ms, p50 of `n`) under SQLite journal/sync settings,
/// to choose the engine's storage configuration on OPFS.
#[wasm_bindgen(js_name = benchJournalModes)]
pub async fn bench_journal_modes(n: u32) -> Result<JsValue, JsValue> {
    let configs = [
        "PRAGMA journal_mode = DELETE; PRAGMA synchronous = FULL;",
        "PRAGMA journal_mode = PERSIST; PRAGMA synchronous = FULL;",
        "PRAGMA journal_mode = TRUNCATE; PRAGMA synchronous = FULL;",
        "PRAGMA journal_mode = DELETE; PRAGMA synchronous = NORMAL;",
        "PRAGMA journal_mode = PERSIST; PRAGMA synchronous = NORMAL;",
        "PRAGMA locking_mode = EXCLUSIVE; PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;",
        "PRAGMA locking_mode = EXCLUSIVE; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;",
    ];
    let mut out = Vec::new();
    for (k, cfg) in configs.iter().enumerate() {
        let conn = connection(&format!("mode{k}")).await?;
        let mode: String = conn
            .query_row_and_then("SELECT 1", [], |_| -> Result<String, rusqlite::Error> { Ok(String::new()) })
            .map_err(js_err)?;
        let _ = mode;
        conn.execute_batch(cfg).map_err(js_err)?;
        let applied: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).map_err(js_err)?;
        conn.execute_batch("CREATE TABLE t (id TEXT PRIMARY KEY, title TEXT)").map_err(js_err)?;
        let mut lat = Vec::new();
        for i in 0..n {
            let t0 = now();
            conn.execute("INSERT INTO t (id, title) VALUES (?1, ?2)", params![format!("r{i}"), "x"]).map_err(js_err)?;
            lat.push(now() - t0);
        }
        lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
        out.push(serde_json::json!({ "config": cfg, "journal": applied, "p50": lat[lat.len() / 2], "p99": lat[lat.len() * 99 / 100] }));
    }
    Ok(serde_to_js(&out))
}

/// Bulk (10,000 rows, one transaction) and single-row commit costs under SQLite page sizes,
/// with the engine's WAL configuration, to choose the engine's page size on OPFS.
#[wasm_bindgen(js_name = benchPageSizes)]
pub async fn bench_page_sizes() -> Result<JsValue, JsValue> {
    let mut out = Vec::new();
    for size in [4096u32, 8192, 16384, 32768, 65536] {
        let name = unique(&format!("page{size}"));
        let conn = crate::store::opfs::open_database_with_page_size(&name, size).await.map_err(js_err)?;
        conn.execute_batch(
            "CREATE TABLE t (id TEXT PRIMARY KEY, title TEXT, done INTEGER, position INTEGER) WITHOUT ROWID",
        )
        .map_err(js_err)?;
        let mut single = Vec::new();
        for i in 0..50u32 {
            let t0 = now();
            conn.execute("INSERT INTO t VALUES (?1, ?2, ?3, ?4)", params![format!("s{i}"), "x", 0, i])
                .map_err(js_err)?;
            single.push(now() - t0);
        }
        single.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let t0 = now();
        conn.execute_batch("BEGIN").map_err(js_err)?;
        {
            let mut stmt = conn.prepare("INSERT INTO t VALUES (?1, ?2, ?3, ?4)").map_err(js_err)?;
            for i in 0..10_000u32 {
                stmt.execute(params![
                    format!("row-{i:08}"),
                    format!("todo number {i} with a realistic title"),
                    i % 3 == 0,
                    i
                ])
                .map_err(js_err)?;
            }
        }
        conn.execute_batch("COMMIT").map_err(js_err)?;
        let bulk_ms = now() - t0;
        out.push(serde_json::json!({ "pageSize": size, "singleP50": single[25], "bulkRowsPerSec": 10_000.0 / bulk_ms * 1000.0 }));
    }
    Ok(serde_to_js(&out))
}
