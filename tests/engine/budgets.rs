//! Every pass is bounded: pages and time per relay (the next pass continues), the size of an
//! answer the device reads, the quarantine's bytes, the deferred set — and queued work (a
//! purge) is only cleared by an answer that really comes from the relay.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::rc::Rc;

use crate::harness::{phrase, temp_dir, todo, todo_schema, Device, DeviceSpec, StalledRelay, TestRelay, T0};
use simplysync::engine::io::{HttpRequest, HttpResponse, Method, Transport, TransportError};
use simplysync::engine::{EngineOptions, Op, RelayState, SyncTrigger, RELAY_PASS_BUDGET_MS};
use simplysync::native::HttpTransport;

fn is_pull(r: &HttpRequest) -> bool {
    r.url.contains("/v1/events?")
}

fn is_push(r: &HttpRequest) -> bool {
    r.url.ends_with("/v1/events") && r.method == Method::Post
}

/// The `after` cursor of a pull request.
fn after_of(r: &HttpRequest) -> String {
    r.url.split("after=").nth(1).unwrap().split('&').next().unwrap().to_owned()
}

/// A page with one junk event and the next cursor `p<n+1>`, claiming `head`.
fn junk_page(req: &HttpRequest, head: u64) -> HttpResponse {
    let n: u64 = after_of(req).trim_start_matches('p').parse().unwrap_or(0);
    let body = serde_json::json!({
        "events": [{"eventId": format!("junk{n}")}],
        "nextCursor": format!("p{}", n + 1),
        "headSeq": head,
    });
    HttpResponse::new(200, body.to_string())
}

#[tokio::test]
async fn a_relay_claiming_a_huge_head_gets_a_thousand_pages_a_pass_and_the_next_pass_goes_on() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    d.net.faults.borrow_mut().push_back(crate::harness::Fault {
        matches: Box::new(is_pull),
        respond: Box::new(|req| Ok(junk_page(req, 1_000_000_000))),
        times: None,
    });
    let r = d.sync().await;
    assert_eq!(d.net.sent("GET", "/v1/events?"), 1000, "one pass, a thousand pages");
    assert!(r.relays[0].more && r.more(), "{:?}", r.relays[0]);
    assert_eq!(r.relays[0].error, None, "stopping at the pass's budget is not a failure");
    assert_eq!(d.status(0).state, RelayState::Pending, "not caught up yet");
    // The next pass continues from the last page applied.
    d.sync().await;
    let log = d.net.log.borrow();
    let pulls: Vec<&String> =
        log.iter().filter(|(m, u, _)| m == "GET" && u.contains("/v1/events?")).map(|(_, u, _)| u).collect();
    assert!(pulls[1000].contains("after=p1000"), "{}", pulls[1000]);
}

#[tokio::test]
async fn a_slow_relay_gets_a_minute_of_the_pass_for_pulls_and_pushes_and_the_next_pass_goes_on() {
    let relay = TestRelay::start();
    let d = Rc::new(Device::new(&phrase(), &[&relay.url]));
    // Every page takes 25 s of the engine's clock.
    let clock = d.clock.clone();
    d.net.faults.borrow_mut().push_back(crate::harness::Fault {
        matches: Box::new(is_pull),
        respond: Box::new(move |req| {
            clock.advance(25_000);
            Ok(junk_page(req, 1_000_000_000))
        }),
        times: None,
    });
    let r = d.sync().await;
    assert_eq!(d.net.sent("GET", "/v1/events?"), 3, "25, 50, then 75 s: past the {RELAY_PASS_BUDGET_MS} ms budget");
    assert!(r.relays[0].more);
    d.net.clear();

    // Pushes: 2500 events are three requests; each takes 70 s, so a pass sends one.
    let ops: Vec<_> = (0..2500)
        .map(|i| simplysync::engine::Op::Insert { table: "todos".into(), row: todo(&format!("r{i:04}"), "x") })
        .collect();
    d.engine.transaction(&ops).unwrap();
    let clock = d.clock.clone();
    *d.net.rewrite.borrow_mut() = Some(Box::new(move |req, resp| {
        if is_push(req) {
            clock.advance(70_000);
        }
        resp
    }));
    let r = d.sync().await;
    assert_eq!((d.net.sent("POST", "/v1/events"), r.relays[0].pushed, r.relays[0].more), (1, 1000, true));
    let r = d.engine.sync_all(SyncTrigger::Manual, 10).await.unwrap();
    assert_eq!((r.relays[0].pushed, r.more()), (1500, false), "sync_all runs passes until the relay is caught up");
    assert_eq!(d.status(0).state, RelayState::Synced);
}

