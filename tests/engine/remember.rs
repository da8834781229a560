//! Things the device must remember: the relay set, purges, failures of its own database, and a
//! re-key that must survive a crash at any step.

use std::path::{Path, PathBuf};

use crate::harness::{phrase, quarantine_by_hand, temp_dir, todo, todo_schema, Device, DeviceSpec, TestRelay, T0};
use simplysync::engine::{RelayState, SyncTrigger};
use simplysync::protocol::Json;

fn on_file(secret: &str, relays: &[&str], path: &Path) -> Device {
    Device::open(spec(secret, relays, path))
}

fn spec<'a>(secret: &'a str, relays: &[&str], path: &Path) -> DeviceSpec<'a> {
    DeviceSpec::on_file(secret, relays, path, T0)
}

fn db_file(tag: &str) -> PathBuf {
    temp_dir(tag).join("db.sqlite")
}

#[tokio::test]
async fn a_relay_that_leaves_the_apps_list_and_comes_back_is_backfilled_with_what_it_missed() {
    let (r1, r2) = (TestRelay::start(), TestRelay::start());
    let secret = phrase();
    let path = db_file("relay-set");
    let a = on_file(&secret, &[&r1.url, &r2.url], &path);
    a.engine.insert("todos", todo("before", "x")).unwrap();
    a.sync().await;
    drop(a);
    // An app update drops r2 from its list; a write made meanwhile reaches r1 only, and the
    // outbox forgets it once r1 acknowledged it.
    let a = on_file(&secret, &[&r1.url], &path);
    a.engine.insert("todos", todo("while-absent", "x")).unwrap();
    a.sync().await;
    assert_eq!(a.count("_sync_outbox"), 0);
    drop(a);
    // r2 comes back: it is new to this device again and gets every current row.
    let a = on_file(&secret, &[&r1.url, &r2.url], &path);
    let r = a.sync().await;
    assert_eq!(r.relays[1].pushed, 2, "{r:?}");
    let fresh = Device::new(&secret, &[&r2.url]);
    fresh.sync().await;
    assert!(fresh.engine.get("todos", "while-absent").unwrap().is_some());
}

#[tokio::test]
async fn relays_added_or_removed_at_run_time_are_remembered_across_restarts() {
    let (r1, r2) = (TestRelay::start(), TestRelay::start());
    let secret = phrase();
    let path = db_file("relay-runtime");
    let a = on_file(&secret, &[&r1.url], &path);
    a.engine.add_relay(&r2.url).unwrap();
    drop(a);
    let a = on_file(&secret, &[&r1.url], &path);
    assert_eq!(a.engine.relay_urls(), [r1.url.clone(), r2.url.clone()]);
    a.engine.remove_relay(&r1.url).unwrap();
    drop(a);
    let a = on_file(&secret, &[&r1.url], &path);
    assert_eq!(a.engine.relay_urls(), std::slice::from_ref(&r2.url), "a relay removed by the user stays removed");
    a.engine.add_relay(&r1.url).unwrap();
    drop(a);
    let a = on_file(&secret, &[&r1.url], &path);
    assert_eq!(a.engine.relay_urls(), [r1.url.clone(), r2.url.clone()]);
    // A tool that passes no list keeps the stored set as it is.
    let conn = simplysync::store::open_path(path.to_str().unwrap()).unwrap();
    drop(a);
    let env = simplysync::engine::Env {
        transport: std::rc::Rc::new(simplysync::native::HttpTransport::new().unwrap()),
        clock: std::rc::Rc::new(simplysync::engine::io::ManualClock::new(T0)),
        entropy: Box::new(simplysync::protocol::entropy::OsEntropy),
    };
    let config = simplysync::engine::EngineConfig::with_stored_relays(secret.clone(), todo_schema(1, &[]));
    let e = simplysync::engine::Engine::open(conn, config, env).unwrap();
    assert_eq!(e.relay_urls(), [r1.url.clone(), r2.url.clone()]);
}

