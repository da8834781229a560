//! A relay that stalls, loops or lies does not hold the engine: timeouts, concurrent relays,
//! cursor loops, malformed envelopes, unconfirmed 404s, push answers that do not add up,
//! retry backoff, a bounded quarantine and a bounded re-seed rate.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::harness::{phrase, todo, Device, StalledRelay, TestRelay};
use simplysync::engine::io::{HttpRequest, HttpResponse};
use simplysync::engine::{EngineOptions, RelayState, SyncTrigger};

fn is_pull(r: &HttpRequest) -> bool {
    r.url.contains("/v1/events?")
}

/// Rewrites the JSON of every pull page.
pub(crate) fn rewrite_pages(d: &Device, f: impl Fn(&mut serde_json::Value) + 'static) {
    *d.net.rewrite.borrow_mut() = Some(Box::new(move |req, mut resp: HttpResponse| {
        if is_pull(req) && resp.status == 200 {
            let mut v: serde_json::Value = serde_json::from_slice(&resp.body).unwrap();
            f(&mut v);
            resp.body = v.to_string().into_bytes();
        }
        resp
    }));
}

/// A device of `secret` that wrote three todos (`r0`–`r2`) and pushed them to `relay`.
async fn three_todos_synced(secret: &str, relay: &TestRelay) -> Device {
    let a = Device::new(secret, &[&relay.url]);
    for i in 0..3 {
        a.engine.insert("todos", todo(&format!("r{i}"), "x")).unwrap();
    }
    a.sync().await;
    a
}

fn error_code(d: &Device, i: usize) -> Option<String> {
    d.status(i).error.and_then(|e| e.code)
}