#[tokio::test]
async fn a_write_joining_a_waiting_poll_pass_makes_it_a_write_pass_that_ignores_the_backoff() {
    // A stalled relay keeps each pass busy for a request timeout, so passes really overlap.
    let (relay, stalled) = (TestRelay::start(), StalledRelay::start());
    let options = EngineOptions { request_timeout_ms: 700, ..EngineOptions::default() };
    let d = Device::with_options(&phrase(), &[&relay.url, &stalled.url], options);
    d.engine.insert("todos", todo("a", "x")).unwrap();
    let busy = relay.url.clone();
    let on_relay = move |r: &HttpRequest| r.url.starts_with(&busy);
    // (Its push and its pull fail: a relay whose pushes alone fail is still pulled from.)
    d.net.answer(on_relay.clone(), 503, r#"{"error":"busy","message":"later"}"#, Some("120"), Some(2));
    d.engine.sync(SyncTrigger::Poll).await.unwrap();
    assert!(d.status(0).backoff_until.is_some(), "the relay is in backoff");
    // A manual pass is under way (the relay fails again, so its backoff stays); a poll waits
    // behind it; then a write comes.
    d.net.answer(on_relay, 503, r#"{"error":"busy","message":"later"}"#, Some("120"), Some(2));
    let (running, waiting, joining) = tokio::join!(
        d.engine.sync_queued(SyncTrigger::Manual),
        d.engine.sync_queued(SyncTrigger::Poll),
        d.engine.sync_queued(SyncTrigger::Write),
    );
    let running = running.unwrap().unwrap();
    assert!(running.relays[0].error.is_some(), "{running:?}");
    assert!(joining.unwrap().is_none(), "the write joined the waiting pass");
    let waiting = waiting.unwrap().unwrap();
    assert_eq!(waiting.relays[0].skipped, None, "the waiting pass ran as a write pass, despite the backoff");
    assert_eq!(waiting.relays[0].pushed, 1);
}

/// A one-shot HTTP server answering every request with `body` (with or without a length).
fn big_answer_server(body_len: usize, declare_length: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { break };
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let head = if declare_length {
                format!("HTTP/1.1 200 OK\r\nContent-Length: {body_len}\r\nConnection: close\r\n\r\n")
            } else {
                "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_owned()
            };
            let _ = conn.write_all(head.as_bytes());
            let chunk = vec![b'x'; 64 * 1024];
            let mut left = body_len;
            while left > 0 {
                let n = left.min(chunk.len());
                if conn.write_all(&chunk[..n]).is_err() {
                    break; // the client stopped reading: what we want
                }
                left -= n;
            }
        }
    });
    url
}

#[tokio::test]
async fn an_answer_larger_than_the_limit_is_not_read_whether_or_not_its_length_is_declared() {
    let transport = HttpTransport::new().unwrap();
    let request = |url: &str, limit: u64| HttpRequest {
        method: Method::Get,
        url: url.to_owned(),
        bearer: None,
        registration: None,
        content_type: None,
        body: None,
        timeout_ms: 10_000,
        max_response_bytes: limit,
    };
    for declared in [true, false] {
        let url = big_answer_server(3 * 1024 * 1024, declared);
        let err: TransportError = transport.send(request(&url, 1024 * 1024)).await.unwrap_err();
        assert!(err.is_response_too_large(), "declared {declared}: {err}");
        assert!(err.0.contains("1048576"), "{err}");
        let ok = transport.send(request(&url, 4 * 1024 * 1024)).await.unwrap();
        assert_eq!(ok.body.len(), 3 * 1024 * 1024, "within the limit it is read whole");
    }
}

