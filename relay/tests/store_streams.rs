//! The stream index, kept in batches: pushes append, a push that leaves 8192 unindexed events
//! has the store's indexer thread index them between pushes (a push that finds four batches
//! unindexed indexes them itself), and every answer that depends on streams is the same on
//! either side of that.

mod common;

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use common::{Owner, TempDir};
use simplysync_protocol::identity::relay_token_hash;
use simplysync_relay::store::sqlite::{Quotas, SqliteStore, StoreOptions};
use simplysync_relay::store::{MayRegister, NewEvent, RelayStore};

const NOW: &str = "2026-12-03T00:00:00.000Z";
const INDEX_BATCH: i64 = 8192;

fn store(dir: &TempDir) -> SqliteStore {
    let quotas = Quotas { max_owner_bytes: u64::MAX / 4, max_total_bytes: u64::MAX / 4 };
    SqliteStore::open(&dir.0.join("relay.sqlite"), StoreOptions::new(quotas), NOW).unwrap()
}

/// Events of `rows` (as `row-<n>`), one each at `version` (event ids unique, ordered by version).
fn events(owner: &Owner, rows: impl Iterator<Item = usize>, version: u64) -> Vec<NewEvent> {
    rows.map(|i| {
        let e = owner.event(&format!("row-{i}"), version * 100_000 + i as u64);
        NewEvent {
            event_id: e.event_id.clone(),
            stream_id: e.stream_id.clone(),
            json: serde_json::to_string(&e).unwrap(),
        }
    })
    .collect()
}

fn push(s: &SqliteStore, owner: &Owner, batch: &[NewEvent]) {
    let th = relay_token_hash(owner.token());
    for chunk in batch.chunks(1000) {
        s.push(owner.owner_id(), &th, chunk.to_vec(), NOW, MayRegister::Yes, None).unwrap();
    }
}

fn streams_in_account(s: &SqliteStore, owner: &Owner) -> u64 {
    s.account(owner.owner_id(), &relay_token_hash(owner.token()), u64::MAX).unwrap().streams
}

/// What the file holds: the owner's distinct streams, and over all owners the events with a
/// stream, the index's entries, and the seq the index has reached.
fn truth(dir: &TempDir, owner: &Owner) -> (u64, i64, i64, i64) {
    let c = rusqlite::Connection::open(dir.0.join("relay.sqlite")).unwrap();
    let all = |sql: &str| c.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
    let streams: i64 = c
        .query_row(
            "SELECT count(DISTINCT stream_id) FROM events JOIN owners USING (owner_key) WHERE owner_id = ?1",
            [owner.owner_id()],
            |r| r.get(0),
        )
        .unwrap();
    (
        streams as u64,
        all("SELECT count(*) FROM events WHERE stream_id IS NOT NULL"),
        all("SELECT count(*) FROM event_streams"),
        all("SELECT coalesce((SELECT value FROM relay_meta WHERE key = 'streams_indexed_seq'), 0)"),
    )
}