#[tokio::test]
async fn a_purged_row_does_not_come_back_from_an_older_event_pushed_late() {
    let (r1, mut r2) = (TestRelay::start(), TestRelay::start());
    let secret = phrase();
    let a = Device::new(&secret, &[&r1.url, &r2.url]);
    let b = Device::new(&secret, &[&r1.url]);
    a.engine.insert("todos", todo("x", "v1")).unwrap();
    a.sync().await;
    b.sync().await;
    // B edits x while offline; later (in HLC order) A deletes and purges it.
    b.engine.update("todos", "x", Json::object([("title", Json::from("b's older edit"))])).unwrap();
    a.clock.advance(60_000);
    a.engine.delete("todos", "x").unwrap();
    a.engine.purge_deleted().unwrap();
    r2.stop();
    a.sync().await;
    assert_eq!(a.engine.purge_queue_len().unwrap(), 1, "r2 still has to compact");
    // B comes online and pushes its older edit to r1, after r1 compacted the stream.
    b.sync().await;
    let r = a.sync().await;
    assert_eq!(r.relays[0].received, 1, "{r:?}");
    assert!(a.engine.get("todos", "x").unwrap().is_none(), "the purged row stays purged");
    assert!(a.todos().is_empty());
    // Once every relay acknowledged and the retention passed, the record goes.
    r2.restart();
    a.sync().await;
    assert_eq!(a.engine.purge_queue_len().unwrap(), 0);
    assert_eq!(a.count("_sync_purged"), 1, "kept for the retention period");
    a.clock.advance(simplysync::store::purged::RETENTION_MS + 1);
    a.sync().await;
    assert_eq!(a.count("_sync_purged"), 0);
}

#[tokio::test]
async fn a_purge_that_reaches_a_relay_after_another_device_wrote_the_row_again_keeps_the_new_version() {
    let relay = TestRelay::start();
    let secret = phrase();
    let (a, b) = (Device::new(&secret, &[&relay.url]), Device::new(&secret, &[&relay.url]));
    a.engine.insert("todos", todo("x", "first")).unwrap();
    a.sync().await;
    a.engine.delete("todos", "x").unwrap();
    a.sync().await;
    b.sync().await;
    // A purges x, but the compaction does not get through yet.
    a.engine.purge_deleted().unwrap();
    a.net.fail("/v1/streams/compact", 503, Some(1));
    a.sync().await;
    assert_eq!(a.engine.purge_queue_len().unwrap(), 1);
    // B, which saw the deletion, writes x again.
    b.clock.advance(1_000);
    b.engine.insert("todos", todo("x", "written again on b")).unwrap();
    b.sync().await;
    // A's next pass sees the newer version before it compacts: the purge is off.
    a.sync().await;
    assert_eq!(a.engine.purge_queue_len().unwrap(), 0);
    assert_eq!(a.net.sent("POST", "/v1/streams/compact"), 1, "only the failed attempt");
    assert_eq!(a.todos()[0].1.as_str(), Some("written again on b"));
    let c = Device::new(&secret, &[&relay.url]);
    c.sync().await;
    assert_eq!(c.todos()[0].1.as_str(), Some("written again on b"), "the relay kept the new version");
}

/// Makes every save of a pull cursor fail, as a full disk would, through a trigger installed
/// on the database file from outside the engine.
fn break_cursor_saves(path: &Path) {
    rusqlite::Connection::open(path)
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER fail_cursor BEFORE INSERT ON _sync_meta WHEN NEW.key LIKE 'cursor:%'
             BEGIN SELECT RAISE(ABORT, 'database or disk is full (injected)'); END;",
        )
        .unwrap();
}

fn repair_cursor_saves(path: &Path) {
    rusqlite::Connection::open(path).unwrap().execute_batch("DROP TRIGGER fail_cursor").unwrap();
}