#[tokio::test]
async fn a_pull_page_too_large_to_read_is_asked_for_again_with_fewer_events() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    for i in 0..5 {
        a.engine.insert("todos", todo(&format!("r{i}"), "x")).unwrap();
    }
    a.sync().await;
    let b = Device::new(&secret, &[&relay.url]);
    let limit = simplysync::engine::EngineOptions::default().max_response_bytes();
    b.net.faults.borrow_mut().push_back(crate::harness::Fault {
        matches: Box::new(|r| is_pull(r) && (r.url.ends_with("limit=1000") || r.url.ends_with("limit=500"))),
        respond: Box::new(move |_| Err(TransportError::response_too_large(limit))),
        times: None,
    });
    let r = b.sync().await;
    assert_eq!(r.relays[0].error, None, "{r:?}");
    assert_eq!(b.todos().len(), 5);
    assert!(b.net.sent("GET", "limit=250") >= 1, "halved twice, then read");
}

#[tokio::test]
async fn a_404_clears_the_purge_queue_only_when_the_relay_confirms_it_does_not_know_the_owner() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    d.engine.insert("todos", todo("gone", "x")).unwrap();
    d.sync().await;
    d.engine.delete("todos", "gone").unwrap();
    d.engine.purge_deleted().unwrap();
    assert_eq!(d.engine.purge_queue_len().unwrap(), 1);
    let is_compact = |r: &HttpRequest| r.url.ends_with("/v1/streams/compact");
    // A proxy's page, then the relay's JSON error that /v1/status contradicts: the queue stays.
    d.net.answer(is_compact, 404, "<html>Not Found</html>", None, Some(1));
    d.sync().await;
    assert_eq!(d.status(0).error.and_then(|e| e.code).as_deref(), Some("foreign_404"));
    d.net.answer(is_compact, 404, r#"{"error":"unknown_owner","message":"?"}"#, None, Some(1));
    d.sync().await;
    assert_eq!(d.status(0).error.and_then(|e| e.code).as_deref(), Some("unconfirmed_404"));
    assert_eq!(d.engine.purge_queue_len().unwrap(), 1, "nothing was cleared");
    // Delivered for real.
    d.sync().await;
    assert_eq!(d.engine.purge_queue_len().unwrap(), 0);
    assert_eq!(relay.events_of(&d.engine.owner_id()), 0, "the relay dropped the stream");

    // A relay that really does not know the owner: the queue is cleared.
    let other = TestRelay::start();
    d.engine.add_relay(&other.url).unwrap();
    d.engine.insert("todos", todo("gone2", "x")).unwrap();
    d.engine.delete("todos", "gone2").unwrap();
    d.engine.purge_deleted().unwrap();
    // The new relay gets the purge before anything is pushed to it: it answers unknown_owner,
    // and /v1/status agrees.
    d.sync().await;
    assert_eq!(d.engine.purge_queue_len().unwrap(), 0, "a confirmed unknown owner has nothing to compact");
}

#[tokio::test]
async fn oversized_quarantined_envelopes_are_cut_and_the_quarantine_is_bounded_in_bytes() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    a.engine.insert("todos", todo("real", "x")).unwrap();
    a.sync().await;
    let b = Device::new(&secret, &[&relay.url]);
    // A relay without a size limit serves envelopes that fail authentication: 5 of 1 MB and
    // 100 of 200 KB.
    *b.net.rewrite.borrow_mut() = Some(Box::new(move |req, mut resp: HttpResponse| {
        if is_pull(req) && resp.status == 200 {
            let mut v: serde_json::Value = serde_json::from_slice(&resp.body).unwrap();
            let events = v["events"].as_array_mut().unwrap();
            if let Some(first) = events.first().cloned() {
                let forged = |id: String, size: usize| {
                    let mut e = first.clone();
                    e["eventId"] = id.into();
                    e["ciphertext"] = "A".repeat(size).into();
                    e
                };
                for i in 0..5 {
                    events.push(forged(format!("zbig{i}"), 1_000_000));
                }
                for i in 0..100 {
                    events.push(forged(format!("mid{i:03}"), 200_000));
                }
            }
            resp.body = v.to_string().into_bytes();
        }
        resp
    }));
    b.sync().await;
    assert!(b.engine.get("todos", "real").unwrap().is_some(), "the real event applied");
    let q = b.engine.quarantined().unwrap();
    let cut: Vec<_> = q.iter().filter(|e| e.event_id.starts_with("zbig")).collect();
    assert_eq!(cut.len(), 5, "the newest are kept");
    assert!(cut.iter().all(|e| e.envelope_json.len() == 64 * 1024 && e.detail.contains("bytes; its first")));
    assert!(q.iter().all(|e| e.envelope_json.len() <= 256 * 1024));
    let bytes: usize = q.iter().map(|e| e.envelope_json.len()).sum();
    assert!(bytes <= 16 * 1024 * 1024, "at most 16 MiB per relay: {bytes}");
    let s = b.status(0);
    assert!(s.quarantine_dropped > 0, "older ones over the byte cap were dropped and counted: {s:?}");
    assert_eq!(s.quarantined + s.quarantine_dropped, 105);
}

