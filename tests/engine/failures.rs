//! The failure policy, each row driven by a relay (or the fault layer in front of the real
//! relay) answering with that status.

use crate::harness::{phrase, todo, Device, TestRelay};
use simplysync::engine::{RelayState, SyncTrigger};

const FIVE_MIN: u64 = 5 * 60 * 1000;

async fn failing_device(status: u16) -> (TestRelay, Device) {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    d.engine.insert("todos", todo("a", "x")).unwrap();
    d.net.fail("/v1/events", status, None);
    let report = d.engine.sync(SyncTrigger::Poll).await.unwrap();
    assert_eq!(report.relays[0].error.as_ref().unwrap().status, Some(status));
    (relay, d)
}

#[tokio::test]
async fn terminal_statuses_back_automatic_passes_off_for_five_minutes_but_not_writes_focus_or_online() {
    for status in [400, 401, 403, 413] {
        let (_relay, d) = failing_device(status).await;
        let s = &d.engine.relay_statuses_local().unwrap()[0];
        assert_eq!(s.state, RelayState::Error);
        assert!(s.error.as_ref().unwrap().terminal, "{status}");
        assert_eq!(s.backoff_until, Some(d.clock.now() + FIVE_MIN));
        let before = d.net.log.borrow().len();
        let r = d.engine.sync(SyncTrigger::Poll).await.unwrap();
        assert!(r.relays[0].skipped.is_some(), "{status}: the poller backs off");
        assert_eq!(d.net.log.borrow().len(), before, "no request while backing off");
        for trigger in [SyncTrigger::Write, SyncTrigger::Focus, SyncTrigger::Online, SyncTrigger::Manual] {
            let r = d.engine.sync(trigger).await.unwrap();
            assert!(r.relays[0].skipped.is_none(), "{status} {trigger:?} retries at once");
        }
        d.clock.advance(FIVE_MIN + 1);
        d.net.clear();
        if status == 413 {
            // A lone event within this engine's limits answered 413 is the relay out of room,
            // whatever its body says: nothing is set aside, pushes wait.
            let s = &d.engine.relay_statuses_local().unwrap()[0];
            assert_eq!(s.set_aside.events, 0);
            assert_eq!(s.push_error.as_ref().and_then(|e| e.code.as_deref()), Some("quota_exceeded"));
        }
        let r = d.engine.sync(SyncTrigger::Poll).await.unwrap();
        assert_eq!(r.relays[0].pushed, 1, "{status}: resumes after the backoff");
        assert_eq!(d.engine.relay_statuses_local().unwrap()[0].state, RelayState::Synced);
    }
}

trait Now {
    fn now(&self) -> u64;
}
impl Now for simplysync::engine::io::ManualClock {
    fn now(&self) -> u64 {
        simplysync::engine::io::Clock::now_ms(self)
    }
}

#[tokio::test]
async fn a_429_backs_automatic_passes_off_five_minutes_or_its_retry_after_and_stays_retryable() {
    let (_relay, d) = failing_device(429).await;
    let s = &d.engine.relay_statuses_local().unwrap()[0];
    assert!(!s.error.as_ref().unwrap().terminal, "the spec: a 429 remains nonterminal");
    assert_eq!(s.backoff_until, Some(d.clock.now() + FIVE_MIN), "the spec's five minutes");
    d.clock.advance(FIVE_MIN - 1);
    assert!(d.engine.sync(SyncTrigger::Poll).await.unwrap().relays[0].skipped.is_some());
    for trigger in [SyncTrigger::Write, SyncTrigger::Focus, SyncTrigger::Online, SyncTrigger::Manual] {
        assert!(d.engine.sync(trigger).await.unwrap().relays[0].skipped.is_none(), "{trigger:?} retries at once");
    }
    // With a Retry-After, as long as it says (a relay asking for more than an hour gets one).
    for (retry_after, wait) in [("7", 7_000), ("86400", 3_600_000)] {
        d.net.clear();
        d.net.answer(
            |r| r.url.contains("/v1/events"),
            429,
            r#"{"error":"rate_limited","message":"slow down"}"#,
            Some(retry_after),
            None,
        );
        d.engine.sync(SyncTrigger::Poll).await.unwrap();
        d.clock.advance(FIVE_MIN + 1);
        d.engine.sync(SyncTrigger::Manual).await.unwrap();
        assert_eq!(d.status(0).backoff_until, Some(d.clock.now() + wait), "Retry-After: {retry_after}");
    }
    d.net.clear();
    d.clock.advance(3_600_001);
    let r = d.engine.sync(SyncTrigger::Poll).await.unwrap();
    assert_eq!((r.relays[0].skipped.as_deref(), r.relays[0].pushed), (None, 1));
}

