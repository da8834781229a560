//! Data that can never be delivered does not block the rest: rows and chunks too large for any
//! relay are refused at write time; an item one relay refuses on its own is set aside for that
//! relay; an owner over quota can still pull and purge its way back under it.

use crate::harness::{phrase, temp_dir, todo, Device, DeviceSpec, TestRelay, T0};
use simplysync::engine::io::HttpRequest;
use simplysync::engine::{EngineOptions, RelayState, SyncTrigger, DEFAULT_MAX_EVENT_BYTES};
use simplysync::protocol::Json;

fn todo_with_title_len(id: &str, len: usize) -> Json {
    todo(id, &"x".repeat(len))
}

/// The largest title of a row with a 3-character id that still fits the default limit, found
/// by asking the engine.
fn largest_fitting_title(d: &Device) -> usize {
    let (mut lo, mut hi) = (0usize, DEFAULT_MAX_EVENT_BYTES);
    while lo + 1 < hi {
        let mid = (lo + hi) / 2;
        let row = todo_with_title_len("p01", mid);
        match d.engine.transaction(&[simplysync::engine::Op::Upsert { table: "todos".into(), row }]) {
            Ok(_) => lo = mid,
            Err(e) => {
                assert_eq!(e.code(), "ROW_TOO_LARGE", "{e}");
                hi = mid;
            }
        }
    }
    d.engine.purge_rows("todos", &["p01".into()]).unwrap();
    lo
}

#[tokio::test]
async fn a_row_too_large_for_the_relays_is_refused_at_write_time_and_the_largest_allowed_one_is_stored() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    let fits = largest_fitting_title(&d);
    assert!(fits > 190_000 && fits < DEFAULT_MAX_EVENT_BYTES, "{fits}");

    let Err(err) = d.engine.insert("todos", todo_with_title_len("big", fits + 1)) else {
        panic!("a row one byte over the limit was accepted")
    };
    assert_eq!(err.code(), "ROW_TOO_LARGE");
    let msg = err.to_string();
    assert!(msg.contains("todos") && msg.contains("\"big\"") && msg.contains("262144"), "{msg}");
    assert!(d.engine.get("todos", "big").unwrap().is_none(), "nothing was written");
    assert_eq!(d.count("_sync_outbox"), 0, "no intent either");

    // The largest row the engine accepts is one the real relay (default MAX_EVENT_BYTES) stores.
    assert!(d.engine.insert("todos", todo_with_title_len("edg", fits)).is_ok());
    let r = d.sync().await;
    assert_eq!((r.relays[0].pushed, r.relays[0].set_aside), (1, 0), "{r:?}");
    assert!(r.relays[0].error.is_none(), "{r:?}");
}

#[tokio::test]
async fn max_event_bytes_and_max_blob_bytes_are_configurable_and_checked() {
    let options = EngineOptions { max_event_bytes: 4096, max_blob_bytes: 64 * 1024, ..EngineOptions::default() };
    let d = Device::with_options(&phrase(), &[], options);
    d.engine.insert("todos", todo_with_title_len("small", 2000)).unwrap();
    assert_eq!(d.engine.insert("todos", todo_with_title_len("big", 4000)).unwrap_err().code(), "ROW_TOO_LARGE");
    // A stored chunk is chunkSize + 28 bytes.
    assert_eq!(d.engine.options().max_chunk_size(), 64 * 1024 - 28);
    d.engine.put_blob(b"fits", "text/plain", Some(64 * 1024 - 28)).unwrap();
    let err = d.engine.put_blob(b"x", "text/plain", Some(64 * 1024 - 27)).unwrap_err();
    assert_eq!(err.code(), "CHUNK_TOO_LARGE");
    assert!(err.to_string().contains("65508"), "{err}");
    // The default chunk size (256 KiB) does not fit a 64 KiB limit: refused, not uploaded later.
    assert_eq!(d.engine.put_blob(b"x", "text/plain", None).unwrap_err().code(), "CHUNK_TOO_LARGE");
    let bad = EngineOptions { max_event_bytes: 10, ..EngineOptions::default() };
    let err = crate::harness::Device::try_open_with(
        crate::harness::DeviceSpec {
            secret: &phrase(),
            relays: vec![],
            schema: crate::harness::todo_schema(1, &[]),
            db_path: None,
            clock_ms: crate::harness::T0,
        },
        bad,
    )
    .unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT");
}