#[tokio::test]
async fn pulls_wait_while_too_many_events_are_deferred_and_nothing_is_dropped() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    a.engine.insert("todos", todo("later", "x")).unwrap();
    a.sync().await;
    let path = temp_dir("deferred-cap").join("device.sqlite");
    let spec = || DeviceSpec {
        secret: &secret,
        relays: vec![relay.url.clone()],
        schema: todo_schema(1, &[]),
        db_path: Some(path.clone()),
        clock_ms: T0,
    };
    drop(Device::open(spec())); // creates the database
                                // Fill the deferred set to its cap, as a flood of events from a clock far ahead would.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("BEGIN").unwrap();
        let mut stmt = conn
            .prepare(
                "INSERT INTO _sync_deferred (event_id, relay, envelope_json, reason, detail, retry_at, attempts, first_seen_at)
                 VALUES (?1, ?2, '{}', 'FUTURE_HLC', 'from a clock far ahead', 9000000000000, 0, 0)",
            )
            .unwrap();
        for i in 0..simplysync::store::inbox::DEFERRED_CAP {
            stmt.execute(rusqlite::params![format!("held{i:06}"), relay.url]).unwrap();
        }
        drop(stmt);
        conn.execute_batch("COMMIT").unwrap();
    }
    let b = Device::open(spec());
    let r = b.sync().await;
    assert_eq!(r.relays[0].error.as_ref().and_then(|e| e.code.as_deref()), Some("deferred_full"), "{r:?}");
    assert!(b.engine.get("todos", "later").unwrap().is_none(), "the page was not applied");
    let cursor = b.engine.inspect_query("SELECT count(*) AS n FROM _sync_meta WHERE key LIKE 'cursor:%'", &[]).unwrap();
    assert_eq!(cursor[0].get("n").unwrap().as_f64(), Some(0.0), "and the cursor did not move");
    drop(b);
    // Once fewer are held, the pull goes on and gets the event the relay kept.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute("DELETE FROM _sync_deferred WHERE event_id LIKE 'held%'", [])
        .unwrap();
    let b = Device::open(spec());
    b.sync().await;
    assert!(b.engine.get("todos", "later").unwrap().is_some());
}

/// A new device of an owner whose other device pushed `todos` rows to `relay`.
async fn fresh_device_of_an_owner_with(relay: &TestRelay, todos: usize) -> Device {
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    let ops: Vec<Op> =
        (0..todos).map(|i| Op::Insert { table: "todos".into(), row: todo(&format!("t{i}"), "x") }).collect();
    a.engine.transaction(&ops).unwrap();
    a.sync().await;
    Device::new(&secret, &[&relay.url])
}

#[tokio::test]
async fn the_next_page_is_requested_before_the_current_one_is_applied_and_never_past_the_last() {
    let relay = TestRelay::start();
    let b = fresh_device_of_an_owner_with(&relay, 2500).await;
    // At each applied page, how many page requests had been sent.
    let seen = Rc::new(std::cell::RefCell::new(Vec::new()));
    let (net, record) = (b.net.clone(), seen.clone());
    b.engine.subscribe(None, move |_| record.borrow_mut().push(net.started("GET", "/v1/events?")));
    let r = b.sync().await;
    assert_eq!(r.relays[0].received, 2500);
    assert_eq!(b.count("todos"), 2500);
    assert_eq!(
        *seen.borrow(),
        vec![2, 3, 3],
        "page 2 asked for while page 1 applied, page 3 while page 2; none after the last"
    );
    assert_eq!(b.net.started("GET", "/v1/events?"), 3);
}

