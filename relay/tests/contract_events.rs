//! Contract: push and pull, over real HTTP against the real binary. One test per rule.

mod common;

use common::{backend, Backend, Owner, Relay};
use serde_json::json;
use simplysync_protocol::{decrypt_envelope, SyncEnvelope};

#[tokio::test]
async fn a_first_push_registers_the_owner_and_counts_accepted_events() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let r = relay.push(&alice, &[alice.event("a", 1), alice.event("b", 2)]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!({"accepted": 2, "duplicate": 0}));
    assert_eq!(relay.status_of(&alice).await.status, 200, "the owner exists now");
}

#[tokio::test]
async fn re_pushing_the_same_events_counts_duplicates_and_stores_nothing_twice() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let events = vec![alice.event("a", 1), alice.event("b", 2)];
    relay.push(&alice, &events).await;
    let r = relay.push(&alice, &[events[1].clone(), alice.event("c", 3), events[0].clone()]).await;
    assert_eq!(r.json(), json!({"accepted": 1, "duplicate": 2}));
    let (stored, _) = relay.pull_all(&alice).await;
    assert_eq!(stored.len(), 3);
}

#[tokio::test]
async fn a_duplicate_event_id_with_a_different_envelope_is_counted_as_forged_and_never_overwrites() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let original = alice.event("a", 1);
    relay.push(&alice, std::slice::from_ref(&original)).await;
    let mut forged = alice.event("a", 1); // same eventId, fresh nonce and ciphertext
    assert_ne!(forged.ciphertext, original.ciphertext);
    forged.created_at = "2031-01-01T00:00:00.000Z".into();
    let r = relay.push(&alice, &[forged]).await;
    assert_eq!(r.json(), json!({"accepted": 0, "duplicate": 1, "forged": 1}));
    let (stored, _) = relay.pull_all(&alice).await;
    assert_eq!(stored, vec![original]);
    let metrics = String::from_utf8(relay.get("/metrics", None).await.bytes).unwrap();
    assert!(metrics.contains("simplysync_events_forged_total 1"), "{metrics}");
    assert!(relay.log_shows("forged duplicates"), "{}", relay.log_text());
}

#[tokio::test]
async fn a_push_with_another_token_after_registration_is_401() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    relay
        .push_as(alice.owner_id(), Owner::new().token(), &[alice.event("b", 2)])
        .await
        .assert_error(401, "unauthorized");
}

#[tokio::test]
async fn a_push_without_a_bearer_token_is_401() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let body = json!({"ownerId": alice.owner_id(), "events": [alice.event("a", 1)]});
    relay.post_json("/v1/events", None, body).await.assert_error(401, "unauthorized");
}

#[tokio::test]
async fn more_than_max_events_per_push_is_413_and_stores_nothing() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let events: Vec<SyncEnvelope> = (0..21).map(|i| alice.event(&format!("r{i}"), i)).collect();
    relay.push(&alice, &events).await.assert_error(413, "payload_too_large");
    relay.pull(&alice, "", None).await.assert_error(404, "unknown_owner");
}

#[tokio::test]
async fn an_envelope_over_max_event_bytes_is_413_and_the_whole_batch_is_refused() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("seed", 0)]).await;
    let r = relay.push(&alice, &[alice.event("a", 1), alice.event_sized("big", 2, 5000)]).await;
    r.assert_error(413, "payload_too_large");
    assert!(r.json()["message"].as_str().unwrap().contains("events[1]"));
    let (stored, _) = relay.pull_all(&alice).await;
    assert_eq!(stored.len(), 1, "no event of the refused batch was committed");
}