#[tokio::test]
async fn a_page_and_its_cursor_commit_together_so_a_failed_save_keeps_neither_and_a_replay_is_safe() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    for i in 0..20 {
        a.engine.insert("todos", todo(&format!("r{i}"), "v1")).unwrap();
    }
    a.sync().await;
    let path = db_file("crash");
    let b = on_file(&secret, &[&relay.url], &path);
    break_cursor_saves(&path);
    let err = b.engine.sync(SyncTrigger::Manual).await.unwrap_err();
    assert_eq!(err.code(), "STORAGE");
    assert_eq!(
        b.todos().len(),
        0,
        "the page rolled back with its cursor: never a cursor ahead of the rows, nor rows without it"
    );
    // The failure of the device's own database shows in the relay's status, with the reason.
    let s = b.status(0);
    let e = s.error.unwrap();
    assert_eq!((s.state, e.code.as_deref()), (RelayState::Error, Some("local_storage")));
    assert!(e.message.contains("disk is full"), "{}", e.message);
    repair_cursor_saves(&path);
    let r = b.sync().await;
    assert_eq!((r.relays[0].received, r.relays[0].applied), (20, 20), "the page again, whole");
    assert_eq!(b.snapshot(), a.snapshot());
    assert_eq!(b.status(0).state, RelayState::Synced);
    // A page pulled again (a cursor lost, as after a restore of an older file) applies nothing twice.
    rusqlite::Connection::open(&path).unwrap().execute("DELETE FROM _sync_meta WHERE key LIKE 'cursor:%'", []).unwrap();
    let r = b.sync().await;
    assert_eq!((r.relays[0].received, r.relays[0].applied), (20, 0), "replayed, applied nothing twice");
    assert_eq!(b.snapshot(), a.snapshot());
}

#[tokio::test]
async fn a_bad_stored_device_id_is_reported_as_corrupt_local_data() {
    let path = db_file("device-id");
    let secret = phrase();
    drop(on_file(&secret, &[], &path));
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute("UPDATE _sync_meta SET value = 'not a device id!' WHERE key = 'device_id'", [])
        .unwrap();
    let err = Device::try_open(spec(&secret, &[], &path)).unwrap_err();
    assert_eq!(err.code(), "STORAGE");
    let msg = err.to_string();
    assert!(msg.contains("device id") && msg.contains("corrupt") && !msg.contains("OPFS"), "{msg}");
}

#[tokio::test]
async fn a_secret_of_another_owner_changes_nothing_in_the_database() {
    let path = db_file("mismatch");
    let a = on_file(&phrase(), &[], &path);
    drop(a);
    let mut other_schema = todo_schema(1, &["notes"]);
    other_schema.tables[0]
        .columns
        .push(simplysync::engine::schema::ColumnDef::new("extra", simplysync::engine::schema::ColumnType::Text));
    let err = Device::try_open(DeviceSpec {
        secret: &phrase(),
        relays: vec![],
        schema: other_schema,
        db_path: Some(path.clone()),
        clock_ms: T0,
    })
    .unwrap_err();
    assert_eq!(err.code(), "OWNER_MISMATCH");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let tables: i64 =
        conn.query_row("SELECT count(*) FROM sqlite_master WHERE name = 'notes'", [], |r| r.get(0)).unwrap();
    assert_eq!(tables, 0, "no table was created for the wrong owner");
}

mod rekey {
    use super::*;

    struct Setup {
        relay: TestRelay,
        old: String,
        new: String,
        path: PathBuf,
        old_owner: String,
        new_owner: String,
    }

    async fn device_with_data(tag: &str) -> (Setup, Device) {
        let relay = TestRelay::start();
        let (old, new) = (phrase(), phrase());
        let path = db_file(tag);
        let d = on_file(&old, &[&relay.url], &path);
        d.engine.insert("todos", todo("t1", "plans")).unwrap();
        let m = d.engine.put_blob(b"a picture", "image/png", None).unwrap();
        d.engine.update("todos", "t1", Json::object([("image", Json::from(m.blob_id.as_str()))])).unwrap();
        d.sync().await;
        let old_owner = d.engine.owner_id();
        let new_owner = simplysync::protocol::Secret::parse(&new).unwrap().identity().owner_id().to_owned();
        (Setup { relay, old, new, path, old_owner, new_owner }, d)
    }