fn push_containing(event_id: String) -> impl Fn(&HttpRequest) -> bool {
    move |r: &HttpRequest| {
        r.url.ends_with("/v1/events")
            && r.body.as_ref().is_some_and(|b| String::from_utf8_lossy(b).contains(&format!("\"{event_id}\"")))
    }
}

#[tokio::test]
async fn an_event_one_relay_refuses_on_its_own_is_set_aside_for_that_relay_and_the_rest_flows() {
    let small = TestRelay::start();
    let big = TestRelay::start();
    let secret = phrase();
    // Written while the app said relays take 256 KiB; the app now says 4 KiB (its small relay).
    let path = temp_dir("set-aside").join("db.sqlite");
    let spec = || DeviceSpec::on_file(&secret, &[&small.url, &big.url], &path, T0);
    let d = Device::open(spec());
    let refused = d.engine.insert("todos", todo("huge", &"x".repeat(10_000))).unwrap();
    let refused_id = refused.get("updatedAt").unwrap().as_str().unwrap().to_owned();
    drop(d);
    let options = EngineOptions { max_event_bytes: 4096, ..EngineOptions::default() };
    let d = Device::try_open_with(spec(), options).unwrap();
    for i in 0..5 {
        d.engine.insert("todos", todo(&format!("r{i}"), "fine")).unwrap();
    }
    d.engine.purge_rows("todos", &["r4".into()]).unwrap();
    // The small relay answers 413 to any push holding that event (a relay with smaller limits).
    let small_url = small.url.clone();
    let matches = push_containing(refused_id.clone());
    d.net.answer(
        move |r| r.url.starts_with(&small_url) && matches(r),
        413,
        r#"{"error":"payload_too_large","message":"events[0] is larger than MAX_EVENT_BYTES"}"#,
        None,
        None,
    );
    let r = d.sync().await;
    assert_eq!((r.relays[0].pushed, r.relays[0].set_aside), (4, 1), "{r:?}");
    assert!(r.relays[0].error.is_none(), "a set-aside item is not a failed pass: {r:?}");
    assert_eq!(r.relays[1].pushed, 5, "the other relay gets everything");
    let s = d.status(0);
    assert_eq!((s.set_aside.events, s.set_aside.chunks, s.pending), (1, 0, 0), "{s:?}");
    assert!(s.set_aside.reason.as_deref().unwrap().contains(&refused_id), "{s:?}");
    assert!(!small.has_event(&d.engine.owner_id(), &refused_id));
    assert!(big.has_event(&d.engine.owner_id(), &refused_id));
    // Nothing is deleted: the event stays in the outbox for the small relay.
    assert_eq!(d.count("_sync_outbox"), 1);
    assert_eq!(d.engine.purge_queue_len().unwrap(), 0, "the purge went out to both relays");

    // Another device writes; the pull from the small relay still works.
    let other = Device::new(&secret, &[&small.url]);
    other.engine.insert("todos", todo("o", "from another device")).unwrap();
    other.sync().await;
    d.sync().await;
    assert!(d.engine.get("todos", "o").unwrap().is_some());

    // A purge frees room: what was set aside is tried again (and set aside again: too large).
    d.engine.delete("todos", "r0").unwrap();
    d.engine.purge_deleted().unwrap();
    assert_eq!(d.status(0).set_aside.events, 0);
    let r = d.sync().await;
    assert_eq!(r.relays[0].set_aside, 1, "{r:?}");

    // Once the relay takes it (limits raised), a retry delivers it and the outbox empties.
    d.net.clear();
    assert_eq!(d.engine.retry_set_aside().unwrap(), 1);
    let r = d.sync().await;
    assert_eq!(r.relays[0].pushed, 1);
    assert!(small.has_event(&d.engine.owner_id(), &refused_id));
    assert_eq!(d.count("_sync_outbox"), 0);
    assert_eq!(d.status(0).set_aside.events, 0);
}

