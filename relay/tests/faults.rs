//! Faults: a full disk (507, reads keep working, writes resume), a database another process
//! holds (503 busy; a push answered 408 never writes afterwards; a write whose client hung up
//! while it waited still commits and spends its registration), a shutdown with a request
//! that never ends (the deadline holds), the high-water mark at its own path and
//! `rotate-epoch`, and compaction scheduled from the stored last run.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Owner, Relay, Resp, TempDir};
use serde_json::Value;
use simplysync_protocol::SyncEnvelope;
use tokio::io::AsyncWriteExt;

async fn metrics(relay: &Relay) -> String {
    String::from_utf8(relay.get("/metrics", None).await.bytes).unwrap()
}

async fn epoch(relay: &Relay) -> String {
    relay.get("/health", None).await.json()["epoch"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_full_database_answers_507_keeps_serving_reads_and_takes_writes_again_once_space_is_freed() {
    let relay =
        Relay::start(&[("MAX_DB_BYTES", "262144"), ("MAX_OWNER_BYTES", "100000000"), ("MAX_TOTAL_BYTES", "100000000")]);
    let (alice, bob) = (Owner::new(), Owner::new());
    // Bob fills the database.
    let mut full: Option<Resp> = None;
    for batch in 0..40u64 {
        let events: Vec<SyncEnvelope> =
            (0..20).map(|i| bob.event_sized(&format!("r{batch}-{i}"), batch * 20 + i, 2000)).collect();
        let r = relay.push(&bob, &events).await;
        if r.status != 200 {
            full = Some(r);
            break;
        }
    }
    let full = full.expect("a 256 KiB database fills up");
    full.assert_error(507, "storage_full");
    let stored = relay.pull_all(&bob).await.0.len();
    assert!(stored > 0);
    // Reads keep working; the refused push stored nothing.
    assert_eq!(relay.status_of(&bob).await.status, 200);
    assert_eq!(relay.pull_all(&bob).await.0.len(), stored);
    let m = metrics(&relay).await;
    assert!(m.contains("simplysync_db_errors_total{kind=\"full\"}"), "{m}");
    // A new owner cannot write either, until space returns: bob closes his account.
    let big: Vec<SyncEnvelope> = (0..20).map(|i| alice.event_sized(&format!("a{i}"), i, 2000)).collect();
    relay.push(&alice, &big).await.assert_error(507, "storage_full");
    let closed =
        relay.post_json("/v1/owner/close", Some(bob.token()), serde_json::json!({"ownerId": bob.owner_id()})).await;
    assert_eq!(
        closed.status,
        200,
        "closing frees space even in a full database: {}",
        String::from_utf8_lossy(&closed.bytes)
    );
    assert_eq!(relay.push(&alice, &big).await.status, 200);
    assert_eq!(relay.pull_all(&alice).await.0.len(), 20);
}

/// Holds SQLite's write lock on the relay's database from this process until dropped.
struct WriteLock {
    _held: rusqlite::Connection,
}

impl WriteLock {
    fn take(db: &std::path::Path) -> WriteLock {
        let c = rusqlite::Connection::open(db).unwrap();
        c.execute_batch("BEGIN IMMEDIATE").unwrap();
        WriteLock { _held: c }
    }
}

#[tokio::test]
async fn while_another_process_holds_the_database_pushes_get_503_busy_or_408_and_none_writes_later() {
    let relay = Relay::start(&[("REQUEST_TIMEOUT_MS", "1000")]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("seed", 0)]).await;
    let lock = WriteLock::take(&relay.db);
    let pushes: Vec<_> = (1..=6u64)
        .map(|i| {
            let (relay_url, alice) = (relay.url.clone(), alice.clone());
            tokio::spawn(async move {
                let body =
                    serde_json::json!({"ownerId": alice.owner_id(), "events": [alice.event(&format!("r{i}"), i)]});
                common::send(
                    reqwest::Method::POST,
                    &format!("{relay_url}/v1/events"),
                    Some(alice.token()),
                    Some(body.to_string().into_bytes()),
                )
                .await
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for p in pushes {
        let r = p.await.unwrap();
        if r.status == 503 {
            r.assert_error(503, "busy");
            assert!(r.headers.contains_key("retry-after"));
        } else {
            r.assert_error(408, "request_timeout");
        }
        statuses.push(r.status.as_u16());
    }
    assert!(statuses.contains(&503), "{statuses:?}");
    assert!(statuses.contains(&408), "{statuses:?}");
    // Writes still queued behind the lock are past their deadline: releasing it now must not
    // let any of them commit.
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(lock);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(relay.pull_all(&alice).await.0.len(), 1, "only the seed event is stored");
    assert!(metrics(&relay).await.contains("simplysync_db_errors_total{kind=\"busy\"}"));
    assert_eq!(relay.push(&alice, &[alice.event("after", 9)]).await.status, 200);
}

#[tokio::test]
async fn shutdown_stops_waiting_for_a_request_that_never_ends_at_its_deadline() {
    let mut relay = Relay::start(&[("SHUTDOWN_TIMEOUT_MS", "1000"), ("REQUEST_TIMEOUT_MS", "60000")]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let mut tcp = tokio::net::TcpStream::connect(relay.addr()).await.unwrap();
    let head = format!(
        "POST /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Length: 500\r\n\r\n{{",
        alice.token()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = Instant::now();
    relay.send_sigterm();
    let (status, relay) = tokio::task::spawn_blocking(move || (relay.wait_exit(), relay)).await.unwrap();
    let took = start.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(5), "exited after {took:?}");
    assert!(relay.log_shows("still running after the deadline"), "{}", relay.log_text());
    assert!(relay.log_shows("WAL checkpoint complete"), "{}", relay.log_text());
}

fn relay_command(args: &[&str], env: &[(&str, &std::path::Path)]) -> Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_simplysync-relay"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn the_high_water_mark_lives_at_hwm_path_and_rotate_epoch_makes_a_new_epoch() {
    let marks = TempDir::new("marks");
    let hwm = marks.0.join("relay.hwm");
    let mut relay = Relay::start(&[("HWM_PATH", hwm.to_str().unwrap())]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1), alice.event("b", 2)]).await;
    let first = epoch(&relay).await;
    relay.send_sigterm();
    let mut relay = tokio::task::spawn_blocking(move || {
        relay.wait_exit();
        relay
    })
    .await
    .unwrap();
    let mark: Value = serde_json::from_str(&std::fs::read_to_string(&hwm).unwrap()).unwrap();
    assert_eq!(mark["epoch"], first.as_str());
    assert_eq!(mark["seq"], 2);
    assert!(!relay.db.with_extension("sqlite.hwm").exists(), "no mark beside the database");
    assert!(std::fs::read_dir(&marks.0).unwrap().count() == 1, "no temporary file left behind");

    // A restore runbook: copy the database back, then rotate its epoch by hand.
    let out = relay_command(&["rotate-epoch"], &[("DB_PATH", &relay.db), ("HWM_PATH", &hwm)]);
    assert_eq!(out["previousEpoch"], first.as_str());
    let second = out["epoch"].as_str().unwrap().to_owned();
    assert_ne!(second, first);
    relay.restart();
    assert_eq!(epoch(&relay).await, second);
    assert_eq!(relay.pull(&alice, "", None).await.json()["epoch"], second.as_str());
    assert_eq!(relay.pull_all(&alice).await.0.len(), 2, "rotating the epoch keeps the data");
}

#[tokio::test]
async fn a_database_restored_behind_its_mark_at_hwm_path_gets_a_new_epoch_on_start() {
    let marks = TempDir::new("marks");
    let hwm = marks.0.join("relay.hwm");
    let mut relay = Relay::start(&[("HWM_PATH", hwm.to_str().unwrap())]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    relay.send_sigterm();
    let mut relay = tokio::task::spawn_blocking(move || {
        relay.wait_exit();
        relay
    })
    .await
    .unwrap();
    let backup = relay.dir().join("backup.sqlite");
    rusqlite::Connection::open(&relay.db)
        .unwrap()
        .execute_batch(&format!("VACUUM INTO '{}'", backup.display()))
        .unwrap();
    relay.restart();
    let first = epoch(&relay).await;
    relay.push(&alice, &[alice.event("b", 2), alice.event("c", 3)]).await;
    relay.send_sigterm();
    let mut relay = tokio::task::spawn_blocking(move || {
        relay.wait_exit();
        relay
    })
    .await
    .unwrap();
    std::fs::copy(&backup, &relay.db).unwrap();
    relay.restart();
    assert_ne!(epoch(&relay).await, first, "the restored copy is behind the mark: a new epoch");
}

#[tokio::test]
async fn a_relay_restarted_more_often_than_its_compaction_interval_still_compacts() {
    let mut relay = Relay::start(&[("COMPACTION_INTERVAL_MS", "2500")]);
    let alice = Owner::new();
    let versions: Vec<SyncEnvelope> = (1..=3).map(|n| alice.event("same-row", n)).collect();
    relay.push(&alice, &versions).await;
    let start = Instant::now();
    while relay.pull_all(&alice).await.0.len() != 1 {
        assert!(start.elapsed() < Duration::from_secs(8), "never compacted across restarts");
        // Each run is shorter than the interval: only a schedule read from the database gets there.
        tokio::time::sleep(Duration::from_millis(700)).await;
        relay.restart();
    }
    assert!(start.elapsed() >= Duration::from_millis(1500), "compacted too early: {:?}", start.elapsed());
}

/// A new owner's first write from 10.0.0.4: a push of one event, or one blob chunk.
fn first_write(o: &Owner, blob: bool) -> String {
    let (line, body) = if blob {
        let hash = simplysync_protocol::identity::sha256_base64url(b"chunk");
        (format!("PUT /v1/blobs/{hash}?ownerId={}", o.owner_id()), "chunk".to_owned())
    } else {
        let body = serde_json::json!({"ownerId": o.owner_id(), "events": [o.event("a", 1)]});
        ("POST /v1/events".to_owned(), body.to_string())
    };
    format!(
        "{line} HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer {}\r\nX-Forwarded-For: 10.0.0.4\r\n\
         Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        o.token(),
        body.len()
    )
}

#[tokio::test]
async fn a_write_whose_client_hangs_up_while_it_waits_for_the_database_still_commits_and_spends_its_registration() {
    for blob in [false, true] {
        // A 30 s request timeout gives the relay a 5 s busy timeout, well past the lock's hold.
        let relay = Relay::start(&[
            ("REGISTRATIONS_PER_MINUTE", "1"),
            ("CLIENT_IP_HEADER", "X-Forwarded-For"),
            ("REQUEST_TIMEOUT_MS", "30000"),
        ]);
        let answer_to = async |o: &Owner| relay.raw(first_write(o, blob).as_bytes(), Duration::from_secs(5)).await;
        for _ in 0..2 {
            let answer = answer_to(&Owner::new()).await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        }
        // The third registration of the burst waits on the lock, and its client goes.
        let third = Owner::new();
        let lock = WriteLock::take(&relay.db);
        let mut tcp = tokio::net::TcpStream::connect(relay.addr()).await.unwrap();
        tcp.write_all(first_write(&third, blob).as_bytes()).await.unwrap();
        // Long enough for the write to reach the store on a loaded machine.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        drop(tcp);
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(lock);
        let start = Instant::now();
        while relay.pull(&third, "", Some(1)).await.status != 200 {
            assert!(start.elapsed() < Duration::from_secs(10), "the abandoned write never committed (blob: {blob})");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The address is charged just before the registration shows in the metrics.
        while !metrics(&relay).await.contains("simplysync_owners_registered_total 3\n") {
            assert!(start.elapsed() < Duration::from_secs(10), "the third registration never showed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Its registration counted against the address: the fourth is over the burst.
        let answer = answer_to(&Owner::new()).await;
        assert!(answer.starts_with("HTTP/1.1 429"), "blob: {blob}: {answer}");
    }
}

#[tokio::test]
async fn the_marks_directory_is_created_and_a_mark_that_cannot_be_written_stops_the_start() {
    let marks = TempDir::new("marks-dir");
    let hwm = marks.0.join("not-yet").join("relay.hwm");
    let relay = Relay::start(&[("HWM_PATH", hwm.to_str().unwrap())]);
    assert_eq!(relay.get("/health", None).await.status, 200);
    assert!(hwm.exists(), "the directory was created and the mark written at start");
    drop(relay);
    // Under a regular file: no directory can be made there, so no mark either.
    let blocker = marks.0.join("a-file");
    std::fs::write(&blocker, "x").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_simplysync-relay"))
        .env("PORT", "0")
        .env("DB_PATH", marks.0.join("r.sqlite"))
        .env("HWM_PATH", blocker.join("relay.hwm"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("HWM_PATH") && err.contains("high-water mark"), "{err}");
}
