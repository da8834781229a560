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
            // A lone event answered 413 is set aside for this relay (a relay with smaller limits).
            assert_eq!(d.engine.relay_statuses_local().unwrap()[0].set_aside.events, 1);
            assert_eq!(d.engine.retry_set_aside().unwrap(), 1);
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
async fn network_errors_5xx_and_429_retry_within_the_poll_cadence_at_first() {
    for status in [429, 500, 502, 503] {
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