    /// Whether `secret`'s owner is still usable on the relay (a fresh device can pull from it).
    async fn owner_state(s: &Setup, secret: &str) -> RelayState {
        let probe = Device::new(secret, &[&s.relay.url]);
        probe.sync().await;
        probe.status(0).state
    }

    async fn blob_of(d: &Device) -> Vec<u8> {
        let id = d.engine.get("todos", "t1").unwrap().unwrap().get("image").unwrap().as_str().unwrap().to_owned();
        d.engine.get_blob(&id).await.unwrap().1
    }

    #[tokio::test]
    async fn a_re_key_that_cannot_get_every_blob_changes_nothing() {
        let (s, d) = device_with_data("rekey-blob").await;
        // A second device that never opened the blob, offline: the re-key cannot proceed.
        let b = on_file(&s.old, &[&s.relay.url], &db_file("rekey-blob-b"));
        b.sync().await;
        b.net.go_offline();
        let err = b.engine.rekey(&s.new).await.unwrap_err();
        assert_eq!(err.code(), "REKEY_REFUSED");
        assert_eq!(b.engine.owner_id(), s.old_owner);
        assert_eq!(b.engine.pending_rekey().unwrap(), None);
        drop(d);
    }

    #[tokio::test]
    async fn a_crash_after_the_local_switch_is_undone_by_opening_with_the_old_secret() {
        let (s, d) = device_with_data("rekey-undo").await;
        d.net.go_offline();
        d.engine.rekey(&s.new).await.unwrap();
        assert_eq!(d.engine.pending_rekey().unwrap().as_deref(), Some(s.new_owner.as_str()));
        drop(d); // the tab closes before the app stored the new secret
        let d = on_file(&s.old, &[&s.relay.url], &s.path);
        assert_eq!(d.engine.owner_id(), s.old_owner);
        assert_eq!(d.engine.pending_rekey().unwrap(), None);
        assert_eq!(blob_of(&d).await, b"a picture", "blobs are back under the old key");
        d.engine.insert("todos", todo("t2", "after the undo")).unwrap();
        let r = d.sync().await;
        assert!(r.relays[0].error.is_none(), "{r:?}");
        assert_eq!(owner_state(&s, &s.old).await, RelayState::Synced, "the old owner was never closed");
        let fresh = Device::new(&s.old, &[&s.relay.url]);
        fresh.sync().await;
        assert_eq!(fresh.todos().len(), 2);
    }

    #[tokio::test]
    async fn after_the_push_the_old_secret_still_undoes_and_the_abandoned_owner_is_closed() {
        let (s, d) = device_with_data("rekey-pushed").await;
        let r = d.engine.rekey(&s.new).await.unwrap();
        assert!(r.relays[0].error.is_none(), "{r:?}");
        assert_eq!(owner_state(&s, &s.old).await, RelayState::Synced, "not closed before confirmation");
        drop(d);
        let d = on_file(&s.old, &[&s.relay.url], &s.path);
        d.sync().await;
        assert_eq!(d.engine.owner_id(), s.old_owner);
        assert_eq!(owner_state(&s, &s.new).await, RelayState::Closed, "nobody kept the new secret");
        assert_eq!(owner_state(&s, &s.old).await, RelayState::Synced);
    }

    #[tokio::test]
    async fn an_undo_keeps_the_new_owner_open_while_a_blob_there_is_not_held_on_this_device() {
        let (s, d) = device_with_data("rekey-undo-blob").await;
        d.engine.rekey(&s.new).await.unwrap();
        // Another device already runs as the new owner and adds a blob this device never opens.
        let e = Device::new(&s.new, &[&s.relay.url]);
        e.sync().await;
        let m = e.engine.put_blob(b"only on the new owner", "text/plain", None).unwrap();
        e.engine.insert("todos", todo("t3", "with a new blob")).unwrap();
        e.engine.update("todos", "t3", Json::object([("image", Json::from(m.blob_id.as_str()))])).unwrap();
        e.sync().await;
        d.sync().await;
        assert!(d.engine.get("todos", "t3").unwrap().is_some());
        drop(d);
        // The undo cannot re-seal that blob (its bytes are only on the new owner): it must not
        // close the new owner, which would destroy them.
        let d = on_file(&s.old, &[&s.relay.url], &s.path);
        d.sync().await;
        assert_eq!(d.engine.owner_id(), s.old_owner);
        assert_eq!(owner_state(&s, &s.new).await, RelayState::Synced, "the new owner stays open");
        let fresh = Device::new(&s.new, &[&s.relay.url]);
        fresh.sync().await;
        assert_eq!(fresh.engine.get_blob(&m.blob_id).await.unwrap().1, b"only on the new owner", "its bytes survive");
    }

