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
