//! A page opener (the browser's opener worker) fetches and decrypts the pages a pull sends
//! ahead. It is the package's own code holding the same keys; what the engine guards against is
//! an opener that is not ready, fails, or hands back openings that are not their envelopes'
//! (garbage, shifted by one): then it applies and files exactly what it would have without it.

use std::cell::Cell;
use std::rc::Rc;

use crate::harness::{phrase, todo, Device, FaultyTransport, TestRelay};
use simplysync::engine::io::{HttpRequest, LocalFuture, OpenedPull, PageOpener, Transport, TransportError};
use simplysync::engine::{open_page, Op, RelayPassReport};
use simplysync::protocol::{Identity, Secret};

/// What the test opener answers.
#[derive(Clone, Copy, PartialEq)]
enum Answers {
    /// Fetched and opened with the owner's keys.
    Honestly,
    /// Fetched, but every opening is another text.
    Garbage,
    /// Fetched, every opening that of the envelope after it.
    Shifted,
    /// "Not sent": not ready.
    NotReady,
    /// No answer (a dead worker).
    Failing,
}

/// An opener on the device's own transport (so its faults and rewrites apply to it too), on
/// the engine's thread.
struct TestOpener {
    net: Rc<FaultyTransport>,
    identity: Rc<Identity>,
    answers: Answers,
    pulls: Rc<Cell<u32>>,
}

impl PageOpener for TestOpener {
    fn pull_opened(
        &self,
        request: HttpRequest,
        owner_id: &str,
    ) -> LocalFuture<'static, Result<OpenedPull, TransportError>> {
        let (net, identity, answers, owner) =
            (self.net.clone(), self.identity.clone(), self.answers, owner_id.to_owned());
        self.pulls.set(self.pulls.get() + 1);
        Box::pin(async move {
            match answers {
                Answers::NotReady => return Ok(None),
                Answers::Failing => return Err(TransportError("the opener worker failed (test)".into())),
                _ => {}
            }
            let resp = net.send(request).await?;
            let mut openings = open_page(&identity, &owner, &resp.body);
            if let Some(o) = openings.as_mut() {
                match answers {
                    Answers::Garbage => o.iter_mut().for_each(|p| *p = Some(br#"{"not":"it"}"#.to_vec())),
                    Answers::Shifted => o.rotate_left(1),
                    _ => {}
                }
            }
            Ok(Some((resp, openings)))
        })
    }
}

/// A device of `secret` on `relay` whose pulls sent ahead go through a test opener; the
/// opener's pull count.
fn device_with_opener(secret: &str, relay: &TestRelay, answers: Answers) -> (Device, Rc<Cell<u32>>) {
    let d = Device::new(secret, &[&relay.url]);
    let identity = Rc::new(Secret::parse(secret).unwrap().identity());
    let pulls = Rc::new(Cell::new(0));
    let opener = TestOpener { net: d.net.clone(), identity, answers, pulls: pulls.clone() };
    d.engine.set_page_opener(Some(Rc::new(opener)));
    (d, pulls)
}

/// 2,500 todos on `relay`: three pages of a pull (1000, 1000, 500).
async fn todos_on_the_relay(secret: &str, relay: &TestRelay) -> Device {
    let a = Device::new(secret, &[&relay.url]);
    let ops: Vec<Op> = (0..2500)
        .map(|i| Op::Insert { table: "todos".into(), row: todo(&format!("t{i:04}"), &format!("n{i}")) })
        .collect();
    a.engine.transaction(&ops).unwrap();
    assert_eq!(a.sync().await.relays[0].pushed, 2500);
    a
}

/// A new device of `secret` restores from `relay` through an opener answering as `answers`:
/// the device, its pass and the opener's pull count.
async fn restored_through(secret: &str, relay: &TestRelay, answers: Answers) -> (Device, RelayPassReport, u32) {
    let (b, pulls) = device_with_opener(secret, relay, answers);
    let pass = b.sync().await.relays.swap_remove(0);
    (b, pass, pulls.get())
}

#[tokio::test]
async fn the_pages_sent_ahead_are_fetched_and_opened_by_the_opener() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = todos_on_the_relay(&secret, &relay).await;
    let (b, pass, pulls) = restored_through(&secret, &relay, Answers::Honestly).await;
    assert_eq!((pass.received, pass.applied, pass.quarantined), (2500, 2500, 0), "{pass:?}");
    assert_eq!(pulls, 2, "pages two and three were sent ahead, through the opener");
    assert_eq!(pass.timings.opened_ahead, 1500, "their envelopes were opened there, and taken as such");
    assert_eq!(b.net.sent("GET", "/v1/events?"), 3, "each page fetched once");
    assert_eq!(b.todos(), a.todos());
}