/// Waits (up to 60 s) for the indexer thread to bring the index up to `seq`.
fn indexed_up_to(dir: &TempDir, owner: &Owner, seq: i64) -> (u64, i64, i64, i64) {
    let start = Instant::now();
    loop {
        let t = truth(dir, owner);
        if t.3 >= seq || start.elapsed() > Duration::from_secs(60) {
            assert_eq!(t.3, seq, "the index reached seq {} of {seq}", t.3);
            return t;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn stream_counts_are_exact_before_and_after_a_push_indexes_the_tail() {
    let dir = TempDir::new("streams-count");
    let s = store(&dir);
    let (alice, bob) = (Owner::new(), Owner::new());
    // Alice: 6000 rows, then 3000 of them again (new versions, no new streams); Bob: 3 rows
    // in the tail that Alice's push indexes.
    push(&s, &alice, &events(&alice, 0..6000, 1));
    push(&s, &bob, &events(&bob, 0..3, 1));
    assert_eq!(streams_in_account(&s, &alice), 6000, "the tail's streams are counted before it is indexed");
    assert_eq!(streams_in_account(&s, &bob), 3);
    assert_eq!(truth(&dir, &alice).3, 0, "6003 events: below the batch, nothing indexed yet");

    push(&s, &alice, &events(&alice, 3000..6000, 2));
    let (alice_streams, with_stream, indexed, indexed_seq) = indexed_up_to(&dir, &alice, 9003);
    assert_eq!(indexed_seq, 9003, "the push past {INDEX_BATCH} unindexed events had all of them indexed");
    assert_eq!((with_stream, indexed), (9003, 9003));
    assert_eq!(streams_in_account(&s, &alice), alice_streams);
    assert_eq!(streams_in_account(&s, &alice), 6000, "new versions of indexed streams start none");
    assert_eq!(streams_in_account(&s, &bob), 3, "the batch credited every owner in it");

    // After the batch: a new stream and a known one, in the tail again.
    push(&s, &alice, &[events(&alice, 6000..6001, 1), events(&alice, 0..1, 2)].concat());
    assert_eq!(streams_in_account(&s, &alice), 6001);
}

#[test]
fn compaction_and_stream_compaction_reach_events_on_both_sides_of_the_index() {
    let dir = TempDir::new("streams-compact");
    let s = store(&dir);
    let alice = Owner::new();
    let th = relay_token_hash(alice.token());
    // 8200 first versions (indexed by the push that passes the batch), then second versions of
    // rows 0..10 and a third of row 0, all in the tail.
    push(&s, &alice, &events(&alice, 0..8200, 1));
    indexed_up_to(&dir, &alice, 8200);
    push(&s, &alice, &[events(&alice, 0..10, 2), events(&alice, 0..1, 3)].concat());
    assert_eq!(truth(&dir, &alice).3, 8200, "the newer versions are in the tail");

    let report = s.compact_all(NOW, &AtomicBool::new(false)).unwrap();
    assert_eq!(report.deleted_events, 11, "each older version goes, though its newer one was unindexed");
    let (streams, with_stream, indexed, indexed_seq) = truth(&dir, &alice);
    assert_eq!((streams, with_stream, indexed, indexed_seq), (8200, 8200, 8200, 8211));

    // A stream whose only version is in the tail, and one with versions on both sides.
    push(&s, &alice, &[events(&alice, 9000..9001, 1), events(&alice, 5..6, 4)].concat());
    let stream = |row: usize| events(&alice, row..row + 1, 1)[0].stream_id.clone().unwrap();
    let out = s.compact_streams(alice.owner_id(), &th, &[stream(9000), stream(5)], None).unwrap();
    assert_eq!(out.deleted_events, 3, "{out:?}");
    assert_eq!(streams_in_account(&s, &alice), 8199);
    let (streams, with_stream, indexed, _) = truth(&dir, &alice);
    assert_eq!((streams, with_stream, indexed), (8199, 8199, 8199), "no index entry outlives its event");
}

#[test]
fn closing_an_owner_drops_its_index_entries_and_its_tail() {
    let dir = TempDir::new("streams-close");
    let s = store(&dir);
    let (alice, bob) = (Owner::new(), Owner::new());
    push(&s, &alice, &events(&alice, 0..8200, 1));
    indexed_up_to(&dir, &alice, 8200);
    push(&s, &alice, &events(&alice, 8200..8210, 1));
    push(&s, &bob, &events(&bob, 0..2, 1));
    s.close_owner(alice.owner_id(), &relay_token_hash(alice.token()), NOW, None).unwrap();
    let c = rusqlite::Connection::open(dir.0.join("relay.sqlite")).unwrap();
    let entries: i64 = c.query_row("SELECT count(*) FROM event_streams", [], |r| r.get(0)).unwrap();
    assert_eq!(entries, 0, "Bob's two events are still in the tail");
    drop(c);
    // Bob's push past the batch indexes only what is left: his own events.
    push(&s, &bob, &events(&bob, 2..8200, 1));
    let (_, with_stream, indexed, _) = indexed_up_to(&dir, &bob, 16410);
    assert_eq!((with_stream, indexed), (8200, 8200));
    assert_eq!(streams_in_account(&s, &bob), 8200);
}

#[test]
fn a_push_that_finds_four_batches_unindexed_indexes_them_itself() {
    let dir = TempDir::new("streams-safety-net");
    let s = store(&dir);
    let alice = Owner::new();
    let th = relay_token_hash(alice.token());
    let below = events(&alice, 0..4 * INDEX_BATCH as usize - 1, 1);
    s.push(alice.owner_id(), &th, below, NOW, MayRegister::Yes, None).unwrap();
    indexed_up_to(&dir, &alice, 4 * INDEX_BATCH - 1);

    let at = events(&alice, 0..4 * INDEX_BATCH as usize, 2);
    s.push(alice.owner_id(), &th, at, NOW, MayRegister::Yes, None).unwrap();
    let (streams, with_stream, indexed, indexed_seq) = truth(&dir, &alice);
    assert_eq!(indexed_seq, 8 * INDEX_BATCH - 1, "indexed in the push's own transaction, before it returned");
    assert_eq!((streams, with_stream, indexed), (4 * INDEX_BATCH as u64, 8 * INDEX_BATCH - 1, 8 * INDEX_BATCH - 1));
    assert_eq!(streams_in_account(&s, &alice), 4 * INDEX_BATCH as u64);
}
