//! Load and hostile clients, over real sockets: bodies bounded per route by their declared
//! length, pull pages bounded by bytes, a global in-flight budget answering 503 with
//! `Retry-After`, silent sockets closed in time (file descriptors stay bounded), no h2c, and
//! registration control with per-address rate limits.

mod common;

use std::time::{Duration, Instant};

use common::{client, Owner, Relay, Resp, TempDir};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A request's head on a raw socket, with `Content-Length: declared` and no body.
fn head_only(method: &str, path: &str, token: Option<&str>, declared: u64) -> Vec<u8> {
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    format!("{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n")
        .into_bytes()
}

fn status_line(raw: &str) -> &str {
    raw.lines().next().unwrap_or("")
}

#[tokio::test]
async fn a_body_declared_larger_than_its_route_takes_is_413_before_auth_or_reading_it() {
    let relay = Relay::start(&[("MAX_REQUEST_BYTES", "20000")]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let wait = Duration::from_secs(5);
    for (method, path, declared) in [
        ("POST", "/v1/events".to_owned(), 20_001),
        ("POST", "/v1/streams/compact".to_owned(), 65_537),
        ("POST", "/v1/owner/close".to_owned(), 65_537),
    ] {
        // No token, and no body at all: the declared length alone is refused.
        let raw = relay.raw(&head_only(method, &path, None, declared), wait).await;
        assert!(status_line(&raw).contains(" 413 "), "{path} declaring {declared}: {raw}");
        assert!(raw.contains("payload_too_large"), "{raw}");
    }
    // Exactly at the control limit is not refused for its size (it is 401: no token).
    let raw = relay.raw(&head_only("POST", "/v1/owner/close", None, 65_536), Duration::from_millis(500)).await;
    assert!(!status_line(&raw).contains(" 413 "), "{raw}");
    // A close body streamed without a length is cut at 64 KiB too.
    let mut req = format!(
        "POST /v1/owner/close HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nTransfer-Encoding: chunked\r\n\r\n",
        alice.token()
    )
    .into_bytes();
    for _ in 0..40 {
        req.extend_from_slice(format!("1000\r\n{}\r\n", " ".repeat(4096)).as_bytes());
    }
    req.extend_from_slice(b"0\r\n\r\n");
    let raw = relay.raw(&req, wait).await;
    assert!(status_line(&raw).contains(" 413 "), "{raw}");
    // Nothing happened to the owner.
    assert_eq!(relay.status_of(&alice).await.status, 200);
}

#[tokio::test]
async fn a_pull_page_stops_at_max_pull_bytes_yet_always_carries_one_event() {
    let relay = Relay::start(&[("MAX_PULL_BYTES", "4096")]);
    let alice = Owner::new();
    let events: Vec<_> = (0..12).map(|i| alice.event_sized(&format!("r{i}"), i, 900)).collect();
    let size = serde_json::to_string(&events[0]).unwrap().len();
    assert!(size > 1300 && size < 2048, "each envelope is {size} bytes");
    relay.push(&alice, &events).await;
    let (mut after, mut seen) = (String::new(), 0);
    loop {
        let v = relay.pull(&alice, &after, Some(50)).await.json();
        let page = v["events"].as_array().unwrap();
        if page.is_empty() {
            break;
        }
        let bytes: usize = page.iter().map(|e| e.to_string().len()).sum();
        assert!(bytes <= 4096, "a page of {} events is {bytes} bytes", page.len());
        assert!(page.len() < 12);
        seen += page.len();
        after = v["nextCursor"].as_str().unwrap().to_owned();
    }
    assert_eq!(seen, 12, "every event is served across the pages");

    // One envelope larger than the whole budget is still served, alone.
    let small = Relay::start(&[("MAX_PULL_BYTES", "1024")]);
    small.push(&alice, &events[..3]).await;
    let v = small.pull(&alice, "", Some(50)).await.json();
    assert_eq!(v["events"].as_array().unwrap().len(), 1, "{v}");
}

/// Opens a push whose body never comes: it holds a place in the in-flight budget until the
/// relay's request timeout.
async fn stalled_push(relay: &Relay, alice: &Owner, declared: u64, in_flight: u64) -> TcpStream {
    let mut tcp = TcpStream::connect(relay.addr()).await.unwrap();
    tcp.write_all(&head_only("POST", "/v1/events", Some(alice.token()), declared)).await.unwrap();
    // Wait until the relay handles it (a new connection may be accepted after requests on
    // connections already open).
    wait_for_in_flight(relay, in_flight).await;
    tcp
}

/// Waits until the relay handles at least `n` requests, read where reading takes no place in
/// the budget (the metrics listener: `METRICS_ADDR` set).
async fn wait_for_in_flight(relay: &Relay, n: u64) {
    let metrics = format!("{}/metrics", relay.metrics_url.as_deref().expect("METRICS_ADDR set"));
    wait_until(async || {
        let m = String::from_utf8(common::send(reqwest::Method::GET, &metrics, None, None).await.bytes).unwrap();
        m.lines().any(|l| {
            l.strip_prefix("simplysync_http_requests_in_flight ").is_some_and(|v| v.parse::<u64>().unwrap_or(0) >= n)
        })
    })
    .await;
}

async fn wait_until(mut ok: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !ok().await {
        assert!(start.elapsed() < Duration::from_secs(10), "condition not met within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn assert_overloaded(r: &Resp) {
    r.assert_error(503, "overloaded");
    let retry: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry >= 1, "Retry-After: {retry}");
}

#[tokio::test]
async fn past_the_in_flight_request_budget_requests_get_503_with_retry_after_then_recover() {
    let relay = Relay::start(&[
        ("MAX_IN_FLIGHT_REQUESTS", "2"),
        ("REQUEST_TIMEOUT_MS", "4000"),
        ("METRICS_ADDR", "127.0.0.1:0"),
    ]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let _a = stalled_push(&relay, &alice, 100, 1).await;
    let _b = stalled_push(&relay, &alice, 100, 2).await;
    assert_overloaded(&relay.pull(&alice, "", None).await);
    assert_overloaded(&relay.push(&alice, &[alice.event("b", 2)]).await);
    // Probes take no place: a busy relay is alive and ready (a load balancer must not drain
    // every busy replica at once).
    assert_eq!(relay.get("/health", None).await.status, 200);
    assert_eq!(relay.get("/ready", None).await.status, 200);
    // The stalled requests time out (408) and free their places.
    wait_until(async || relay.pull(&alice, "", None).await.status == 200).await;
    assert_eq!(relay.push(&alice, &[alice.event("b", 2)]).await.status, 200);
    let metrics = format!("{}/metrics", relay.metrics_url.as_deref().unwrap());
    let metrics = String::from_utf8(common::send(reqwest::Method::GET, &metrics, None, None).await.bytes).unwrap();
    assert!(metrics.contains("simplysync_rejections_total{reason=\"overloaded\"} "), "{metrics}");
}

#[tokio::test]
async fn past_the_in_flight_byte_budget_bodies_get_503_while_reads_still_pass() {
    let relay = Relay::start(&[
        ("MAX_REQUEST_BYTES", "20000"),
        ("MAX_EVENT_BYTES", "16000"),
        ("MAX_IN_FLIGHT_BYTES", "30720"),
        // The whole budget, not one client's share of it (every request here is one client's).
        ("MAX_IN_FLIGHT_PER_CLIENT", "0"),
        ("REQUEST_TIMEOUT_MS", "4000"),
        ("METRICS_ADDR", "127.0.0.1:0"),
    ]);
    let alice = Owner::new();
    let first = relay.push(&alice, &[alice.event("a", 1)]).await;
    assert_eq!(first.status, 200, "{}", String::from_utf8_lossy(&first.bytes));
    let _held = stalled_push(&relay, &alice, 20_000, 1).await;
    let body = json!({"ownerId": alice.owner_id(), "events": [alice.event_sized("b", 2, 9000)]}).to_string();
    assert!(body.len() > 10_240 && body.len() < 16_000, "{}", body.len());
    let r = relay.post_json("/v1/events", Some(alice.token()), serde_json::from_str(&body).unwrap()).await;
    assert_overloaded(&r);
    // A read declares no body: it still passes.
    assert_eq!(relay.pull(&alice, "", None).await.status, 200);
    // The stalled body times out; the same push then goes through.
    wait_until(async || {
        relay.post_json("/v1/events", Some(alice.token()), serde_json::from_str(&body).unwrap()).await.status == 200
    })
    .await;
}

#[tokio::test]
async fn hundreds_of_silent_sockets_are_closed_in_time_and_the_relay_keeps_serving() {
    let relay = Relay::start(&[("MAX_CONNECTIONS", "40"), ("IDLE_TIMEOUT_MS", "1000"), ("HEADER_TIMEOUT_MS", "1000")]);
    let fds_before = relay.open_fds();
    let mut silent = Vec::new();
    for _ in 0..300 {
        silent.push(TcpStream::connect(relay.addr()).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fds_during = relay.open_fds();
    assert!(fds_during <= fds_before + 40 + 5, "fds: {fds_before} before, {fds_during} with 300 silent sockets");
    // Every silent socket is closed by the relay: refused at once past the cap, or after the
    // idle timeout.
    let start = Instant::now();
    for s in &mut silent {
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
        assert!(matches!(n, Ok(Ok(0)) | Ok(Err(_))), "a silent socket stayed open: {n:?}");
    }
    assert!(start.elapsed() < Duration::from_secs(4), "closed after {:?}", start.elapsed());
    assert_eq!(relay.get("/health", None).await.status, 200);
    assert!(relay.open_fds() <= fds_before + 5, "fds after: {}", relay.open_fds());
}

#[tokio::test]
async fn a_client_that_trickles_its_headers_is_cut_off_at_the_header_timeout() {
    let relay = Relay::start(&[("HEADER_TIMEOUT_MS", "800"), ("IDLE_TIMEOUT_MS", "60000")]);
    let mut tcp = TcpStream::connect(relay.addr()).await.unwrap();
    tcp.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let start = Instant::now();
    let mut closed = false;
    while start.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if tcp.write_all(b"X-Slow: 1\r\n").await.is_err() {
            closed = true;
            break;
        }
        let mut buf = [0u8; 256];
        if let Ok(r) = tokio::time::timeout(Duration::from_millis(1), tcp.read(&mut buf)).await {
            // Closed (0 bytes / reset) or answered with an error status: either way cut off.
            closed = !matches!(r, Ok(n) if n > 0 && String::from_utf8_lossy(&buf[..n]).contains(" 200 "));
            break;
        }
    }
    assert!(closed, "a trickling client was still connected after {:?}", start.elapsed());
    assert!(start.elapsed() < Duration::from_secs(3), "cut off after {:?}", start.elapsed());
    assert_eq!(relay.get("/health", None).await.status, 200);
}

#[tokio::test]
async fn the_http2_preface_is_not_spoken_on_plaintext() {
    let relay = Relay::start(&[]);
    let raw = relay.raw(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", Duration::from_secs(3)).await;
    // An HTTP/2 server would answer with a SETTINGS frame (binary, type 0x04); this one answers
    // HTTP/1.1 or closes.
    assert!(raw.is_empty() || raw.starts_with("HTTP/1.1 4"), "{raw:?}");
    assert_eq!(relay.get("/health", None).await.status, 200);
}

/// A push as if from client address `ip` (behind a proxy that sets `X-Forwarded-For`).
async fn push_from(relay: &Relay, ip: &str, owner: &Owner, token: &str) -> Resp {
    push_with_lines(relay, &[ip], owner, token).await
}

/// A push whose `X-Forwarded-For` comes as these header lines, in order.
async fn push_with_lines(relay: &Relay, lines: &[&str], owner: &Owner, token: &str) -> Resp {
    let body = json!({"ownerId": owner.owner_id(), "events": [owner.event("a", 1)]}).to_string();
    let mut req = client()
        .post(format!("{}/v1/events", relay.url))
        .header("Authorization", format!("Bearer {token}"))
        .header("Content-Type", "application/json");
    for line in lines {
        req = req.header("X-Forwarded-For", *line);
    }
    let r = req.body(body).send().await.unwrap();
    let (status, headers) = (r.status(), r.headers().clone());
    Resp { status, headers, bytes: r.bytes().await.unwrap().to_vec() }
}

#[tokio::test]
async fn with_registration_closed_only_known_owners_may_push() {
    let mut relay = Relay::start(&[]);
    let (alice, bob) = (Owner::new(), Owner::new());
    relay.push(&alice, &[alice.event("a", 1)]).await;
    relay.set_env("REGISTRATION", "closed");
    relay.restart();
    relay.push(&bob, &[bob.event("a", 1)]).await.assert_error(403, "registration_closed");
    let bytes = b"a chunk".to_vec();
    let hash = simplysync_protocol::identity::sha256_base64url(&bytes);
    relay.put_blob(&bob, &hash, bytes).await.assert_error(403, "registration_closed");
    assert_eq!(relay.push(&alice, &[alice.event("b", 2)]).await.status, 200);
    relay.pull(&bob, "", None).await.assert_error(404, "unknown_owner");
}

#[tokio::test]
async fn max_owners_caps_registration_and_known_owners_keep_pushing() {
    let relay = Relay::start(&[("MAX_OWNERS", "2")]);
    let (a, b, c) = (Owner::new(), Owner::new(), Owner::new());
    assert_eq!(relay.push(&a, &[a.event("a", 1)]).await.status, 200);
    assert_eq!(relay.push(&b, &[b.event("a", 1)]).await.status, 200);
    relay.push(&c, &[c.event("a", 1)]).await.assert_error(403, "registration_closed");
    assert_eq!(relay.push(&a, &[a.event("b", 2)]).await.status, 200);
}

#[tokio::test]
async fn one_address_registering_owners_too_fast_gets_429_and_others_do_not() {
    let relay = Relay::start(&[("REGISTRATIONS_PER_MINUTE", "1"), ("CLIENT_IP_HEADER", "X-Forwarded-For")]);
    for _ in 0..3 {
        let o = Owner::new();
        assert_eq!(push_from(&relay, "10.0.0.1", &o, o.token()).await.status, 200, "within the burst");
    }
    let o = Owner::new();
    // A client cannot dodge the limit by claiming another address in front of the proxy's.
    let r = push_from(&relay, "192.0.2.77, 10.0.0.1", &o, o.token()).await;
    r.assert_error(429, "rate_limited");
    assert!(r.headers["retry-after"].to_str().unwrap().parse::<u64>().unwrap() >= 1);
    // Nor by sending a header line of its own before the one the proxy adds: the last line's
    // last entry is the address.
    let o2 = Owner::new();
    push_with_lines(&relay, &["192.0.2.78", "10.0.0.1"], &o2, o2.token()).await.assert_error(429, "rate_limited");
    // Refused registration registered nothing; another address is unaffected.
    relay.pull(&o, "", None).await.assert_error(404, "unknown_owner");
    assert_eq!(push_from(&relay, "10.0.0.2", &o, o.token()).await.status, 200);
}

#[tokio::test]
async fn an_address_failing_auth_too_often_gets_429_even_with_the_right_token() {
    let relay = Relay::start(&[("AUTH_FAILURES_PER_MINUTE", "1"), ("CLIENT_IP_HEADER", "X-Forwarded-For")]);
    let alice = Owner::new();
    assert_eq!(push_from(&relay, "10.0.0.9", &alice, alice.token()).await.status, 200);
    let wrong = "w".repeat(43);
    for _ in 0..3 {
        push_from(&relay, "10.0.0.7", &alice, &wrong).await.assert_error(401, "unauthorized");
    }
    let r = push_from(&relay, "10.0.0.7", &alice, alice.token()).await;
    r.assert_error(429, "rate_limited");
    assert!(r.headers.contains_key("retry-after"));
    assert_eq!(push_from(&relay, "10.0.0.8", &alice, alice.token()).await.status, 200);
}

#[tokio::test]
async fn an_address_guessing_the_admin_or_metrics_token_gets_429_even_with_the_right_one() {
    let relay = Relay::start(&[
        ("AUTH_FAILURES_PER_MINUTE", "1"),
        ("CLIENT_IP_HEADER", "X-Forwarded-For"),
        ("ADMIN_TOKEN", "a5c1e9f07b2d48e6"),
        ("METRICS_TOKEN", "7e0d3b9a1c6f4285"),
    ]);
    let get = |path: &'static str, ip: &'static str, token: &'static str| {
        let url = format!("{}{path}", relay.url);
        async move {
            client().get(url).header("X-Forwarded-For", ip).bearer_auth(token).send().await.unwrap().status().as_u16()
        }
    };
    for _ in 0..3 {
        assert_eq!(get("/ops/stats", "10.0.0.7", "guess").await, 403);
    }
    assert_eq!(get("/ops/stats", "10.0.0.7", "a5c1e9f07b2d48e6").await, 429, "the guesser waits, right token or not");
    assert_eq!(get("/metrics", "10.0.0.7", "7e0d3b9a1c6f4285").await, 429);
    assert_eq!(get("/ops/stats", "10.0.0.8", "a5c1e9f07b2d48e6").await, 200, "another address is unaffected");
    for _ in 0..3 {
        assert_eq!(get("/metrics", "10.0.0.9", "guess").await, 403);
    }
    assert_eq!(get("/metrics", "10.0.0.9", "7e0d3b9a1c6f4285").await, 429);
}

#[tokio::test]
async fn concurrent_registrations_from_one_address_stop_at_its_burst() {
    let relay = Relay::start(&[("REGISTRATIONS_PER_MINUTE", "1"), ("CLIENT_IP_HEADER", "X-Forwarded-For")]);
    let owners: Vec<Owner> = (0..12).map(|_| Owner::new()).collect();
    let answers =
        futures_util::future::join_all(owners.iter().map(|o| push_from(&relay, "10.0.0.5", o, o.token()))).await;
    let ok = answers.iter().filter(|r| r.status == 200).count();
    assert_eq!(ok, 3, "the check and the spend are one step: a burst of 3 registers 3, however many race");
    assert!(answers.iter().all(|r| r.status == 200 || r.status == 429));
}

#[tokio::test]
async fn an_ipv6_client_is_rate_limited_by_its_64() {
    let relay = Relay::start(&[("REGISTRATIONS_PER_MINUTE", "1"), ("CLIENT_IP_HEADER", "X-Forwarded-For")]);
    for n in 1..=3 {
        let o = Owner::new();
        assert_eq!(push_from(&relay, &format!("2001:db8:7:7::{n}"), &o, o.token()).await.status, 200);
    }
    let o = Owner::new();
    push_from(&relay, "2001:db8:7:7:abcd:ef01:2345:6789", &o, o.token()).await.assert_error(429, "rate_limited");
    assert_eq!(push_from(&relay, "2001:db8:7:8::1", &o, o.token()).await.status, 200, "the next /64 is another client");
}

#[tokio::test]
async fn an_empty_first_push_registers_no_owner_and_spends_no_registration() {
    let relay = Relay::start(&[("REGISTRATIONS_PER_MINUTE", "1"), ("CLIENT_IP_HEADER", "X-Forwarded-For")]);
    let empty = |o: &Owner| {
        client()
            .post(format!("{}/v1/events", relay.url))
            .header("Authorization", format!("Bearer {}", o.token()))
            .header("X-Forwarded-For", "10.0.0.6")
            .body(json!({"ownerId": o.owner_id(), "events": []}).to_string())
            .send()
    };
    for _ in 0..5 {
        let o = Owner::new();
        let r = empty(&o).await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.json::<serde_json::Value>().await.unwrap(), json!({"accepted": 0, "duplicate": 0}));
        relay.pull(&o, "", None).await.assert_error(404, "unknown_owner");
    }
    for _ in 0..3 {
        let o = Owner::new();
        assert_eq!(push_from(&relay, "10.0.0.6", &o, o.token()).await.status, 200, "the budget is untouched");
    }
}

#[tokio::test]
async fn a_relay_whose_open_file_limit_is_low_serves_fewer_connections_and_says_how_to_raise_it() {
    // The hard limit lowered for this relay alone: 900 descriptors fit 372 connections (528 are
    // kept for requests being handled, the database pool and the rest).
    let dir = common::TempDir::new("nofile");
    let mut child = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("ulimit -n 900 && exec {}", env!("CARGO_BIN_EXE_simplysync-relay")))
        .env("PORT", "0")
        .env("DB_PATH", dir.0.join("r.sqlite"))
        .env("IDLE_TIMEOUT_MS", "5000")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    let url = line.trim().strip_prefix("simplysync-relay listening on ").expect("address line").to_owned();
    let addr = url.trim_start_matches("http://").to_owned();
    // 400 idle connections: those past 372 are closed at once instead of failing accepts.
    let mut held = Vec::new();
    for _ in 0..400 {
        held.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    drop(held);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let metrics = client().get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains(r#"simplysync_rejections_total{reason="connections"} 28"#), "{metrics}");
    assert_eq!(client().get(format!("{url}/ready")).send().await.unwrap().status(), 200);
    let _ = child.kill();
    let _ = child.wait();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        err.contains("open-file limit") && err.contains("max_connections=372") && err.contains("LimitNOFILE"),
        "{err}"
    );
}

#[tokio::test]
async fn one_client_address_cannot_take_every_connection_unless_a_proxy_is_in_front() {
    let open_idle = |relay: &Relay, n: usize| {
        let addr = relay.url.trim_start_matches("http://").to_owned();
        async move {
            let mut held = Vec::new();
            for _ in 0..n {
                held.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
            }
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            held
        }
    };
    let direct = Relay::start(&[("MAX_CONNECTIONS_PER_CLIENT", "5"), ("METRICS_ADDR", "127.0.0.1:0")]);
    let held = open_idle(&direct, 8).await;
    let metrics = format!("{}/metrics", direct.metrics_url.as_deref().unwrap());
    let text = String::from_utf8(common::send(reqwest::Method::GET, &metrics, None, None).await.bytes).unwrap();
    assert!(text.contains(r#"simplysync_rejections_total{reason="connections_per_client"} 3"#), "{text}");
    drop(held);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(direct.get("/health", None).await.status, 200, "closed connections give their places back");
    // Behind a proxy every connection comes from the proxy's address: no cap per address.
    let proxied = Relay::start(&[
        ("MAX_CONNECTIONS_PER_CLIENT", "5"),
        ("CLIENT_IP_HEADER", "X-Forwarded-For"),
        ("METRICS_ADDR", "127.0.0.1:0"),
    ]);
    let _held = open_idle(&proxied, 8).await;
    let metrics = format!("{}/metrics", proxied.metrics_url.as_deref().unwrap());
    let text = String::from_utf8(common::send(reqwest::Method::GET, &metrics, None, None).await.bytes).unwrap();
    assert!(!text.contains("connections_per_client"), "{text}");
}

#[tokio::test]
async fn an_address_that_sent_its_hours_bytes_gets_429_for_writes_while_reads_and_other_addresses_pass() {
    let relay = Relay::start(&[("CLIENT_BYTES_PER_HOUR", "3000"), ("CLIENT_IP_HEADER", "X-Forwarded-For")]);
    let alice = Owner::new();
    let body_len = json!({"ownerId": alice.owner_id(), "events": [alice.event("a", 1)]}).to_string().len();
    let mut passed = 0;
    let refused = loop {
        let r = push_from(&relay, "10.0.0.1", &alice, alice.token()).await;
        if r.status != 200 {
            break r;
        }
        passed += 1;
        assert!(passed * body_len <= 3000 + body_len, "{passed} pushes of {body_len} bytes passed a 3000-byte budget");
    };
    refused.assert_error(429, "rate_limited");
    assert!(passed * body_len >= 3000, "refused after {passed} pushes of {body_len} bytes");
    let wait: u64 = refused.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(wait >= 1, "{wait}");
    // A blob chunk from that address waits too; reading does not; another address writes.
    let bytes = b"a chunk".to_vec();
    let hash = simplysync_protocol::identity::sha256_base64url(&bytes);
    let put = client()
        .put(format!("{}/v1/blobs/{hash}?ownerId={}", relay.url, alice.owner_id()))
        .header("Authorization", format!("Bearer {}", alice.token()))
        .header("X-Forwarded-For", "10.0.0.1")
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(put.status().as_u16(), 429);
    assert_eq!(relay.pull(&alice, "", None).await.status, 200);
    assert_eq!(push_from(&relay, "10.0.0.2", &alice, alice.token()).await.status, 200);
}

/// The relay binary's `registration-key` / `registration-token` commands, as an operator runs them.
fn relay_command(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_simplysync-relay")).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A push carrying `token` in `X-SimplySync-Registration`, if any.
async fn push_with_token(relay: &Relay, owner: &Owner, token: Option<&str>) -> Resp {
    let body = json!({"ownerId": owner.owner_id(), "events": [owner.event("a", 1)]}).to_string();
    let mut req = client()
        .post(format!("{}/v1/events", relay.url))
        .header("Authorization", format!("Bearer {}", owner.token()))
        .header("Content-Type", "application/json");
    if let Some(t) = token {
        req = req.header("X-SimplySync-Registration", t);
    }
    let r = req.body(body).send().await.unwrap();
    let (status, headers) = (r.status(), r.headers().clone());
    Resp { status, headers, bytes: r.bytes().await.unwrap().to_vec() }
}

#[tokio::test]
async fn with_registration_token_a_new_owner_needs_a_token_the_operator_signed_and_known_owners_write_without() {
    let pair: serde_json::Value = serde_json::from_str(&relay_command(&["registration-key"])).unwrap();
    let dir = TempDir::new("registration-key");
    let key_file = dir.0.join("signing.key");
    std::fs::write(&key_file, pair["signingKey"].as_str().unwrap()).unwrap();
    let sign = |extra: &[&str]| {
        let mut args = vec!["registration-token", "--signing-key-file", key_file.to_str().unwrap()];
        args.extend_from_slice(extra);
        relay_command(&args)
    };
    let relay = Relay::start(&[("REGISTRATION", "token"), ("REGISTRATION_KEYS", pair["publicKey"].as_str().unwrap())]);
    let (alice, bob, carol) = (Owner::new(), Owner::new(), Owner::new());

    let r = push_with_token(&relay, &alice, None).await;
    r.assert_error(403, "registration_token");
    assert!(r.json()["message"].as_str().unwrap().contains("X-SimplySync-Registration"), "{:?}", r.json());
    let expired = sign(&["--ttl-secs", "0"]);
    let r = push_with_token(&relay, &alice, Some(&expired)).await;
    r.assert_error(403, "registration_token");
    assert!(r.json()["message"].as_str().unwrap().contains("expired"));
    let (other_key, _) = simplysync_relay::registration::SigningKey::generate().unwrap();
    let r = push_with_token(&relay, &alice, Some(&other_key.token(u64::MAX / 2, None))).await;
    r.assert_error(403, "registration_token");
    assert!(r.json()["message"].as_str().unwrap().contains("REGISTRATION_KEYS"));
    let for_bob = sign(&["--owner", bob.owner_id()]);
    push_with_token(&relay, &alice, Some(&for_bob)).await.assert_error(403, "registration_token");
    relay.pull(&alice, "", None).await.assert_error(404, "unknown_owner");

    // Accepted: a token for any owner, and one naming its owner; then no token is needed.
    assert_eq!(push_with_token(&relay, &alice, Some(&sign(&[]))).await.status, 200);
    assert_eq!(push_with_token(&relay, &bob, Some(&for_bob)).await.status, 200);
    assert_eq!(relay.push(&alice, &[alice.event("b", 2)]).await.status, 200, "a known owner writes without one");
    // A blob upload that would register needs one too.
    let bytes = b"a chunk".to_vec();
    let hash = simplysync_protocol::identity::sha256_base64url(&bytes);
    relay.put_blob(&carol, &hash, bytes.clone()).await.assert_error(403, "registration_token");
    let put = client()
        .put(format!("{}/v1/blobs/{hash}?ownerId={}", relay.url, carol.owner_id()))
        .header("Authorization", format!("Bearer {}", carol.token()))
        .header("X-SimplySync-Registration", sign(&["--owner", carol.owner_id()]))
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(put.status().as_u16(), 200);
}

#[tokio::test]
async fn registration_token_without_a_usable_key_is_refused_at_start() {
    let dir = TempDir::new("registration-refused");
    for keys in ["", "not-a-key"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_simplysync-relay"))
            .env("REGISTRATION", "token")
            .env("REGISTRATION_KEYS", keys)
            .env("DB_PATH", dir.0.join("relay.sqlite"))
            .env("PORT", "0")
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("REGISTRATION_KEYS"), "{keys:?}");
    }
}

/// A request's head from client address `ip` (behind a proxy that sets `X-Forwarded-For`),
/// declaring `declared` body bytes, on a fresh socket.
async fn open_from(relay: &Relay, ip: &str, method: &str, path: &str, token: &str, declared: u64) -> TcpStream {
    let mut tcp = TcpStream::connect(relay.addr()).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: {ip}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp
}

#[tokio::test]
async fn one_client_holds_at_most_max_in_flight_per_client_requests_while_other_clients_are_served() {
    let relay = Relay::start(&[
        ("MAX_IN_FLIGHT_PER_CLIENT", "2"),
        ("CLIENT_IP_HEADER", "X-Forwarded-For"),
        ("REQUEST_TIMEOUT_MS", "4000"),
        ("METRICS_ADDR", "127.0.0.1:0"),
    ]);
    let alice = Owner::new();
    assert_eq!(push_from(&relay, "10.0.0.1", &alice, alice.token()).await.status, 200);
    let _a = open_from(&relay, "10.0.0.1", "POST", "/v1/events", alice.token(), 100).await;
    let _b = open_from(&relay, "10.0.0.1", "POST", "/v1/events", alice.token(), 100).await;
    wait_for_in_flight(&relay, 2).await;
    let r = push_from(&relay, "10.0.0.1", &alice, alice.token()).await;
    r.assert_error(429, "rate_limited");
    assert!(r.json()["message"].as_str().unwrap().contains("MAX_IN_FLIGHT_PER_CLIENT"));
    assert_eq!(push_from(&relay, "10.0.0.2", &alice, alice.token()).await.status, 200, "another client is served");
    // Its stalled bodies time out and give its places back.
    wait_until(async || push_from(&relay, "10.0.0.1", &alice, alice.token()).await.status == 200).await;
}

#[tokio::test]
async fn a_body_that_trickles_slower_than_min_bytes_per_sec_on_average_gets_408_after_the_grace() {
    let relay = Relay::start(&[
        ("MIN_BYTES_PER_SEC", "100"),
        ("MIN_BYTES_GRACE_MS", "2000"),
        ("REQUEST_TIMEOUT_MS", "60000"),
        ("IDLE_TIMEOUT_MS", "60000"),
    ]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let started = Instant::now();
    let mut tcp = TcpStream::connect(relay.addr()).await.unwrap();
    tcp.write_all(&head_only("POST", "/v1/events", Some(alice.token()), 5000)).await.unwrap();
    tcp.write_all(b"{\"ownerId\":").await.unwrap();
    // 11 bytes were due by 2.11 s; 100 more at 1.5 s move the due time to 3.11 s (it is an
    // average, not a deadline per byte); then nothing.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    tcp.write_all(&[b' '; 100]).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), tcp.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the relay never answered");
    let answer = String::from_utf8_lossy(&answer);
    assert!(status_line(&answer).contains("408"), "{answer}");
    assert!(answer.contains("MIN_BYTES_PER_SEC"), "{answer}");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(3000) && took < Duration::from_secs(10), "cut off after {took:?}");
}

#[tokio::test]
async fn a_response_holds_its_bytes_in_the_budget_until_sent_and_a_reader_slower_than_min_bytes_per_sec_is_cut_off() {
    let relay = Relay::start(&[
        ("MAX_EVENT_BYTES", "262144"),
        ("MAX_OWNER_BYTES", "100000000"),
        ("MAX_TOTAL_BYTES", "100000000"),
        ("MAX_EVENTS_PER_PULL", "1000"),
        ("MAX_IN_FLIGHT_BYTES", "12582912"),
        // The whole budget, not one client's share of it (every request here is one client's).
        ("MAX_IN_FLIGHT_PER_CLIENT", "0"),
        ("MIN_BYTES_PER_SEC", "10000000"),
        ("MIN_BYTES_GRACE_MS", "2000"),
        ("IDLE_TIMEOUT_MS", "60000"),
        ("REQUEST_TIMEOUT_MS", "60000"),
    ]);
    let alice = Owner::new();
    // 54 events of ~147 KB: one answer of ~7.9 MB (under MAX_PULL_BYTES), more than the
    // kernel's socket buffers hold, so the relay still has some of it to send.
    for batch in 0..3u64 {
        let events: Vec<_> =
            (0..18).map(|i| alice.event_sized(&format!("r{batch}-{i}"), batch * 18 + i, 110_000)).collect();
        assert_eq!(relay.push(&alice, &events).await.status, 200);
    }
    let path = format!("/v1/events?ownerId={}&after=&limit=1000", alice.owner_id());
    // A reader that takes its answer slowly, through a small receive buffer.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut slow = socket.connect(relay.addr().parse().unwrap()).await.unwrap();
    let asked = Instant::now();
    slow.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n", alice.token()).as_bytes(),
    )
    .await
    .unwrap();
    let mut first = [0u8; 4096];
    let n = slow.read(&mut first).await.unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    // Its answer's bytes are held: another answer that large does not fit the budget now.
    let second = relay.pull(&alice, "", Some(1000)).await;
    assert_eq!(second.status, 503, "{} bytes answered", second.bytes.len());
    assert_overloaded(&second);
    // It reads no further: past the grace (2 s) it has fallen behind (IDLE_TIMEOUT_MS is a
    // minute away), its connection is closed and the answer's bytes are back in the budget.
    let started = Instant::now();
    let whole = loop {
        let r = relay.pull(&alice, "", Some(1000)).await;
        if r.status == 200 {
            break r;
        }
        assert!(started.elapsed() < Duration::from_secs(25), "the slow reader was never cut off");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (took, since_asked) = (started.elapsed(), asked.elapsed());
    assert!(took < Duration::from_secs(15), "cut off after {took:?}, not by IDLE_TIMEOUT_MS (a minute)");
    assert!(since_asked >= Duration::from_millis(1800), "cut off {since_asked:?} after asking: within the 2 s grace");
    assert_eq!(whole.json()["events"].as_array().unwrap().len(), 54);
    // What the kernel had already taken still arrives; the rest never does.
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), slow.read_to_end(&mut rest)).await.expect("closed");
    let got = n + rest.len();
    assert!(got < whole.bytes.len(), "read {got} bytes: the whole answer, not cut off");
}

#[tokio::test]
async fn one_client_holds_at_most_an_eighth_of_the_in_flight_bytes_while_others_are_served() {
    let relay = Relay::start(&[
        ("MAX_REQUEST_BYTES", "100000"),
        ("MAX_EVENT_BYTES", "16000"),
        ("MAX_PULL_BYTES", "10000"),
        ("MAX_IN_FLIGHT_BYTES", "800000"),
        ("CLIENT_IP_HEADER", "X-Forwarded-For"),
        ("REQUEST_TIMEOUT_MS", "4000"),
        ("METRICS_ADDR", "127.0.0.1:0"),
    ]);
    let alice = Owner::new();
    assert_eq!(push_from(&relay, "10.0.0.1", &alice, alice.token()).await.status, 200);
    // A body declared at 100000 bytes holds this client's whole share (800000 / 8).
    let _held = open_from(&relay, "10.0.0.1", "POST", "/v1/events", alice.token(), 100_000).await;
    wait_for_in_flight(&relay, 1).await;
    let r = push_from(&relay, "10.0.0.1", &alice, alice.token()).await;
    r.assert_error(429, "rate_limited");
    assert!(r.json()["message"].as_str().unwrap().contains("MAX_IN_FLIGHT_BYTES"), "{:?}", r.json());
    assert_eq!(push_from(&relay, "10.0.0.2", &alice, alice.token()).await.status, 200, "another client is served");
}