#[tokio::test]
async fn a_page_request_sent_ahead_that_got_no_answer_is_asked_again_at_once() {
    let relay = TestRelay::start();
    let b = fresh_device_of_an_owner_with(&relay, 1500).await;
    // The second page's request, sent while the first page applied, gets no answer once (as if
    // its deadline ran out during a long apply).
    b.net.faults.borrow_mut().push_back(crate::harness::Fault {
        matches: Box::new(|r| is_pull(r) && after_of(r) == "1000"),
        respond: Box::new(|_| Err(TransportError("the relay did not answer in time (injected)".into()))),
        times: Some(1),
    });
    let r = b.sync().await;
    assert_eq!(r.relays[0].error, None, "{:?}", r.relays[0].error);
    assert_eq!(b.count("todos"), 1500);
    assert_eq!(b.net.started("GET", "after=1000"), 2, "asked again once");
    assert_eq!(b.status(0).state, RelayState::Synced);
}

/// A device with `todos` rows written and not yet pushed.
fn device_with_a_backlog(relay: &TestRelay, todos: usize) -> Device {
    let d = Device::new(&phrase(), &[&relay.url]);
    let ops: Vec<Op> =
        (0..todos).map(|i| Op::Insert { table: "todos".into(), row: todo(&format!("t{i}"), "x") }).collect();
    d.engine.transaction(&ops).unwrap();
    d
}

/// At each push's answer from the relay, how many pushes had been started.
fn started_at_each_push_answer(d: &Device) -> Rc<std::cell::RefCell<Vec<usize>>> {
    let seen = Rc::new(std::cell::RefCell::new(Vec::new()));
    let (net, record) = (Rc::downgrade(&d.net), seen.clone());
    *d.net.rewrite.borrow_mut() = Some(Box::new(move |req, resp| {
        if is_push(req) {
            record.borrow_mut().push(net.upgrade().unwrap().started("POST", "/v1/events"));
        }
        resp
    }));
    seen
}

/// Answers the `nth` push (counting from 1) once with `respond` instead of the relay.
fn fail_push(d: &Device, nth: u32, respond: impl Fn() -> Result<HttpResponse, TransportError> + 'static) {
    let pushes = Rc::new(std::cell::Cell::new(0));
    d.net.faults.borrow_mut().push_back(crate::harness::Fault {
        matches: Box::new(move |r| {
            if is_push(r) {
                pushes.set(pushes.get() + 1);
            }
            is_push(r) && pushes.get() == nth
        }),
        respond: Box::new(move |_| respond()),
        times: Some(1),
    });
}

#[tokio::test]
async fn a_backlog_goes_out_with_the_next_push_sent_before_the_previous_one_is_answered() {
    let relay = TestRelay::start();
    let d = device_with_a_backlog(&relay, 3500);
    let seen = started_at_each_push_answer(&d);
    let r = d.sync().await;
    assert_eq!((r.relays[0].pushed, r.relays[0].error.as_ref()), (3500, None), "{r:?}");
    assert_eq!(
        *seen.borrow(),
        vec![1, 3, 4, 4],
        "the first push alone; the third sent before the second was answered, the fourth before the third"
    );
    assert_eq!(relay.events_of(&d.engine.owner_id()), 3500);
    assert_eq!(d.status(0).pending, 0);
}

