//! The SQLite backend's file-level behaviour: the `compact` command on `DB_PATH`, a clean
//! stop that leaves a checkpointed database file, and a file restored from an older copy.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{versions_of_three_rows, Owner, Relay};
use serde_json::json;
use simplysync_protocol::SyncEnvelope;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn the_compact_command_compacts_the_database_file_and_prints_a_report() {
    let mut relay = Relay::start(&[]);
    let alice = Owner::new();
    versions_of_three_rows(&relay, &alice).await;
    relay.stop();
    let out =
        Command::new(env!("CARGO_BIN_EXE_simplysync-relay")).arg("compact").env("DB_PATH", &relay.db).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["deletedEvents"], 3);
    relay.restart();
    assert_eq!(relay.pull_all(&alice).await.0.len(), 3);
}

#[tokio::test]
async fn sigterm_finishes_an_in_flight_push_exits_cleanly_and_checkpoints_the_wal() {
    let mut relay = Relay::start(&[]);
    let alice = Owner::new();
    let events: Vec<SyncEnvelope> = (0..20).map(|i| alice.event(&format!("r{i}"), i)).collect();
    let body = json!({"ownerId": alice.owner_id(), "events": events}).to_string();
    let (first, rest) = body.split_at(body.len() / 2);
    let addr = relay.url.strip_prefix("http://").unwrap().to_owned();
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        alice.token(),
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(first.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    relay.send_sigterm();
    // The relay has heard the signal (and stopped accepting) before the body's rest arrives.
    for _ in 0..200 {
        if relay.log_text().contains("shutdown signal received") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(relay.log_text().contains("shutdown signal received"));
    tcp.write_all(rest.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(5), tcp.read_to_string(&mut response)).await.expect("answered").unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains(r#""accepted":20"#), "{response}");

    let status = tokio::task::spawn_blocking(move || (relay.wait_exit(), relay)).await.unwrap();
    assert!(status.0.success(), "exit status {:?}", status.0);
    let mut relay = status.1;
    let wal = relay.db.with_extension("sqlite-wal");
    assert!(std::fs::metadata(&wal).map(|m| m.len() == 0).unwrap_or(true), "WAL checkpointed and truncated");
    assert!(relay.log_shows("WAL checkpoint complete"), "{}", relay.log_text());
    relay.restart();
    assert_eq!(relay.pull_all(&alice).await.0.len(), 20);
}

#[tokio::test]
async fn a_database_restored_from_an_older_copy_gets_a_new_epoch() {
    let mut relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let epoch = relay.get("/health", None).await.json()["epoch"].clone();
    relay.send_sigterm(); // a clean stop checkpoints the WAL: the file is a complete backup
    relay.wait_exit();
    let backup = relay.dir().join("backup.sqlite");
    std::fs::copy(&relay.db, &backup).unwrap();
    relay.restart();
    relay.push(&alice, &[alice.event("b", 2), alice.event("c", 3)]).await;
    relay.send_sigterm();
    relay.wait_exit();
    let _ = std::fs::remove_file(relay.db.with_extension("sqlite-wal"));
    std::fs::copy(&backup, &relay.db).unwrap();
    relay.restart();
    let after = relay.get("/health", None).await.json()["epoch"].clone();
    assert_ne!(after, epoch, "rolled back below its high-water mark");
    assert!(relay.log_shows("restored from a backup"), "{}", relay.log_text());
    relay.restart();
    assert_eq!(relay.get("/health", None).await.json()["epoch"], after, "and stable from then on");
}

#[tokio::test]
async fn a_database_from_a_newer_relay_is_refused_with_its_version_named() {
    let mut relay = Relay::start(&[]);
    relay.stop();
    rusqlite::Connection::open(&relay.db).unwrap().execute_batch("PRAGMA user_version = 99").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_simplysync-relay"))
        .env("DB_PATH", &relay.db)
        .env("PORT", "0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("schema version 99") && err.contains("newer relay"), "{err}");
}

#[tokio::test]
async fn a_database_from_before_the_counters_gets_them_counted_on_open() {
    let mut relay = Relay::start(&[]);
    let alice = Owner::new();
    let v: Vec<SyncEnvelope> = (1..=5).map(|n| alice.event(if n % 2 == 0 { "even" } else { "odd" }, n)).collect();
    relay.push(&alice, &v).await;
    relay.stop();
    let c = rusqlite::Connection::open(&relay.db).unwrap();
    c.execute_batch(
        "ALTER TABLE owners DROP COLUMN event_count; ALTER TABLE owners DROP COLUMN stream_count;
         DELETE FROM relay_meta WHERE key IN ('events', 'blobs', 'owners', 'closed_owners');",
    )
    .unwrap();
    drop(c);
    relay.restart();
    let account = relay.status_of(&alice).await.json()["account"].clone();
    assert_eq!((account["events"].as_u64(), account["streams"].as_u64()), (Some(5), Some(2)), "{account}");
    let metrics = String::from_utf8(relay.get("/metrics", None).await.bytes).unwrap();
    assert!(metrics.contains("simplysync_stored_events 5\n"), "{metrics}");
    assert!(metrics.contains("simplysync_owners 1\n"), "{metrics}");
}

#[tokio::test]
async fn a_seq_collision_is_an_error_never_a_silently_skipped_event() {
    let mut relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    relay.stop();
    // A damaged database: a row already holds the seq the next push will take.
    let c = rusqlite::Connection::open(&relay.db).unwrap();
    c.execute(
        "INSERT INTO events (seq, owner_id, event_id, stream_id, envelope, bytes) VALUES (2, 'someone-else', 'x', NULL, '{}', 2)",
        [],
    )
    .unwrap();
    drop(c);
    relay.restart();
    let r = relay.push(&alice, &[alice.event("b", 2)]).await;
    r.assert_error(500, "internal");
    let (events, _) = relay.pull_all(&alice).await;
    assert_eq!(events.len(), 1, "nothing was reported stored that is not");
}
