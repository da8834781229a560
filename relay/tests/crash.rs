//! Crash safety: `kill -9` during concurrent pushes loses no acknowledged event, commits every
//! push all-or-nothing, and the seq counter continues upward after restart.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{Owner, Relay};
use serde_json::json;
use simplysync_protocol::SyncEnvelope;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_during_concurrent_pushes_loses_no_acknowledged_event_and_seq_continues_upward() {
    let mut relay = Relay::start(&[("MAX_OWNER_BYTES", "100000000"), ("MAX_TOTAL_BYTES", "1000000000")]);
    let url = relay.url.clone();
    let alice = Owner::new();
    let stop = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(AtomicUsize::new(0));
    let mut writers = Vec::new();
    for w in 0..8u64 {
        let (url, mut owner, stop, acks) = (url.clone(), alice.clone(), stop.clone(), acks.clone());
        owner.device = format!("crash{w}");
        writers.push(tokio::spawn(async move {
            let client = common::client();
            let (mut acked, mut sent) = (Vec::new(), Vec::new());
            for batch in 0u64.. {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let events: Vec<SyncEnvelope> =
                    (0..20).map(|i| owner.event(&format!("w{w}-{batch}-{i}"), batch * 20 + i)).collect();
                let ids: Vec<String> = events.iter().map(|e| e.event_id.clone()).collect();
                let body = json!({"ownerId": owner.owner_id(), "events": events}).to_string().into_bytes();
                let r = client
                    .post(format!("{url}/v1/events"))
                    .header("Authorization", format!("Bearer {}", owner.token()))
                    .body(body)
                    .send()
                    .await;
                match r {
                    Ok(resp) if resp.status() == 200 => {
                        acked.push(ids);
                        acks.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(resp) => panic!("unexpected status {}", resp.status()),
                    Err(_) => {
                        sent.push(ids); // the relay died mid-request: outcome unknown
                        break;
                    }
                }
            }
            (acked, sent)
        }));
    }
    // Kill once the writers are well under way (at least 8 acknowledged pushes), not after a
    // fixed time.
    for _ in 0..2000 {
        if acks.load(Ordering::SeqCst) >= 8 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    relay.kill9();
    stop.store(true, Ordering::SeqCst);
    let (mut acked, mut unknown) = (Vec::new(), Vec::new());
    for w in writers {
        let (a, s) = w.await.unwrap();
        acked.extend(a);
        unknown.extend(s);
    }
    assert!(acked.len() >= 8, "writers made progress before the crash ({} pushes)", acked.len());

    relay.restart();
    let (stored, cursors) = relay.pull_all(&alice).await;
    let ids: Vec<&str> = stored.iter().map(|e| e.event_id.as_str()).collect();
    let unique: HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "every stored event exactly once");
    for batch in &acked {
        assert!(batch.iter().all(|id| unique.contains(id.as_str())), "an acknowledged push lost events");
    }
    let counts: HashMap<bool, usize> = unknown.iter().fold(HashMap::new(), |mut m, batch| {
        let present = batch.iter().filter(|id| unique.contains(id.as_str())).count();
        assert!(present == 0 || present == batch.len(), "a push was committed partially ({present}/{})", batch.len());
        *m.entry(present > 0).or_default() += 1;
        m
    });
    assert_eq!(unique.len(), (acked.len() + counts.get(&true).copied().unwrap_or(0)) * 20);

    let head = *cursors.last().unwrap();
    relay.push(&alice, &[alice.event("after-crash", 999_999)]).await;
    let v = relay.pull(&alice, &head.to_string(), None).await.json();
    let next: u64 = v["nextCursor"].as_str().unwrap().parse().unwrap();
    assert!(next > head, "the seq counter continues upward after restart ({next} > {head})");
}
