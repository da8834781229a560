//! Purge queue, re-key and blobs against the real relay.

use crate::harness::{phrase, temp_dir, todo, todo_schema, Device, DeviceSpec, TestRelay, T0};
use simplysync::engine::RelayState;
use simplysync::protocol::Json;

fn events_on(relay: &TestRelay, d: &Device) -> u64 {
    relay.events_of(&d.engine.owner_id())
}

#[tokio::test]
async fn purging_deleted_rows_drops_them_locally_and_on_the_relay() {
    let relay = TestRelay::start();
    let a = Device::new(&phrase(), &[&relay.url]);
    a.engine.insert("todos", todo("keep", "k")).unwrap();
    a.engine.insert("todos", todo("gone", "g")).unwrap();
    a.sync().await;
    a.engine.delete("todos", "gone").unwrap();
    a.sync().await;
    assert_eq!(events_on(&relay, &a), 3, "keep, gone, and gone's tombstone");
    assert_eq!(a.engine.purge_deleted().unwrap(), 1);
    assert_eq!(a.todos().len(), 1, "hard-deleted locally");
    assert_eq!(a.engine.purge_queue_len().unwrap(), 1);
    a.sync().await;
    assert_eq!(a.engine.purge_queue_len().unwrap(), 0);
    assert_eq!(events_on(&relay, &a), 1, "both events of the purged stream are gone, tombstone included");
}

#[tokio::test]
async fn the_purge_queue_survives_a_restart_and_a_relay_that_was_down() {
    let mut relay = TestRelay::start();
    let secret = phrase();
    let path = temp_dir("purge").join("db.sqlite");
    let url = relay.url.clone();
    let spec = |p: &std::path::Path| DeviceSpec {
        secret: &secret,
        relays: vec![url.clone()],
        schema: todo_schema(1, &[]),
        db_path: Some(p.to_owned()),
        clock_ms: T0,
    };
    let a = Device::open(spec(&path));
    for i in 0..3 {
        a.engine.insert("todos", todo(&format!("r{i}"), "x")).unwrap();
    }
    a.sync().await;
    relay.stop();
    a.engine.purge_rows("todos", &["r0".into(), "r1".into()]).unwrap();
    let r = a.sync().await;
    assert!(r.relays[0].error.is_some(), "the relay is down");
    assert_eq!(a.engine.purge_queue_len().unwrap(), 2);
    drop(a);
    relay.restart();
    let a = Device::open(spec(&path));
    assert_eq!(a.engine.purge_queue_len().unwrap(), 2, "the queue is durable");
    a.sync().await;
    assert_eq!(a.engine.purge_queue_len().unwrap(), 0);
    assert_eq!(events_on(&relay, &a), 1);
}

#[tokio::test]
async fn a_purged_row_with_an_unpushed_event_is_not_resurrected_elsewhere() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    a.engine.insert("todos", todo("x", "never pushed")).unwrap();
    a.engine.purge_rows("todos", &["x".into()]).unwrap();
    a.sync().await;
    let b = Device::new(&secret, &[&relay.url]);
    b.sync().await;
    assert!(b.todos().is_empty());
}

#[tokio::test]
async fn rekey_moves_everything_to_the_new_owner_and_the_old_owner_gets_410() {
    let relay = TestRelay::start();
    let old_secret = phrase();
    let a = Device::new(&old_secret, &[&relay.url]);
    let attacker = Device::new(&old_secret, &[&relay.url]);
    a.engine.insert("todos", todo("t1", "secret plans")).unwrap();
    let manifest = a.engine.put_blob(b"a picture", "image/png", None).unwrap();
    a.engine.update("todos", "t1", Json::object([("image", Json::from(manifest.blob_id.as_str()))])).unwrap();
    a.sync().await;
    attacker.sync().await;
    let old_owner = a.engine.owner_id();

    let new_secret = phrase();
    let report = a.engine.rekey(&new_secret).await.unwrap();
    assert!(report.relays[0].error.is_none(), "{report:?}");
    assert_ne!(a.engine.owner_id(), old_owner);
    assert_eq!(a.engine.recovery_secret(), new_secret);
    // The app stored the new secret: it confirms, and the old owner is closed.
    let report = a.engine.confirm_rekey().await.unwrap();
    assert!(report.relays[0].error.is_none(), "{report:?}");

    // The old phrase is dead on the relay: the holder of the leaked phrase gets 410.
    attacker.engine.insert("todos", todo("evil", "x")).unwrap();
    attacker.sync().await;
    assert_eq!(attacker.engine.relay_statuses_local().unwrap()[0].state, RelayState::Closed);

    // A new device with the new phrase restores everything, blob included.
    let b = Device::new(&new_secret, &[&relay.url]);
    b.sync().await;
    assert_eq!(b.todos(), a.todos());
    let (m, bytes) = b.engine.get_blob(&manifest.blob_id).await.unwrap();
    assert_eq!(bytes, b"a picture");
    assert_eq!(m.owner_id, b.engine.owner_id(), "re-sealed under the new owner, same blob id");
}