#[tokio::test]
async fn a_blob_chunk_one_relay_refuses_is_set_aside_with_its_manifest_until_it_goes() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    let m = d.engine.put_blob(&[7u8; 40_000], "application/octet-stream", Some(16_384)).unwrap();
    let bad_hash = m.chunks[1].hash.clone();
    d.net.answer(
        move |r| r.url.contains(&format!("/v1/blobs/{bad_hash}")) && r.method == simplysync::engine::io::Method::Put,
        413,
        r#"{"error":"payload_too_large","message":"chunk over MAX_BLOB_BYTES"}"#,
        None,
        None,
    );
    let r = d.sync().await;
    assert_eq!(r.relays[0].set_aside, 2, "the chunk and its manifest: {r:?}");
    assert_eq!(r.relays[0].pushed, 0, "the manifest is held back: a reader there could not read the blob");
    assert_eq!((d.status(0).set_aside.chunks, d.status(0).set_aside.events), (1, 1));
    assert_eq!(relay.events_of(&d.engine.owner_id()), 0);
    assert_eq!(d.count("_sync_blob_chunks"), 3, "the chunk is kept locally");
    assert_eq!(d.net.sent("PUT", "/v1/blobs/"), 3);
    d.sync().await;
    assert_eq!(d.net.sent("PUT", "/v1/blobs/"), 3, "a set-aside chunk is not offered again in later passes");
    // The relay takes it once retried (its limit raised): the chunk, then the manifest.
    d.net.clear();
    d.engine.retry_set_aside().unwrap();
    let r = d.sync().await;
    assert_eq!(r.relays[0].pushed, 1, "{r:?}");
    let other = Device::new(&d.engine.recovery_secret(), &[&relay.url]);
    other.sync().await;
    let (_, bytes) = other.engine.get_blob(&m.blob_id).await.unwrap();
    assert_eq!(bytes, vec![7u8; 40_000]);
}

#[tokio::test]
async fn a_blob_chunk_that_fails_verification_on_one_relay_is_read_from_the_next() {
    let (first, second) = (TestRelay::start(), TestRelay::start());
    let secret = phrase();
    let a = Device::new(&secret, &[&first.url, &second.url]);
    let m = a.engine.put_blob(&[9u8; 30_000], "application/octet-stream", Some(16_384)).unwrap();
    a.sync().await;
    let b = Device::new(&secret, &[&first.url, &second.url]);
    b.sync().await;
    // The first relay serves altered bytes for every chunk.
    let first_url = first.url.clone();
    *b.net.rewrite.borrow_mut() = Some(Box::new(move |req, mut resp: simplysync::engine::io::HttpResponse| {
        if req.url.starts_with(&first_url) && req.url.contains("/v1/blobs/") && resp.status == 200 {
            if let Some(x) = resp.body.last_mut() {
                *x ^= 1;
            }
        }
        resp
    }));
    let (_, bytes) = b.engine.get_blob(&m.blob_id).await.unwrap();
    assert_eq!(bytes, vec![9u8; 30_000]);
    // Where no relay has good bytes, the reader gets BLOB_UNAVAILABLE naming why.
    let c = Device::new(&secret, &[&first.url]);
    c.sync().await;
    let first_url = first.url.clone();
    *c.net.rewrite.borrow_mut() = Some(Box::new(move |req, mut resp: simplysync::engine::io::HttpResponse| {
        if req.url.starts_with(&first_url) && req.url.contains("/v1/blobs/") && resp.status == 200 {
            if let Some(x) = resp.body.last_mut() {
                *x ^= 1;
            }
        }
        resp
    }));
    let e = c.engine.get_blob(&m.blob_id).await.unwrap_err();
    assert_eq!(e.code(), "BLOB_UNAVAILABLE");
    assert!(e.to_string().contains("failed verification"), "{e}");
}

#[tokio::test]
async fn an_owner_over_quota_still_pulls_and_purges_first_so_it_can_get_back_under_the_quota() {
    let relay = TestRelay::start_with(&[("MAX_OWNER_BYTES", "6000")]);
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    let b = Device::new(&secret, &[&relay.url]);
    for i in 0..6 {
        a.engine.insert("todos", todo(&format!("a{i}"), &"x".repeat(200))).unwrap();
    }
    a.sync().await;
    // B fills the rest of the quota while A is away.
    b.sync().await;
    b.engine.insert("todos", todo("from-b", "late")).unwrap();
    b.sync().await;
    for i in 0..6 {
        a.engine.update("todos", &format!("a{i}"), Json::object([("title", Json::from("y".repeat(200)))])).unwrap();
    }
    let r = a.engine.sync(SyncTrigger::Poll).await.unwrap();
    let err = r.relays[0].error.clone().expect("over quota");
    assert_eq!((err.status, err.code.as_deref()), (Some(413), Some("quota_exceeded")), "{r:?}");
    assert!(a.engine.get("todos", "from-b").unwrap().is_some(), "the pass still pulled");
    let s = a.status(0);
    assert_eq!((s.state, s.backoff_until), (RelayState::Error, None), "polls keep pulling: {s:?}");

    // The user deletes and purges: the next pass sends the purge before any push.
    a.net.log.borrow_mut().clear();
    for i in 0..6 {
        a.engine.delete("todos", &format!("a{i}")).unwrap();
    }
    a.engine.purge_deleted().unwrap();
    let r = a.engine.sync(SyncTrigger::Write).await.unwrap();
    assert!(r.relays[0].error.is_none(), "{r:?}");
    let log = a.net.log.borrow().clone();
    let compact = log.iter().position(|(_, u, _)| u.ends_with("/v1/streams/compact")).expect("a compact");
    assert!(log.iter().position(|(m, u, _)| m == "POST" && u.ends_with("/v1/events")).is_none_or(|p| p > compact));
    assert_eq!(a.status(0).state, RelayState::Synced);
    assert_eq!(relay.events_of(&a.engine.owner_id()), 1, "only b's row is left");
}

