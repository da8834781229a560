//! Live sync through the real relay: the engine's driver keeps one wait open per relay, pulls
//! on a notice, falls back to polling where the relay has no wait endpoint, reconnects with
//! backoff, and keeps its poll timer as a safety net only while the channel is healthy.

use std::future::Future;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_util::future::join;
use simplysync::engine::io::Clock;
use simplysync::engine::{Driver, DriverOptions, LiveState};
use simplysync::native::TokioTimer;

use simplysync::engine::io::TransportError;

use crate::harness::{phrase, todo, Device, Fault, TestRelay};

const HOUR_MS: u64 = 3_600_000;

fn driver(d: &Device, interval_ms: u64, live: bool) -> Rc<Driver> {
    Driver::new(d.engine.clone(), Rc::new(TokioTimer), DriverOptions { interval_ms, live }, None)
}

/// Runs the drivers while `body` runs, then stops them and waits for them to end.
async fn driving<T>(drivers: &[&Rc<Driver>], body: impl Future<Output = T>) -> T {
    let runs = futures_util::future::join_all(drivers.iter().map(|d| (*d).clone().run()));
    let body = async {
        let out = body.await;
        for d in drivers {
            d.stop();
        }
        out
    };
    join(runs, body).await.1
}

/// Waits (up to 15 s of real time) until `ready` holds.
async fn until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn has(d: &Device, id: &str) -> bool {
    d.engine.get("todos", id).unwrap().is_some()
}

fn live_state(d: &Device) -> LiveState {
    d.status(0).live.state
}

/// A and B of one owner, both synced once (the relay knows the owner; B has a cursor).
async fn pair(relay: &TestRelay) -> (Device, Device) {
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    let b = Device::new(&secret, &[&relay.url]);
    a.engine.insert("todos", todo("0", "first")).unwrap();
    a.sync().await;
    b.sync().await;
    (a, b)
}

#[tokio::test]
async fn a_write_on_one_device_shows_on_an_idle_other_device_without_sync_or_a_poll() {
    let relay = TestRelay::start();
    let (a, b) = pair(&relay).await;
    // B polls once an hour: only a live notice can bring A's write within the test.
    let drive_b = driver(&b, HOUR_MS, true);
    driving(&[&drive_b], async {
        until("B's channel is live", || live_state(&b) == LiveState::Live).await;
        a.engine.insert("todos", todo("1", "live")).unwrap();
        a.sync().await;
        until("B has A's write", || has(&b, "1")).await;
        assert_eq!(b.status(0).live.reason, None);
    })
    .await;
    assert_eq!(live_state(&b), LiveState::Off, "a stopped driver shows its channel off");
}

#[tokio::test]
async fn a_relay_without_the_wait_endpoint_is_polled_and_no_wait_is_sent() {
    let relay = TestRelay::start_with(&[("LIVE_MAX_WAITERS", "0")]);
    let (a, b) = pair(&relay).await;
    let drive_b = driver(&b, 200, true);
    driving(&[&drive_b], async {
        until("B knows the relay has no live notices", || live_state(&b) == LiveState::Polling).await;
        let reason = b.status(0).live.reason.unwrap();
        assert!(reason.contains("offers no live notices"), "{reason}");
        a.engine.insert("todos", todo("1", "polled")).unwrap();
        a.sync().await;
        until("B has A's write (by polling)", || has(&b, "1")).await;
    })
    .await;
    assert_eq!(b.net.started("GET", "/v1/events/wait"), 0, "no wait against a relay that does not offer it");
    assert_eq!(b.net.started("GET", "/health"), 1, "support is detected once");
}

#[tokio::test]
async fn while_the_channel_is_healthy_the_poll_timer_is_only_a_safety_net() {
    let relay = TestRelay::start();
    let (_a, b) = pair(&relay).await;
    let pulls = |d: &Device| d.net.started("GET", "/v1/events?ownerId");
    // Every 100 ms without live notices…
    let polling = driver(&b, 100, false);
    let before = pulls(&b);
    driving(&[&polling], tokio::time::sleep(Duration::from_millis(1000))).await;
    let polled = pulls(&b) - before;
    assert!(polled >= 5, "without a channel B polls: {polled} pulls in a second");
    // …and with them: the boot pass, then nothing until the one-minute safety net.
    let live = driver(&b, 100, true);
    driving(&[&live], async {
        until("B's channel is live", || live_state(&b) == LiveState::Live).await;
        tokio::time::sleep(Duration::from_millis(300)).await; // the boot pass ends
        let before = pulls(&b);
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(pulls(&b) - before, 0, "no poll while the channel is healthy");
    })
    .await;
}

