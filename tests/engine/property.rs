//! Property: any number of devices with random offline edits, random sync orders, and relays
//! that misbehave, all converge — to exactly the rows an oracle expects: for every row, the
//! successful write with the greatest HLC. Two runs: 1000 seeds against an in-process relay
//! that duplicates, reorders and replays pages and drops requests; and a few dozen seeds
//! against two real relays over HTTP with a chaotic network (dropped requests, lost answers,
//! 503s), a relay restart, a relay wipe and purges. Seeded and reproducible: a failure prints
//! its seed (`SIMPLYSYNC_SEED=n` reruns one).

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;

use std::collections::BTreeMap;

use simplysync::engine::io::{HttpRequest, HttpResponse, LocalFuture, ManualClock, Method, Transport, TransportError};
use simplysync::engine::{Engine, EngineConfig, Env, Op, SyncTrigger};
use simplysync::protocol::entropy::{Entropy, EntropyError};
use simplysync::protocol::{Json, SyncEnvelope};

use crate::harness::{todo_schema, TestRelay, T0};
use simplysync::native::HttpTransport;

/// xorshift64*: small, seedable, good enough to drive a simulation.
#[derive(Clone)]
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

/// An in-memory relay with the wire protocol's push/pull semantics and a mischievous network.
struct SimRelay {
    log: RefCell<Vec<(u64, String, String)>>, // (seq, event_id, envelope json)
    ids: RefCell<HashSet<String>>,
    rng: RefCell<Rng>,
    mischief: std::cell::Cell<bool>,
}

fn json_resp(status: u16, v: serde_json::Value) -> HttpResponse {
    HttpResponse::new(status, v.to_string())
}

impl SimRelay {
    fn handle(&self, req: &HttpRequest) -> Result<HttpResponse, TransportError> {
        let mischief = self.mischief.get();
        if mischief && self.rng.borrow_mut().chance(10) {
            return Err(TransportError("dropped (simulated)".into()));
        }
        let path = req.url.split_once("://").map(|(_, r)| r).unwrap_or(&req.url);
        let path = &path[path.find('/').unwrap_or(0)..];
        match (req.method, path.split('?').next().unwrap()) {
            (Method::Post, "/v1/events") => {
                let body: serde_json::Value = serde_json::from_slice(req.body.as_ref().unwrap()).unwrap();
                let (mut accepted, mut duplicate) = (0, 0);
                for e in body["events"].as_array().unwrap() {
                    let env: SyncEnvelope = serde_json::from_value(e.clone()).unwrap();
                    if self.ids.borrow_mut().insert(env.event_id.clone()) {
                        let seq = self.log.borrow().len() as u64 + 1;
                        self.log.borrow_mut().push((seq, env.event_id, e.to_string()));
                        accepted += 1;
                    } else {
                        duplicate += 1;
                    }
                }
                if mischief && self.rng.borrow_mut().chance(10) {
                    // Stored, but the acknowledgement is lost: the device must re-push safely.
                    return Err(TransportError("response lost (simulated)".into()));
                }
                Ok(json_resp(200, serde_json::json!({"accepted": accepted, "duplicate": duplicate})))
            }
            (Method::Get, "/v1/events") => {
                let query = path.split_once('?').map(|(_, q)| q).unwrap_or("");
                let param = |k: &str| query.split('&').find_map(|kv| kv.strip_prefix(&format!("{k}="))).unwrap_or("");
                if self.log.borrow().is_empty() && param("after").is_empty() {
                    return Ok(json_resp(404, serde_json::json!({"error": "unknown_owner", "message": "unknown"})));
                }
                let mut after: u64 = param("after").parse().unwrap_or(0);
                let limit: usize = param("limit").parse().unwrap_or(500).min(7); // small pages
                let mut rng = self.rng.borrow_mut();
                if mischief && after > 0 && rng.chance(15) {
                    after -= rng.below(after) + 1; // replay: serve an older page again
                }
                let log = self.log.borrow();
                let mut page: Vec<&(u64, String, String)> =
                    log.iter().filter(|(s, _, _)| *s > after).take(limit).collect();
                let next = page.last().map_or(after, |p| p.0);
                if mischief && rng.chance(30) {
                    for i in (1..page.len()).rev() {
                        page.swap(i, rng.below(i as u64 + 1) as usize); // reorder within the page
                    }
                }
                if mischief && !page.is_empty() && rng.chance(15) {
                    let d = page[rng.below(page.len() as u64) as usize];
                    page.push(d); // duplicate an event within the page
                }
                let events: Vec<serde_json::Value> = page.iter().map(|p| serde_json::from_str(&p.2).unwrap()).collect();
                Ok(json_resp(
                    200,
                    serde_json::json!({"events": events, "nextCursor": next.to_string(), "headSeq": log.len()}),
                ))
            }
            _ => Ok(json_resp(404, serde_json::json!({"error": "not_found", "message": "not simulated"}))),
        }
    }
}

