//! Live notices: `GET /v1/events/wait` answers as soon as the owner's log moves past the
//! cursor — also when the push went through another relay process (PostgreSQL LISTEN/NOTIFY,
//! in the three-process run) — or 204 on its timeout; it is authenticated like a pull, bounded
//! by its own limits rather than the request budget, and a shutdown answers it at once.

mod common;

use std::time::{Duration, Instant};

use common::{send, Owner, Relay, Resp};
use reqwest::Method;
use serde_json::json;

async fn wait(relay: &Relay, owner: &Owner, after: u64, timeout_ms: u64) -> Resp {
    let url = format!("{}/v1/events/wait?ownerId={}&after={after}&timeoutMs={timeout_ms}", relay.url, owner.owner_id());
    send(Method::GET, &url, Some(owner.token()), None).await
}

async fn head(relay: &Relay, owner: &Owner) -> u64 {
    relay.status_of(owner).await.json()["account"]["headSeq"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiting_device_hears_a_push_at_once() {
    let relay = std::sync::Arc::new(Relay::start(&[]));
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let after = head(&relay, &alice).await;
    let (r, a) = (relay.clone(), alice.clone());
    let started = Instant::now();
    let waiting = tokio::spawn(async move { wait(&r, &a, after, 20_000).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "nothing moved yet");
    relay.push(&alice, &[alice.event("b", 2)]).await;
    let r = waiting.await.unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.bytes));
    let v = r.json();
    assert!(v["headSeq"].as_u64().unwrap() > after, "{v}");
    assert_eq!(v["epoch"], relay.get("/health", None).await.json()["epoch"]);
    assert!(started.elapsed() < Duration::from_secs(10), "woken by the push, not by the 20 s timeout");
}

#[tokio::test]
async fn a_cursor_behind_the_head_answers_at_once_and_nothing_new_answers_204_on_time() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1), alice.event("b", 2)]).await;
    let now = head(&relay, &alice).await;
    let r = wait(&relay, &alice, now - 1, 20_000).await;
    assert_eq!((r.status.as_u16(), r.json()["headSeq"].as_u64()), (200, Some(now)));
    let started = Instant::now();
    let r = wait(&relay, &alice, now, 300).await;
    assert_eq!(r.status, 204);
    assert!(started.elapsed() >= Duration::from_millis(250));
}

#[tokio::test]
async fn waiting_is_authenticated_like_a_pull() {
    let relay = Relay::start(&[]);
    let (alice, stranger) = (Owner::new(), Owner::new());
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let url = format!("{}/v1/events/wait?ownerId={}&after=0&timeoutMs=100", relay.url, alice.owner_id());
    send(Method::GET, &url, Some(stranger.token()), None).await.assert_error(401, "unauthorized");
    send(Method::GET, &url, None, None).await.assert_error(401, "unauthorized");
    wait(&relay, &stranger, 0, 100).await.assert_error(404, "unknown_owner");
    let bad = format!("{}/v1/events/wait?ownerId={}&after=x1&timeoutMs=100", relay.url, alice.owner_id());
    send(Method::GET, &bad, Some(alice.token()), None).await.assert_error(400, "bad_request");
    relay.post_json("/v1/owner/close", Some(alice.token()), json!({"ownerId": alice.owner_id()})).await;
    wait(&relay, &alice, 0, 100).await.assert_error(410, "owner_closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_hold_no_place_in_the_request_budget_and_have_limits_of_their_own() {
    let relay =
        std::sync::Arc::new(Relay::start(&[("MAX_IN_FLIGHT_REQUESTS", "2"), ("LIVE_MAX_WAITERS_PER_OWNER", "3")]));
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let after = head(&relay, &alice).await;
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let (r, a) = (relay.clone(), alice.clone());
            tokio::spawn(async move { wait(&r, &a, after, 20_000).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let metrics = String::from_utf8(relay.get("/metrics", None).await.bytes).unwrap();
    assert!(metrics.contains("\nsimplysync_live_waiters 3\n"), "{metrics}");
    // Three waiting requests, and a budget of two: pushes and pulls still pass.
    assert_eq!(relay.pull(&alice, "", None).await.status, 200);
    let fourth = wait(&relay, &alice, after, 20_000).await;
    fourth.assert_error(429, "rate_limited");
    assert_eq!(relay.push(&alice, &[alice.event("b", 2)]).await.status, 200);
    for w in waiters {
        assert_eq!(w.await.unwrap().status, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wait_is_authenticated_before_it_takes_a_waiter_slot() {
    let relay = std::sync::Arc::new(Relay::start(&[("LIVE_MAX_WAITERS", "1")]));
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let after = head(&relay, &alice).await;
    let (r, a) = (relay.clone(), alice.clone());
    let holding = tokio::spawn(async move { wait(&r, &a, after, 20_000).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Every slot is taken; a wrong token is told so (401), not that the relay is full (503).
    let url = format!("{}/v1/events/wait?ownerId={}&after={after}&timeoutMs=20000", relay.url, alice.owner_id());
    send(Method::GET, &url, Some(&"w".repeat(43)), None).await.assert_error(401, "unauthorized");
    wait(&relay, &alice, after, 20_000).await.assert_error(503, "overloaded");
    assert_eq!(relay.push(&alice, &[alice.event("b", 2)]).await.status, 200);
    assert_eq!(holding.await.unwrap().status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shutdown_answers_waiting_devices_at_once() {
    let mut relay = Relay::start(&[("SHUTDOWN_TIMEOUT_MS", "20000")]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let after = head(&relay, &alice).await;
    let url = format!("{}/v1/events/wait?ownerId={}&after={after}&timeoutMs=20000", relay.url, alice.owner_id());
    let token = alice.token().to_owned();
    let waiting = tokio::spawn(async move { send(Method::GET, &url, Some(&token), None).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    relay.send_sigterm();
    assert_eq!(waiting.await.unwrap().status, 204);
    let (status, _relay) = tokio::task::spawn_blocking(move || (relay.wait_exit(), relay)).await.unwrap();
    assert!(status.success());
    assert!(started.elapsed() < Duration::from_secs(5), "exited after {:?}", started.elapsed());
}

#[tokio::test]
async fn health_advertises_the_wait_endpoint() {
    let relay = Relay::start(&[]);
    assert_eq!(relay.get("/health", None).await.json()["wait"], "/v1/events/wait");
}

#[tokio::test]
async fn with_live_notices_off_the_endpoint_is_neither_advertised_nor_served() {
    let relay = Relay::start(&[("LIVE_MAX_WAITERS", "0")]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    assert_eq!(relay.get("/health", None).await.json().get("wait"), None);
    wait(&relay, &alice, 0, 100).await.assert_error(404, "not_found");
}