#[tokio::test]
async fn a_stalled_relay_times_out_as_offline_while_the_other_relay_syncs_in_the_same_pass() {
    let stalled = StalledRelay::start();
    let good = TestRelay::start();
    let timeout = Duration::from_millis(4000);
    let options = EngineOptions { request_timeout_ms: timeout.as_millis() as u32, ..EngineOptions::default() };
    let d = Device::with_options(&phrase(), &[&stalled.url, &good.url], options);
    let row = d.engine.insert("todos", todo("a", "x")).unwrap();
    let event = row.get("updatedAt").unwrap().as_str().unwrap().to_owned();
    let owner = d.engine.owner_id();
    let start = Instant::now();
    let (report, reached_good) = tokio::join!(d.sync(), async {
        for _ in 0..400 {
            if good.has_event(&owner, &event) {
                return Some(start.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        None
    });
    let reached_good = reached_good.expect("the event reached the good relay");
    assert!(reached_good < timeout, "the good relay synced while the stalled one was still pending");
    assert!(stalled.accepted.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    let err = report.relays[0].error.clone().unwrap();
    assert_eq!(err.status, None);
    assert!(err.message.contains("4000 ms"), "{err:?}");
    assert_eq!(d.status(0).state, RelayState::Offline);
    assert_eq!(report.relays[1].pushed, 1);
    assert_eq!(d.status(1).state, RelayState::Synced);
}

#[tokio::test]
async fn a_cursor_that_comes_back_within_a_pass_ends_the_pull_with_a_status_error() {
    let relay = TestRelay::start();
    let secret = phrase();
    three_todos_synced(&secret, &relay).await;
    let b = Device::new(&secret, &[&relay.url]);
    rewrite_pages(&b, |v| {
        v["nextCursor"] = "1".into();
        v.as_object_mut().unwrap().remove("headSeq");
    });
    let r = b.sync().await;
    assert_eq!(error_code(&b, 0).as_deref(), Some("relay_cursor_loop"), "{r:?}");
    assert!(!b.status(0).error.unwrap().terminal);
    assert!(b.net.sent("GET", "/v1/events?") <= 3, "the loop ended at once");
    assert_eq!(b.todos().len(), 3, "what was received is applied");
}

#[tokio::test]
async fn a_cursor_that_goes_backwards_is_refused_and_never_saved() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = three_todos_synced(&secret, &relay).await;
    let b = Device::new(&secret, &[&relay.url]);
    b.sync().await;
    a.engine.insert("todos", todo("late", "x")).unwrap();
    a.sync().await;
    rewrite_pages(&b, |v| v["nextCursor"] = "1".into());
    b.sync().await;
    assert_eq!(error_code(&b, 0).as_deref(), Some("relay_cursor_backwards"));
    let cursor = b.engine.inspect_query("SELECT value FROM _sync_meta WHERE key LIKE 'cursor:%'", &[]).unwrap();
    assert_eq!(cursor[0].get("value").unwrap().as_str(), Some("3"), "the backwards cursor was not stored");
    b.net.clear();
    b.sync().await;
    assert_eq!(b.status(0).state, RelayState::Synced);
    assert!(b.engine.get("todos", "late").unwrap().is_some());
}

#[tokio::test]
async fn a_relay_serving_more_pages_than_its_head_needs_is_stopped_after_a_bounded_number() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    d.net.faults.borrow_mut().push_back(crate::harness::Fault {
        matches: Box::new(is_pull),
        respond: Box::new(|req| {
            let after = req.url.split("after=").nth(1).unwrap().split('&').next().unwrap().to_owned();
            let n: u64 = after.trim_start_matches('p').parse().unwrap_or(0);
            let body = serde_json::json!({
                "events": [{"eventId": format!("junk{n}")}],
                "nextCursor": format!("p{}", n + 1),
                "headSeq": 5,
            });
            Ok(HttpResponse::new(200, body.to_string()))
        }),
        times: None,
    });
    d.sync().await;
    assert_eq!(error_code(&d, 0).as_deref(), Some("pull_incomplete"));
    assert_eq!(d.net.sent("GET", "/v1/events?"), 20, "twice the 5 pages the head implies, plus 10");
}

#[tokio::test]
async fn one_malformed_envelope_in_a_page_is_quarantined_and_the_rest_of_the_page_applies() {
    let relay = TestRelay::start();
    let secret = phrase();
    three_todos_synced(&secret, &relay).await;
    let b = Device::new(&secret, &[&relay.url]);
    rewrite_pages(&b, |v| {
        let events = v["events"].as_array_mut().unwrap();
        if !events.is_empty() {
            events.insert(1, serde_json::json!({"eventId": "broken", "version": "one", "nonce": 5}));
        }
    });
    let r = b.sync().await;
    assert_eq!((r.relays[0].applied, r.relays[0].quarantined), (3, 1), "{r:?}");
    let q = b.engine.quarantined().unwrap();
    assert_eq!((q[0].event_id.as_str(), q[0].reason.as_str()), ("broken", "MALFORMED_ENVELOPE"));
    assert_eq!(b.status(0).quarantined, 1);
    assert_eq!(b.status(0).state, RelayState::Synced);
}

#[tokio::test]
async fn a_malformed_envelope_is_filed_under_its_event_id_only_when_that_is_a_string() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    a.engine.insert("todos", todo("r0", "x")).unwrap();
    a.sync().await;
    let b = Device::new(&secret, &[&relay.url]);
    rewrite_pages(&b, |v| {
        let events = v["events"].as_array_mut().unwrap();
        if !events.is_empty() {
            events.push(serde_json::json!({"eventId": 7, "version": 1}));
            events.push(serde_json::json!({"eventId": "quote\"d", "version": 1}));
        }
    });
    let r = b.sync().await;
    assert_eq!((r.relays[0].applied, r.relays[0].quarantined), (1, 2), "{r:?}");
    let mut ids: Vec<String> = b.engine.quarantined().unwrap().into_iter().map(|q| q.event_id).collect();
    ids.sort();
    assert_eq!(ids[1], "quote\"d", "a string id is read as JSON, escapes and all");
    assert!(ids[0].starts_with("malformed:") && ids[0].len() == "malformed:".len() + 22, "{ids:?}");
}

#[tokio::test]
async fn a_404_that_is_not_the_relay_losing_the_owner_never_re_uploads() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    for i in 0..3 {
        d.engine.insert("todos", todo(&format!("r{i}"), "x")).unwrap();
    }
    d.sync().await;
    let pushes = d.net.sent("POST", "/v1/events");
    // A proxy's page.
    d.net.answer(is_pull, 404, "<html><body>404 Not Found</body></html>", None, Some(1));
    let r = d.sync().await;
    assert_eq!((r.relays[0].reseeded.as_deref(), error_code(&d, 0).as_deref()), (None, Some("foreign_404")));
    // The relay's JSON error, but /health does not agree.
    d.net.answer(is_pull, 404, r#"{"error":"unknown_owner","message":"?"}"#, None, Some(1));
    d.net.fail("/health", 502, Some(1));
    let r = d.sync().await;
    assert_eq!((r.relays[0].reseeded.as_deref(), error_code(&d, 0).as_deref()), (None, Some("unconfirmed_404")));
    // The relay's JSON error and a healthy relay, but /v1/status still knows the owner.
    d.net.answer(is_pull, 404, r#"{"error":"unknown_owner","message":"?"}"#, None, Some(1));
    let r = d.sync().await;
    assert_eq!((r.relays[0].reseeded.as_deref(), error_code(&d, 0).as_deref()), (None, Some("unconfirmed_404")));
    assert_eq!(d.net.sent("POST", "/v1/events"), pushes, "nothing was re-uploaded");
    assert_eq!(d.status(0).pending, 0);
    d.sync().await;
    assert_eq!(d.status(0).state, RelayState::Synced);
}

#[tokio::test]
async fn a_push_answer_that_does_not_add_up_is_an_error_and_nothing_is_marked_delivered() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    for i in 0..3 {
        d.engine.insert("todos", todo(&format!("r{i}"), "x")).unwrap();
    }
    let is_push = |r: &HttpRequest| r.url.ends_with("/v1/events");
    d.net.answer(is_push, 200, r#"{"accepted":1,"duplicate":0}"#, None, Some(1));
    let r = d.sync().await;
    assert_eq!(r.relays[0].pushed, 0);
    assert_eq!(error_code(&d, 0).as_deref(), Some("push_mismatch"), "{r:?}");
    assert!(d.status(0).error.unwrap().message.contains("pushed 3 events"));
    assert_eq!(d.status(0).pending, 3, "nothing was marked delivered");
    let r = d.sync().await;
    assert_eq!(r.relays[0].pushed, 3);
    assert_eq!(d.status(0).state, RelayState::Synced);
}

#[tokio::test]
async fn forged_duplicates_reported_by_the_relay_show_in_the_status() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    d.engine.insert("todos", todo("a", "x")).unwrap();
    d.engine.insert("todos", todo("b", "x")).unwrap();
    let is_push = |r: &HttpRequest| r.url.ends_with("/v1/events");
    d.net.answer(is_push, 200, r#"{"accepted":0,"duplicate":2,"forged":2}"#, None, Some(1));
    let r = d.sync().await;
    assert_eq!((r.relays[0].pushed, r.relays[0].forged), (2, 2));
    assert_eq!(d.status(0).forged, 2);
}

#[tokio::test]
async fn failures_back_off_exponentially_with_full_jitter_and_honour_retry_after() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    d.engine.insert("todos", todo("a", "x")).unwrap();
    // (The push and the pull fail: a relay whose pushes alone fail is still pulled from.)
    d.net.answer(|_| true, 503, r#"{"error":"busy","message":"later"}"#, Some("120"), Some(2));
    d.engine.sync(SyncTrigger::Poll).await.unwrap();
    let now = simplysync::engine::io::Clock::now_ms(d.clock.as_ref());
    let until = d.status(0).backoff_until.unwrap();
    assert!(until >= now + 120_000 && until <= now + 300_000, "Retry-After: 120 is honoured: {}", until - now);
    assert!(!d.status(0).error.unwrap().terminal);

    // Network failures in a row: each delay within its doubling ceiling.
    d.net.go_offline();
    let mut delays = Vec::new();
    for n in 2..=9u32 {
        let now = simplysync::engine::io::Clock::now_ms(d.clock.as_ref());
        d.clock.set(d.status(0).backoff_until.unwrap().max(now) + 1);
        let r = d.engine.sync(SyncTrigger::Poll).await.unwrap();
        assert!(r.relays[0].skipped.is_none());
        let now = simplysync::engine::io::Clock::now_ms(d.clock.as_ref());
        let delay = d.status(0).backoff_until.unwrap() - now;
        assert!(delay <= simplysync::engine::retry_ceiling_ms(n), "failure {n}: {delay}");
        assert!(delay <= 300_000, "capped at 5 minutes: {delay}");
        delays.push(delay);
        // Within the backoff a poll leaves the relay alone; a write tries at once.
        if delay > 0 {
            let before = d.net.log.borrow().len();
            assert!(d.engine.sync(SyncTrigger::Poll).await.unwrap().relays[0].skipped.is_some());
            assert_eq!(d.net.log.borrow().len(), before);
        }
    }
    assert!(delays.iter().any(|&x| x > 5_000), "the ceiling grew past the poll cadence: {delays:?}");
    let before = d.net.log.borrow().len();
    d.engine.sync(SyncTrigger::Write).await.unwrap();
    assert!(d.net.log.borrow().len() > before, "a write tries at once");
    d.net.clear();
    d.engine.sync(SyncTrigger::Online).await.unwrap();
    let s = d.status(0);
    assert_eq!((s.state, s.backoff_until), (RelayState::Synced, None), "success resets the backoff");
}

#[tokio::test]
async fn many_triggers_during_a_pass_queue_one_more_pass_not_many() {
    let stalled = StalledRelay::start();
    let options = EngineOptions { request_timeout_ms: 700, ..EngineOptions::default() };
    let d = Device::with_options(&phrase(), &[&stalled.url], options);
    let finished = Rc::new(Cell::new(0));
    let run = |trigger| {
        let finished = finished.clone();
        let engine = &d.engine;
        async move {
            let out = engine.sync_queued(trigger).await.unwrap();
            finished.set(finished.get() + 1);
            out.is_some()
        }
    };
    let ran = futures_util::future::join_all([
        run(SyncTrigger::Poll),
        run(SyncTrigger::Write),
        run(SyncTrigger::Focus),
        run(SyncTrigger::Online),
        run(SyncTrigger::Write),
        run(SyncTrigger::Online),
    ])
    .await;
    assert_eq!(ran, [true, true, false, false, false, false], "the running pass and one queued pass");
    assert_eq!(stalled.accepted.load(std::sync::atomic::Ordering::SeqCst), 2, "two passes reached the relay");
    assert_eq!(finished.get(), 6, "every call settled");
}

#[tokio::test]
async fn the_quarantine_keeps_the_newest_events_of_a_relay_and_counts_the_rest() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    a.engine.insert("todos", todo("real", "x")).unwrap();
    a.sync().await;
    let b = Device::new(&secret, &[&relay.url]);
    rewrite_pages(&b, |v| {
        let events = v["events"].as_array_mut().unwrap();
        if !events.is_empty() {
            for i in 0..1100 {
                events.push(serde_json::json!({ "eventId": format!("junk{i:05}") }));
            }
        }
    });
    b.sync().await;
    let s = b.status(0);
    assert_eq!((s.quarantined, s.quarantine_dropped), (1000, 100), "{s:?}");
    assert!(b.engine.get("todos", "real").unwrap().is_some());
    assert_eq!(b.count("_sync_quarantine"), 1000);
}

#[tokio::test]
async fn a_relay_whose_epoch_changes_on_every_pass_is_re_seeded_ever_more_rarely() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    for i in 0..3 {
        d.engine.insert("todos", todo(&format!("r{i}"), "x")).unwrap();
    }
    let counter = Rc::new(Cell::new(0u32));
    let c = counter.clone();
    rewrite_pages(&d, move |v| {
        c.set(c.get() + 1);
        v["epoch"] = format!("epoch-{}", c.get()).into();
    });
    d.sync().await;
    let r = d.sync().await;
    assert!(r.relays[0].reseeded.is_some(), "the first change re-seeds: {r:?}");
    let pushes = d.net.sent("POST", "/v1/events");
    let r = d.sync().await;
    assert_eq!(r.relays[0].reseeded, None);
    assert_eq!(error_code(&d, 0).as_deref(), Some("relay_unstable"), "{r:?}");
    assert_eq!(d.net.sent("POST", "/v1/events"), pushes, "no second re-upload");
    d.clock.advance(simplysync::engine::RESEED_WINDOW_MS + 1);
    let r = d.sync().await;
    assert!(r.relays[0].reseeded.is_some(), "after the window, a loss is re-seeded again");
    // Each further re-seed waits 4× longer: 15 min is no longer enough, an hour is.
    d.clock.advance(simplysync::engine::RESEED_WINDOW_MS + 1);
    let r = d.sync().await;
    assert_eq!((r.relays[0].reseeded.as_deref(), error_code(&d, 0).as_deref()), (None, Some("relay_unstable")));
    d.clock.advance(3 * simplysync::engine::RESEED_WINDOW_MS);
    let r = d.sync().await;
    assert!(r.relays[0].reseeded.is_some(), "an hour after the second re-seed");
    let uploads = d.net.sent("POST", "/v1/events");
    // Four more hours without an accepted re-seed, at most one more (the 4-hour window).
    for _ in 0..16 {
        d.clock.advance(simplysync::engine::RESEED_WINDOW_MS);
        d.sync().await;
    }
    assert!(d.net.sent("POST", "/v1/events") <= uploads + 1, "re-uploads thin out");
}