struct SimTransport(Rc<SimRelay>);

impl Transport for SimTransport {
    fn send(&self, req: HttpRequest) -> LocalFuture<'_, Result<HttpResponse, TransportError>> {
        let out = self.0.handle(&req);
        Box::pin(async move { out })
    }
}

const SECRET: &str = "sf1_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";

fn all_rows(e: &Engine) -> Vec<Json> {
    let opts = simplysync::engine::ListOptions { include_deleted: true, ..Default::default() };
    e.list("todos", &opts).unwrap()
}

/// A row as compared: (updatedAt, deleted, title, done).
type Version = (String, bool, Json, Json);

fn version(row: &Json) -> (String, Version) {
    let f = |k: &str| row.get(k).cloned().unwrap_or(Json::Null);
    let id = f("id").as_str().unwrap().to_owned();
    let at = f("updatedAt").as_str().unwrap().to_owned();
    (id, (at, f("deleted").as_bool().unwrap(), f("title"), f("done")))
}

/// What every device must end with: per row, the successful write with the greatest HLC.
#[derive(Default)]
struct Oracle {
    rows: BTreeMap<String, Version>,
    writes: u32,
}

impl Oracle {
    fn wrote(&mut self, rows: &[Json]) {
        for row in rows {
            let (id, v) = version(row);
            self.writes += 1;
            if self.rows.get(&id).is_none_or(|old| old.0 < v.0) {
                self.rows.insert(id, v);
            }
        }
    }

