//! Property: random histories across app versions end equal everywhere and lose no value.
//!
//! Devices run two versions of an app — v1: `todos(title, done)` merged whole and
//! `notes(title, body)` merged per column; v2 adds `todos.priority` (default 0) and
//! `notes.tags` — and upgrade at random moments. They insert, update, upsert and delete rows
//! of both tables offline with clocks that disagree, sync in random orders through a relay that
//! compacts (each stream keeps its newest event) at random moments, drops the streams a device
//! purges and once loses everything (devices re-seed it), and purge rows every device saw
//! deleted; an older app version sometimes opens a newer one's database. At the end every
//! device upgrades and syncs, the relay compacts, and a fresh device restores from the
//! survivors alone:
//!
//! - every device and the fresh one hold the same live rows;
//! - and those are the oracle's: per whole-row row, the write with the greatest HLC as its
//!   writer held the row (the values it kept for columns it did not declare included); per
//!   column-merge cell, the write of that cell with the greatest HLC — so no value is lost
//!   unless a later write to the same cell (or row) replaced it.
//!
//! Seeded and reproducible: a failure prints its seed (`SIMPLYSYNC_SEED=n` reruns one).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::rc::Rc;

use simplysync::engine::io::{HttpRequest, HttpResponse, LocalFuture, ManualClock, Method, Transport, TransportError};
use simplysync::engine::schema::{ColumnDef, ColumnType, Merge, SchemaDef, TableDef};
use simplysync::engine::{Engine, EngineConfig, Env, ListOptions, SyncTrigger};
use simplysync::protocol::entropy::{Entropy, EntropyError};
use simplysync::protocol::{parse_json, Json, SyncEnvelope};

use crate::harness::{temp_dir, T0};

/// xorshift64*: small, seedable, good enough to drive a simulation.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

struct SeededEntropy(Rng);

impl Entropy for SeededEntropy {
    fn fill(&mut self, dest: &mut [u8]) -> Result<(), EntropyError> {
        for b in dest {
            *b = self.0.next() as u8;
        }
        Ok(())
    }
}

/// One stored event: its seq, id, stream and JSON.
struct Stored {
    seq: u64,
    event_id: String,
    stream: Option<String>,
    text: String,
}

/// A relay with the wire protocol's push, pull and stream compaction, and log compaction on
/// demand (the newest event of each stream is kept). Seqs never go back.
#[derive(Default)]
struct CompactingRelay {
    log: RefCell<Vec<Stored>>,
    ids: RefCell<HashSet<String>>,
    head: Cell<u64>,
    /// Its database's id: a wipe makes a new one (every pull carries it).
    epoch: Cell<u32>,
}

fn answer(status: u16, v: serde_json::Value) -> HttpResponse {
    HttpResponse::new(status, v.to_string())
}