#[tokio::test]
async fn exceeding_the_owner_quota_is_413_commits_nothing_and_charges_nothing() {
    let relay = Relay::start(&[("MAX_OWNER_BYTES", "3000")]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event_sized("a", 1, 500)]).await;
    let used = relay.status_of(&alice).await.json()["account"]["usedBytes"].as_u64().unwrap();
    let batch: Vec<SyncEnvelope> = (2..8).map(|i| alice.event_sized(&format!("r{i}"), i, 500)).collect();
    relay.push(&alice, &batch).await.assert_error(413, "quota_exceeded");
    let account = relay.status_of(&alice).await.json()["account"].clone();
    assert_eq!(account["usedBytes"].as_u64().unwrap(), used, "no usage was charged");
    assert_eq!(account["events"], 1);
}

#[tokio::test]
async fn exceeding_max_total_bytes_over_all_owners_is_413() {
    // Each event is about 1.75 kB stored, and each owner's records count 4 KiB; the per-owner
    // quota is far away.
    let relay = Relay::start(&[("MAX_TOTAL_BYTES", &(5000 + 2 * OWNER_OVERHEAD).to_string())]);
    let alice = Owner::new();
    let bob = Owner::new();
    assert_eq!(relay.push(&alice, &[alice.event_sized("a", 1, 1000)]).await.status, 200);
    assert_eq!(relay.push(&bob, &[bob.event_sized("b", 1, 1000)]).await.status, 200);
    let r = relay.push(&bob, &[bob.event_sized("c", 2, 1000)]).await;
    r.assert_error(413, "quota_exceeded");
    assert!(r.json()["message"].as_str().unwrap().contains("MAX_TOTAL_BYTES"));
}

/// What each owner's records count against `MAX_TOTAL_BYTES` (the relay's `OWNER_OVERHEAD_BYTES`).
const OWNER_OVERHEAD: u64 = simplysync_relay::store::OWNER_OVERHEAD_BYTES;

#[tokio::test]
async fn each_owner_counts_its_records_against_max_total_bytes_so_owners_storing_little_cannot_fill_a_relay() {
    let first = Owner::new();
    let probe = Relay::start(&[]);
    assert_eq!(probe.push(&first, &[first.event("a", 1)]).await.status, 200);
    let event_bytes = probe.status_of(&first).await.json()["account"]["usedBytes"].as_u64().unwrap();
    // Room for three owners' records and one small event each, and not for a fourth owner.
    let room = 3 * (OWNER_OVERHEAD + event_bytes) + OWNER_OVERHEAD / 2;
    // Exact within one process; across processes the ceiling is approximate (docs/relay.md).
    let one_process = match backend() {
        Backend::Postgres3 => Backend::Postgres,
        other => other,
    };
    let relay = Relay::start_on(one_process, &[("MAX_TOTAL_BYTES", &room.to_string())]);
    let owners: Vec<Owner> = (0..4).map(|_| Owner::new()).collect();
    for o in &owners[..3] {
        assert_eq!(relay.push(o, &[o.event("a", 1)]).await.status, 200);
    }
    let r = relay.push(&owners[3], &[owners[3].event("a", 1)]).await;
    r.assert_error(413, "quota_exceeded");
    assert!(r.json()["message"].as_str().unwrap().contains("MAX_TOTAL_BYTES"), "{:?}", r.json());
    // The refused owner was not registered, and the charge is not the owner's own usage.
    assert_eq!(relay.status_of(&owners[3]).await.status, 404, "an unknown owner");
    let used = relay.status_of(&owners[0]).await.json()["account"]["usedBytes"].as_u64().unwrap();
    assert_eq!(used, event_bytes);
}