    #[tokio::test]
    async fn opening_with_the_new_secret_confirms_and_closes_the_old_owner() {
        let (s, d) = device_with_data("rekey-confirm-open").await;
        d.engine.rekey(&s.new).await.unwrap();
        drop(d); // crashed after the app stored the new secret, before confirmRekey()
        let d = on_file(&s.new, &[&s.relay.url], &s.path);
        assert_eq!(d.engine.pending_rekey().unwrap(), None);
        d.sync().await;
        assert_eq!(owner_state(&s, &s.old).await, RelayState::Closed);
        let fresh = Device::new(&s.new, &[&s.relay.url]);
        fresh.sync().await;
        assert_eq!(fresh.todos(), d.todos());
        assert_eq!(blob_of(&fresh).await, b"a picture");
        assert_eq!(Device::try_open(spec(&s.old, &[], &s.path)).unwrap_err().code(), "OWNER_MISMATCH");
    }

    #[tokio::test]
    async fn confirm_rekey_closes_the_old_owner_and_a_relay_that_was_down_gets_the_close_later() {
        let (mut s, d) = device_with_data("rekey-confirm").await;
        d.engine.rekey(&s.new).await.unwrap();
        s.relay.stop();
        let r = d.engine.confirm_rekey().await.unwrap();
        assert!(r.relays[0].error.is_some(), "the relay is down");
        assert_eq!(d.engine.confirm_rekey().await.unwrap_err().code(), "NO_PENDING_REKEY");
        drop(d);
        s.relay.restart();
        let d = on_file(&s.new, &[&s.relay.url], &s.path);
        d.sync().await;
        assert_eq!(owner_state(&s, &s.old).await, RelayState::Closed, "the queued close went out");
        let stored =
            d.engine.inspect_query("SELECT value FROM _sync_meta WHERE key LIKE 'pending_close:%'", &[]).unwrap();
        assert!(stored.is_empty());
    }

    #[tokio::test]
    async fn a_refused_close_of_the_old_owner_is_told_and_does_not_hold_up_the_new_owners_pushes() {
        let (s, d) = device_with_data("rekey-close-refused").await;
        d.engine.rekey(&s.new).await.unwrap();
        d.net.fail("/v1/owner/close", 403, None);
        d.engine.confirm_rekey().await.unwrap();
        for i in 0..2 {
            d.engine.insert("todos", todo(&format!("after{i}"), "x")).unwrap();
            d.clock.advance(1);
            let r = d.engine.sync(SyncTrigger::Poll).await.unwrap();
            assert_eq!(r.relays[0].pushed, 1, "pass {i}: the new owner's write goes out: {r:?}");
            assert_eq!(d.status(0).push_error.as_ref().and_then(|e| e.status), Some(403), "the refusal is told");
        }
        d.net.clear();
        d.clock.advance(1);
        d.engine.sync(SyncTrigger::Manual).await.unwrap();
        assert_eq!(owner_state(&s, &s.old).await, RelayState::Closed, "the queued close went out");
    }

    #[tokio::test]
    async fn no_secret_or_token_is_stored_in_plaintext_during_the_hand_over() {
        let (s, d) = device_with_data("rekey-plain").await;
        d.net.go_offline();
        d.engine.rekey(&s.new).await.unwrap();
        d.engine.confirm_rekey().await.unwrap();
        let old_auth = simplysync::protocol::Secret::parse(&s.old).unwrap().identity().relay_auth().to_owned();
        let conn = rusqlite::Connection::open(&s.path).unwrap();
        let meta: Vec<String> = conn
            .prepare("SELECT value FROM _sync_meta")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let all = meta.join("\n");
        assert!(!all.contains(&s.old) && !all.contains(&s.new) && !all.contains(&old_auth), "{all}");
        assert!(all.contains(&s.old_owner), "the close of the old owner is queued");
    }
}

