//! Log compaction time for 1,000,000 stored events (`cargo bench -p simplysync-relay --bench
//! compaction [-- EVENTS]`): 10 owners × 10,000 streams × 10 versions each, ~1 KiB envelopes,
//! written through the store, then one compaction pass that keeps the newest version per
//! stream (removing 90%). Repeated on fresh databases; prints median and spread, and the
//! longest write transaction of the pass (how long it held the writer).
//!
//! `-- one-stream [VERSIONS]`: one owner, one stream, 20,000 versions by default (a row
//! autosaved every second between two passes).

use std::time::Instant;

use simplysync_relay::store::sqlite::{Quotas, SqliteStore, StoreOptions};
use simplysync_relay::store::{MayRegister, NewEvent, RelayStore};

fn main() {
    let one_stream = std::env::args().any(|a| a == "one-stream");
    let number: Option<usize> = std::env::args().skip(1).find_map(|a| a.parse().ok());
    let runs = 3;
    let (total, owners, versions, streams_per_owner) = if one_stream {
        let versions = number.unwrap_or(20_000);
        (versions, 1, versions, 1)
    } else {
        let total = number.unwrap_or(1_000_000);
        (total, 10, 10, total / 10 / 10)
    };
    let pad = "x".repeat(900);
    let mut fill_s = Vec::new();
    let mut compact_s = Vec::new();
    let mut longest_ms = Vec::new();
    for run in 0..runs {
        let dir = std::env::temp_dir().join(format!("simplysync-compaction-{}-{run}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let quotas = Quotas { max_owner_bytes: u64::MAX / 4, max_total_bytes: u64::MAX / 4 };
        let store = SqliteStore::open(&dir.join("relay.sqlite"), StoreOptions::new(quotas), "2026-01-01T00:00:00.000Z")
            .unwrap();
        let t0 = Instant::now();
        for o in 0..owners {
            let owner = format!("{:A>22}", format!("owner{o}"));
            let mut batch = Vec::with_capacity(1000);
            // Versions interleave across streams, as edits do.
            for v in 0..versions {
                for s in 0..streams_per_owner {
                    let event_id =
                        format!("{:015}-{:06}-dev", 1_764_504_000_000u64 + (v * streams_per_owner + s) as u64, 0);
                    let stream = format!("{:A>22}", format!("s{s}"));
                    let json = format!(
                        r#"{{"version":1,"ownerId":"{owner}","eventId":"{event_id}","deviceId":"dev","createdAt":"2026-01-01T00:00:00.000Z","streamId":"{stream}","nonce":"AAAAAAAAAAAAAAAA","ciphertext":"{pad}"}}"#
                    );
                    batch.push(NewEvent { event_id, stream_id: Some(stream), json });
                    if batch.len() == 1000 {
                        let full = std::mem::take(&mut batch);
                        store
                            .push(&owner, "token-hash", full, "2026-01-01T00:00:00.000Z", MayRegister::Yes, None)
                            .unwrap();
                    }
                }
            }
            if !batch.is_empty() {
                store.push(&owner, "token-hash", batch, "2026-01-01T00:00:00.000Z", MayRegister::Yes, None).unwrap();
            }
        }
        fill_s.push(t0.elapsed().as_secs_f64());
        let t0 = Instant::now();
        let report = store.compact_all("2026-01-01T00:00:01.000Z", &std::sync::atomic::AtomicBool::new(false)).unwrap();
        compact_s.push(t0.elapsed().as_secs_f64());
        longest_ms.push(report.longest_batch_ms as f64);
        assert_eq!(report.deleted_events as usize, owners * streams_per_owner * (versions - 1));
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!(
            "run {run}: filled in {:.1} s, compacted in {:.1} s ({} removed)",
            fill_s[run], compact_s[run], report.deleted_events
        );
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    let (c, cmin, cmax) = med(&mut compact_s);
    let (f, fmin, fmax) = med(&mut fill_s);
    let (l, lmin, lmax) = med(&mut longest_ms);
    println!(
        "| {total} events ({owners} owners × {streams_per_owner} streams × {versions} versions) | compaction {:.0} ms [{:.0}–{:.0}] | longest write {l:.0} ms [{lmin:.0}–{lmax:.0}] | fill {f:.1} s [{fmin:.1}–{fmax:.1}] |",
        c * 1000.0,
        cmin * 1000.0,
        cmax * 1000.0
    );
}