#[tokio::test]
async fn a_401_or_410_from_v1_status_updates_the_relay_status() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    d.engine.insert("todos", todo("a", "x")).unwrap();
    d.sync().await;
    d.net.fail("/v1/status", 401, Some(1));
    let s = d.engine.relay_statuses().await.unwrap().remove(0);
    assert_eq!(
        (s.state, s.error.as_ref().map(|e| (e.status, e.terminal))),
        (RelayState::Error, Some((Some(401), true)))
    );
    d.net.fail("/v1/status", 410, Some(1));
    let s = d.engine.relay_statuses().await.unwrap().remove(0);
    assert_eq!(s.state, RelayState::Closed);
}

/// The page's events with a copy of event 1 inserted before it (`forged_first`) or after it,
/// its ciphertext altered: one event id named twice on the page, one copy genuine.
fn repeat_one_event_forged(d: &Device, forged_first: bool) {
    rewrite_pages(d, move |v| {
        let events = v["events"].as_array_mut().unwrap();
        if events.len() < 2 {
            return;
        }
        let mut forged = events[1].clone();
        crate::harness::alter_ciphertext(&mut forged);
        events.insert(if forged_first { 1 } else { 2 }, forged);
    });
}

#[tokio::test]
async fn a_device_alone_on_a_relay_notices_when_the_relay_changes_its_own_events() {
    // Its own events, sent back with one field altered, whichever: each is opened like any
    // other and fails authentication (a device that skipped its own echoes would never learn
    // its backup was altered).
    for field in ["ciphertext", "nonce", "createdAt", "streamId", "deviceId"] {
        let relay = TestRelay::start();
        let a = Device::new(&phrase(), &[&relay.url]);
        rewrite_pages(&a, move |v| {
            v["events"].as_array_mut().unwrap().iter_mut().for_each(|e| crate::harness::alter_field(e, field))
        });
        for id in ["a", "b", "c"] {
            a.engine.insert("todos", todo(id, "x")).unwrap();
        }
        let before = a.todos();
        let r = a.sync().await.relays.swap_remove(0);
        assert_eq!((r.pushed, r.received, r.applied, r.quarantined, r.own_echoes), (3, 3, 0, 3, 0), "{field}: {r:?}");
        let held = a.engine.quarantined().unwrap();
        assert!(held.iter().all(|h| h.reason == "AUTH_FAILED"), "{field}: {held:?}");
        assert_eq!(a.todos(), before, "{field}: its rows stay as written");
    }
}