impl CompactingRelay {
    fn handle(&self, req: &HttpRequest) -> HttpResponse {
        let path = req.url.split_once("://").map_or(req.url.as_str(), |(_, r)| r);
        let path = &path[path.find('/').unwrap_or(0)..];
        let (route, query) = path.split_once('?').unwrap_or((path, ""));
        let param = |k: &str| query.split('&').find_map(|kv| kv.strip_prefix(&format!("{k}="))).unwrap_or("");
        let unknown = self.head.get() == 0;
        match (req.method, route) {
            (Method::Get, "/health") => {
                answer(200, serde_json::json!({"ok": true, "service": "sim", "version": "1", "serverTime": ""}))
            }
            (Method::Post, "/v1/events") => {
                let body: serde_json::Value = serde_json::from_slice(req.body.as_ref().unwrap()).unwrap();
                let (mut accepted, mut duplicate) = (0, 0);
                for e in body["events"].as_array().unwrap() {
                    let env: SyncEnvelope = serde_json::from_value(e.clone()).unwrap();
                    if self.ids.borrow_mut().insert(env.event_id.clone()) {
                        self.head.set(self.head.get() + 1);
                        self.log.borrow_mut().push(Stored {
                            seq: self.head.get(),
                            event_id: env.event_id,
                            stream: env.stream_id,
                            text: e.to_string(),
                        });
                        accepted += 1;
                    } else {
                        duplicate += 1;
                    }
                }
                answer(200, serde_json::json!({"accepted": accepted, "duplicate": duplicate}))
            }
            _ if unknown => answer(404, serde_json::json!({"error": "unknown_owner", "message": "never pushed"})),
            (Method::Get, "/v1/events") => {
                let after: u64 = param("after").parse().unwrap_or(0);
                let log = self.log.borrow();
                let page: Vec<&Stored> = log.iter().filter(|s| s.seq > after).take(9).collect();
                let next = page.last().map_or(after, |s| s.seq);
                let events: Vec<serde_json::Value> =
                    page.iter().map(|s| serde_json::from_str(&s.text).unwrap()).collect();
                let epoch = format!("epoch{}", self.epoch.get());
                answer(
                    200,
                    serde_json::json!({"events": events, "nextCursor": next.to_string(), "headSeq": self.head.get(), "epoch": epoch}),
                )
            }
            (Method::Post, "/v1/streams/compact") => {
                let body: serde_json::Value = serde_json::from_slice(req.body.as_ref().unwrap()).unwrap();
                let streams: HashSet<&str> =
                    body["streamIds"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
                let mut log = self.log.borrow_mut();
                let before = log.len();
                log.retain(|s| s.stream.as_deref().is_none_or(|id| !streams.contains(id)));
                answer(200, serde_json::json!({"deletedEvents": before - log.len(), "reclaimedBytes": 0}))
            }
            _ => answer(404, serde_json::json!({"error": "not_found", "message": "not simulated"})),
        }
    }

    /// Loses everything, as a relay whose database was replaced by an empty one: its seqs start
    /// again (devices see its head behind their cursors, or a 404, and re-seed it).
    fn wipe(&self) {
        self.log.borrow_mut().clear();
        self.ids.borrow_mut().clear();
        self.head.set(0);
        self.epoch.set(self.epoch.get() + 1);
    }

    /// Log compaction: each stream keeps the event with the greatest id.
    fn compact(&self) {
        let mut newest: BTreeMap<String, String> = BTreeMap::new();
        for s in self.log.borrow().iter() {
            if let Some(stream) = &s.stream {
                let e = newest.entry(stream.clone()).or_default();
                if s.event_id > *e {
                    e.clone_from(&s.event_id);
                }
            }
        }
        self.log.borrow_mut().retain(|s| s.stream.as_ref().is_none_or(|st| newest[st] == s.event_id));
    }
}

struct Sim(Rc<CompactingRelay>);

impl Transport for Sim {
    fn send(&self, req: HttpRequest) -> LocalFuture<'_, Result<HttpResponse, TransportError>> {
        let out = self.0.handle(&req);
        Box::pin(async move { Ok(out) })
    }
}

const SECRET: &str = "sf1_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";

fn schema(version: u8) -> SchemaDef {
    let mut todos = vec![ColumnDef::new("title", ColumnType::Text), ColumnDef::new("done", ColumnType::Boolean)];
    let mut notes = vec![ColumnDef::new("title", ColumnType::Text), ColumnDef::new("body", ColumnType::Text)];
    if version == 2 {
        todos.push(ColumnDef::new("priority", ColumnType::Integer).with_default(&Json::from(0i64)));
        notes.push(ColumnDef::new("tags", ColumnType::Json));
    }
    SchemaDef {
        schema_version: 1,
        tables: vec![TableDef::new("todos", todos), TableDef { merge: Merge::Column, ..TableDef::new("notes", notes) }],
    }
}

/// The v2 columns of each table and their defaults, as compared at the end.
const TODO_COLUMNS: [(&str, &str); 3] = [("title", "null"), ("done", "null"), ("priority", "0")];
const NOTE_COLUMNS: [(&str, &str); 3] = [("title", "null"), ("body", "null"), ("tags", "null")];

