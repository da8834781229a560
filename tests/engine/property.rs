//! Property: any number of devices with random offline edits, random sync orders, and a relay
//! that duplicates, reorders and replays pages and drops requests, all converge to identical
//! rows. Seeded and reproducible: a failure prints its seed (`SIMPLYSYNC_SEED=n` reruns one).

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;

use simplysync::engine::io::{HttpRequest, HttpResponse, LocalFuture, ManualClock, Method, Transport, TransportError};
use simplysync::engine::{Engine, EngineConfig, Env, Op, SyncTrigger};
use simplysync::protocol::entropy::{Entropy, EntropyError};
use simplysync::protocol::{Json, SyncEnvelope};

use crate::harness::{todo_schema, T0};

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
    HttpResponse { status, body: v.to_string().into_bytes() }
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

fn snapshot(e: &Engine) -> Vec<Json> {
    let opts = simplysync::engine::ListOptions { include_deleted: true, ..Default::default() };
    e.list("todos", &opts).unwrap()
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
        let config =
            EngineConfig { secret: SECRET.into(), relays: vec!["http://sim".into()], schema: todo_schema(1, &[]) };
        devices.push((Engine::open(simplysync::store::open_memory().unwrap(), config, env).unwrap(), clock));
    }
    for _ in 0..40 {
        let (engine, clock) = &devices[rng.below(n_devices as u64) as usize];
        clock.advance(rng.below(2_000));
        let id = format!("r{}", rng.below(6));
        let title = Json::from(format!("v{}", rng.below(1000)));
        let op = match rng.below(6) {
            0 => Op::Insert {
                table: "todos".into(),
                row: Json::object([("id", Json::from(id.as_str())), ("title", title)]),
            },
            1 => Op::Update { table: "todos".into(), id, patch: Json::object([("title", title)]) },
            2 => Op::Upsert {
                table: "todos".into(),
                row: Json::object([("id", Json::from(id.as_str())), ("done", Json::Bool(true))]),
            },
            3 => Op::Delete { table: "todos".into(), id },
            _ => {
                engine.sync(SyncTrigger::Manual).await.unwrap();
                continue;
            }
        };
        let _ = engine.transaction(&[op]); // AlreadyExists / NotFound are part of the game
    }
    // The network heals; everyone syncs until quiet.
    relay.mischief.set(false);
    for _ in 0..3 {
        for (engine, clock) in &devices {
            clock.advance(10);
            engine.sync(SyncTrigger::Manual).await.unwrap();
        }
    }
    let first = snapshot(&devices[0].0);
    for (i, (engine, _)) in devices.iter().enumerate() {
        assert_eq!(snapshot(engine), first, "seed {seed}: device {i} diverged");
        assert!(engine.quarantined().unwrap().is_empty(), "seed {seed}: an honest relay's event was quarantined");
    }
}

#[test]
fn devices_converge_under_random_edits_sync_orders_and_a_mischievous_relay() {
    let seeds: Vec<u64> = match std::env::var("SIMPLYSYNC_SEED") {
        Ok(s) => vec![s.parse().expect("SIMPLYSYNC_SEED is a number")],
        Err(_) => (1..=1000).collect(),
    };
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    for seed in seeds {
        rt.block_on(run(seed));
    }
}