#[tokio::test]
async fn a_device_does_not_open_its_own_events_again_when_the_relay_sends_them_back_unchanged() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    for id in ["a", "b", "c"] {
        a.engine.insert("todos", todo(id, "x")).unwrap();
    }
    let before = a.todos();
    let r = a.sync().await.relays.swap_remove(0);
    assert_eq!((r.pushed, r.received, r.own_echoes, r.applied, r.quarantined), (3, 3, 3, 0, 0), "{r:?}");
    assert_eq!(a.todos(), before);
    // Another device's events (of the same owner) are opened and applied as before, and its
    // own come back to it as echoes too.
    let b = Device::new(&secret, &[&relay.url]);
    b.engine.insert("todos", todo("d", "y")).unwrap();
    let r = b.sync().await.relays.swap_remove(0);
    assert_eq!((r.pushed, r.received, r.own_echoes, r.applied), (1, 4, 1, 3), "{r:?}");
    let r = a.sync().await.relays.swap_remove(0);
    assert_eq!((r.received, r.own_echoes, r.applied), (1, 0, 1), "{r:?}");
    assert_eq!(a.todos(), b.todos());
}

#[tokio::test]
async fn a_page_that_names_one_event_twice_applies_the_genuine_copy_whichever_comes_first() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = three_todos_synced(&secret, &relay).await;
    // Forged copy first: it is quarantined and gives its claim back, so the genuine copy after
    // it on the same page still applies.
    let b = Device::new(&secret, &[&relay.url]);
    repeat_one_event_forged(&b, true);
    let r = b.sync().await.relays.swap_remove(0);
    assert_eq!((r.received, r.applied, r.quarantined), (4, 3, 1), "{r:?}");
    assert_eq!(b.todos(), a.todos());
    let held = b.engine.quarantined().unwrap();
    assert_eq!(held.iter().map(|h| h.reason.as_str()).collect::<Vec<_>>(), ["AUTH_FAILED"]);
    // Genuine copy first: it applies, and the forged copy after it is a duplicate, not held.
    let c = Device::new(&secret, &[&relay.url]);
    repeat_one_event_forged(&c, false);
    let r = c.sync().await.relays.swap_remove(0);
    assert_eq!((r.received, r.applied, r.quarantined), (4, 3, 0), "{r:?}");
    assert_eq!(c.todos(), a.todos());
}