struct Device {
    engine: Engine,
    clock: Rc<ManualClock>,
    path: PathBuf,
    version: u8,
    seed: u64,
}

fn open(relay: &Rc<CompactingRelay>, path: &std::path::Path, version: u8, clock: Rc<ManualClock>, seed: u64) -> Engine {
    let env = Env { transport: Rc::new(Sim(relay.clone())), clock, entropy: Box::new(SeededEntropy(Rng::new(seed))) };
    let config = EngineConfig::new(SECRET, vec!["http://sim".into()], schema(version));
    Engine::open(simplysync::store::open_path(path.to_str().unwrap()).unwrap(), config, env).unwrap()
}

impl Device {
    /// Reopens the device's database with app version `version` (an update, or an older app
    /// opening a newer app's database).
    fn reopen(&mut self, relay: &Rc<CompactingRelay>, version: u8) {
        let placeholder = open_memory_engine(relay);
        drop(std::mem::replace(&mut self.engine, placeholder));
        self.seed += 1000;
        self.engine = open(relay, &self.path, version, self.clock.clone(), self.seed);
        self.version = version;
    }

    /// A row's values of the v2 columns of `table` as this device holds them, kept values
    /// included (what a whole-row event of it carries).
    fn held(&self, table: &str, row: &Json) -> BTreeMap<String, String> {
        let id = row.get("id").unwrap().as_str().unwrap();
        let mut held: BTreeMap<String, String> = BTreeMap::new();
        let columns = if table == "todos" { TODO_COLUMNS } else { NOTE_COLUMNS };
        for (name, default) in columns {
            let value = row.get(name).map(simplysync::protocol::to_canonical_json);
            held.insert(name.into(), value.unwrap_or_else(|| default.to_owned()));
        }
        for (name, value) in self.engine.kept_values(table, id).unwrap() {
            held.insert(name, value);
        }
        held
    }

    fn row(&self, table: &str, id: &str) -> Option<Json> {
        let opts = ListOptions { include_deleted: true, ..Default::default() };
        self.engine.list(table, &opts).unwrap().into_iter().find(|r| r.get("id").unwrap().as_str() == Some(id))
    }

    fn clocks(&self, table: &str, id: &str) -> BTreeMap<String, String> {
        self.engine.cell_clocks(table, id).unwrap().into_iter().collect()
    }

    /// Live rows of both tables: `(table, id) → v2 column → canonical JSON`.
    fn live(&self) -> BTreeMap<(String, String), BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        for table in ["todos", "notes"] {
            for row in self.engine.list(table, &ListOptions::default()).unwrap() {
                let id = row.get("id").unwrap().as_str().unwrap().to_owned();
                // (Kept values are compared too: once every device is on v2 there are none.)
                out.insert((table.to_owned(), id), self.held(table, &row));
            }
        }
        out
    }
}

/// An engine on a throwaway in-memory database (held while a device's file is reopened).
fn open_memory_engine(relay: &Rc<CompactingRelay>) -> Engine {
    let env = Env {
        transport: Rc::new(Sim(relay.clone())),
        clock: Rc::new(ManualClock::new(T0)),
        entropy: Box::new(SeededEntropy(Rng::new(7))),
    };
    let config = EngineConfig::new(SECRET, vec![], schema(1));
    Engine::open(simplysync::store::open_memory().unwrap(), config, env).unwrap()
}

/// What every device must end with.
#[derive(Default)]
struct Oracle {
    /// Whole-row rows: id → (HLC, deleted, the writer's values).
    rows: BTreeMap<String, (String, bool, BTreeMap<String, String>)>,
    /// Column-merge cells: (id, cell) → (HLC, value); the cell `deleted` holds the deletion.
    cells: BTreeMap<(String, String), (String, String)>,
}

impl Oracle {
    fn fact(&mut self, id: &str, cell: &str, hlc: &str, value: String) {
        let key = (id.to_owned(), cell.to_owned());
        if self.cells.get(&key).is_none_or(|(h, _)| h.as_str() < hlc) {
            self.cells.insert(key, (hlc.to_owned(), value));
        }
    }