#[tokio::test]
async fn a_429_to_pushes_alone_backs_the_whole_relay_off_reads_included() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    d.engine.insert("todos", todo("a", "x")).unwrap();
    d.net.answer(is_push, 429, r#"{"error":"rate_limited","message":"slow down"}"#, Some("60"), None);
    let r = d.engine.sync(SyncTrigger::Poll).await.unwrap();
    assert_eq!(r.relays[0].pushed, 0);
    assert_eq!(d.status(0).backoff_until, Some(d.clock.now() + 60_000), "its Retry-After, for the relay");
    d.clock.advance(59_000);
    let gets = d.net.sent("GET", "/v1/events");
    let r = d.engine.sync(SyncTrigger::Poll).await.unwrap();
    assert!(r.relays[0].skipped.is_some(), "a poll leaves the relay alone: {r:?}");
    assert_eq!(d.net.sent("GET", "/v1/events"), gets, "no pull either");
    d.net.clear();
    d.clock.advance(1_001);
    let r = d.engine.sync(SyncTrigger::Poll).await.unwrap();
    assert_eq!((r.relays[0].skipped.as_deref(), r.relays[0].pushed), (None, 1), "{r:?}");
}

#[tokio::test]
async fn network_errors_and_5xx_retry_within_the_poll_cadence_at_first() {
    for status in [500, 502, 503] {
        let (_relay, d) = failing_device(status).await;
        let s = &d.engine.relay_statuses_local().unwrap()[0];
        assert!(!s.error.as_ref().unwrap().terminal, "{status}");
        let until = s.backoff_until.unwrap();
        assert!(until <= d.clock.now() + 5_000, "{status}: the first retry comes within the poll cadence");
        d.clock.set(until + 1);
        assert!(d.engine.sync(SyncTrigger::Poll).await.unwrap().relays[0].skipped.is_none(), "{status}");
    }
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    d.net.go_offline();
    d.engine.sync(SyncTrigger::Poll).await.unwrap();
    let s = &d.engine.relay_statuses_local().unwrap()[0];
    assert_eq!(s.state, RelayState::Offline);
    assert!(s.backoff_until.unwrap() <= d.clock.now() + 5_000);
    d.net.clear();
    d.clock.advance(5_001);
    d.engine.sync(SyncTrigger::Poll).await.unwrap();
    assert_eq!(d.engine.relay_statuses_local().unwrap()[0].state, RelayState::Synced);
}

#[tokio::test]
async fn a_410_closes_the_relay_for_good_without_re_uploading() {
    let (_relay, d) = failing_device(410).await;
    assert_eq!(d.engine.relay_statuses_local().unwrap()[0].state, RelayState::Closed);
    let before = d.net.log.borrow().len();
    d.engine.insert("todos", todo("b", "y")).unwrap();
    for trigger in [SyncTrigger::Manual, SyncTrigger::Write, SyncTrigger::Poll] {
        let r = d.engine.sync(trigger).await.unwrap();
        assert!(r.relays[0].skipped.as_deref().unwrap().contains("410"));
    }
    assert_eq!(d.net.log.borrow().len(), before, "nothing is sent to a closed relay");
}

#[tokio::test]
async fn a_relay_with_smaller_push_batches_gets_halved_batches() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    for i in 0..40 {
        d.engine.insert("todos", todo(&format!("r{i}"), "x")).unwrap();
    }
    // Refuse any push of more than 8 events, like a relay with MAX_EVENTS_PER_PUSH=8.
    d.net.faults.borrow_mut().push_back(crate::harness::Fault {
        matches: Box::new(|r| {
            r.url.ends_with("/v1/events")
                && r.body.as_ref().is_some_and(|b| {
                    let v: serde_json::Value = serde_json::from_slice(b).unwrap();
                    v["events"].as_array().unwrap().len() > 8
                })
        }),
        respond: Box::new(|_| {
            Ok(simplysync::engine::io::HttpResponse::new(
                413,
                br#"{"error":"payload_too_large","message":"too many events"}"#.to_vec(),
            ))
        }),
        times: None,
    });
    let r = d.sync().await;
    assert_eq!(r.relays[0].pushed, 40);
    assert_eq!(r.relays[0].error, None);
}