#[tokio::test]
async fn an_invalid_envelope_is_400_and_commits_no_event_of_the_batch() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("seed", 0)]).await;
    let breakers: [fn(&mut SyncEnvelope); 7] = [
        |e| e.version = 2,
        |e| e.owner_id = "AAAAAAAAAAAAAAAAAAAAAA".into(),
        |e| e.nonce = "short".into(),
        |e| e.ciphertext = "AAAA".into(),
        |e| e.stream_id = Some("not-a-stream-id".into()),
        |e| e.event_id = String::new(),
        |e| e.device_id = "x".repeat(300),
    ];
    for (i, breaker) in breakers.iter().enumerate() {
        let mut bad = alice.event("b", 10 + i as u64);
        breaker(&mut bad);
        let r = relay.push(&alice, &[alice.event("ok", 20 + i as u64), bad]).await;
        r.assert_error(400, "invalid_envelope");
        assert!(r.json()["message"].as_str().unwrap().starts_with("events[1]"), "{}", r.json());
    }
    let (stored, _) = relay.pull_all(&alice).await;
    assert_eq!(stored.len(), 1);
}

#[tokio::test]
async fn a_push_missing_a_field_is_400_with_the_field_named() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let mut e = serde_json::to_value(alice.event("a", 1)).unwrap();
    e.as_object_mut().unwrap().remove("nonce");
    let r =
        relay.post_json("/v1/events", Some(alice.token()), json!({"ownerId": alice.owner_id(), "events": [e]})).await;
    r.assert_error(400, "invalid_json");
    assert!(r.json()["message"].as_str().unwrap().contains("nonce"));
}

#[tokio::test]
async fn an_invalid_first_push_does_not_register_the_owner() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let mut bad = alice.event("a", 1);
    bad.version = 9;
    relay.push_as(alice.owner_id(), "attacker-token", &[bad]).await.assert_error(400, "invalid_envelope");
    assert_eq!(relay.push(&alice, &[alice.event("a", 1)]).await.status, 200, "the real token registers");
}

#[tokio::test]
async fn pulling_an_unknown_owner_is_404() {
    let relay = Relay::start(&[]);
    relay.pull(&Owner::new(), "", None).await.assert_error(404, "unknown_owner");
}

#[tokio::test]
async fn pulling_with_a_wrong_token_is_401() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let url = format!("/v1/events?ownerId={}", alice.owner_id());
    relay.get(&url, Some("wrong")).await.assert_error(401, "unauthorized");
}

#[tokio::test]
async fn pulls_page_in_seq_order_and_next_cursor_is_the_last_seq_returned() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let events: Vec<SyncEnvelope> = (0..15).map(|i| alice.event(&format!("r{i}"), i)).collect();
    relay.push(&alice, &events).await;
    let first = relay.pull(&alice, "", Some(6)).await.json();
    let page: Vec<SyncEnvelope> = serde_json::from_value(first["events"].clone()).unwrap();
    assert_eq!(page, events[..6].to_vec());
    assert_eq!(first["nextCursor"], "6");
    let second = relay.pull(&alice, "6", Some(6)).await.json();
    let page: Vec<SyncEnvelope> = serde_json::from_value(second["events"].clone()).unwrap();
    assert_eq!(page, events[6..12].to_vec());
    assert_eq!(second["nextCursor"], "12");
}

#[tokio::test]
async fn an_empty_or_non_numeric_after_starts_from_zero() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1), alice.event("b", 2)]).await;
    for after in ["", "legacy-cursor", "-3", "1.5"] {
        let v = relay.pull(&alice, after, None).await.json();
        assert_eq!(v["events"].as_array().unwrap().len(), 2, "after={after:?}");
    }
}

#[tokio::test]
async fn limit_is_clamped_to_one_and_max_and_defaults_to_default_events_per_pull() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    for batch in 0..4u64 {
        let events: Vec<SyncEnvelope> =
            (0..20).map(|i| alice.event(&format!("r{batch}-{i}"), batch * 100 + i)).collect();
        relay.push(&alice, &events).await;
    }
    let count = |v: serde_json::Value| v["events"].as_array().unwrap().len();
    assert_eq!(count(relay.pull(&alice, "", None).await.json()), 10, "DEFAULT_EVENTS_PER_PULL");
    assert_eq!(count(relay.pull(&alice, "", Some(1000)).await.json()), 50, "MAX_EVENTS_PER_PULL");
    let url = format!("/v1/events?ownerId={}&limit=-5", alice.owner_id());
    assert_eq!(count(relay.get(&url, Some(alice.token())).await.json()), 1);
    let url = format!("/v1/events?ownerId={}&limit=0", alice.owner_id());
    assert_eq!(count(relay.get(&url, Some(alice.token())).await.json()), 1);
    let url = format!("/v1/events?ownerId={}&limit=many", alice.owner_id());
    assert_eq!(count(relay.get(&url, Some(alice.token())).await.json()), 10);
}