#[tokio::test]
async fn a_re_sent_mutating_call_with_the_same_request_id_takes_effect_once() {
    let relay = TestRelay::start();
    let other = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    let e = &d.engine;
    let m1 = e.once(Some("tab:1"), || e.put_blob(b"picture", "image/png", None)).unwrap();
    let m2 = e.once(Some("tab:1"), || e.put_blob(b"picture", "image/png", None)).unwrap();
    assert_eq!(m1, m2, "the repeat returns the first call's manifest");
    assert_eq!(d.count("blob"), 1, "one blob, not two");
    e.insert("todos", todo("a", "x")).unwrap();
    e.delete("todos", "a").unwrap();
    assert_eq!(e.once(Some("tab:2"), || e.purge_deleted()).unwrap(), 1);
    e.insert("todos", todo("a", "again")).unwrap();
    e.delete("todos", "a").unwrap();
    assert_eq!(e.once(Some("tab:2"), || e.purge_deleted()).unwrap(), 1, "the recorded count");
    assert_eq!(d.todos().len(), 1, "the second purge did not run");
    e.once(Some("tab:3"), || e.add_relay(&other.url)).unwrap();
    e.once(Some("tab:3"), || e.add_relay(&other.url)).unwrap();
    assert_eq!(e.relay_urls().len(), 2);
    // A call that failed is not recorded: it may be re-sent and run.
    assert!(e.once(Some("tab:4"), || e.remove_relay("http://127.0.0.1:1")).is_err());
    e.once(Some("tab:4"), || e.remove_relay(&other.url)).unwrap();
    assert_eq!(e.relay_urls().len(), 1);
    let (first, second) = (phrase(), phrase());
    let r = e
        .once_async(Some("tab:5"), |id| e.rekey_storing(&first, None, id), || e.sync(SyncTrigger::Manual))
        .await
        .unwrap();
    assert!(r.relays[0].error.is_none());
    let owner = e.owner_id();
    e.once_async(Some("tab:5"), |id| e.rekey_storing(&second, None, id), || e.sync(SyncTrigger::Manual)).await.unwrap();
    assert_eq!(e.owner_id(), owner, "a re-sent re-key does not re-key again");
    let confirm = || e.once_async(Some("tab:6"), |id| e.confirm_rekey_request(id), || e.sync(SyncTrigger::Manual));
    confirm().await.unwrap();
    assert!(confirm().await.is_ok(), "a re-sent confirmation is answered, not NO_PENDING_REKEY");
    assert_eq!(e.confirm_rekey().await.unwrap_err().code(), "NO_PENDING_REKEY");
    assert_eq!(e.once(Some(""), || Ok(1)).unwrap_err().code(), "INVALID_QUERY");
}

#[tokio::test]
async fn the_clock_survives_a_purge_and_a_restart_so_a_later_write_still_sorts_after_the_tombstone() {
    let relay = TestRelay::start();
    let secret = phrase();
    let path = db_file("clock");
    let a = on_file(&secret, &[&relay.url], &path);
    let b = Device::new(&secret, &[&relay.url]);
    a.engine.insert("todos", todo("r", "first")).unwrap();
    a.engine.delete("todos", "r").unwrap();
    a.sync().await;
    b.sync().await;
    a.engine.purge_deleted().unwrap();
    a.sync().await;
    drop(a);
    // Same wall time after the restart: only the persisted clock knows how far it got.
    let a = on_file(&secret, &[&relay.url], &path);
    a.engine.insert("todos", todo("r", "again")).unwrap();
    a.sync().await;
    b.sync().await;
    assert_eq!(b.todos()[0].1.as_str(), Some("again"), "the new write sorts after b's tombstone");
    assert!(!b.todos()[0].2);
}

