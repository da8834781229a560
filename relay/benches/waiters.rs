//! Live notices at scale: N devices (default 10,000), each its own owner, waiting on one relay
//! process (`GET /v1/events/wait`) started with its default configuration, over real HTTP on
//! loopback. Measures the relay's memory per waiting device, how long a push takes to wake the
//! device waiting on its owner (200 samples, one at a time), and whether pushes of other owners
//! slow down while the devices wait (16 owners × 10,000 events in pushes of 1000, before the
//! waits open and while they are open).
//!
//! `cargo bench -p simplysync-relay --bench waiters [-- N]`. The client shares the machine's 2
//! cores with the relay; both need N file descriptors (the relay raises its own limit).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use simplysync_protocol::entropy::OsEntropy;
use simplysync_protocol::{create_recovery_key, encrypt_payload, EventMeta, Identity, Json, SyncEnvelope};

struct Relay {
    child: Child,
    url: String,
    dir: std::path::PathBuf,
}

impl Relay {
    fn start() -> Relay {
        let dir = std::env::temp_dir().join(format!("simplysync-bench-waiters-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut child = Command::new(env!("CARGO_BIN_EXE_simplysync-relay"))
            .env("PORT", "0")
            .env("DB_PATH", dir.join("relay.sqlite"))
            .env("RUST_LOG", "warn")
            .env("COMPACTION_INTERVAL_MS", "0")
            // One client address registers every device here; the defaults allow 10 a minute.
            .env("REGISTRATIONS_PER_MINUTE", "1000000")
            // ... and holds every device's connection (the default allows 1000 per address).
            .env("MAX_CONNECTIONS_PER_CLIENT", "0")
            // ... and its requests in flight, and its bytes (every device is one address here).
            .env("MAX_IN_FLIGHT_PER_CLIENT", "0")
            .env("CLIENT_BYTES_PER_HOUR", "0")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the relay");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url = line.trim().strip_prefix("simplysync-relay listening on ").expect("address line").to_owned();
        Relay { child, url, dir }
    }

    /// The relay's resident memory, bytes.
    fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap();
        kb * 1024
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

struct Device {
    owner_id: String,
    token: String,
    id: Identity,
}

fn envelope(id: &Identity, n: u64, pad: usize) -> SyncEnvelope {
    let hlc = format!("{:015}-{:06}-bench", 1_764_504_000_000u64 + n, 0);
    let payload = Json::object([
        ("schemaVersion", Json::from(1u32)),
        ("table", Json::from("todos")),
        ("rowId", Json::from(n.to_string())),
        ("hlc", Json::from(hlc.as_str())),
        ("deleted", Json::Bool(false)),
        ("row", Json::object([("title", Json::from("x".repeat(pad)))])),
    ]);
    let meta = EventMeta {
        event_id: hlc,
        device_id: "bench".into(),
        created_at: "2025-11-30T12:00:00.000Z".into(),
        stream_id: Some(id.stream_id("todos", &n.to_string())),
    };
    encrypt_payload(id, &meta, &payload, &mut OsEntropy).unwrap()
}

fn device() -> Device {
    let id = Identity::from_secret(&create_recovery_key(&mut OsEntropy).unwrap()).unwrap();
    Device { owner_id: id.owner_id().to_owned(), token: id.relay_auth().to_owned(), id }
}

async fn push(client: &reqwest::Client, url: &str, d: &Device, events: &[SyncEnvelope]) {
    let body = json!({"ownerId": d.owner_id, "events": events}).to_string();
    let r = client.post(format!("{url}/v1/events")).bearer_auth(&d.token).body(body).send().await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
}

/// 16 owners push 10,000 events each in pushes of 1000 (bodies built before timing): events/s.
async fn other_owners_push(client: &reqwest::Client, url: &str) -> f64 {
    let loads: Vec<(Device, Vec<String>)> = (0..16)
        .map(|_| {
            let d = device();
            let events: Vec<SyncEnvelope> = (0..10_000).map(|n| envelope(&d.id, n, 560)).collect();
            let bodies = events.chunks(1000).map(|c| json!({"ownerId": d.owner_id, "events": c}).to_string()).collect();
            (d, bodies)
        })
        .collect();
    let started = Instant::now();
    let tasks: Vec<_> = loads
        .into_iter()
        .map(|(d, bodies)| {
            let (client, url) = (client.clone(), url.to_owned());
            tokio::spawn(async move {
                for body in bodies {
                    let r =
                        client.post(format!("{url}/v1/events")).bearer_auth(&d.token).body(body).send().await.unwrap();
                    assert_eq!(r.status(), 200);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    160_000.0 / started.elapsed().as_secs_f64()
}

async fn waiting(client: &reqwest::Client, url: &str) -> u64 {
    let text = client.get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("simplysync_live_waiters "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as u64
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let n: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(10_000);
    let relay = Relay::start();
    let url = relay.url.clone();
    let client = reqwest::Client::builder().pool_max_idle_per_host(usize::MAX).build().unwrap();
    let rss_start = relay.rss();
    let alone = other_owners_push(&client, &url).await;

    eprintln!("registering {n} devices");
    let devices: Arc<Vec<Device>> = Arc::new((0..n).map(|_| device()).collect());
    for chunk in (0..n).collect::<Vec<_>>().chunks(64) {
        let tasks: Vec<_> = chunk
            .iter()
            .map(|&i| {
                let (client, url, devices) = (client.clone(), url.clone(), devices.clone());
                tokio::spawn(async move {
                    let d = &devices[i];
                    push(&client, &url, d, &[envelope(&d.id, 0, 8)]).await;
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    }
    let rss_registered = relay.rss();

    // Every device waits past its one event; a wait that times out (204) is asked again. Each
    // wait on a connection of its own, closed after its answer (a shared pool would keep the
    // answered ones open beside the waiting ones: more connections than devices).
    let waits = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let (woken_tx, mut woken_rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Instant)>();
    let mut refused = 0u64;
    let refused_count = Arc::new(std::sync::atomic::AtomicU64::new(0));
    for i in 0..n {
        let (client, url, devices, woken, refused) =
            (waits.clone(), url.clone(), devices.clone(), woken_tx.clone(), refused_count.clone());
        tokio::spawn(async move {
            let d = &devices[i];
            // The first wait answers at once with the owner's head (seqs are relay-wide); the
            // device then waits past it, as the engine does.
            let mut after: Option<u64> = None;
            loop {
                let r = client
                    .get(format!(
                        "{url}/v1/events/wait?ownerId={}&after={}&timeoutMs=60000",
                        d.owner_id,
                        after.unwrap_or(0)
                    ))
                    .bearer_auth(&d.token)
                    .timeout(Duration::from_secs(90))
                    .send()
                    .await;
                let r = match r {
                    Ok(r) => r,
                    Err(e) => {
                        if refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 3 {
                            eprintln!("a wait failed: {e:?}");
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                match r.status().as_u16() {
                    200 if after.is_none() => {
                        let v: serde_json::Value = r.json().await.unwrap();
                        after = v["headSeq"].as_u64();
                    }
                    200 => {
                        let _ = woken.send((i, Instant::now()));
                        return;
                    }
                    204 => continue,
                    status => {
                        if refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 3 {
                            eprintln!("a wait was refused: {status}");
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        });
    }
    let opened = Instant::now();
    while waiting(&client, &url).await < n as u64 && opened.elapsed() < Duration::from_secs(120) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let waiters = waiting(&client, &url).await;
    eprintln!("{waiters} waiting after {:.1} s", opened.elapsed().as_secs_f64());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_opening = relay.rss();
    // The blocking threads that read each owner's head as the waits came in idle out after 10 s.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let rss_waiting = relay.rss();

    // Other owners push while the devices wait, then one sampled device at a time is woken.
    let busy = other_owners_push(&client, &url).await;
    let samples = 200.min(n);
    let mut pushed_at = HashMap::new();
    let mut latencies = Vec::new();
    for k in 0..samples {
        let i = k * (n / samples);
        let d = &devices[i];
        let event = envelope(&d.id, 1, 8);
        let t0 = Instant::now();
        push(&client, &url, d, &[event]).await;
        pushed_at.insert(i, t0);
        let (woken, at) = tokio::time::timeout(Duration::from_secs(10), woken_rx.recv())
            .await
            .map(|w| w.unwrap())
            .unwrap_or((usize::MAX, Instant::now()));
        if woken == i {
            latencies.push(at.duration_since(t0).as_secs_f64() * 1000.0);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    refused += refused_count.load(std::sync::atomic::Ordering::Relaxed);
    latencies.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let heard = latencies.len();
    let metrics = client.get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap();
    let closed_at_once = metrics
        .lines()
        .find_map(|l| l.strip_prefix(r#"simplysync_rejections_total{reason="connections"} "#))
        .unwrap_or("0")
        .to_owned();
    let mib = |b: u64| b as f64 / 1_048_576.0;
    println!(
        "| waiting devices | {n} ({waiters} registered as waiting; {refused} waits refused or failed and asked again; \
         {closed_at_once} connections past MAX_CONNECTIONS closed at once) |"
    );
    println!(
        "| relay RSS | {:.1} MiB at start, {:.1} MiB with {n} owners, {:.1} MiB as they start waiting, {:.1} MiB 12 s later: {:.1} KiB per waiter |",
        mib(rss_start),
        mib(rss_registered),
        mib(rss_opening),
        mib(rss_waiting),
        rss_waiting.saturating_sub(rss_registered) as f64 / 1024.0 / n as f64
    );
    if heard > 0 {
        println!(
            "| push → waiting device woken | p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms ({heard} of {samples} samples heard within 10 s) |",
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.9),
            latencies[heard - 1]
        );
    } else {
        println!("| push → waiting device woken | none of {samples} samples heard within 10 s |");
    }
    println!("| 16 other owners pushing (1000-event pushes) | {alone:.0} events/s alone, {busy:.0} events/s with {n} waiting |");
}