#[tokio::test]
async fn a_page_that_names_a_deferred_event_twice_defers_it_once() {
    let relay = TestRelay::start();
    let secret = phrase();
    let spec = |version| crate::harness::DeviceSpec {
        secret: &secret,
        relays: vec![relay.url.clone()],
        schema: crate::harness::todo_schema(version, &[]),
        db_path: None,
        clock_ms: crate::harness::T0,
    };
    // Two events of a newer schema: an older app defers both.
    let newer = Device::open(spec(2));
    newer.engine.insert("todos", todo("a", "x")).unwrap();
    newer.engine.insert("todos", todo("b", "y")).unwrap();
    newer.sync().await;
    let older = Device::open(spec(1));
    // The relay repeats the first event right after it: once deferred, its copy is already
    // handled (a duplicate), not deferred a second time.
    rewrite_pages(&older, |v| {
        let events = v["events"].as_array_mut().unwrap();
        if let Some(first) = events.first().cloned() {
            events.insert(1, first);
        }
    });
    let r = older.sync().await.relays.swap_remove(0);
    assert_eq!((r.received, r.applied, r.deferred), (3, 0, 2), "{r:?}");
    let attempts = older.engine.inspect_query("SELECT max(attempts) AS n FROM _sync_deferred", &[]).unwrap();
    assert_eq!(attempts[0].get("n").unwrap().as_f64(), Some(0.0), "each filed once");
}

