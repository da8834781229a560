//! Robustness: malformed, hostile and oversized input always gets a 4xx with a clear JSON
//! message — never a 5xx, a hang or a crash — and `/health` still answers afterwards.

mod common;

use std::time::Duration;

use common::{Owner, Relay};
use reqwest::Method;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Case {
    name: &'static str,
    method: Method,
    path: String,
    token: Option<String>,
    body: Option<Vec<u8>>,
}

fn case(
    name: &'static str,
    method: Method,
    path: impl Into<String>,
    token: Option<&str>,
    body: Option<Vec<u8>>,
) -> Case {
    Case { name, method, path: path.into(), token: token.map(str::to_owned), body }
}

#[tokio::test]
async fn malformed_and_hostile_requests_get_a_4xx_json_error_and_the_relay_stays_up() {
    let relay = Relay::start(&[("MAX_REQUEST_BYTES", "200000")]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let (o, t) = (alice.owner_id().to_owned(), alice.token().to_owned());
    let tok = Some(t.as_str());
    let deep = "[".repeat(100_000);
    let valid = json!({"ownerId": o, "events": [alice.event("b", 2)]}).to_string();
    let cases = vec![
        case("malformed JSON", Method::POST, "/v1/events", tok, Some(b"{".to_vec())),
        case("truncated JSON", Method::POST, "/v1/events", tok, Some(valid.as_bytes()[..valid.len() / 2].to_vec())),
        case("empty body", Method::POST, "/v1/events", tok, Some(vec![])),
        case("non-UTF-8 body", Method::POST, "/v1/events", tok, Some(vec![0xff, 0xfe, 0x00, 0x7b])),
        case("wrong types", Method::POST, "/v1/events", tok, Some(br#"{"ownerId":5,"events":"x"}"#.to_vec())),
        case("array body", Method::POST, "/v1/events", tok, Some(b"[1,2,3]".to_vec())),
        case("events null", Method::POST, "/v1/events", tok, Some(format!(r#"{{"ownerId":"{o}","events":null}}"#).into_bytes())),
        case("deeply nested JSON", Method::POST, "/v1/events", tok, Some(deep.into_bytes())),
        case("oversized body", Method::POST, "/v1/events", tok, Some(vec![b' '; 300_000])),
        case("envelope with numbers for strings", Method::POST, "/v1/events", tok,
            Some(format!(r#"{{"ownerId":"{o}","events":[{{"version":1,"ownerId":"{o}","eventId":1,"deviceId":2,"createdAt":3,"nonce":4,"ciphertext":5}}]}}"#).into_bytes())),
        case("huge version", Method::POST, "/v1/events", tok,
            Some(valid.replace("\"version\":1", "\"version\":99999999999999999999").into_bytes())),
        case("path traversal owner", Method::GET, "/v1/events?ownerId=../../../etc/passwd", tok, None),
        case("SQL-ish owner", Method::GET, "/v1/events?ownerId=x'%20OR%201=1%20--", tok, None),
        case("unicode owner", Method::GET, "/v1/events?ownerId=%C3%85%C3%85%C3%85%C3%85%C3%85%C3%85%C3%85%C3%85%C3%85%C3%85%C3%85", tok, None),
        case("NUL in owner", Method::GET, "/v1/events?ownerId=AAAAAAAAAAAAAAAAAAAA%00A", tok, None),
        case("very long owner", Method::GET, format!("/v1/events?ownerId={}", "A".repeat(20_000)), tok, None),
        case("missing owner", Method::GET, "/v1/events?after=1", tok, None),
        case("invalid percent-encoding", Method::GET, "/v1/events?ownerId=%ZZ%", tok, None),
        case("no token", Method::GET, format!("/v1/events?ownerId={o}"), None, None),
        case("basic auth", Method::GET, format!("/v1/events?ownerId={o}"), None, None),
        case("huge token", Method::GET, format!("/v1/events?ownerId={o}"), Some(&"t".repeat(10_000)), None),
        case("blob traversal", Method::GET, format!("/v1/blobs/..%2F..%2Fetc%2Fpasswd?ownerId={o}"), tok, None),
        case("blob unicode hash", Method::PUT, format!("/v1/blobs/%E2%9C%93%E2%9C%93?ownerId={o}"), tok, Some(b"x".to_vec())),
        case("blob without owner", Method::GET, "/v1/blobs/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", tok, None),
        case("compact not an array", Method::POST, "/v1/streams/compact", tok, Some(format!(r#"{{"ownerId":"{o}","streamIds":"a"}}"#).into_bytes())),
        case("compact huge id list", Method::POST, "/v1/streams/compact", tok,
            Some(json!({"ownerId": o, "streamIds": vec!["AAAAAAAAAAAAAAAAAAAAAA"; 5000]}).to_string().into_bytes())),
        case("close without owner", Method::POST, "/v1/owner/close", tok, Some(b"{}".to_vec())),
        case("status with bad owner", Method::GET, "/v1/status?ownerId=%20", tok, None),
    ];
    for Case { name, method, path, token, body } in cases {
        let url = format!("{}{path}", relay.url);
        let mut req = common::client().request(method, &url);
        if name == "basic auth" {
            req = req.header("Authorization", "Basic dXNlcjpwYXNz");
        }
        if let Some(t) = token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        if let Some(b) = body {
            req = req.body(b);
        }
        let r =
            tokio::time::timeout(Duration::from_secs(10), req.send()).await.unwrap_or_else(|_| panic!("{name}: hung"));
        let r = r.unwrap_or_else(|e| panic!("{name}: {e}"));
        let status = r.status().as_u16();
        let bytes = r.bytes().await.unwrap();
        assert!((400..500).contains(&status), "{name}: status {status}, body {}", String::from_utf8_lossy(&bytes));
        let v: serde_json::Value =
            serde_json::from_slice(&bytes).unwrap_or_else(|_| panic!("{name}: body is not JSON"));
        assert!(v["error"].is_string() && v["message"].as_str().is_some_and(|m| !m.is_empty()), "{name}: {v}");
    }
    assert_eq!(relay.get("/health", None).await.status, 200);
    assert!(!relay.log_text().contains("internal error"), "{}", relay.log_text());
    // The owner's data is untouched by all of it.
    assert_eq!(relay.pull_all(&alice).await.0.len(), 1);
}

#[tokio::test]
async fn garbage_on_the_socket_is_refused_and_the_relay_keeps_serving() {
    let relay = Relay::start(&[]);
    let addr = relay.url.strip_prefix("http://").unwrap().to_owned();
    for garbage in [
        b"\x00\x01\x02\x03 not http at all\r\n\r\n".to_vec(),
        b"GET /v1/status?ownerId=AAAAAAAAAAAAAAAAAAAAAA HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\r\n\r\n"
            .to_vec(),
        b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n".to_vec(),
        b"POST /v1/events HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".to_vec(),
    ] {
        let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
        tcp.write_all(&garbage).await.unwrap();
        let mut buf = vec![0u8; 2048];
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
            .await
            .expect("answered or closed")
            .unwrap_or(0);
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(n == 0 || text.starts_with("HTTP/1.1 4"), "{text}");
    }
    assert_eq!(relay.get("/health", None).await.status, 200);
}

#[tokio::test]
async fn a_client_that_stalls_mid_body_does_not_block_other_clients() {
    let relay = Relay::start(&[("REQUEST_TIMEOUT_MS", "5000")]);
    let alice = Owner::new();
    let addr = relay.url.strip_prefix("http://").unwrap().to_owned();
    let mut stalled = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Length: 9999\r\n\r\n{{",
        alice.token()
    );
    stalled.write_all(head.as_bytes()).await.unwrap();
    let started = std::time::Instant::now();
    assert_eq!(relay.push(&alice, &[alice.event("a", 1)]).await.status, 200);
    assert!(started.elapsed() < Duration::from_secs(2));
}
