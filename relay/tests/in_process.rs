//! The router driven in-process with `oneshot` (no sockets) — fast checks in addition to the
//! real-HTTP contract suite.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{Owner, TempDir};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use simplysync_relay::config::Config;
use tower::ServiceExt;

async fn router(dir: &TempDir) -> axum::Router {
    let db = dir.0.join("r.sqlite");
    let config = Config::from_lookup(|k| (k == "DB_PATH").then(|| db.display().to_string())).unwrap();
    let store = simplysync_relay::open_store(&config).await.unwrap();
    simplysync_relay::app(simplysync_relay::state(&config, store))
}

async fn call(app: &axum::Router, req: Request<Body>) -> (StatusCode, Value) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_push_then_a_pull_round_trips_in_process() {
    let dir = TempDir::new("inproc");
    let app = router(&dir).await;
    let alice = Owner::new();
    let e = alice.event("a", 1);
    let push = Request::post("/v1/events")
        .header("authorization", format!("Bearer {}", alice.token()))
        .body(Body::from(json!({"ownerId": alice.owner_id(), "events": [e]}).to_string()))
        .unwrap();
    assert_eq!(call(&app, push).await, (StatusCode::OK, json!({"accepted": 1, "duplicate": 0})));
    let pull = Request::get(format!("/v1/events?ownerId={}", alice.owner_id()))
        .header("authorization", format!("Bearer {}", alice.token()))
        .body(Body::empty())
        .unwrap();
    let (status, v) = call(&app, pull).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["events"][0], serde_json::to_value(&e).unwrap());
    assert_eq!(v["nextCursor"], "1");
    assert_eq!(v["headSeq"], 1);
}

#[tokio::test]
async fn errors_are_json_with_a_code_and_a_message_in_process() {
    let dir = TempDir::new("inproc-err");
    let app = router(&dir).await;
    let (status, v) =
        call(&app, Request::get("/v1/usage?ownerId=AAAAAAAAAAAAAAAAAAAAAA").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(v["error"], "unauthorized");
    let bad = Request::post("/v1/events").header("authorization", "Bearer t").body(Body::from("nope")).unwrap();
    let (status, v) = call(&app, bad).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(v["error"], "invalid_json");
}