/// The HLC (`updatedAt`) a write returned.
fn hlc_of(row: &Json) -> String {
    row.get("updatedAt").unwrap().as_str().unwrap().to_owned()
}

/// A write made after a restart sorts after `last`, the greatest HLC issued before it.
fn assert_sorts_after(row: &Json, last: &str) {
    let next = hlc_of(row);
    assert!(next.as_str() > last, "{next} must sort after {last}");
}

#[tokio::test]
async fn a_restart_at_the_same_wall_time_resumes_the_clock_after_every_local_write() {
    let path = db_file("resume");
    let secret = phrase();
    let a = on_file(&secret, &[], &path);
    a.engine.insert("todos", todo("x", "one")).unwrap();
    let mut last = String::new();
    for title in ["two", "three", "four"] {
        last = hlc_of(&a.engine.update("todos", "x", Json::object([("title", Json::from(title))])).unwrap());
    }
    drop(a);
    // The wall clock has not moved: only what the database holds tells the clock how far it got.
    let a = on_file(&secret, &[], &path);
    assert_sorts_after(&a.engine.insert("todos", todo("y", "after the restart")).unwrap(), &last);
}

#[tokio::test]
async fn a_restart_resumes_the_clock_after_writes_whose_intents_were_acknowledged_and_whose_table_left_the_schema() {
    let relay = TestRelay::start();
    let path = db_file("resume-pruned");
    let secret = phrase();
    let with_notes = |schema| DeviceSpec { schema, ..spec(&secret, &[&relay.url], &path) };
    let a = Device::open(with_notes(todo_schema(1, &["notes"])));
    let mut last = String::new();
    for body in ["one", "two", "three"] {
        last = hlc_of(
            &a.engine.upsert("notes", Json::object([("id", Json::from("n")), ("body", Json::from(body))])).unwrap(),
        );
    }
    // The pass pushes (the relay acknowledges, the intents are pruned) but its pull fails, so no
    // pulled page saves the clock either.
    a.net.answer(|r| r.url.contains("/v1/events?"), 503, r#"{"error":"injected","message":"no pulls"}"#, None, None);
    a.sync().await;
    assert_eq!(a.count("_sync_outbox"), 0, "the intents were acknowledged and pruned");
    drop(a);
    // The app's next version no longer has `notes`; the wall clock has not moved.
    let a = Device::open(with_notes(todo_schema(2, &[])));
    assert_sorts_after(&a.engine.insert("todos", todo("t", "after the restart")).unwrap(), &last);
}

#[tokio::test]
async fn the_device_id_is_kept_across_restarts_and_stamps_every_event() {
    let relay = TestRelay::start();
    let path = db_file("device");
    let secret = phrase();
    let a = on_file(&secret, &[&relay.url], &path);
    let id = a.engine.device_id().to_owned();
    assert_eq!(id.len(), 22);
    let row = a.engine.insert("todos", todo("x", "y")).unwrap();
    assert!(row.get("updatedAt").unwrap().as_str().unwrap().ends_with(&id));
    a.sync().await;
    drop(a);
    assert_eq!(on_file(&secret, &[&relay.url], &path).engine.device_id(), id);
    let db = rusqlite::Connection::open(&relay.db).unwrap();
    let device: String = db.query_row("SELECT envelope FROM events", [], |r| r.get(0)).unwrap();
    assert!(device.contains(&format!("\"deviceId\":\"{id}\"")), "{device}");
}

#[tokio::test]
async fn a_quarantined_event_that_is_valid_after_all_is_released_by_retry_quarantined() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    a.engine.insert("todos", todo("q", "was quarantined by an older engine")).unwrap();
    a.engine.insert("todos", todo("q2", "also")).unwrap();
    a.sync().await;
    let env: Vec<String> = {
        let db = rusqlite::Connection::open(&relay.db).unwrap();
        let mut st = db.prepare("SELECT envelope FROM events ORDER BY seq").unwrap();
        st.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    };
    // A device whose (older) engine had quarantined these valid events.
    let path = db_file("requarantine");
    let b = on_file(&secret, &[], &path);
    drop(b);
    for (i, e) in env.iter().enumerate() {
        quarantine_by_hand(&path, "r", e, i as i64);
    }
    let b = on_file(&secret, &[], &path);
    assert_eq!(b.engine.quarantined().unwrap().len(), 2);
    assert_eq!(b.engine.retry_quarantined().unwrap(), 2, "both released");
    assert_eq!(b.todos().len(), 2, "and applied");
    assert_eq!(b.count("_sync_seen"), 2, "and recorded as seen: the relay's copies are duplicates");
    assert!(b.engine.quarantined().unwrap().is_empty());
    assert_eq!(b.engine.retry_quarantined().unwrap(), 0);
}

