//! Relay throughput: push and pull events/s over real HTTP on loopback, with 1 and 16
//! concurrent owners and ~1 KiB envelopes, against the release binary on a fresh database —
//! pushes of 1000 events (a device catching up), and of 10 (devices pushing as they write).
//!
//! `cargo bench -p simplysync-relay --bench throughput [-- RUNS]` (default 3 runs per case).
//! With `BENCH_RELAY_BINS=label=path,…` it measures those relay binaries in turn, run by run.
//! With `BENCH_RELAY_URL=http://…` it loads that relay instead of starting one (for profiling
//! a relay under `perf record`). With `BENCH_PG=postgres://…/postgres` (a server it may create
//! databases on) it also measures one PostgreSQL-backed process and three processes on one
//! database, the same client spreading requests round-robin over them.
//! Requests are built before timing: the figures are the relay's (plus loopback HTTP and the
//! load generator sharing the same 2 cores), not the client's encryption.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use simplysync_protocol::entropy::OsEntropy;
use simplysync_protocol::{create_recovery_key, encrypt_payload, EventMeta, Identity, Json, SyncEnvelope};

const BATCH: usize = 1000;

/// Which store the measured relays use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres(usize),
}

impl Backend {
    fn label(self) -> String {
        match self {
            Backend::Sqlite => "SQLite, 1 process".into(),
            Backend::Postgres(n) => format!("PostgreSQL, {n} process{}", if n == 1 { "" } else { "es" }),
        }
    }
}

struct Server {
    children: Vec<Child>,
    urls: Vec<String>,
    dir: std::path::PathBuf,
}

fn psql(url: &str, sql: &str) {
    let ok = Command::new("psql").arg(url).args(["-q", "-c", sql]).status().expect("psql runs").success();
    assert!(ok, "{sql}");
}

