//! A relay run with `REGISTRATION=token`: the device's first writes carry the token the app
//! gave for that relay, and only to that relay.

use crate::harness::{phrase, todo, Device, TestRelay};
use simplysync::engine::{RelayState, SyncTrigger};
use simplysync_relay::registration::SigningKey;

use std::cell::RefCell;
use std::rc::Rc;

use simplysync::engine::io::Method;

/// A request as sent: method, URL, and the registration token it carried.
type Sent = (Method, String, Option<String>);

#[tokio::test]
async fn a_device_registers_on_a_token_relay_once_the_app_gives_its_token_and_says_why_until_then() {
    let (operator, _) = SigningKey::generate().unwrap();
    let guarded = TestRelay::start_with(&[("REGISTRATION", "token"), ("REGISTRATION_KEYS", &operator.public_key())]);
    let open = TestRelay::start();
    let d = Device::new(&phrase(), &[&guarded.url, &open.url]);
    d.engine.insert("todos", todo("a", "milk")).unwrap();

    let report = d.engine.sync(SyncTrigger::Manual).await.unwrap();
    let refused = report.relays[0].error.as_ref().expect("refused without a token");
    assert_eq!((refused.status, refused.code.as_deref()), (Some(403), Some("registration_token")));
    assert_eq!(report.relays[1].pushed, 1, "the open relay is not held up");
    let status = &d.engine.relay_statuses_local().unwrap()[0];
    assert_eq!(status.state, RelayState::Error);
    assert!(status.error.as_ref().unwrap().message.contains("X-SimplySync-Registration"), "{status:?}");

    let token = operator.token(u64::MAX / 2, Some(&d.engine.owner_id()));
    d.engine.set_registration_token(&format!("{}/", guarded.url), Some(token.clone()));
    // Every request as sent: method, URL, and the token it carried.
    let sent: Rc<RefCell<Vec<Sent>>> = Rc::default();
    let record = sent.clone();
    *d.net.rewrite.borrow_mut() = Some(Box::new(move |req, resp| {
        record.borrow_mut().push((req.method, req.url.clone(), req.registration.clone()));
        resp
    }));
    d.engine.insert("todos", todo("b", "bread")).unwrap();
    let report = d.engine.sync(SyncTrigger::Manual).await.unwrap();
    assert!(report.relays[0].error.is_none(), "{:?}", report.relays[0].error);
    assert_eq!(report.relays[0].pushed, 2);
    assert_eq!(guarded.events_of(&d.engine.owner_id()), 2);
    // The token went with the writes to its own relay, never with reads nor to another relay.
    let sent = sent.borrow();
    assert!(sent.iter().any(|(m, url, _)| *m == Method::Post && url.starts_with(&open.url)), "{sent:?}");
    for (method, url, carried) in sent.iter() {
        let write = matches!(method, Method::Post | Method::Put);
        let expected = (write && url.starts_with(&guarded.url)).then_some(token.as_str());
        assert_eq!(carried.as_deref(), expected, "{} {url}", method.as_str());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_syncs_with_a_token_relay_given_registration_token_url_equals_token() {
    let (operator, _) = SigningKey::generate().unwrap();
    let relay = TestRelay::start_with(&[("REGISTRATION", "token"), ("REGISTRATION_KEYS", &operator.public_key())]);
    let secret = phrase();
    let dir = crate::harness::temp_dir("cli-registration");
    let schema = dir.join("schema.json");
    std::fs::write(&schema, serde_json::to_string(&crate::harness::todo_schema(1, &[])).unwrap()).unwrap();
    let db = dir.join("app.sqlite");
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_simplysync"))
            .args(args)
            .args(["--db", db.to_str().unwrap(), "--schema", schema.to_str().unwrap()])
            .env("SIMPLYSYNC_SECRET", &secret)
            .output()
            .unwrap()
    };
    assert!(cli(&["insert", "todos", r#"{"id":"a","title":"from the cli"}"#]).status.success());
    let refused = cli(&["sync", "--once", "--relay", &relay.url]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("registration_token"), "{refused:?}");
    let token = format!("{}={}", relay.url, operator.token(u64::MAX / 2, None));
    let synced = cli(&["sync", "--once", "--relay", &relay.url, "--registration-token", &token]);
    assert!(synced.status.success(), "{}", String::from_utf8_lossy(&synced.stderr));
    let owner = simplysync::protocol::Secret::parse(&secret).unwrap().identity().owner_id().to_owned();
    assert_eq!(relay.events_of(&owner), 1);
    let malformed = cli(&["sync", "--once", "--relay", &relay.url, "--registration-token", "no-equals-sign"]);
    assert!(String::from_utf8_lossy(&malformed.stderr).contains("URL=TOKEN"), "{malformed:?}");
}

/// A server that answers every request with `answer` and reports each request's head.
async fn server(answer: String) -> (String, tokio::sync::mpsc::UnboundedReceiver<String>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = vec![0u8; 8192];
            let n = socket.read(&mut buf).await.unwrap_or(0);
            let _ = tx.send(String::from_utf8_lossy(&buf[..n]).to_lowercase());
            let _ = socket.write_all(answer.as_bytes()).await;
        }
    });
    (url, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_carrying_a_registration_token_never_follows_a_redirect_to_another_host() {
    use simplysync::engine::io::{HttpRequest, Transport};
    let (elsewhere, mut seen_elsewhere) = server("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}".into()).await;
    let moved =
        format!("HTTP/1.1 307 Temporary Redirect\r\nLocation: {elsewhere}/v1/events\r\nContent-Length: 0\r\n\r\n");
    let (relay, _) = server(moved).await;
    let transport = simplysync::native::HttpTransport::new().unwrap();
    let request = |registration: Option<&str>| HttpRequest {
        method: Method::Post,
        url: format!("{relay}/v1/events"),
        bearer: None,
        registration: registration.map(str::to_owned),
        content_type: Some("application/json"),
        body: Some(b"{}".to_vec()),
        timeout_ms: 5000,
        max_response_bytes: 1 << 20,
    };
    let answer = transport.send(request(Some("the-token"))).await.unwrap();
    assert_eq!(answer.status, 307, "not followed");
    assert!(seen_elsewhere.try_recv().is_err(), "the token's request never reached another host");
    // Without a token a redirect is followed as before.
    assert_eq!(transport.send(request(None)).await.unwrap().status, 200);
    assert!(!seen_elsewhere.recv().await.unwrap().contains("x-simplysync-registration"));
}