fn is_push(r: &simplysync::engine::io::HttpRequest) -> bool {
    r.method == simplysync::engine::io::Method::Post && r.url.contains("/v1/events") && !r.url.contains("/wait")
}

#[tokio::test]
async fn a_relay_whose_writes_fail_still_delivers_other_devices_changes_and_each_direction_reports_its_own() {
    let relay = TestRelay::start();
    let secret = phrase();
    let (a, b) = (Device::new(&secret, &[&relay.url]), Device::new(&secret, &[&relay.url]));
    b.engine.insert("todos", todo("from-b", "x")).unwrap();
    b.sync().await;
    // A's writes fail (the relay's write kill switch: 503 on POST only).
    a.engine.insert("todos", todo("from-a", "x")).unwrap();
    a.net.answer(is_push, 503, r#"{"error":"overloaded","message":"writes are off"}"#, None, None);
    let r = a.engine.sync(SyncTrigger::Poll).await.unwrap();
    assert_eq!(r.relays[0].received, 1, "{r:?}");
    assert!(a.engine.get("todos", "from-b").unwrap().is_some(), "the pull went on");
    let s = a.status(0);
    assert_eq!((s.push_error.as_ref().map(|e| e.status), s.pull_error.as_ref()), (Some(Some(503)), None));
    assert_eq!((s.state, s.pending, s.backoff_until), (RelayState::Error, 1, None));
    // Automatic passes go on pulling while the pushes back off; a write pushes at once.
    b.engine.insert("todos", todo("from-b-2", "x")).unwrap();
    b.sync().await;
    a.clock.advance(1);
    let r = a.engine.sync(SyncTrigger::Poll).await.unwrap();
    assert_eq!((r.relays[0].received, a.net.sent("POST", "/v1/events")), (1, 1), "pulled, not pushed again: {r:?}");
    a.engine.sync(SyncTrigger::Write).await.unwrap();
    assert_eq!(a.net.sent("POST", "/v1/events"), 2);
    a.net.clear();
    let r = a.engine.sync(SyncTrigger::Write).await.unwrap();
    assert_eq!(r.relays[0].pushed, 1);
    let s = a.status(0);
    assert_eq!((s.state, s.push_error.is_none(), s.error.is_none()), (RelayState::Synced, true, true));
    b.sync().await;
    assert!(b.engine.get("todos", "from-a").unwrap().is_some());
}

#[tokio::test]
async fn a_relay_whose_reads_fail_still_takes_pushes() {
    let relay = TestRelay::start();
    let secret = phrase();
    let (a, b) = (Device::new(&secret, &[&relay.url]), Device::new(&secret, &[&relay.url]));
    a.engine.insert("todos", todo("from-a", "x")).unwrap();
    a.net.answer(
        |r| !is_push(r) && r.url.contains("/v1/events"),
        500,
        r#"{"error":"internal","message":"x"}"#,
        None,
        None,
    );
    let r = a.engine.sync(SyncTrigger::Manual).await.unwrap();
    assert_eq!(r.relays[0].pushed, 1, "{r:?}");
    let s = a.status(0);
    assert_eq!((s.pull_error.as_ref().map(|e| e.status), s.push_error.as_ref()), (Some(Some(500)), None));
    b.sync().await;
    assert!(b.engine.get("todos", "from-a").unwrap().is_some());
}

#[tokio::test]
async fn a_refused_compaction_is_reported_with_the_writes_and_pushes_go_on() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    d.engine.insert("todos", todo("gone", "x")).unwrap();
    d.engine.delete("todos", "gone").unwrap();
    d.sync().await;
    assert_eq!(d.engine.purge_deleted().unwrap(), 1);
    d.net.fail("/v1/streams/compact", 403, None);
    for i in 0..2 {
        d.engine.insert("todos", todo(&format!("new{i}"), "x")).unwrap();
        let r = d.engine.sync(SyncTrigger::Poll).await.unwrap();
        assert_eq!(r.relays[0].pushed, 1, "pass {i}: pushes go on: {r:?}");
        let s = d.status(0);
        assert_eq!(s.push_error.as_ref().and_then(|e| e.status), Some(403));
        assert!(d.engine.purge_queue_len().unwrap() > 0, "the compaction waits");
        d.clock.advance(1);
    }
    d.net.clear();
    d.engine.sync(SyncTrigger::Manual).await.unwrap();
    assert_eq!(d.engine.purge_queue_len().unwrap(), 0);
    assert!(d.status(0).push_error.is_none());
}