#[tokio::test]
async fn the_channel_reconnects_with_backoff_when_the_relay_goes_away_and_comes_back() {
    let mut relay = TestRelay::start();
    let (a, b) = pair(&relay).await;
    let drive_b = driver(&b, HOUR_MS, true);
    let tries = || b.net.started("GET", "/v1/events/wait") + b.net.started("GET", "/health");
    driving(&[&drive_b], async {
        until("B's channel is live", || live_state(&b) == LiveState::Live).await;
        relay.stop();
        until("B is reconnecting", || live_state(&b) == LiveState::Reconnecting).await;
        let status = b.status(0).live;
        assert!(status.reason.as_deref().unwrap().contains("the wait failed"), "{status:?}");
        assert!(status.retry_at.is_some(), "{status:?}");
        // Backing off: over two seconds, a handful of tries, not a storm.
        let before = tries();
        let seen = Rc::new(std::cell::RefCell::new(Vec::new()));
        let log = seen.clone();
        let listener = b.engine.on_status(move |s| log.borrow_mut().push(s[0].live.state));
        tokio::time::sleep(Duration::from_secs(2)).await;
        b.engine.unsubscribe(listener);
        assert!(!seen.borrow().contains(&LiveState::Live), "shown live while the relay is down: {:?}", seen.borrow());
        let tried = tries() - before;
        assert!((1..=4).contains(&tried), "{tried} tries in 2 s");
        relay.restart();
        until("B is live again", || live_state(&b) == LiveState::Live).await;
        a.engine.insert("todos", todo("1", "after the outage")).unwrap();
        a.sync().await;
        until("B has A's write", || has(&b, "1")).await;
    })
    .await;
}

#[tokio::test]
async fn coming_back_online_reconnects_at_once_instead_of_waiting_out_the_backoff() {
    let mut relay = TestRelay::start();
    let (_a, b) = pair(&relay).await;
    let drive_b = driver(&b, HOUR_MS, true);
    driving(&[&drive_b], async {
        until("B's channel is live", || live_state(&b) == LiveState::Live).await;
        relay.stop();
        // Let the backoff grow past 4 s.
        until("the next try is 4 s away", || {
            let s = b.status(0).live;
            s.retry_at.is_some_and(|t| t >= b.clock.now_ms() + 4_000)
        })
        .await;
        relay.restart();
        let asked = Instant::now();
        drive_b.request(simplysync::engine::SyncTrigger::Online);
        until("B is live again", || live_state(&b) == LiveState::Live).await;
        assert!(asked.elapsed() < Duration::from_secs(3), "reconnected after {:?}", asked.elapsed());
    })
    .await;
}

#[tokio::test]
async fn a_device_that_slept_reconnects_and_syncs_when_it_wakes() {
    let relay = TestRelay::start();
    let (_a, b) = pair(&relay).await;
    let drive_b = driver(&b, 100, true);
    let waits = || b.net.started("GET", "/v1/events/wait");
    driving(&[&drive_b], async {
        until("B's channel is live", || live_state(&b) == LiveState::Live).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = waits();
        // Ten minutes pass on the wall clock while no timer fires: the device slept.
        b.clock.advance(10 * 60 * 1000);
        until("B opened a new wait", || waits() > before).await;
    })
    .await;
}

#[tokio::test]
async fn a_notice_whose_pull_keeps_failing_backs_off_instead_of_spinning() {
    let relay = TestRelay::start();
    let (a, b) = pair(&relay).await;
    let drive_b = driver(&b, HOUR_MS, true);
    let waits = || b.net.started("GET", "/v1/events/wait");
    driving(&[&drive_b], async {
        until("B's channel is live", || live_state(&b) == LiveState::Live).await;
        // Pulls get no answer (waits do): the notice's pass cannot catch up.
        b.net.faults.borrow_mut().push_back(Fault {
            matches: Box::new(|r| r.url.contains("/v1/events?ownerId")),
            respond: Box::new(|_| Err(TransportError("connection reset (injected)".into()))),
            times: None,
        });
        a.engine.insert("todos", todo("1", "unpullable")).unwrap();
        a.sync().await;
        until("B is reconnecting", || live_state(&b) == LiveState::Reconnecting).await;
        let reason = b.status(0).live.reason.unwrap();
        assert!(reason.contains("did not catch up"), "{reason}");
        let before = waits();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let tries = waits() - before;
        assert!(tries <= 4, "{tries} waits in 2 s while every pull fails");
        b.net.clear();
        // The next notice lifts the backoff the failed pulls caused (the relay answers again).
        until("B has A's write once pulls work", || has(&b, "1")).await;
    })
    .await;
}

#[tokio::test]
async fn many_waiting_devices_do_not_starve_pushes() {
    // A relay that handles 4 requests at once, and 12 devices of other owners waiting on it.
    let relay = TestRelay::start_with(&[("MAX_IN_FLIGHT_REQUESTS", "4")]);
    let idle: Vec<Device> = (0..12).map(|_| Device::new(&phrase(), &[&relay.url])).collect();
    for (i, d) in idle.iter().enumerate() {
        d.engine.insert("todos", todo(&format!("idle-{i}"), "idle")).unwrap();
        d.sync().await;
    }
    let (a, b) = pair(&relay).await;
    let idle_drivers: Vec<Rc<Driver>> = idle.iter().map(|d| driver(d, HOUR_MS, true)).collect();
    let drive_b = driver(&b, HOUR_MS, true);
    let mut all: Vec<&Rc<Driver>> = idle_drivers.iter().collect();
    all.push(&drive_b);
    driving(&all, async {
        until("every channel is live", || {
            live_state(&b) == LiveState::Live && idle.iter().all(|d| live_state(d) == LiveState::Live)
        })
        .await;
        for i in 0..300 {
            a.engine.insert("todos", todo(&format!("w{i}"), "pushed")).unwrap();
        }
        let report = a.sync().await;
        assert_eq!(report.relays[0].error, None, "the push went through");
        assert_eq!(report.relays[0].pushed, 300);
        until("B has all 300", || (0..300).all(|i| has(&b, &format!("w{i}")))).await;
    })
    .await;
}