#[tokio::test]
async fn a_push_sent_ahead_that_failed_is_sent_again_alone_and_nothing_is_lost() {
    let no_answer: fn() -> Result<HttpResponse, TransportError> =
        || Err(TransportError("the relay did not answer in time (injected)".into()));
    let busy: fn() -> Result<HttpResponse, TransportError> = || {
        Ok(HttpResponse::new(
            503,
            r#"{"error":"overloaded","message":"too many requests in flight"}"#.as_bytes().to_vec(),
        ))
    };
    for (failure, respond) in [("no answer", no_answer), ("503", busy)] {
        let relay = TestRelay::start();
        let d = device_with_a_backlog(&relay, 5500);
        // The third push (the first sent ahead) fails once.
        fail_push(&d, 3, respond);
        let seen = started_at_each_push_answer(&d);
        let r = d.sync().await;
        assert_eq!((r.relays[0].pushed, r.relays[0].error.as_ref()), (5500, None), "{failure}: {r:?}");
        // 1, 2, 3 (failed), 4 (sent ahead, dropped with it), then 3 again, 4, 5 and 6, each
        // alone: after a push sent ahead failed, the pass sends one at a time.
        assert_eq!(d.net.started("POST", "/v1/events"), 8, "{failure}");
        assert_eq!(*seen.borrow(), vec![1, 3, 5, 6, 7, 8], "{failure}");
        assert_eq!(relay.events_of(&d.engine.owner_id()), 5500, "{failure}");
        assert_eq!(d.status(0).pending, 0, "{failure}");
        assert_eq!(d.status(0).state, RelayState::Synced, "{failure}");
    }
}

#[tokio::test]
async fn a_failed_push_ends_the_push_with_nothing_after_it_marked_delivered() {
    let relay = TestRelay::start();
    let d = device_with_a_backlog(&relay, 3500);
    // The second push (the first with another sent after it) is refused.
    refuse_push(&d, 2, || {});
    let r = d.sync().await;
    assert_eq!(r.relays[0].pushed, 1000, "{r:?}");
    assert!(r.relays[0].error.is_some(), "{r:?}");
    assert_eq!(d.status(0).pending, 2500, "the push sent ahead is not counted as delivered, stored or not");
    d.sync().await;
    assert_eq!(d.status(0).pending, 0);
    assert_eq!(relay.events_of(&d.engine.owner_id()), 3500);
}

/// Every push answer from the relay takes 25 s of the engine's clock.
fn pushes_take_25_s(d: &Device) {
    let clock = d.clock.clone();
    *d.net.rewrite.borrow_mut() = Some(Box::new(move |req, resp| {
        if is_push(req) {
            clock.advance(25_000);
        }
        resp
    }));
}

/// Answers the `nth` push (counting from 1) with 503 once, after `then` ran.
fn refuse_push(d: &Device, nth: u32, then: impl Fn() + 'static) {
    fail_push(d, nth, move || {
        then();
        Ok(HttpResponse::new(503, br#"{"error":"unavailable","message":"injected"}"#.to_vec()))
    });
}

#[tokio::test]
async fn pushes_sent_ahead_keep_to_the_pass_budget_and_a_failed_one_goes_again_even_past_it() {
    let relay = TestRelay::start();
    let d = device_with_a_backlog(&relay, 4500);
    pushes_take_25_s(&d);
    refuse_push(&d, 4, || {});
    let r = d.sync().await;
    // 1 alone (25 s); 2, with 3 sent ahead (50 s); 4 sent ahead and refused, 3 answered (75 s);
    // 5 is not sent ahead past the minute; 4 goes again alone, as it was sent in time (100 s);
    // then the pass ends with the rest for the next one.
    assert_eq!(
        (r.relays[0].pushed, r.relays[0].more, r.relays[0].error.as_ref()),
        (4000, true, None),
        "{RELAY_PASS_BUDGET_MS} ms budget"
    );
    assert_eq!(d.net.started("POST", "/v1/events"), 5);
    assert_eq!(relay.events_of(&d.engine.owner_id()), 4000);
}

#[tokio::test]
async fn a_push_refused_as_the_pass_runs_out_of_time_reports_its_error_and_not_more() {
    let relay = TestRelay::start();
    let d = device_with_a_backlog(&relay, 4500);
    pushes_take_25_s(&d);
    // The second push is refused, and by then the pass's minute is over: the push that would
    // have gone ahead of it is not sent, and the pass says why it stopped, not "more".
    let clock = d.clock.clone();
    refuse_push(&d, 2, move || clock.advance(40_000));
    let r = d.sync().await;
    assert_eq!((r.relays[0].pushed, r.relays[0].more), (1000, false), "{r:?}");
    assert!(r.relays[0].error.is_some(), "{r:?}");
    assert_eq!(d.net.started("POST", "/v1/events"), 2);
}