#[tokio::test]
async fn pushes_backing_off_stay_backed_off_through_a_pass_whose_pull_failed() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    d.engine.insert("todos", todo("a", "x")).unwrap();
    d.net.answer(is_push, 503, r#"{"error":"overloaded","message":"writes are off"}"#, None, None);
    d.engine.sync(SyncTrigger::Poll).await.unwrap();
    let blocked = d.status(0).push_error.clone();
    assert_eq!(blocked.as_ref().and_then(|e| e.status), Some(503));
    // The next automatic pass skips the pushes, and its pull fails too.
    d.net.answer(
        |r| !is_push(r) && r.url.contains("/v1/events"),
        500,
        r#"{"error":"internal","message":"x"}"#,
        None,
        None,
    );
    d.clock.advance(1);
    d.engine.sync(SyncTrigger::Poll).await.unwrap();
    let s = d.status(0);
    assert_eq!(s.push_error, blocked, "nothing was pushed: the writes' failure stands");
    assert_eq!(s.pull_error.as_ref().and_then(|e| e.status), Some(500));
    // And the pushes still wait out their backoff.
    d.net.clear();
    d.clock.advance(1);
    let before = d.net.sent("POST", "/v1/events");
    d.engine.sync(SyncTrigger::Poll).await.unwrap();
    assert_eq!(d.net.sent("POST", "/v1/events"), before, "no push before the backoff ends");
}

#[tokio::test]
async fn pushes_that_went_through_are_not_held_back_by_a_refused_compaction() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    d.engine.insert("todos", todo("gone", "x")).unwrap();
    d.engine.delete("todos", "gone").unwrap();
    d.sync().await;
    // Pushes fail and back off; then the relay takes writes again but refuses compaction.
    d.engine.insert("todos", todo("a", "x")).unwrap();
    d.net.answer(is_push, 503, r#"{"error":"overloaded","message":"writes are off"}"#, None, None);
    d.engine.sync(SyncTrigger::Poll).await.unwrap();
    assert_eq!(d.status(0).push_error.as_ref().and_then(|e| e.status), Some(503));
    d.net.clear();
    assert_eq!(d.engine.purge_deleted().unwrap(), 1);
    d.net.fail("/v1/streams/compact", 403, None);
    let r = d.engine.sync(SyncTrigger::Write).await.unwrap();
    assert_eq!(r.relays[0].pushed, 1, "{r:?}");
    assert_eq!(d.status(0).push_error.as_ref().and_then(|e| e.status), Some(403), "the compaction's refusal is told");
    // The next automatic pass pushes a new write: the writes' backoff ended with the push.
    d.engine.insert("todos", todo("b", "x")).unwrap();
    d.clock.advance(1);
    let r = d.engine.sync(SyncTrigger::Poll).await.unwrap();
    assert_eq!(r.relays[0].pushed, 1, "pushed by the poll: {r:?}");
}

#[tokio::test]
async fn a_blob_chunk_the_relay_does_not_take_does_not_stop_the_pull() {
    let relay = TestRelay::start();
    let secret = phrase();
    let (a, b) = (Device::new(&secret, &[&relay.url]), Device::new(&secret, &[&relay.url]));
    b.engine.insert("todos", todo("from-b", "x")).unwrap();
    b.sync().await;
    a.engine.put_blob(&[7u8; 1000], "image/png", None).unwrap();
    a.net.fail("/v1/blobs/", 500, None);
    let r = a.engine.sync(SyncTrigger::Poll).await.unwrap();
    assert_eq!(r.relays[0].received, 1, "{r:?}");
    assert!(a.engine.get("todos", "from-b").unwrap().is_some());
    assert_eq!(a.status(0).push_error.as_ref().and_then(|e| e.status), Some(500));
}

#[tokio::test]
async fn a_relays_error_text_is_kept_to_a_kibibyte() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    d.engine.insert("todos", todo("a", "x")).unwrap();
    let long = "é".repeat(100_000);
    let body = serde_json::json!({"error": "x".repeat(5_000), "message": long}).to_string();
    let body: &'static str = Box::leak(body.into_boxed_str());
    d.net.answer(|r| r.url.contains("/v1/events"), 500, body, None, None);
    let r = d.sync().await;
    let e = r.relays[0].error.clone().unwrap();
    assert!(e.message.len() <= 1024 + 8 && e.message.ends_with('…'), "{}", e.message.len());
    assert!(e.code.unwrap().len() <= 1024 + 3);
    let s = d.status(0);
    assert!(s.error.unwrap().message.len() <= 1024 + 8);
}
