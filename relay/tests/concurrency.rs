//! Concurrency: pagination stays skip-proof under many writers, and trust-on-first-use admits
//! exactly one token when first pushes race.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{Owner, Relay};
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