#[tokio::test]
async fn compact_requests_are_halved_for_a_relay_with_a_smaller_streams_per_compact_limit() {
    let relay = TestRelay::start_with(&[("MAX_STREAMS_PER_COMPACT", "3")]);
    let d = Device::new(&phrase(), &[&relay.url]);
    for i in 0..10 {
        d.engine.insert("todos", todo(&format!("r{i}"), "x")).unwrap();
    }
    d.sync().await;
    let ids: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
    assert_eq!(d.engine.purge_rows("todos", &ids).unwrap(), 10);
    let r = d.sync().await;
    assert!(r.relays[0].error.is_none(), "{r:?}");
    assert_eq!(d.engine.purge_queue_len().unwrap(), 0);
    assert_eq!(relay.events_of(&d.engine.owner_id()), 0);
    assert!(d.net.sent("POST", "/v1/streams/compact") >= 4, "10 streams in batches of at most 3");
}

#[tokio::test]
async fn a_413_for_one_event_within_the_limits_is_the_relay_out_of_room_and_a_purge_retries_what_was_set_aside() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    for i in 0..8 {
        d.engine.insert("todos", todo(&format!("r{i}"), "fine")).unwrap();
    }
    // A relay out of room that says 413 without quota_exceeded: the batch is halved down to one
    // event, and then pushes wait — the outbox is not set aside one event after another.
    d.net.answer(
        |r| r.method == simplysync::engine::io::Method::Post && r.url.ends_with("/v1/events"),
        413,
        r#"{"error":"too_large","message":"no"}"#,
        None,
        None,
    );
    let r = d.sync().await;
    assert_eq!((r.relays[0].pushed, r.relays[0].set_aside), (0, 0), "{r:?}");
    let s = d.status(0);
    assert_eq!((s.set_aside.events, s.pending), (0, 8));
    assert_eq!(s.push_error.as_ref().and_then(|e| e.code.as_deref()), Some("quota_exceeded"));
    // Room comes back: the next write pushes everything.
    d.net.clear();
    d.engine.insert("todos", todo("later", "x")).unwrap();
    let r = d.engine.sync(SyncTrigger::Write).await.unwrap();
    assert_eq!(r.relays[0].pushed, 9);
}

#[tokio::test]
async fn a_413_for_one_event_when_the_account_has_room_sets_that_event_aside_and_pushes_the_rest() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    d.engine.insert("todos", todo("first", "x")).unwrap();
    d.sync().await;
    d.engine.relay_statuses().await.unwrap(); // the account is known: plenty of room
                                              // Something in front of the relay takes no request over 40 KB (a proxy's smaller limit).
    d.engine.insert("todos", todo("big", &"y".repeat(60_000))).unwrap();
    for i in 0..3 {
        d.engine.insert("todos", todo(&format!("small{i}"), "z")).unwrap();
    }
    d.net.answer(
        |r| r.method == simplysync::engine::io::Method::Post && r.body.as_ref().is_some_and(|b| b.len() > 40_000),
        413,
        r#"{"error":"too_large","message":"request entity too large"}"#,
        None,
        None,
    );
    let r = d.sync().await;
    assert_eq!((r.relays[0].pushed, r.relays[0].set_aside), (3, 1), "{r:?}");
    let s = d.status(0);
    assert_eq!((s.set_aside.events, s.pending), (1, 0));
    assert_ne!(s.push_error.as_ref().and_then(|e| e.code.as_deref()), Some("quota_exceeded"));
}
