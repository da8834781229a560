//! Crashes, hostile relays, clocks, schema evolution and lost relay data.

use crate::harness::{phrase, temp_dir, todo, todo_schema, Device, DeviceSpec, TestRelay, T0};
use simplysync::engine::io::HttpResponse;
use simplysync::engine::RelayState;
use simplysync::protocol::{parse_json, SyncEnvelope};

fn tamper(alter: fn(&mut SyncEnvelope)) -> crate::harness::Rewrite {
    Box::new(move |req, mut resp: HttpResponse| {
        if req.url.contains("/v1/events?") && resp.status == 200 {
            let mut v: serde_json::Value = serde_json::from_slice(&resp.body).unwrap();
            for e in v["events"].as_array_mut().unwrap() {
                let mut env: SyncEnvelope = serde_json::from_value(e.clone()).unwrap();
                alter(&mut env);
                *e = serde_json::to_value(env).unwrap();
            }
            resp.body = v.to_string().into_bytes();
        }
        resp
    })
}

#[tokio::test]
async fn tampered_ciphertext_and_rebound_headers_are_quarantined_and_never_applied() {
    type Alteration = (fn(&mut SyncEnvelope), &'static str);
    let alterations: [Alteration; 4] = [
        (
            |e| {
                let mut ct = simplysync::protocol::base64url::decode(&e.ciphertext).unwrap();
                ct[3] ^= 1;
                e.ciphertext = simplysync::protocol::base64url::encode(&ct);
            },
            "AUTH_FAILED",
        ),
        (|e| e.stream_id = Some("AAAAAAAAAAAAAAAAAAAAAA".into()), "AUTH_FAILED"),
        (|e| e.device_id = "evil".into(), "AUTH_FAILED"),
        (|e| e.owner_id = "BBBBBBBBBBBBBBBBBBBBBB".into(), "FOREIGN_OWNER"),
    ];
    for (alter, reason) in alterations {
        let relay = TestRelay::start();
        let secret = phrase();
        let a = Device::new(&secret, &[&relay.url]);
        a.engine.insert("todos", todo("x", "genuine")).unwrap();
        a.sync().await;
        let b = Device::new(&secret, &[&relay.url]);
        *b.net.rewrite.borrow_mut() = Some(tamper(alter));
        let r = b.sync().await;
        assert_eq!((r.relays[0].applied, r.relays[0].quarantined), (0, 1), "{reason}");
        assert!(b.todos().is_empty(), "nothing tampered is applied");
        let q = b.engine.quarantined().unwrap();
        assert_eq!(q[0].reason, reason);
        assert!(
            b.engine.inspect_query("SELECT value FROM _sync_meta WHERE key LIKE 'cursor:%'", &[]).unwrap().len() == 1,
            "the cursor moved on"
        );
        assert_eq!(b.engine.retry_quarantined().unwrap(), 0, "failed authentication stays quarantined");
        // An honest copy of the same event still applies.
        let c = Device::new(&secret, &[&relay.url]);
        c.sync().await;
        assert_eq!(c.todos().len(), 1);
    }
}

fn seen_ids(d: &Device) -> Vec<String> {
    let rows = d.engine.inspect_query("SELECT event_id FROM _sync_seen ORDER BY event_id", &[]).unwrap();
    rows.iter().map(|r| r.get("event_id").unwrap().as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn a_forged_copy_quarantined_from_one_relay_does_not_block_the_genuine_copy_from_another() {
    let (evil, honest) = (TestRelay::start(), TestRelay::start());
    let secret = phrase();
    let a = Device::new(&secret, &[&evil.url]);
    a.engine.insert("todos", todo("x", "genuine")).unwrap();
    a.sync().await;
    // The same event (a backfill keeps the row's HLC as its id) on a second relay.
    a.engine.add_relay(&honest.url).unwrap();
    a.sync().await;

    let b = Device::new(&secret, &[&evil.url]);
    *b.net.rewrite.borrow_mut() = Some(tamper(|e| e.device_id = "evil".into()));
    let r = b.sync().await;
    assert_eq!((r.relays[0].applied, r.relays[0].quarantined), (0, 1));
    assert!(seen_ids(&b).is_empty(), "a quarantined event is not recorded as seen");
    *b.net.rewrite.borrow_mut() = None;
    b.engine.add_relay(&honest.url).unwrap();
    b.sync().await;
    assert_eq!(b.todos().len(), 1, "the genuine copy applies");
    assert_eq!(seen_ids(&b).len(), 1);
}

#[tokio::test]
async fn an_event_deferred_from_one_relay_is_a_duplicate_when_another_relay_sends_it_and_is_seen_once_applied() {
    let (one, two) = (TestRelay::start(), TestRelay::start());
    let secret = phrase();
    let ahead = Device::open(DeviceSpec {
        secret: &secret,
        relays: vec![one.url.clone(), two.url.clone()],
        schema: todo_schema(1, &[]),
        db_path: None,
        clock_ms: T0 + 60 * 60 * 1000, // an hour ahead
    });
    ahead.engine.insert("todos", todo("f", "from the future")).unwrap();
    ahead.sync().await;
    let b = Device::new(&secret, &[&one.url, &two.url]);
    let r = b.sync().await;
    let deferred: Vec<u64> = r.relays.iter().map(|x| x.deferred).collect();
    assert_eq!(deferred.iter().sum::<u64>(), 1, "deferred once, the other copy is a duplicate: {deferred:?}");
    assert_eq!(b.engine.deferred().unwrap().len(), 1);
    assert!(seen_ids(&b).is_empty(), "a deferred event is not recorded as seen");
    b.clock.set(T0 + 56 * 60 * 1000);
    let r = b.sync().await;
    assert_eq!(r.deferred_applied, 1);
    assert_eq!(seen_ids(&b).len(), 1, "applied from the deferred set, it is recorded as seen");
}

#[tokio::test]
async fn an_event_from_a_far_future_clock_is_deferred_then_applied_when_time_catches_up() {
    let relay = TestRelay::start();
    let secret = phrase();
    let ahead = Device::open(DeviceSpec {
        secret: &secret,
        relays: vec![relay.url.clone()],
        schema: todo_schema(1, &[]),
        db_path: None,
        clock_ms: T0 + 60 * 60 * 1000, // an hour ahead
    });
    ahead.engine.insert("todos", todo("f", "from the future")).unwrap();
    ahead.sync().await;
    let b = Device::new(&secret, &[&relay.url]);
    let r = b.sync().await;
    assert_eq!(r.relays[0].deferred, 1);
    assert!(b.todos().is_empty());
    let d = b.engine.deferred().unwrap();
    assert_eq!(d[0].reason, "FUTURE_HLC");
    assert_eq!(d[0].at, Some((T0 + 55 * 60 * 1000) as i64), "retry when it is within 5 minutes");
    // The far-future time was not absorbed: a local write still uses local time.
    let mine = b.engine.insert("todos", todo("m", "now")).unwrap();
    assert!(mine.get("updatedAt").unwrap().as_str().unwrap().starts_with(&format!("{T0:015}")));
    b.clock.set(T0 + 56 * 60 * 1000);
    let r = b.sync().await;
    assert_eq!(r.deferred_applied, 1);
    assert_eq!(b.todos().len(), 2);
    assert!(b.engine.deferred().unwrap().is_empty());
}

#[tokio::test]
async fn unknown_tables_and_future_schema_versions_are_deferred_until_the_app_declares_them() {
    let relay = TestRelay::start();
    let secret = phrase();
    let newer = Device::open(DeviceSpec {
        secret: &secret,
        relays: vec![relay.url.clone()],
        schema: todo_schema(2, &["notes"]),
        db_path: None,
        clock_ms: T0,
    });
    newer.engine.insert("notes", parse_json(r#"{"id":"n1","body":"hello"}"#).unwrap()).unwrap();
    newer.engine.insert("todos", todo("t1", "written by v2")).unwrap();
    newer.sync().await;

    let path = temp_dir("evolve").join("db.sqlite");
    let old = Device::open(DeviceSpec {
        secret: &secret,
        relays: vec![relay.url.clone()],
        schema: todo_schema(1, &[]),
        db_path: Some(path.clone()),
        clock_ms: T0,
    });
    let r = old.sync().await;
    assert_eq!((r.relays[0].deferred, r.relays[0].applied), (2, 0));
    let mut reasons: Vec<String> = old.engine.deferred().unwrap().into_iter().map(|d| d.reason).collect();
    reasons.sort();
    assert_eq!(reasons, ["FUTURE_SCHEMA", "FUTURE_SCHEMA"]);
    drop(old);

    // The app updates: declares schema 2 and the notes table.
    let upgraded = Device::open(DeviceSpec {
        secret: &secret,
        relays: vec![relay.url.clone()],
        schema: todo_schema(2, &["notes"]),
        db_path: Some(path),
        clock_ms: T0,
    });
    let r = upgraded.sync().await;
    assert_eq!(r.deferred_applied, 2);
    assert_eq!(upgraded.snapshot(), newer.snapshot());
}

#[tokio::test]
async fn an_unknown_table_on_the_same_schema_version_is_deferred_until_declared() {
    let relay = TestRelay::start();
    let secret = phrase();
    let newer = Device::open(DeviceSpec {
        secret: &secret,
        relays: vec![relay.url.clone()],
        schema: todo_schema(1, &["notes"]),
        db_path: None,
        clock_ms: T0,
    });
    newer.engine.insert("notes", parse_json(r#"{"id":"n1","body":"additive"}"#).unwrap()).unwrap();
    newer.sync().await;
    let path = temp_dir("additive").join("db.sqlite");
    let old = Device::open(DeviceSpec {
        secret: &secret,
        relays: vec![relay.url.clone()],
        schema: todo_schema(1, &[]),
        db_path: Some(path.clone()),
        clock_ms: T0,
    });
    old.sync().await;
    assert_eq!(old.engine.deferred().unwrap()[0].reason, "UNKNOWN_TABLE");
    drop(old);
    let upgraded = Device::open(DeviceSpec {
        secret: &secret,
        relays: vec![relay.url.clone()],
        schema: todo_schema(1, &["notes"]),
        db_path: Some(path),
        clock_ms: T0,
    });
    upgraded.sync().await;
    assert_eq!(upgraded.engine.get("notes", "n1").unwrap().unwrap().get("body").unwrap().as_str(), Some("additive"));
}

#[tokio::test]
async fn a_wiped_relay_is_re_seeded_and_no_device_is_stranded_even_one_that_never_sees_a_404() {
    let mut relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    let b = Device::new(&secret, &[&relay.url]);
    for i in 0..30 {
        a.engine.insert("todos", todo(&format!("a{i}"), "from a")).unwrap();
        // History: each row edited twice, so the relay's seq runs far ahead of the row count.
        a.engine.update("todos", &format!("a{i}"), parse_json(r#"{"done":true}"#).unwrap()).unwrap();
    }
    a.sync().await;
    b.sync().await;
    relay.wipe_and_restart();
    // B syncs first: its pull 404s with a stored cursor, so B re-seeds.
    let rb = b.sync().await;
    assert!(rb.relays[0].reseeded.is_some(), "{rb:?}");
    // A never sees a 404 (B recreated the owner) — the spec's stranded-peer gap. The epoch
    // change gives it away.
    b.engine.insert("todos", todo("b-new", "written after the wipe")).unwrap();
    b.sync().await;
    let ra = a.sync().await;
    assert!(ra.relays[0].reseeded.as_deref().unwrap().contains("epoch"), "{ra:?}");
    a.engine.insert("todos", todo("a-new", "after recovery")).unwrap();
    a.sync().await;
    b.sync().await;
    assert_eq!(a.snapshot(), b.snapshot());
    assert!(a.engine.get("todos", "b-new").unwrap().is_some());
    assert_eq!(a.engine.relay_statuses_local().unwrap()[0].state, RelayState::Synced);
}

async fn relay_rolled_back_after_writes(lose_mark: bool) -> (TestRelay, Device, Device, String) {
    let mut relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    let b = Device::new(&secret, &[&relay.url]);
    a.engine.insert("todos", todo("early", "before the backup")).unwrap();
    a.sync().await;
    let backup = temp_dir("backup").join("old.sqlite");
    relay.backup(&backup);
    for i in 0..10 {
        a.engine.insert("todos", todo(&format!("late{i}"), "after the backup")).unwrap();
    }
    a.sync().await;
    b.sync().await;
    if lose_mark {
        // Stopped first: the relay writes its mark on a thread of its own, and a write still
        // pending when the file is deleted would bring the mark back (the test then saw a
        // rotated epoch instead of a head seq behind the cursor).
        relay.stop();
        let _ = std::fs::remove_file(format!("{}.hwm", relay.db.display()));
    }
    relay.restore(&backup);
    (relay, a, b, secret)
}

#[tokio::test]
async fn a_relay_restored_from_an_older_backup_rotates_its_epoch_and_every_device_re_seeds_it() {
    let (relay, a, b, secret) = relay_rolled_back_after_writes(false).await;
    // B re-seeds first, pushing the relay's head past A's cursor: A still notices (new epoch).
    let rb = b.sync().await;
    assert!(rb.relays[0].reseeded.as_deref().unwrap().contains("epoch"), "{rb:?}");
    b.engine.insert("todos", todo("b-after", "written after the restore")).unwrap();
    b.sync().await;
    let ra = a.sync().await;
    assert!(ra.relays[0].reseeded.as_deref().unwrap().contains("epoch"), "{ra:?}");
    b.sync().await;
    assert_eq!(a.snapshot(), b.snapshot());
    assert!(a.engine.get("todos", "b-after").unwrap().is_some());
    let fresh = Device::new(&secret, &[&relay.url]);
    fresh.sync().await;
    assert_eq!(fresh.snapshot(), a.snapshot());
}

#[tokio::test]
async fn a_rolled_back_relay_without_its_mark_is_caught_by_a_head_seq_behind_the_cursor() {
    let (_relay, a, b, _) = relay_rolled_back_after_writes(true).await;
    let rb = b.sync().await;
    assert!(rb.relays[0].reseeded.as_deref().unwrap().contains("head seq"), "{rb:?}");
    a.sync().await;
    b.sync().await;
    assert_eq!(a.snapshot(), b.snapshot());
}

#[tokio::test]
async fn a_pull_absorbs_a_remote_clock_ahead_within_the_bound_so_later_local_writes_win() {
    let relay = TestRelay::start();
    let secret = phrase();
    let ahead = Device::open(DeviceSpec {
        secret: &secret,
        relays: vec![relay.url.clone()],
        schema: todo_schema(1, &[]),
        db_path: None,
        clock_ms: T0 + 120_000,
    });
    ahead.engine.insert("todos", todo("r", "from a clock 2 minutes ahead")).unwrap();
    ahead.sync().await;
    let b = Device::new(&secret, &[&relay.url]);
    b.sync().await;
    // B's wall clock is 2 minutes behind, yet its edit must win: it happened later.
    b.engine.update("todos", "r", parse_json(r#"{"title":"edited on b"}"#).unwrap()).unwrap();
    b.sync().await;
    ahead.sync().await;
    assert_eq!(ahead.todos()[0].1.as_str(), Some("edited on b"));
    assert_eq!(ahead.snapshot(), b.snapshot());
}

#[test]
fn the_seen_set_is_capped_at_50k_keeping_the_greatest_ids() {
    let conn = simplysync::store::open_memory().unwrap();
    simplysync::store::system::create_system_tables(&conn).unwrap();
    let tx = conn.unchecked_transaction().unwrap();
    for i in 0..50_123u32 {
        simplysync::store::inbox::mark_seen(&tx, &format!("{i:08}")).unwrap();
    }
    tx.commit().unwrap();
    assert_eq!(simplysync::store::inbox::cap_seen(&conn).unwrap(), 123);
    assert_eq!(simplysync::store::inbox::seen_count(&conn).unwrap(), 50_000);
    assert!(!simplysync::store::inbox::already_handled(&conn, "00000122").unwrap());
    assert!(simplysync::store::inbox::already_handled(&conn, "00000123").unwrap());
    assert!(simplysync::store::inbox::already_handled(&conn, "00050122").unwrap());
}

#[tokio::test]
async fn a_damaged_record_of_a_re_sent_write_is_a_storage_error_not_an_empty_answer() {
    let path = temp_dir("requests").join("db.sqlite");
    let spec = |db_path| DeviceSpec {
        secret: "sf1_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
        relays: vec![],
        schema: todo_schema(1, &[]),
        db_path: Some(db_path),
        clock_ms: T0,
    };
    let d = Device::open(spec(path.clone()));
    let ops = [simplysync::engine::Op::Insert { table: "todos".into(), row: todo("a", "once") }];
    d.engine.transaction_once("tab-1:7", &ops).unwrap();
    drop(d);
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute("UPDATE _sync_outbox SET request_result = '{\"not\":\"rows\"}' WHERE request_id = 'tab-1:7'", [])
        .unwrap();

    let d = Device::open(spec(path));
    let err = d.engine.transaction_once("tab-1:7", &ops).unwrap_err();
    assert_eq!(err.code(), "STORAGE");
    assert!(err.to_string().contains("tab-1:7"), "{err}");
    assert_eq!(d.todos().len(), 1, "the write itself is kept");
}
