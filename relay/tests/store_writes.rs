//! The SQLite store's write path: WAL checkpoints happen off the push path.

mod common;

use std::time::{Duration, Instant};

use common::{Owner, TempDir};
use simplysync_protocol::identity::relay_token_hash;
use simplysync_relay::store::sqlite::{Quotas, SqliteStore, StoreOptions};
use simplysync_relay::store::{MayRegister, NewEvent, RelayStore};

const NOW: &str = "2026-12-01T00:00:00.000Z";

fn store_with(dir: &TempDir, quotas: Quotas) -> SqliteStore {
    SqliteStore::open(&dir.0.join("relay.sqlite"), StoreOptions::new(quotas), NOW).unwrap()
}

fn store(dir: &TempDir) -> SqliteStore {
    store_with(dir, Quotas { max_owner_bytes: u64::MAX / 4, max_total_bytes: u64::MAX / 4 })
}

fn rows(owner: &Owner, n: usize) -> Vec<NewEvent> {
    (0..n)
        .map(|i| {
            let e = owner.event_sized(&format!("row-{i}"), i as u64 + 1, 1000);
            NewEvent {
                event_id: e.event_id.clone(),
                stream_id: e.stream_id.clone(),
                json: serde_json::to_string(&e).unwrap(),
            }
        })
        .collect()
}

fn file_len(dir: &TempDir) -> u64 {
    std::fs::metadata(dir.0.join("relay.sqlite")).map(|m| m.len()).unwrap_or(0)
}

#[test]
fn pushed_events_reach_the_database_file_by_a_background_checkpoint() {
    let dir = TempDir::new("checkpointer");
    let s = store(&dir);
    let alice = Owner::new();
    let before = file_len(&dir);
    // 300 events of ~1.5 KB (~60 pages of WAL): far below the writer's own checkpoint threshold, so
    // only the background checkpointer copies them into the main file.
    let events = rows(&alice, 300);
    let bytes: u64 = events.iter().map(|e| e.json.len() as u64).sum();
    let out = s.push(alice.owner_id(), &relay_token_hash(alice.token()), events, NOW, MayRegister::Yes, None).unwrap();
    assert_eq!(out.accepted, 300);

    let deadline = Instant::now() + Duration::from_secs(10);
    while file_len(&dir) < before + bytes && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        file_len(&dir) >= before + bytes,
        "the database file is {} bytes 10 s after a push of {bytes} bytes (it was {before})",
        file_len(&dir)
    );
}
