//! Compaction at the store: it stops at a safe point when cancelled (shutdown) and records
//! its run only when it finished, so the next start still finds it due.

mod common;

use std::sync::atomic::AtomicBool;

use common::{Owner, TempDir};
use simplysync_protocol::identity::relay_token_hash;
use simplysync_relay::store::sqlite::{Quotas, SqliteStore, StoreOptions};
use simplysync_relay::store::{MayRegister, NewEvent, RelayStore};

fn store(dir: &TempDir) -> SqliteStore {
    let quotas = Quotas { max_owner_bytes: u64::MAX / 4, max_total_bytes: u64::MAX / 4 };
    SqliteStore::open(&dir.0.join("relay.sqlite"), StoreOptions::new(quotas), "2026-12-01T00:00:00.000Z").unwrap()
}

fn versions(alice: &Owner, n: u64) -> Vec<NewEvent> {
    (1..=n)
        .map(|v| {
            let e = alice.event("one-row", v);
            NewEvent {
                event_id: e.event_id.clone(),
                stream_id: e.stream_id.clone(),
                json: serde_json::to_string(&e).unwrap(),
            }
        })
        .collect()
}

#[test]
fn a_cancelled_compaction_stops_before_deleting_and_records_no_run() {
    let dir = TempDir::new("compaction");
    let s = store(&dir);
    let alice = Owner::new();
    let th = relay_token_hash(alice.token());
    s.push(alice.owner_id(), &th, versions(&alice, 4), "2026-12-01T00:00:01.000Z", MayRegister::Yes, None).unwrap();

    let cancelled = AtomicBool::new(true);
    let report = s.compact_all("2026-12-01T00:00:02.000Z", &cancelled).unwrap();
    assert!(!report.complete);
    assert_eq!(report.deleted_events, 0);
    assert_eq!(s.compaction_times().unwrap().0, None, "an unfinished run is not recorded");

    let report = s.compact_all("2026-12-01T00:00:03.000Z", &AtomicBool::new(false)).unwrap();
    assert!(report.complete);
    assert_eq!(report.deleted_events, 3);
    assert_eq!(s.compaction_times().unwrap().0.as_deref(), Some("2026-12-01T00:00:03.000Z"));
    let page = s.pull(alice.owner_id(), &th, 0, 100, usize::MAX).unwrap();
    assert_eq!(page.events.len(), 1);
}

fn new_event(e: &simplysync_protocol::envelope::SyncEnvelope) -> NewEvent {
    NewEvent { event_id: e.event_id.clone(), stream_id: e.stream_id.clone(), json: serde_json::to_string(e).unwrap() }
}

#[test]
fn compaction_keeps_only_each_streams_newest_version_whatever_order_the_versions_arrived_in() {
    let dir = TempDir::new("compaction-order");
    let s = store(&dir);
    let alice = Owner::new();
    let th = relay_token_hash(alice.token());
    // One hot row with 7,000 versions arriving in a scrambled order (several compaction windows,
    // several of its versions in each), and 300 rows of one version each arriving among them.
    let mut order: Vec<u64> = (1..=7000).collect();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let mut events: Vec<NewEvent> = order.iter().map(|&v| new_event(&alice.event("hot", v))).collect();
    for r in 0..300u64 {
        let at = (r as usize * 23) % events.len();
        events.insert(at, new_event(&alice.event(&format!("cold-{r}"), 10_000 + r)));
    }
    for chunk in events.chunks(1000) {
        s.push(alice.owner_id(), &th, chunk.to_vec(), "2026-12-01T00:00:01.000Z", MayRegister::Yes, None).unwrap();
    }
    let report = s.compact_all("2026-12-01T00:00:02.000Z", &AtomicBool::new(false)).unwrap();
    assert_eq!(report.deleted_events, 6999);
    let (mut kept, mut after) = (Vec::new(), 0);
    loop {
        let page = s.pull(alice.owner_id(), &th, after, 1000, usize::MAX).unwrap();
        let Some(last) = page.last_seq else { break };
        kept.extend(page.events);
        after = last;
    }
    assert_eq!(kept.len(), 301);
    let newest_hot = serde_json::to_string(&alice.event("hot", 7000)).unwrap();
    let newest_id = &serde_json::from_str::<serde_json::Value>(&newest_hot).unwrap()["eventId"];
    assert!(kept.iter().any(|e| &serde_json::from_str::<serde_json::Value>(e).unwrap()["eventId"] == newest_id));
    assert_eq!(s.account(alice.owner_id(), &th, 1 << 30).unwrap().events, 301);
}

#[test]
fn closing_an_owner_deletes_a_log_longer_than_a_batch_and_the_next_pass_finishes_one_cut_short() {
    let dir = TempDir::new("compaction-close");
    let s = store(&dir);
    let (alice, bob) = (Owner::new(), Owner::new());
    let (tha, thb) = (relay_token_hash(alice.token()), relay_token_hash(bob.token()));
    for chunk in (1..=4500u64).collect::<Vec<_>>().chunks(1000) {
        let events = chunk.iter().map(|&n| new_event(&alice.event(&format!("row-{n}"), n))).collect();
        s.push(alice.owner_id(), &tha, events, "2026-12-01T00:00:01.000Z", MayRegister::Yes, None).unwrap();
    }
    s.push(bob.owner_id(), &thb, versions(&bob, 3), "2026-12-01T00:00:01.000Z", MayRegister::Yes, None).unwrap();
    let closed = s.close_owner(alice.owner_id(), &tha, "2026-12-01T00:00:02.000Z", None).unwrap();
    assert_eq!(closed.deleted_events, 4500);
    let db = rusqlite::Connection::open(dir.0.join("relay.sqlite")).unwrap();
    let count = |sql: &str| db.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
    assert_eq!(count("SELECT count(*) FROM events"), 3, "only bob's events are left");
    assert_eq!(s.stats().unwrap().events, 3);
    // A close cut short (a crash between its batches) leaves rows of the closed owner behind.
    let alice_key: i64 =
        db.query_row("SELECT owner_key FROM owners WHERE owner_id = ?1", [alice.owner_id()], |r| r.get(0)).unwrap();
    db.execute(
        "INSERT INTO events (seq, owner_key, event_id, stream_id, envelope, bytes)
         SELECT 100000 + value, ?1, 'left-' || value, 'stream', '{}', 2 FROM generate_series(1, 2500)",
        [alice_key],
    )
    .unwrap_or_else(|_| {
        // No generate_series in this SQLite build: a recursive count instead.
        db.execute(
            "WITH RECURSIVE n(value) AS (SELECT 1 UNION ALL SELECT value + 1 FROM n WHERE value < 2500)
             INSERT INTO events (seq, owner_key, event_id, stream_id, envelope, bytes)
             SELECT 100000 + value, ?1, 'left-' || value, 'stream', '{}', 2 FROM n",
            [alice_key],
        )
        .unwrap()
    });
    let report = s.compact_all("2026-12-01T00:00:03.000Z", &AtomicBool::new(false)).unwrap();
    assert!(report.complete);
    assert_eq!(count("SELECT count(*) FROM events"), 1, "the pass deleted what the close left (and compacted bob)");
    assert_eq!(s.pull(bob.owner_id(), &thb, 0, 100, usize::MAX).unwrap().events.len(), 1, "bob compacted as usual");
}