#[tokio::test]
async fn the_safety_net_still_polls_once_a_minute_while_the_channel_is_healthy() {
    let relay = TestRelay::start();
    let (_a, b) = pair(&relay).await;
    let pulls = || b.net.started("GET", "/v1/events?ownerId");
    let drive_b = driver(&b, 100, true);
    driving(&[&drive_b], async {
        until("B's channel is live", || live_state(&b) == LiveState::Live).await;
        tokio::time::sleep(Duration::from_millis(300)).await; // the boot pass ends
        let before = pulls();
        // Seventy seconds pass in ten-second steps (no step long enough to look like a sleep).
        for _ in 0..7 {
            b.clock.advance(10_000);
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        until("the safety-net poll", || pulls() > before).await;
        assert_eq!(live_state(&b), LiveState::Live);
    })
    .await;
}

#[tokio::test]
async fn a_head_past_the_last_remaining_event_does_not_keep_the_channel_answering() {
    let relay = TestRelay::start();
    let (a, b) = pair(&relay).await;
    // A writes a row and purges it: the relay compacts its events away, so the owner's head
    // seq stays past the last event B can ever pull.
    a.engine.insert("todos", todo("gone", "soon purged")).unwrap();
    a.sync().await;
    assert_eq!(a.engine.purge_rows("todos", &["gone".to_owned()]).unwrap(), 1);
    a.sync().await;
    let drive_b = driver(&b, HOUR_MS, true);
    let waits = || b.net.started("GET", "/v1/events/wait");
    driving(&[&drive_b], async {
        until("B's channel is live", || live_state(&b) == LiveState::Live).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = waits();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(live_state(&b), LiveState::Live, "{:?}", b.status(0).live);
        assert!(waits() - before <= 1, "{} waits in 1.5 s: the wait answers at once", waits() - before);
    })
    .await;
    assert!(!has(&b, "gone"));
}

#[tokio::test]
async fn notices_do_not_override_a_relays_retry_after() {
    let relay = TestRelay::start();
    let (a, b) = pair(&relay).await;
    let pulls = || b.net.started("GET", "/v1/events?ownerId");
    let drive_b = driver(&b, HOUR_MS, true);
    driving(&[&drive_b], async {
        until("B's channel is live", || live_state(&b) == LiveState::Live).await;
        let busy = r#"{"error":"overloaded","message":"busy"}"#;
        b.net.answer(|r| r.url.contains("/v1/events?ownerId"), 503, busy, Some("3600"), None);
        a.engine.insert("todos", todo("1", "while the relay is busy")).unwrap();
        a.sync().await;
        until("B's notice pass met the 503", || b.status(0).backoff_until.is_some()).await;
        let before = pulls();
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(pulls() - before, 0, "notices kept answering, but the relay asked for an hour");
        assert_eq!(live_state(&b), LiveState::Reconnecting);
    })
    .await;
}

#[tokio::test]
async fn a_wait_answered_at_once_with_nothing_new_is_spaced_out_longer_each_time_not_spun() {
    for (status, body) in [(200, r#"{"headSeq":1}"#), (204, "")] {
        let relay = TestRelay::start();
        let (a, b) = pair(&relay).await;
        let drive_b = driver(&b, HOUR_MS, true);
        let waits = || b.net.started("GET", "/v1/events/wait");
        driving(&[&drive_b], async {
            until("B's channel is live", || live_state(&b) == LiveState::Live).await;
            // From now on a cache in front of the relay answers every wait at once with what
            // B has read; B's wait held now ends with A's next write.
            b.net.answer(|r| r.url.contains("/v1/events/wait"), status, body, None, None);
            a.engine.insert("todos", todo("1", "x")).unwrap();
            a.sync().await;
            b.engine.sync(simplysync::engine::SyncTrigger::Manual).await.unwrap();
            assert!(has(&b, "1"));
            let before = waits();
            // Spaced 1 s, 2 s, 4 s…: at most 3 in 3.5 s; spinning would be hundreds (looked at
            // every 50 ms, so a spin fails at once).
            for _ in 0..70 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let tries = waits() - before;
                assert!(tries <= 3, "{status}: {tries} waits so soon");
            }
            assert!(waits() > before, "{status}: the cache was asked");
            b.net.clear();
        })
        .await;
    }
}