    fn expected(&self) -> BTreeMap<(String, String), BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        for (id, (_, deleted, values)) in &self.rows {
            if !deleted {
                let mut values = values.clone();
                values.retain(|k, _| TODO_COLUMNS.iter().any(|(c, _)| c == k));
                out.insert(("todos".to_owned(), id.clone()), values);
            }
        }
        let ids: HashSet<&String> = self.cells.keys().map(|(id, _)| id).collect();
        for id in ids {
            let get = |cell: &str| self.cells.get(&(id.clone(), cell.to_owned())).map(|(_, v)| v.clone());
            if get("deleted").as_deref() != Some("false") {
                continue;
            }
            let values =
                NOTE_COLUMNS.iter().map(|(c, d)| (c.to_string(), get(c).unwrap_or_else(|| d.to_string()))).collect();
            out.insert(("notes".to_owned(), id.clone()), values);
        }
        out
    }
}

fn random_value(rng: &mut Rng, column: &str) -> Json {
    match column {
        "done" => Json::Bool(rng.chance(50)),
        "priority" => Json::from(rng.below(4) as i64),
        "tags" => parse_json(&format!(r#"["t{}"]"#, rng.below(5))).unwrap(),
        _ => Json::from(format!("{column}{}", rng.below(100))),
    }
}

/// A random write on device `d`; records what it wrote in the oracle.
fn random_write(rng: &mut Rng, d: &Device, oracle: &mut Oracle) {
    let table = if rng.chance(50) { "todos" } else { "notes" };
    let id = format!("{}{}", &table[..1], rng.below(5));
    let columns: Vec<&str> = if table == "todos" { TODO_COLUMNS.iter() } else { NOTE_COLUMNS.iter() }
        .map(|(c, _)| *c)
        .filter(|c| d.version == 2 || !matches!(*c, "priority" | "tags"))
        .collect();
    let mut row = vec![("id".to_owned(), Json::from(id.as_str()))];
    for c in &columns {
        if rng.chance(60) {
            row.push(((*c).to_owned(), random_value(rng, c)));
        }
    }
    let patch = Json::object(row.iter().skip(1).map(|(k, v)| (k.as_str(), v.clone())));
    let row = Json::object(row.iter().map(|(k, v)| (k.as_str(), v.clone())));
    let before = d.clocks(table, &id);
    let result = match rng.below(4) {
        0 => d.engine.insert(table, row),
        1 => d.engine.upsert(table, row),
        2 => d.engine.update(table, &id, patch),
        _ => d.engine.delete(table, &id),
    };
    let Ok(written) = result else { return };
    let hlc = written.get("updatedAt").unwrap().as_str().unwrap().to_owned();
    let now = d.row(table, &id).unwrap();
    if table == "todos" {
        let deleted = now.get("deleted").unwrap().as_bool().unwrap();
        if oracle.rows.get(&id).is_none_or(|(h, _, _)| *h < hlc) {
            oracle.rows.insert(id, (hlc, deleted, d.held(table, &now)));
        }
        return;
    }
    let after = d.clocks(table, &id);
    let held = d.held(table, &now);
    let deleted = now.get("deleted").unwrap().as_bool().unwrap();
    let mut whole = None;
    for (cell, at) in &after {
        if before.get(cell) == Some(at) {
            continue;
        }
        let value = if cell == "deleted" { deleted.to_string() } else { held[cell].clone() };
        oracle.fact(&id, cell, at, value);
        // (A whole-row write sets every column at one HLC; an edit each at an HLC of its own.)
        if after.iter().filter(|(c, h)| *c != "deleted" && *h == at).count() > 1 {
            whole = Some(at.clone());
        }
    }
    // A whole-row write also sets the columns its writer does not know to their defaults.
    if let Some(at) = whole {
        for (c, default) in NOTE_COLUMNS {
            if !after.contains_key(c) {
                oracle.fact(&id, c, &at, default.to_owned());
            }
        }
    }
}

async fn sync(d: &Device) {
    d.engine.sync_all(SyncTrigger::Manual, 20).await.unwrap();
}

async fn settle(devices: &[Device]) {
    for _ in 0..3 {
        for d in devices {
            sync(d).await;
        }
    }
}

async fn run(seed: u64) {
    let mut rng = Rng::new(seed);
    let relay = Rc::new(CompactingRelay::default());
    let dir = temp_dir("history");
    let mut devices = Vec::new();
    for i in 0..3 {
        let clock = Rc::new(ManualClock::new(T0 + rng.below(60_000)));
        let path = dir.join(format!("d{i}.sqlite"));
        let version = 1 + rng.below(2) as u8;
        let dseed = seed * 31 + i;
        devices.push(Device {
            engine: open(&relay, &path, version, clock.clone(), dseed),
            clock,
            path,
            version,
            seed: dseed,
        });
    }
    let mut oracle = Oracle::default();
    let mut wiped = false;
    for _ in 0..60 {
        let i = rng.below(devices.len() as u64) as usize;
        devices[i].clock.advance(rng.below(3000));
        match rng.below(22) {
            0..=10 => random_write(&mut rng, &devices[i], &mut oracle),
            11..=15 => sync(&devices[i]).await,
            16 => relay.compact(),
            17 if devices[i].version == 1 => devices[i].reopen(&relay, 2),
            // An older app opens a newer app's database (an old tab after a deploy).
            19 if devices[i].version == 2 => devices[i].reopen(&relay, 1),
            // The relay loses its data, once (re-seeds of one relay are rate-limited).
            20 if !wiped => {
                wiped = true;
                relay.wipe();
            }
            18 => {
                // A purge of rows every device saw deleted, on some of the devices.
                settle(&devices).await;
                for d in devices.iter().filter(|_| rng.chance(60)) {
                    d.engine.purge_deleted().unwrap();
                }
            }
            _ => {}
        }
    }
    for d in devices.iter_mut().filter(|d| d.version == 1) {
        d.reopen(&relay, 2);
    }
    settle(&devices).await;
    relay.compact();
    let fresh_path = dir.join("fresh.sqlite");
    let fresh_clock = Rc::new(ManualClock::new(T0 + 10_000_000));
    let fresh = Device {
        engine: open(&relay, &fresh_path, 2, fresh_clock.clone(), seed ^ 0xF00D),
        clock: fresh_clock,
        path: fresh_path,
        version: 2,
        seed,
    };
    sync(&fresh).await;
    let expected = oracle.expected();
    if std::env::var("SIMPLYSYNC_DEBUG").is_ok() {
        for (i, d) in devices.iter().chain(std::iter::once(&fresh)).enumerate() {
            eprintln!("device {i}: {:?}", d.live());
            for id in ["n0", "n1", "n2", "n3", "n4"] {
                eprintln!("  {id} clocks {:?}", d.clocks("notes", id));
            }
        }
        eprintln!("oracle cells: {:?}", oracle.cells);
    }
    for (i, d) in devices.iter().chain(std::iter::once(&fresh)).enumerate() {
        assert_eq!(d.live(), expected, "seed {seed}: device {i} (3 is the fresh one) differs from the oracle");
        assert!(d.engine.quarantined().unwrap().is_empty(), "seed {seed}: device {i} quarantined an honest event");
        assert!(d.engine.deferred().unwrap().is_empty(), "seed {seed}: device {i} holds deferred events");
    }
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test]
async fn random_histories_across_app_versions_end_equal_on_every_device_and_a_fresh_restore() {
    // (`SIMPLYSYNC_SEEDS=n` runs seeds 1 to n, to search further than CI does.)
    let seeds: Vec<u64> = match (std::env::var("SIMPLYSYNC_SEED"), std::env::var("SIMPLYSYNC_SEEDS")) {
        (Ok(s), _) => vec![s.parse().unwrap()],
        (_, Ok(n)) => (1..=n.parse().unwrap()).collect(),
        _ => (1..=60).collect(),
    };
    for seed in seeds {
        run(seed).await;
    }
}
