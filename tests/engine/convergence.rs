use crate::harness::{phrase, todo, Device, TestRelay};
use simplysync::protocol::parse_json;

#[tokio::test]
async fn two_devices_converge_through_the_real_relay() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    let b = Device::new(&secret, &[&relay.url]);
    a.engine.insert("todos", todo("1", "from a")).unwrap();
    b.engine.insert("todos", todo("2", "from b")).unwrap();
    a.sync().await;
    b.sync().await;
    a.sync().await;
    assert_eq!(a.snapshot(), b.snapshot());
    assert_eq!(a.todos().len(), 2);
    let report = a.sync().await;
    assert_eq!(report.relays[0].error, None);
}

#[tokio::test]
async fn concurrent_offline_edits_converge_to_the_row_with_the_greatest_hlc() {
    let relay = TestRelay::start();
    let secret = phrase();
    let devices: Vec<Device> = (0..3).map(|_| Device::new(&secret, &[&relay.url])).collect();
    devices[0].engine.insert("todos", todo("r", "original")).unwrap();
    devices[0].sync().await;
    for d in &devices[1..] {
        d.sync().await;
    }
    // All three edit the same row while offline, at different wall times.
    for (i, d) in devices.iter().enumerate() {
        d.clock.advance(1000 * (i as u64 + 1));
        d.engine.update("todos", "r", parse_json(&format!(r#"{{"title":"edit {i}"}}"#)).unwrap()).unwrap();
    }
    for _ in 0..2 {
        for d in &devices {
            d.sync().await;
        }
    }
    let snap = devices[0].snapshot();
    for d in &devices[1..] {
        assert_eq!(d.snapshot(), snap);
    }
    assert_eq!(devices[0].todos()[0].1.as_str(), Some("edit 2"), "the greatest HLC wins the whole row");
}

#[tokio::test]
async fn a_new_device_restores_identical_state_from_the_phrase() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    for i in 0..250 {
        a.engine.insert("todos", todo(&format!("t{i:03}"), &format!("item {i}"))).unwrap();
    }
    for i in 0..50 {
        a.engine.update("todos", &format!("t{i:03}"), parse_json(r#"{"done":true}"#).unwrap()).unwrap();
    }
    a.engine.delete("todos", "t100").unwrap();
    a.sync().await;
    let fresh = Device::new(&secret, &[&relay.url]);
    let progress = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let p = progress.clone();
    fresh.engine.on_progress(move |e| p.borrow_mut().push(e.clone()));
    let report = fresh.sync().await;
    // Edits made before the sync collapse into each row's latest version: 250 events.
    assert_eq!(report.relays[0].received, 250);
    assert_eq!(fresh.snapshot(), a.snapshot());
    let last = progress.borrow().last().cloned().unwrap();
    assert!(
        last.done && last.events_received == 250 && last.events_applied == 250 && last.head_seq == Some(250),
        "{last:?}"
    );
}

#[tokio::test]
async fn an_event_is_kept_until_every_relay_acknowledged_it_and_relays_fail_independently() {
    let r1 = TestRelay::start();
    let r2 = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&r1.url, &r2.url]);
    a.engine.insert("todos", todo("x", "both")).unwrap();
    a.net.fail(&r2.url.clone().leak()[..], 503, None);
    let report = a.sync().await;
    assert_eq!(report.relays[0].pushed, 1);
    assert_eq!(report.relays[1].error.as_ref().unwrap().status, Some(503));
    let statuses = a.engine.relay_statuses_local().unwrap();
    assert_eq!((statuses[0].pending, statuses[1].pending), (0, 1));
    assert_eq!(
        a.engine.inspect_query("SELECT count(*) AS n FROM _sync_outbox", &[]).unwrap()[0].get("n").unwrap().as_f64(),
        Some(1.0)
    );
    a.net.clear();
    let report = a.sync().await;
    assert_eq!(report.relays[1].pushed, 1);
    assert_eq!(
        a.engine.inspect_query("SELECT count(*) AS n FROM _sync_outbox", &[]).unwrap()[0].get("n").unwrap().as_f64(),
        Some(0.0)
    );
}

#[tokio::test]
async fn a_newly_added_relay_gets_every_current_row_even_after_the_outbox_was_pruned() {
    let r1 = TestRelay::start();
    let r2 = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&r1.url]);
    a.engine.insert("todos", todo("x", "old")).unwrap();
    a.engine.insert("todos", todo("y", "older")).unwrap();
    a.engine.delete("todos", "y").unwrap();
    a.sync().await;
    assert_eq!(
        a.engine.inspect_query("SELECT count(*) AS n FROM _sync_outbox", &[]).unwrap()[0].get("n").unwrap().as_f64(),
        Some(0.0)
    );
    a.engine.add_relay(&r2.url).unwrap();
    let report = a.sync().await;
    assert_eq!(report.relays[1].pushed, 2, "one canonical upsert per current row, tombstone included");
    assert_eq!(report.relays[0].pushed, 0, "the old relay is not sent them again");
    let b = Device::new(&secret, &[&r2.url]);
    b.sync().await;
    assert_eq!(b.snapshot(), a.snapshot());
}