/// Rewrites the closed database's outbox in its first layout (a rowid table ordered by `seq`,
/// `event_id UNIQUE`), as an engine before issue 17's round twenty-three left it.
fn outbox_in_first_layout(path: &Path) {
    rusqlite::Connection::open(path)
        .unwrap()
        .execute_batch(
            "BEGIN;
             CREATE TABLE first_layout (
                 seq INTEGER PRIMARY KEY, event_id TEXT NOT NULL UNIQUE, table_name TEXT NOT NULL,
                 row_id TEXT NOT NULL, envelope_json TEXT, created_at INTEGER NOT NULL, pushed_at INTEGER);
             INSERT INTO first_layout (event_id, table_name, row_id, envelope_json, created_at, pushed_at)
                 SELECT event_id, table_name, row_id, envelope_json, created_at, pushed_at FROM _sync_outbox ORDER BY event_id;
             DROP TABLE _sync_outbox;
             ALTER TABLE first_layout RENAME TO _sync_outbox;
             COMMIT;",
        )
        .unwrap();
}

#[tokio::test]
async fn an_outbox_of_the_first_layout_is_carried_over_and_every_relay_still_gets_what_it_missed() {
    let (r1, mut r2) = (TestRelay::start(), TestRelay::start());
    let secret = phrase();
    let path = db_file("outbox-layout");
    let a = on_file(&secret, &[&r1.url, &r2.url], &path);
    r2.stop();
    a.engine.insert("todos", todo("one", "sealed, r1 acknowledged it")).unwrap();
    a.engine.insert("todos", todo("two", "sealed, r1 acknowledged it")).unwrap();
    a.sync().await;
    a.engine.insert("todos", todo("three", "not sealed yet")).unwrap();
    assert_eq!(a.count("_sync_outbox"), 3);
    assert_eq!(a.count("_sync_acks"), 2);
    drop(a);
    outbox_in_first_layout(&path);
    r2.restart();

    let a = on_file(&secret, &[&r1.url, &r2.url], &path);
    let columns = a.engine.inspect_query("SELECT name FROM pragma_table_info('_sync_outbox')", &[]).unwrap();
    let columns: Vec<&str> = columns.iter().filter_map(|c| c.get("name").and_then(Json::as_str)).collect();
    assert_eq!(
        columns,
        [
            "event_id",
            "table_name",
            "row_id",
            "envelope_json",
            "created_at",
            "pushed_at",
            "request_id",
            "request_result"
        ]
    );
    assert_eq!(a.count("_sync_outbox"), 3, "every intent and event was carried over");
    let triggers = a.engine.inspect_query("SELECT name FROM sqlite_master WHERE type = 'trigger'", &[]).unwrap();
    assert_eq!(triggers, [Json::object([("name", Json::from("_sync_outbox_keeps_requests"))])], "records move out");
    let r = a.sync().await;
    assert_eq!((r.relays[0].pushed, r.relays[1].pushed), (1, 3), "{r:?}");
    assert_eq!(a.count("_sync_outbox"), 0);
    let fresh = Device::new(&secret, &[&r2.url]);
    fresh.sync().await;
    let ids: Vec<String> = fresh.todos().into_iter().map(|t| t.0).collect();
    assert_eq!(ids, ["one", "three", "two"]);
}