/// Rewrites every 404 of the relay into the body another spec relay answers (the spec fixes
/// no error body): `{"error": "unknown owner", "status": 404}`.
fn other_relays_404s(d: &Device) {
    *d.net.rewrite.borrow_mut() = Some(Box::new(|_, mut resp: HttpResponse| {
        if resp.status == 404 {
            resp.body = br#"{"error":"unknown owner","status":404}"#.to_vec();
        }
        resp
    }));
}

#[tokio::test]
async fn a_wiped_relay_whose_404s_are_another_relays_json_is_re_seeded_and_a_new_device_sees_no_error() {
    let mut relay = TestRelay::start();
    let secret = phrase();
    // A new device against an empty relay: its first pull's 404 means "nothing there yet".
    let d = Device::new(&secret, &[&relay.url]);
    other_relays_404s(&d);
    let r = d.sync().await;
    assert_eq!(r.relays[0].error, None, "{r:?}");
    for i in 0..3 {
        d.engine.insert("todos", todo(&format!("r{i}"), "x")).unwrap();
    }
    d.sync().await;
    relay.wipe_and_restart();
    let r = d.sync().await;
    assert!(r.relays[0].reseeded.is_some(), "{r:?}");
    d.sync().await;
    assert_eq!(relay.events_of(&d.engine.owner_id()), 3, "re-seeded");
    let fresh = Device::new(&secret, &[&relay.url]);
    fresh.sync().await;
    assert_eq!(fresh.todos().len(), 3);
}