#[tokio::test]
async fn openings_that_lie_change_nothing_the_engine_applies() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = todos_on_the_relay(&secret, &relay).await;
    for answers in [Answers::Garbage, Answers::Shifted] {
        let (b, pass, pulls) = restored_through(&secret, &relay, answers).await;
        assert_eq!(pulls, 2);
        assert_eq!((pass.received, pass.applied, pass.quarantined), (2500, 2500, 0), "{pass:?}");
        assert_eq!(pass.timings.opened_ahead, 0, "no opening was taken");
        assert_eq!(b.todos(), a.todos(), "every event opened again by the engine");
    }
}

#[tokio::test]
async fn an_opener_not_ready_or_failing_leaves_the_pull_to_the_engine() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = todos_on_the_relay(&secret, &relay).await;
    for answers in [Answers::NotReady, Answers::Failing] {
        let (b, pass, pulls) = restored_through(&secret, &relay, answers).await;
        assert_eq!(pulls, 2);
        assert_eq!(pass.error, None);
        assert_eq!((pass.applied, pass.timings.opened_ahead), (2500, 0), "{pass:?}");
        assert_eq!(b.net.sent("GET", "/v1/events?"), 3, "the engine pulled pages two and three itself");
        assert_eq!(b.todos(), a.todos());
    }
}

#[tokio::test]
async fn a_forged_event_is_quarantined_alike_with_and_without_an_opener() {
    let relay = TestRelay::start();
    let secret = phrase();
    todos_on_the_relay(&secret, &relay).await;
    // The relay's answers, with one envelope's ciphertext altered on every page.
    let forge = |d: &Device| {
        *d.net.rewrite.borrow_mut() = Some(Box::new(|req, mut resp| {
            if req.url.contains("/v1/events?") && resp.status == 200 {
                let mut page: serde_json::Value = serde_json::from_slice(&resp.body).unwrap();
                if let Some(e) = page["events"].get_mut(10) {
                    crate::harness::alter_ciphertext(e);
                }
                resp.body = page.to_string().into_bytes();
            }
            resp
        }));
    };
    let quarantined = |d: &Device| {
        let mut q: Vec<(String, String)> =
            d.engine.quarantined().unwrap().into_iter().map(|h| (h.event_id, h.reason)).collect();
        q.sort();
        q
    };
    let plain = Device::new(&secret, &[&relay.url]);
    forge(&plain);
    let without = plain.sync().await.relays.swap_remove(0);
    for answers in [Answers::Honestly, Answers::Garbage] {
        let (b, _) = device_with_opener(&secret, &relay, answers);
        forge(&b); // before its pass
        let with = b.sync().await.relays.swap_remove(0);
        assert_eq!((with.applied, with.quarantined), (2497, 3), "{with:?}");
        assert_eq!((with.applied, with.quarantined), (without.applied, without.quarantined));
        assert_eq!(quarantined(&b), quarantined(&plain));
        assert!(quarantined(&b).iter().all(|(_, reason)| reason == "AUTH_FAILED"), "{:?}", quarantined(&b));
        assert_eq!(b.todos(), plain.todos());
    }
}
