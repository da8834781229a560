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
    let err = refused_start(&relay.db);
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
        "INSERT INTO events (seq, owner_key, event_id, stream_id, envelope, bytes) VALUES (2, 999, 'x', NULL, '{}', 2)",
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

/// Starts the relay on `db` expecting it to refuse; returns what it printed to stderr. A relay
/// that starts instead is stopped and the test fails (rather than waiting on a server forever).
fn refused_start(db: &std::path::Path) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_simplysync-relay"))
        .env("DB_PATH", db)
        .env("PORT", "0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            child.kill().unwrap();
            panic!("the relay started on {} instead of refusing it", db.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn columns(db: &std::path::Path, table: &str) -> Vec<String> {
    let c = rusqlite::Connection::open(db).unwrap();
    let mut stmt = c.prepare("SELECT name FROM pragma_table_info(?1)").unwrap();
    stmt.query_map([table], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
}

async fn earlier_layouts_are_brought_up_to_date_on_open(layout: u8) {
    let mut relay = Relay::start(&[]);
    let (alice, bob, dave) = (Owner::new(), Owner::new(), Owner::new());
    relay.push(&bob, &[bob.event("x", 1), bob.event("y", 2)]).await;
    relay.push(&dave, &[dave.event("x", 1)]).await;
    let closed = relay.post_json("/v1/owner/close", Some(dave.token()), json!({"ownerId": dave.owner_id()})).await;
    assert_eq!(closed.json()["closed"], true);
    let pushed = versions_of_three_rows(&relay, &alice).await;
    let before = (relay.pull_all(&alice).await, relay.pull_all(&bob).await);
    relay.stop();
    match layout {
        3 => common::downgrade_to_layout_3(&relay.db),
        _ => common::downgrade_to_layout(&relay.db, layout == 2),
    }
    assert_eq!(columns(&relay.db, "events").contains(&"owner_id".to_owned()), layout < 3);

    relay.restart();
    assert!(columns(&relay.db, "events").contains(&"owner_key".to_owned()), "{:?}", columns(&relay.db, "events"));
    if layout < 3 {
        let wal = std::fs::metadata(relay.db.with_extension("sqlite-wal")).map(|m| m.len()).unwrap_or(0);
        assert_eq!(wal, 0, "the rebuilt table was checkpointed out of the WAL right after the migration");
    }
    // Layout 4: the stream index is a table holding every stored event with a stream.
    let c = rusqlite::Connection::open(&relay.db).unwrap();
    let (indexed, index_left): (i64, i64) = (
        c.query_row("SELECT count(*) FROM event_streams", [], |r| r.get(0)).unwrap(),
        c.query_row("SELECT count(*) FROM sqlite_schema WHERE name = 'events_by_owner_stream'", [], |r| r.get(0))
            .unwrap(),
    );
    assert_eq!((indexed, index_left), (8, 0));
    drop(c);
    let metrics = String::from_utf8(relay.get("/metrics", None).await.bytes).unwrap();
    for line in ["simplysync_stored_events 8\n", "simplysync_owners 3\n", "simplysync_owners_closed 1\n"] {
        assert!(metrics.contains(line), "{line}: {metrics}");
    }
    let version: i64 =
        rusqlite::Connection::open(&relay.db).unwrap().query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(version, 4);
    // Every event is where it was: same envelopes, same seqs, each owner's own.
    assert_eq!((relay.pull_all(&alice).await, relay.pull_all(&bob).await), before);
    let account = relay.status_of(&alice).await.json()["account"].clone();
    assert_eq!((account["events"].as_u64(), account["streams"].as_u64()), (Some(6), Some(3)), "{account}");
    // A closed owner stays closed.
    relay.push(&dave, &[dave.event("y", 2)]).await.assert_error(410, "owner_closed");
    // The owner's event ids still deduplicate, and its counters still move.
    let again = relay.push(&alice, &pushed[..2]).await.json();
    assert_eq!((again["accepted"].as_u64(), again["duplicate"].as_u64()), (Some(0), Some(2)), "{again}");
    relay.push(&alice, &[alice.event("d", 7)]).await;
    let account = relay.status_of(&alice).await.json()["account"].clone();
    assert_eq!((account["events"].as_u64(), account["streams"].as_u64()), (Some(7), Some(4)), "{account}");
    // A new owner gets a key of its own: neither sees the other's events.
    let carol = Owner::new();
    let carol_event = carol.event("z", 1);
    relay.push(&carol, std::slice::from_ref(&carol_event)).await;
    assert_eq!(relay.pull_all(&carol).await.0, vec![carol_event.clone()]);
    assert_eq!(relay.pull_all(&alice).await.0.len(), 7);
    // Compaction and stream compaction find the re-keyed events.
    relay.stop();
    assert_eq!(relay.command(&["compact"])["deletedEvents"], 3);
    relay.restart();
    assert_eq!(relay.pull_all(&alice).await.0.len(), 4);
    let stream = alice.event("a", 1).stream_id.unwrap();
    let r = relay.compact_streams(&alice, &[stream]).await;
    assert_eq!(r.json()["deletedEvents"], 1, "{:?}", r.json());
    assert_eq!(relay.pull_all(&bob).await, before.1);
}

#[tokio::test]
async fn a_database_of_layout_3_gets_its_stream_index_as_a_table_on_open() {
    earlier_layouts_are_brought_up_to_date_on_open(3).await;
}

#[tokio::test]
async fn a_database_of_layout_2_is_re_keyed_by_owner_on_open_and_keeps_every_event() {
    earlier_layouts_are_brought_up_to_date_on_open(2).await;
}

#[tokio::test]
async fn a_database_of_layout_1_gets_owner_keys_and_its_counters_on_open() {
    earlier_layouts_are_brought_up_to_date_on_open(1).await;
}

#[tokio::test]
async fn events_without_an_owner_stop_the_migration_and_stay_stored() {
    let mut relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    relay.stop();
    common::downgrade_to_layout(&relay.db, true);
    let c = rusqlite::Connection::open(&relay.db).unwrap();
    c.execute(
        "INSERT INTO events (seq, owner_id, event_id, stream_id, envelope, bytes) VALUES (9, 'nobody', 'x', NULL, '{}', 2)",
        [],
    )
    .unwrap();
    drop(c);
    let err = refused_start(&relay.db);
    assert!(err.contains("1 stored events belong to no owner row"), "{err}");
    let c = rusqlite::Connection::open(&relay.db).unwrap();
    let (version, events): (i64, i64) = (
        c.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap(),
        c.query_row("SELECT count(*) FROM events", [], |r| r.get(0)).unwrap(),
    );
    assert_eq!((version, events), (2, 2), "the database is left as it was");
    assert!(columns(&relay.db, "events").contains(&"owner_id".to_owned()));
}

fn page_size(db: &std::path::Path) -> i64 {
    rusqlite::Connection::open(db).unwrap().query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap()
}

#[tokio::test]
async fn a_new_database_has_8_kib_pages_and_a_file_with_4_kib_pages_keeps_them() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    assert_eq!(page_size(&relay.db), 8192);

    let mut older = Relay::start(&[]);
    older.stop();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", older.db.display()));
    }
    rusqlite::Connection::open(&older.db)
        .unwrap()
        .execute_batch("PRAGMA page_size = 4096; PRAGMA journal_mode = WAL; CREATE TABLE t (x); DROP TABLE t;")
        .unwrap();
    older.restart();
    let events: Vec<SyncEnvelope> = (1..=20).map(|n| alice.event(&format!("r{n}"), n)).collect();
    let pushed = older.push(&alice, &events).await;
    assert_eq!(pushed.status, 200, "{:?}", pushed.json());
    assert_eq!(older.pull_all(&alice).await.0, events);
    assert_eq!(page_size(&older.db), 4096);
}