#[tokio::test]
async fn rekey_refuses_the_same_owner_and_an_invalid_secret() {
    let secret = phrase();
    let a = Device::new(&secret, &[]);
    assert_eq!(a.engine.rekey(&secret).await.unwrap_err().code(), "REKEY_REFUSED");
    assert_eq!(a.engine.rekey("not a phrase").await.unwrap_err().code(), "SECRET_WORD_COUNT");
}

#[tokio::test]
async fn a_blob_uploads_before_its_manifest_and_another_device_fetches_only_the_chunks_it_opens() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let m = a.engine.put_blob(&data, "application/octet-stream", Some(16 * 1024)).unwrap();
    assert_eq!(m.chunks.len(), 7);
    a.sync().await;
    let log = a.net.log.borrow().clone();
    let first_event_push = log.iter().position(|(m, u, _)| m == "POST" && u.ends_with("/v1/events")).unwrap();
    let last_chunk_put = log.iter().rposition(|(m, u, _)| m == "PUT" && u.contains("/v1/blobs/")).unwrap();
    assert!(last_chunk_put < first_event_push, "chunks reach the relay before the manifest does");

    let b = Device::new(&secret, &[&relay.url]);
    b.sync().await;
    let chunk = b.engine.get_blob_chunk(&m.blob_id, 3).await.unwrap();
    assert_eq!(chunk, data[3 * 16384..4 * 16384].to_vec());
    assert_eq!(b.net.log.borrow().iter().filter(|(m, u, _)| m == "GET" && u.contains("/v1/blobs/")).count(), 1);
    let (_, whole) = b.engine.get_blob(&m.blob_id).await.unwrap();
    assert_eq!(whole, data);
    let gets = b.net.log.borrow().iter().filter(|(m, u, _)| m == "GET" && u.contains("/v1/blobs/")).count();
    assert_eq!(gets, 7, "chunk 3 came from the local cache the second time");
    // Offline, the cached blob still opens.
    b.net.go_offline();
    assert_eq!(b.engine.get_blob(&m.blob_id).await.unwrap().1, data);
}

#[tokio::test]
async fn put_blob_works_offline_and_uploads_on_a_later_sync() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    a.net.go_offline();
    let m = a.engine.put_blob(b"offline bytes", "text/plain", None).unwrap();
    a.sync().await;
    a.net.clear();
    a.sync().await;
    let b = Device::new(&secret, &[&relay.url]);
    b.sync().await;
    assert_eq!(b.engine.get_blob(&m.blob_id).await.unwrap().1, b"offline bytes");
}

#[tokio::test]
async fn a_missing_blob_or_chunk_is_a_clear_error() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    assert_eq!(a.engine.get_blob("nope").await.unwrap_err().code(), "BLOB_NOT_FOUND");
    let m = a.engine.put_blob(b"x", "text/plain", None).unwrap();
    a.sync().await;
    let b = Device::new(&secret, &[&relay.url]);
    b.sync().await;
    b.net.go_offline();
    let err = b.engine.get_blob_chunk(&m.blob_id, 0).await.unwrap_err();
    assert_eq!(err.code(), "BLOB_UNAVAILABLE", "{err}");
    assert_eq!(b.engine.get_blob_chunk(&m.blob_id, 9).await.unwrap_err().code(), "BLOB_INVALID");
}