    /// Live rows must be exactly the oracle's live rows; a deleted row a device still holds
    /// must be the oracle's version (a device that purged it may lack it).
    fn check(&self, seed: u64, i: usize, e: &Engine) {
        let rows: BTreeMap<String, Version> = all_rows(e).iter().map(version).collect();
        let live = |m: &BTreeMap<String, Version>| -> Vec<(String, Version)> {
            m.iter().filter(|(_, v)| !v.1).map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        assert_eq!(live(&rows), live(&self.rows), "seed {seed}: device {i}'s live rows differ from the oracle");
        for (id, v) in rows.iter().filter(|(_, v)| v.1) {
            assert_eq!(Some(v), self.rows.get(id), "seed {seed}: device {i}'s deleted row {id}");
        }
        assert!(e.quarantined().unwrap().is_empty(), "seed {seed}: an honest relay's event was quarantined");
    }
}

fn random_op(rng: &mut Rng) -> Option<Op> {
    let id = format!("r{}", rng.below(6));
    let title = Json::from(format!("v{}", rng.below(1000)));
    Some(match rng.below(6) {
        0 => {
            Op::Insert { table: "todos".into(), row: Json::object([("id", Json::from(id.as_str())), ("title", title)]) }
        }
        1 => Op::Update { table: "todos".into(), id, patch: Json::object([("title", title)]) },
        2 => Op::Upsert {
            table: "todos".into(),
            row: Json::object([("id", Json::from(id.as_str())), ("done", Json::Bool(true))]),
        },
        3 => Op::Delete { table: "todos".into(), id },
        _ => return None,
    })
}

async fn run(seed: u64) {
    let mut rng = Rng::new(seed);
    let relay = Rc::new(SimRelay {
        log: RefCell::default(),
        ids: RefCell::default(),
        rng: RefCell::new(Rng::new(seed ^ 0xABCD)),
        mischief: std::cell::Cell::new(true),
    });
    let n_devices = 2 + rng.below(3) as usize;
    let mut devices = Vec::new();
    for d in 0..n_devices {
        // Clocks disagree by up to a minute (within the 5-minute drift bound).
        let clock = Rc::new(ManualClock::new(T0 + rng.below(60_000)));
        let env = Env {
            transport: Rc::new(SimTransport(relay.clone())),
            clock: clock.clone(),
            entropy: Box::new(SeededEntropy(Rng::new(seed * 31 + d as u64))),
        };
        let config = EngineConfig::new(SECRET, vec!["http://sim".into()], todo_schema(1, &[]));
        devices.push((Engine::open(simplysync::store::open_memory().unwrap(), config, env).unwrap(), clock));
    }
    let (mut oracle, mut syncs) = (Oracle::default(), 0);
    for _ in 0..40 {
        let (engine, clock) = &devices[rng.below(n_devices as u64) as usize];
        clock.advance(rng.below(2_000));
        match random_op(&mut rng) {
            // AlreadyExists / NotFound are part of the game; what succeeded is recorded.
            Some(op) => {
                if let Ok(rows) = engine.transaction(&[op]) {
                    oracle.wrote(&rows);
                }
            }
            None => {
                engine.sync(SyncTrigger::Manual).await.unwrap();
                syncs += 1;
            }
        }
    }
    assert!(oracle.writes >= 5 && syncs >= 1, "seed {seed}: the run wrote {} times, synced {syncs}", oracle.writes);
    // The network heals; everyone syncs until quiet.
    relay.mischief.set(false);
    for _ in 0..3 {
        for (engine, clock) in &devices {
            clock.advance(10);
            engine.sync(SyncTrigger::Manual).await.unwrap();
        }
    }
    for (i, (engine, _)) in devices.iter().enumerate() {
        oracle.check(seed, i, engine);
    }
}

/// The seeds to run: `SIMPLYSYNC_SEED=n` runs one, `SIMPLYSYNC_SEEDS=n` the first n (quick
/// runs, e.g. under cargo-mutants), else `default`.
fn seeds(default: std::ops::RangeInclusive<u64>) -> Vec<u64> {
    if let Ok(s) = std::env::var("SIMPLYSYNC_SEED") {
        return vec![s.parse().expect("SIMPLYSYNC_SEED is a number")];
    }
    match std::env::var("SIMPLYSYNC_SEEDS") {
        Ok(n) => (1..=n.parse::<u64>().expect("SIMPLYSYNC_SEEDS is a number")).collect(),
        Err(_) => default.collect(),
    }
}

#[test]
fn devices_converge_under_random_edits_sync_orders_and_a_mischievous_relay() {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    for seed in seeds(1..=1000) {
        rt.block_on(run(seed));
    }
}

/// The real HTTP transport on a chaotic network: requests dropped before they leave, answers
/// lost after the relay acted, and 503s.
struct ChaosTransport {
    inner: HttpTransport,
    rng: RefCell<Rng>,
    on: Rc<std::cell::Cell<bool>>,
}

impl Transport for ChaosTransport {
    fn send(&self, req: HttpRequest) -> LocalFuture<'_, Result<HttpResponse, TransportError>> {
        Box::pin(async move {
            let roll = if self.on.get() { self.rng.borrow_mut().below(100) } else { 100 };
            if roll < 6 {
                return Err(TransportError("dropped (chaos)".into()));
            }
            if roll < 10 {
                return Ok(HttpResponse::new(503, r#"{"error":"chaos","message":"busy (chaos)"}"#));
            }
            let out = self.inner.send(req).await;
            if roll < 15 {
                return Err(TransportError("answer lost (chaos)".into()));
            }
            out
        })
    }
}

/// What a run went through, so the test can show its faults really happened.
#[derive(Default, Debug)]
struct Seen {
    purged: u64,
    reseeds: u64,
    failures: u64,
    device_restarts: u64,
}

impl Seen {
    fn count(&mut self, r: &simplysync::engine::SyncReport) {
        for relay in &r.relays {
            self.reseeds += u64::from(relay.reseeded.is_some());
            self.failures += u64::from(relay.error.is_some());
        }
    }
}

/// The network heals and every device syncs until quiet.
async fn heal(devices: &[(Engine, Rc<ManualClock>)], chaos: &std::cell::Cell<bool>, seen: &mut Seen) {
    chaos.set(false);
    for _ in 0..3 {
        for (e, _) in devices {
            seen.count(&e.sync(SyncTrigger::Manual).await.unwrap());
        }
    }
}

async fn run_real(seed: u64) -> Seen {
    let mut rng = Rng::new(seed);
    let mut relays = [TestRelay::start(), TestRelay::start()];
    let urls: Vec<String> = relays.iter().map(|r| r.url.clone()).collect();
    let chaos = Rc::new(std::cell::Cell::new(true));
    let n_devices = 2 + rng.below(2) as usize;
    let dir = crate::harness::temp_dir(&format!("property-{seed}"));
    // Each device's database is a file, so a device can restart mid-run.
    let open_device = |d: usize, generation: u64, mine: &[String], clock: &Rc<ManualClock>| {
        let env = Env {
            transport: Rc::new(ChaosTransport {
                inner: HttpTransport::new().unwrap(),
                rng: RefCell::new(Rng::new(seed * 17 + d as u64 + generation * 1000)),
                on: chaos.clone(),
            }),
            clock: clock.clone(),
            entropy: Box::new(SeededEntropy(Rng::new(seed * 31 + d as u64 + generation * 1000))),
        };
        let path = dir.join(format!("device{d}.sqlite"));
        let config = EngineConfig::new(SECRET, mine.to_vec(), todo_schema(1, &[]));
        Engine::open(simplysync::store::open_path(path.to_str().unwrap()).unwrap(), config, env).unwrap()
    };
    let mut devices = Vec::new();
    let mut relay_sets = Vec::new();
    for d in 0..n_devices {
        let clock = Rc::new(ManualClock::new(T0 + rng.below(60_000)));
        // Every device uses the first relay (relays do not forward to each other, so devices
        // meet only on a relay they share); some use the second one too.
        let mine = if rng.chance(30) { vec![urls[0].clone()] } else { urls.clone() };
        devices.push((open_device(d, 0, &mine, &clock), clock));
        relay_sets.push(mine);
    }
    let (mut oracle, mut syncs, mut seen) = (Oracle::default(), 0, Seen::default());
    let (restart_at, wipe_at, purge_at) = (rng.below(30), rng.below(30), rng.below(30));
    let (device_restart_at, restarting) = (rng.below(30), rng.below(n_devices as u64) as usize);
    for step in 0..30 {
        if step == restart_at {
            relays[0].restart();
        }
        if step == device_restart_at {
            // A device closes (a tab, an app) and opens again on its database.
            let (engine, clock) = devices.remove(restarting);
            drop(engine);
            let reopened = open_device(restarting, 1, &relay_sets[restarting], &clock);
            devices.insert(restarting, (reopened, clock));
            seen.device_restarts += 1;
        }
        if step == wipe_at {
            relays[1].wipe_and_restart();
        }
        if step == purge_at {
            // Purge what the whole fleet has seen deleted.
            heal(&devices, &chaos, &mut seen).await;
            let (engine, _) = &devices[rng.below(n_devices as u64) as usize];
            seen.purged += engine.purge_deleted().unwrap();
            chaos.set(true);
        }
        let (engine, clock) = &devices[rng.below(n_devices as u64) as usize];
        clock.advance(rng.below(2_000));
        match random_op(&mut rng) {
            Some(op) => {
                if let Ok(rows) = engine.transaction(&[op]) {
                    oracle.wrote(&rows);
                }
            }
            None => {
                seen.count(&engine.sync(SyncTrigger::Manual).await.unwrap());
                syncs += 1;
            }
        }
    }
    assert!(oracle.writes >= 2 && syncs >= 1, "seed {seed}: wrote {} times, synced {syncs}", oracle.writes);
    heal(&devices, &chaos, &mut seen).await;
    if std::env::var("SIMPLYSYNC_DEBUG").is_ok() {
        dump(&devices, &relays);
    }
    for (i, (engine, _)) in devices.iter().enumerate() {
        oracle.check(seed, i, engine);
        for s in engine.relay_statuses_local().unwrap() {
            assert!(s.error.is_none() && s.pending == 0, "seed {seed}: device {i} not synced with {}: {s:?}", s.url);
        }
    }
    seen
}

/// What each device and relay holds (`SIMPLYSYNC_DEBUG=1`), to diagnose a failing seed.
fn dump(devices: &[(Engine, Rc<ManualClock>)], relays: &[TestRelay]) {
    for (i, (engine, _)) in devices.iter().enumerate() {
        eprintln!("device {i} {} relays {:?}", engine.device_id(), engine.relay_urls());
        for q in [
            "SELECT key, value FROM _sync_meta WHERE key LIKE 'cursor:%' OR key LIKE 'epoch:%' OR key LIKE 'reseeded:%'",
            "SELECT event_id FROM _sync_seen ORDER BY event_id",
            "SELECT event_id, reason FROM _sync_deferred",
            "SELECT relay, event_id, reason FROM _sync_quarantine",
            "SELECT table_name, row_id, hlc FROM _sync_purged",
        ] {
            let rows: Vec<String> = engine.inspect_query(q, &[]).unwrap().iter().map(|r| r.to_serde().to_string()).collect();
            eprintln!("  {q}: {rows:?}");
        }
    }
    for r in relays {
        let db = rusqlite::Connection::open(&r.db).unwrap();
        let mut st = db.prepare("SELECT seq, event_id FROM events ORDER BY seq").unwrap();
        let evs: Vec<(i64, String)> =
            st.query_map([], |x| Ok((x.get(0)?, x.get(1)?))).unwrap().map(|x| x.unwrap()).collect();
        eprintln!("relay {}: {evs:?}", r.url);
    }
}

#[test]
fn devices_converge_through_real_relays_on_a_chaotic_network_with_restarts_wipes_and_purges() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut total = Seen::default();
    let all = seeds(1..=48);
    for &seed in &all {
        let seen = rt.block_on(run_real(seed));
        total.purged += seen.purged;
        total.reseeds += seen.reseeds;
        total.failures += seen.failures;
        total.device_restarts += seen.device_restarts;
    }
    if all.len() > 1 {
        let Seen { purged, reseeds, failures, device_restarts } = total;
        assert!(purged > 0 && reseeds > 0 && failures > 0 && device_restarts > 0, "the faults happened: {total:?}");
    }
}
