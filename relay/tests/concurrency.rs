//! Concurrency: pagination stays skip-proof under many writers, trust-on-first-use admits
//! exactly one token when first pushes race, and the owner quota holds under concurrent pushes
//! — with three relay processes on one PostgreSQL database too (requests spread over them).

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{send, Owner, Relay};
use reqwest::Method;
use serde_json::json;
use simplysync_protocol::SyncEnvelope;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_writers_and_a_paginating_reader_see_every_accepted_event_exactly_once_in_cursor_order() {
    let relay = Arc::new(Relay::start(&[("MAX_OWNER_BYTES", "100000000"), ("MAX_TOTAL_BYTES", "1000000000")]));
    let alice = Owner::new();
    let bystander = Owner::new();
    let done = Arc::new(AtomicBool::new(false));

    let mut writers = Vec::new();
    for w in 0..8u64 {
        let (relay, mut owner) = (relay.clone(), alice.clone());
        owner.device = format!("writer{w}");
        writers.push(tokio::spawn(async move {
            let mut accepted = Vec::new();
            for batch in 0..30u64 {
                let events: Vec<SyncEnvelope> =
                    (0..10).map(|i| owner.event(&format!("w{w}-{batch}-{i}"), batch * 10 + i)).collect();
                let r = relay.push(&owner, &events).await;
                assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.bytes));
                accepted.extend(events.into_iter().map(|e| e.event_id));
            }
            accepted
        }));
    }
    // Another owner's pushes interleave seqs, so this owner's seqs have gaps.
    let noise = {
        let (relay, owner) = (relay.clone(), bystander.clone());
        tokio::spawn(async move {
            for n in 0..40 {
                relay.push(&owner, &[owner.event(&format!("n{n}"), n)]).await;
            }
        })
    };
    let reader = {
        let (relay, owner, done) = (relay.clone(), alice.clone(), done.clone());
        tokio::spawn(async move {
            let (mut seen, mut cursors) = (Vec::new(), Vec::<u64>::new());
            let mut after = String::new();
            loop {
                let finished = done.load(Ordering::SeqCst);
                let r = relay.pull(&owner, &after, Some(37)).await;
                if r.status == 404 {
                    continue; // nothing pushed yet
                }
                let v = r.json();
                let page: Vec<SyncEnvelope> = serde_json::from_value(v["events"].clone()).unwrap();
                if page.is_empty() && finished {
                    return (seen, cursors);
                }
                if !page.is_empty() {
                    let next = v["nextCursor"].as_str().unwrap().to_owned();
                    cursors.push(next.parse().unwrap());
                    seen.extend(page.into_iter().map(|e| e.event_id));
                    after = next;
                }
            }
        })
    };
    let mut accepted = Vec::new();
    for w in writers {
        accepted.extend(w.await.unwrap());
    }
    noise.await.unwrap();
    done.store(true, Ordering::SeqCst);
    let (seen, cursors) = reader.await.unwrap();

    assert_eq!(accepted.len(), 2400);
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no event was delivered twice");
    assert_eq!(unique, accepted.iter().collect::<HashSet<_>>(), "every accepted event was delivered");
    assert!(cursors.windows(2).all(|w| w[0] < w[1]), "cursors strictly increase");
    assert!(cursors.len() > 10, "the reader really paginated while writers pushed ({} pages)", cursors.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_pushes_with_different_tokens_register_exactly_one() {
    let relay = Arc::new(Relay::start(&[]));
    let alice = Owner::new();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (relay, owner) = (relay.clone(), alice.clone());
        tasks.push(tokio::spawn(async move {
            let token = format!("contender-token-{i}");
            let r = relay.push_as(owner.owner_id(), &token, &[owner.event(&format!("r{i}"), i)]).await;
            (token, r.status.as_u16())
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    let winners: Vec<&(String, u16)> = results.iter().filter(|(_, s)| *s == 200).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    assert!(results.iter().all(|(_, s)| *s == 200 || *s == 401), "{results:?}");
    let url = format!("/v1/status?ownerId={}", alice.owner_id());
    let status = relay.get(&url, Some(&winners[0].0)).await.json();
    assert_eq!(status["account"]["events"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_pushes_never_take_an_owner_past_the_quota() {
    let relay = Relay::start(&[("MAX_OWNER_BYTES", "40000")]);
    let alice = Owner::new();
    let tasks: Vec<_> = (0..16u64)
        .map(|t| {
            let (url, alice) = (relay.url.clone(), alice.clone());
            tokio::spawn(async move {
                let events: Vec<SyncEnvelope> =
                    (0..5).map(|i| alice.event_sized(&format!("t{t}-{i}"), t * 10 + i, 500)).collect();
                let bytes: u64 = events.iter().map(|e| serde_json::to_string(e).unwrap().len() as u64).sum();
                let body = json!({"ownerId": alice.owner_id(), "events": events}).to_string().into_bytes();
                let r = send(Method::POST, &format!("{url}/v1/events"), Some(alice.token()), Some(body)).await;
                (r, bytes)
            })
        })
        .collect();
    let (mut accepted_bytes, mut refused) = (0u64, 0u64);
    for t in tasks {
        let (r, bytes) = t.await.unwrap();
        match r.status.as_u16() {
            200 => accepted_bytes += bytes,
            _ => {
                r.assert_error(413, "quota_exceeded");
                refused += 1;
            }
        }
    }
    assert!(refused > 0, "16 pushes of ~5 KB each exceed a 40 KB quota");
    let used = relay.status_of(&alice).await.json()["account"]["usedBytes"].as_u64().unwrap();
    assert!(used <= 40_000, "{used}");
    assert_eq!(used, accepted_bytes, "exactly the accepted pushes are charged");
    let account = relay.status_of(&alice).await.json()["account"].clone();
    assert_eq!(account["events"].as_u64().unwrap(), (16 - refused) * 5, "{account}");
    assert_eq!(relay.pull_all(&alice).await.0.len() as u64, (16 - refused) * 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn max_owners_holds_when_first_pushes_of_many_owners_race() {
    let relay = Arc::new(Relay::start(&[("MAX_OWNERS", "3")]));
    let tasks: Vec<_> = (0..12)
        .map(|i| {
            let relay = relay.clone();
            tokio::spawn(async move {
                let owner = Owner::new();
                relay.push(&owner, &[owner.event("r", i)]).await.status.as_u16()
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 3, "{statuses:?}");
    assert!(statuses.iter().all(|s| *s == 200 || *s == 403), "{statuses:?}");
}