#[tokio::test]
async fn a_page_past_the_end_is_empty_and_keeps_the_cursor() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let v = relay.pull(&alice, "1", None).await.json();
    assert_eq!(v["events"], json!([]));
    assert_eq!(v["nextCursor"], "1");
    let v = relay.pull(&alice, "99999999999999999999999", None).await.json();
    assert_eq!(v["events"], json!([]));
}

#[tokio::test]
async fn pulled_events_are_the_pushed_envelopes_and_still_decrypt() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let sent = alice.event("a", 1);
    relay.push(&alice, std::slice::from_ref(&sent)).await;
    let (got, _) = relay.pull_all(&alice).await;
    assert_eq!(got, vec![sent]);
    let payload = decrypt_envelope(&alice.id, &got[0]).unwrap();
    assert_eq!(payload.get("rowId").and_then(|v| v.as_str()), Some("a"));
}

#[tokio::test]
async fn seqs_are_global_so_two_owners_interleave_without_sharing_cursors() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let bob = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    relay.push(&bob, &[bob.event("b", 1)]).await;
    relay.push(&alice, &[alice.event("c", 2)]).await;
    let (events, cursors) = relay.pull_all(&alice).await;
    assert_eq!(events.len(), 2);
    assert_eq!(cursors, vec![3]);
    assert_eq!(relay.pull(&alice, "1", None).await.json()["events"].as_array().unwrap().len(), 1);
}

/// A push as big as a device's backlog: all-or-nothing, answered by its first bad envelope.
#[tokio::test]
async fn a_big_push_with_a_bad_envelope_near_its_end_commits_nothing_not_even_the_registration() {
    let relay = Relay::start(&[
        ("MAX_EVENTS_PER_PUSH", "1000"),
        ("MAX_OWNER_BYTES", "10000000"),
        ("MAX_TOTAL_BYTES", "100000000"),
    ]);
    let alice = Owner::new();
    let mut events: Vec<SyncEnvelope> = (0..600).map(|i| alice.event(&format!("r{i}"), i)).collect();
    let good = events[599].clone();
    events[599].nonce = "short".into();
    let r = relay.push_as(alice.owner_id(), "attacker-token", &events).await;
    r.assert_error(400, "invalid_envelope");
    assert!(r.json()["message"].as_str().unwrap().starts_with("events[599]"), "{}", r.json());

    events[599] = good;
    let r = relay.push(&alice, &events[..300]).await;
    assert_eq!(r.json(), json!({"accepted": 300, "duplicate": 0}), "the real token registers");
    let mut late = events[300..].to_vec();
    late[299] = alice.event_sized("big", 9999, 5000);
    let r = relay.push(&alice, &late).await;
    r.assert_error(413, "payload_too_large");
    assert!(r.json()["message"].as_str().unwrap().contains("events[299]"), "{}", r.json());
    let (stored, _) = relay.pull_all(&alice).await;
    assert_eq!(stored.len(), 300, "none of the refused batch was committed");

    let r = relay.push(&alice, &events).await;
    assert_eq!(r.json(), json!({"accepted": 300, "duplicate": 300}));
    let (stored, _) = relay.pull_all(&alice).await;
    let ids: Vec<&str> = stored.iter().map(|e| e.event_id.as_str()).collect();
    let pushed: Vec<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids, pushed, "every event, in the batch's order");
}