impl Server {
    fn start(backend: Backend, binary: &std::path::Path, run: usize) -> Server {
        if let Ok(url) = std::env::var("BENCH_RELAY_URL") {
            return Server {
                children: Vec::new(),
                urls: vec![url],
                dir: std::env::temp_dir().join("simplysync-bench-external"),
            };
        }
        let dir = std::env::temp_dir().join(format!("simplysync-bench-{}-{run}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (processes, database_url) = match backend {
            Backend::Sqlite => (1, None),
            Backend::Postgres(n) => {
                let admin = std::env::var("BENCH_PG").expect("BENCH_PG");
                let name = format!("bench_{}_{run}_{n}", std::process::id());
                psql(&admin, &format!("DROP DATABASE IF EXISTS {name}"));
                psql(&admin, &format!("CREATE DATABASE {name}"));
                (n, Some(format!("{}/{name}", admin.rsplit_once('/').unwrap().0)))
            }
        };
        let mut server = Server { children: Vec::new(), urls: Vec::new(), dir: dir.clone() };
        for _ in 0..processes {
            let mut cmd = Command::new(binary);
            cmd.env("PORT", "0")
                .env("DB_PATH", dir.join("relay.sqlite"))
                .env("RUST_LOG", "warn")
                .env("COMPACTION_INTERVAL_MS", "0")
                .env("MAX_TOTAL_BYTES", "100000000000")
                // Every writer is one address here: no per-address byte budget or share.
                .env("CLIENT_BYTES_PER_HOUR", "0")
                .env("MAX_IN_FLIGHT_PER_CLIENT", "0")
                .stdout(Stdio::piped())
                .stderr(Stdio::null());
            if let Some(url) = &database_url {
                cmd.env("DATABASE_URL", url);
            }
            let mut child = cmd.spawn().expect("start the relay");
            let mut line = String::new();
            BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
            let url = line.trim().strip_prefix("simplysync-relay listening on ").expect("address line").to_owned();
            server.urls.push(url);
            server.children.push(child);
        }
        server
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        for mut child in self.children.drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Picks the next relay process for each request.
#[derive(Clone)]
struct Urls(Arc<(Vec<String>, std::sync::atomic::AtomicUsize)>);

impl Urls {
    fn next(&self) -> &str {
        let i = self.0 .1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        &self.0 .0[i % self.0 .0.len()]
    }
}

struct OwnerLoad {
    owner_id: String,
    token: String,
    bodies: Vec<String>,
    events: usize,
}

/// One owner's events, sealed for real, ~1 KiB each as stored JSON, in pushes of `batch`.
fn owner_load(events: usize, batch: usize) -> OwnerLoad {
    let id = Identity::from_secret(&create_recovery_key(&mut OsEntropy).unwrap()).unwrap();
    let padding = "x".repeat(560);
    let envelopes: Vec<SyncEnvelope> = (0..events)
        .map(|i| {
            let hlc = format!("{:015}-{:06}-bench", 1_764_504_000_000u64 + i as u64, 0);
            let payload = Json::object([
                ("schemaVersion", Json::from(1u32)),
                ("table", Json::from("todos")),
                ("rowId", Json::from(i.to_string())),
                ("hlc", Json::from(hlc.as_str())),
                ("deleted", Json::Bool(false)),
                ("row", Json::object([("title", Json::from(padding.as_str()))])),
            ]);
            let meta = EventMeta {
                event_id: hlc,
                device_id: "bench".into(),
                created_at: "2025-11-30T12:00:00.000Z".into(),
                stream_id: Some(id.stream_id("todos", &i.to_string())),
            };
            encrypt_payload(&id, &meta, &payload, &mut OsEntropy).unwrap()
        })
        .collect();
    let bodies = envelopes.chunks(batch).map(|c| json!({"ownerId": id.owner_id(), "events": c}).to_string()).collect();
    OwnerLoad { owner_id: id.owner_id().to_owned(), token: id.relay_auth().to_owned(), bodies, events }
}

/// Pushes one owner's bodies in order as the engine does: the first alone (it registers the
/// owner), then with up to `in_flight` requests outstanding, the oldest awaited before the next
/// is sent.
async fn push_all(client: &reqwest::Client, urls: &Urls, load: &OwnerLoad, in_flight: usize) {
    let send = |body: &String| {
        let url = urls.next();
        let request = client.post(format!("{url}/v1/events")).bearer_auth(&load.token).body(body.clone());
        tokio::spawn(async move {
            let r = request.send().await.unwrap();
            assert_eq!(r.status(), 200);
        })
    };
    let Some((first, rest)) = load.bodies.split_first() else { return };
    send(first).await.unwrap();
    let mut outstanding: std::collections::VecDeque<tokio::task::JoinHandle<()>> = std::collections::VecDeque::new();
    for body in rest {
        if outstanding.len() >= in_flight {
            outstanding.pop_front().unwrap().await.unwrap();
        }
        outstanding.push_back(send(body));
    }
    for answer in outstanding {
        answer.await.unwrap();
    }
}

async fn pull_all(client: &reqwest::Client, urls: &Urls, load: &OwnerLoad) -> usize {
    let (mut after, mut n) = (String::from("0"), 0);
    loop {
        let url = urls.next();
        let r = client
            .get(format!("{url}/v1/events?ownerId={}&after={after}&limit={BATCH}", load.owner_id))
            .bearer_auth(&load.token)
            .send()
            .await
            .unwrap();
        let v: serde_json::Value = r.json().await.unwrap();
        let count = v["events"].as_array().unwrap().len();
        if count == 0 {
            return n;
        }
        n += count;
        after = v["nextCursor"].as_str().unwrap().to_owned();
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(3);
    // BENCH_RELAY_BINS="before=/path/a,after=/path/b": relay binaries measured in turn, run by
    // run, so a before/after pair shares the machine's state (default: this build's relay).
    let binaries: Vec<(String, std::path::PathBuf)> = match std::env::var("BENCH_RELAY_BINS") {
        Ok(list) => list
            .split(',')
            .map(|item| {
                let (label, path) = item.split_once('=').expect("BENCH_RELAY_BINS items are label=path");
                (format!(" ({label})"), path.into())
            })
            .collect(),
        Err(_) => vec![(String::new(), env!("CARGO_BIN_EXE_simplysync-relay").into())],
    };
    let mut backends = vec![Backend::Sqlite];
    if std::env::var("BENCH_PG").is_ok() {
        backends.extend([Backend::Postgres(1), Backend::Postgres(3)]);
    }
    println!("| store | owners | events | events per push | pushes in flight per owner | push events/s (median [min–max]) | pull events/s (median [min–max]) | stored bytes/event |");
    println!("|---|---|---|---|---|---|---|---|");
    // Cases: owners, events per owner, events per push, pushes in flight per owner. The engine
    // keeps two pushes in flight while it works through a backlog (src/engine/push.rs); one in
    // flight is how every earlier round measured.
    let cases =
        [(1usize, 100_000usize, BATCH, 1usize), (1, 100_000, BATCH, 2), (16, 10_000, BATCH, 1), (16, 2_000, 10, 1)];
    let only: Option<usize> = std::env::var("BENCH_CASE").ok().and_then(|c| c.parse().ok());
    for (case, &(owners, per_owner, batch, in_flight)) in cases.iter().enumerate() {
        if only.is_some_and(|c| c != case) {
            continue;
        }
        let loads: Vec<Arc<OwnerLoad>> = (0..owners).map(|_| Arc::new(owner_load(per_owner, batch))).collect();
        let stored_size = loads[0].bodies[0].len() / batch.min(per_owner);
        for &backend in &backends {
            let mut figures = vec![(Vec::new(), Vec::new()); binaries.len()];
            for run in 0..runs {
                for ((_, binary), (push, pull)) in binaries.iter().zip(figures.iter_mut()) {
                    let server = Server::start(backend, binary, run);
                    let urls = Urls(Arc::new((server.urls.clone(), Default::default())));
                    let _ = rustls::crypto::ring::default_provider().install_default();
                    let client = reqwest::Client::builder().pool_max_idle_per_host(64).build().unwrap();
                    let total: usize = loads.iter().map(|l| l.events).sum();
                    let started = Instant::now();
                    let tasks: Vec<_> = loads
                        .iter()
                        .map(|l| {
                            let (c, u, l) = (client.clone(), urls.clone(), Arc::clone(l));
                            tokio::spawn(async move { push_all(&c, &u, &l, in_flight).await })
                        })
                        .collect();
                    for t in tasks {
                        t.await.unwrap();
                    }
                    push.push(total as f64 / started.elapsed().as_secs_f64());
                    let started = Instant::now();
                    let tasks: Vec<_> = loads
                        .iter()
                        .map(|l| {
                            let (c, u, l) = (client.clone(), urls.clone(), Arc::clone(l));
                            tokio::spawn(async move { pull_all(&c, &u, &l).await })
                        })
                        .collect();
                    let mut pulled = 0;
                    for t in tasks {
                        pulled += t.await.unwrap();
                    }
                    assert_eq!(pulled, total);
                    pull.push(total as f64 / started.elapsed().as_secs_f64());
                }
            }
            let fmt = |v: &Vec<f64>| {
                let (lo, hi) = (v.iter().cloned().fold(f64::MAX, f64::min), v.iter().cloned().fold(0.0, f64::max));
                format!("{:.0} [{:.0}–{:.0}]", median(v.clone()), lo, hi)
            };
            for ((label, _), (push, pull)) in binaries.iter().zip(&figures) {
                println!(
                    "| {}{label} | {owners} | {} | {batch} | {in_flight} | {} | {} | {stored_size} |",
                    backend.label(),
                    owners * per_owner,
                    fmt(push),
                    fmt(pull)
                );
            }
        }
    }
}
