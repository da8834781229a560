//! Log compaction: keep the newest event (max eventId = HLC) of each (owner, stream), drop
//! older versions, credit their bytes back. It walks each owner's log in seq order, a few
//! thousand events per short write transaction, so pushes interleave with it and a shutdown
//! can stop it between batches. Seqs are never reused, so no cursor is stranded.
//!
//! Each batch finds the newest version of every stream with several versions in its window
//! **once** (one walk of that stream's index entries) and deletes the older ones; for a stream
//! with one version in the window it asks "is there a newer version?", walking the stream from
//! its latest entry (the newest, as a rule: found at the first step). Asking that per event
//! from the oldest entry walked a stream once per version — 12,000 versions of one stream took
//! 2.2 s under the writer (BENCHMARKS.md). A stream now costs at most its versions times the
//! windows it appears in, whatever order its versions arrived in.
//! The pass also finishes deleting the logs of closed owners, in batches ([`purge_closed`]).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rusqlite::{params, OptionalExtension};

use super::owners::{apply, Delta};
use super::schema::set_meta;
use super::streams::index_tail;
use super::SqliteStore;
use crate::store::{CompactionReport, StoreError};

/// Events of one owner examined per write transaction, at first: the window then shrinks or
/// grows so that a batch holds the writer for about [`TARGET_MS`].
pub(super) const BATCH: i64 = 2500;

/// How long one batch may hold the writer, ms (pushes wait for it meanwhile).
const TARGET_MS: u64 = 25;

pub(super) fn compact_all(store: &SqliteStore, now: &str, cancel: &AtomicBool) -> Result<CompactionReport, StoreError> {
    let started = Instant::now();
    let owners: Vec<(String, i64)> = store.read(|conn| {
        let mut stmt =
            conn.prepare("SELECT owner_id, owner_key FROM owners WHERE closed_at IS NULL ORDER BY owner_id")?;
        let ids = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<Vec<_>, _>>()?;
        Ok(ids)
    })?;
    let mut report = CompactionReport { owners: owners.len() as u64, complete: true, ..CompactionReport::default() };
    if !purge_closed(store, cancel, &mut report)? {
        report.complete = false;
    }
    let mut window = BATCH;
    'owners: for (owner_id, owner_key) in owners {
        if !report.complete {
            break;
        }
        let mut cursor = 0i64;
        loop {
            if cancel.load(Ordering::Relaxed) {
                report.complete = false;
                break 'owners;
            }
            let held = Cell::new(None);
            let (deleted, bytes, next) = store.write(None, |tx| {
                held.set(Some(Instant::now()));
                // An owner closed since the pass began: its counters were settled by the close,
                // and what is left of its log is the purge's (never subtracted twice).
                let open = tx
                    .prepare_cached("SELECT 1 FROM owners WHERE owner_key = ?1 AND closed_at IS NULL")?
                    .exists([owner_key])?;
                if !open {
                    return Ok((0, 0, None));
                }
                // Pushes since the last batch may have left a tail outside the stream index.
                index_tail(tx, 0)?;
                // The window: this owner's next `window` events after the cursor.
                let upper: Option<i64> = tx
                    .prepare_cached(
                        "SELECT seq FROM events WHERE owner_key = ?1 AND seq > ?2 ORDER BY seq LIMIT 1 OFFSET ?3",
                    )?
                    .query_row(params![owner_key, cursor, window - 1], |r| r.get(0))
                    .optional()?;
                let upper = upper.unwrap_or(i64::MAX);
                let deleted: Vec<(String, i64, i64)> = tx
                    .prepare_cached(
                        "WITH win AS MATERIALIZED (
                           SELECT seq, stream_id, event_id FROM events
                           WHERE owner_key = ?1 AND seq > ?2 AND seq <= ?3 AND stream_id IS NOT NULL),
                         multi AS MATERIALIZED (
                           SELECT d.stream_id,
                                  (SELECT max(n.event_id) FROM event_streams AS s JOIN events AS n ON n.seq = s.seq
                                   WHERE s.owner_key = ?1 AND s.stream_id = d.stream_id) AS newest
                           FROM (SELECT stream_id FROM win GROUP BY stream_id HAVING count(*) > 1) AS d)
                         DELETE FROM events WHERE seq IN (
                           SELECT win.seq FROM win LEFT JOIN multi ON multi.stream_id = win.stream_id
                           WHERE CASE WHEN multi.stream_id IS NOT NULL THEN win.event_id < multi.newest
                             ELSE (SELECT 1 FROM event_streams AS s JOIN events AS n ON n.seq = s.seq
                                   WHERE s.owner_key = ?1 AND s.stream_id = win.stream_id
                                     AND n.event_id > win.event_id
                                   ORDER BY s.seq DESC LIMIT 1) IS NOT NULL END)
                         RETURNING stream_id, seq, bytes",
                    )?
                    .query_map(params![owner_key, cursor, upper], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect::<Result<_, _>>()?;
                let mut unindex = tx
                    .prepare_cached("DELETE FROM event_streams WHERE owner_key = ?1 AND stream_id = ?2 AND seq = ?3")?;
                let (mut n, mut bytes) = (0i64, 0i64);
                for (stream_id, seq, size) in &deleted {
                    unindex.execute(params![owner_key, stream_id, seq])?;
                    n += 1;
                    bytes += size;
                }
                apply(tx, &owner_id, Delta { bytes: -bytes, events: -n, streams: 0 })?;
                Ok((n as u64, bytes as u64, (upper != i64::MAX).then_some(upper)))
            })?;
            // The time the writer was held (not the wait for it: a busy writer must not make
            // the windows shrink).
            let took = held_ms(&held);
            report.longest_batch_ms = report.longest_batch_ms.max(took);
            window = if took > TARGET_MS {
                (window / 2).max(250)
            } else if took < TARGET_MS / 3 {
                (window * 3 / 2).min(4 * BATCH)
            } else {
                window
            };
            report.deleted_events += deleted;
            report.reclaimed_bytes += bytes;
            match next {
                Some(n) => cursor = n,
                None => break,
            }
        }
    }
    report.duration_ms = started.elapsed().as_millis() as u64;
    if !report.complete {
        return Ok(report); // stopped early: the next pass is still due
    }
    store.write(None, |tx| {
        set_meta(tx, "last_compaction_at", &now)?;
        set_meta(tx, "last_compaction_deleted", &(report.deleted_events as i64))?;
        set_meta(tx, "last_compaction_ms", &(report.duration_ms as i64))
    })?;
    Ok(report)
}

/// Milliseconds since the writer was taken (`held`, set inside the write), commit included.
fn held_ms(held: &Cell<Option<Instant>>) -> u64 {
    held.get().map_or(0, |at| at.elapsed().as_millis() as u64)
}

/// Rows of a closed owner's log deleted per write transaction.
pub(super) const PURGE_BATCH: i64 = 2000;

/// Deletes what is left of closed owners' logs (a close removes its rows this way too, after
/// the owner is marked closed and its counters are zeroed), a batch per write transaction so
/// the writer is never held long. Returns false if `cancel` stopped it.
pub(super) fn purge_closed(
    store: &SqliteStore,
    cancel: &AtomicBool,
    report: &mut CompactionReport,
) -> Result<bool, StoreError> {
    let closed: Vec<i64> = store.read(|conn| {
        let mut stmt = conn.prepare(
            "SELECT owner_key FROM owners AS o WHERE closed_at IS NOT NULL
             AND (EXISTS (SELECT 1 FROM events AS e WHERE e.owner_key = o.owner_key)
                  OR EXISTS (SELECT 1 FROM event_streams AS s WHERE s.owner_key = o.owner_key))",
        )?;
        let keys = stmt.query_map([], |r| r.get(0))?.collect::<Result<Vec<_>, _>>()?;
        Ok(keys)
    })?;
    for owner_key in closed {
        if !purge_owner_log(store, owner_key, cancel, None, report)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Deletes one closed owner's events, then their index entries, in batches. The counters were
/// settled when the owner closed; these rows no longer count anywhere. Stops early (false) once
/// `cancel` is set or `until` has passed.
pub(super) fn purge_owner_log(
    store: &SqliteStore,
    owner_key: i64,
    cancel: &AtomicBool,
    until: Option<Instant>,
    report: &mut CompactionReport,
) -> Result<bool, StoreError> {
    for sql in [
        "DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE owner_key = ?1 ORDER BY seq LIMIT ?2)",
        "DELETE FROM event_streams WHERE (owner_key, stream_id, seq) IN
           (SELECT owner_key, stream_id, seq FROM event_streams WHERE owner_key = ?1 LIMIT ?2)",
    ] {
        loop {
            if cancel.load(Ordering::Relaxed) || until.is_some_and(|u| Instant::now() >= u) {
                return Ok(false);
            }
            let held = Cell::new(None);
            let n = store.write(None, |tx| {
                held.set(Some(Instant::now()));
                Ok(tx.prepare_cached(sql)?.execute(params![owner_key, PURGE_BATCH])?)
            })?;
            report.longest_batch_ms = report.longest_batch_ms.max(held_ms(&held));
            if (n as i64) < PURGE_BATCH {
                break;
            }
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};

    use super::super::test_store::{self, Dir};
    use super::super::{lock, Quotas, SqliteStore};
    use super::{compact_all, purge_owner_log};
    use crate::store::{CompactionReport, MayRegister, NewEvent, RelayStore};

    const NOW: &str = "2026-12-08T00:00:00.000Z";
    const OWNER: &str = "AAAAAAAAAAAAAAAAAAAAAA";

    fn store(tag: &str) -> (Dir, SqliteStore) {
        test_store::open(&format!("compact-{tag}"), Quotas { max_owner_bytes: 1 << 30, max_total_bytes: 1 << 30 })
    }

    /// `n` versions of one stream of `OWNER`.
    fn versions(s: &SqliteStore, n: usize) {
        for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
            let events = chunk
                .iter()
                .map(|i| NewEvent {
                    event_id: format!("{i:09}"),
                    stream_id: Some("BBBBBBBBBBBBBBBBBBBBBB".into()),
                    json: "{}".into(),
                })
                .collect();
            s.push(OWNER, "hash", events, NOW, MayRegister::Yes, None).unwrap();
        }
    }

    fn events(s: &SqliteStore) -> i64 {
        lock(&s.writer).query_row("SELECT count(*) FROM events", [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn a_purge_out_of_time_stops_before_its_next_batch_and_the_next_pass_deletes_the_rest() {
        let (_dir, s) = store("purge-until");
        versions(&s, 5000);
        let key: i64 = lock(&s.writer).query_row("SELECT owner_key FROM owners", [], |r| r.get(0)).unwrap();
        let mut report = CompactionReport::default();
        let never = AtomicBool::new(false);
        assert!(!purge_owner_log(&s, key, &never, Some(Instant::now()), &mut report).unwrap());
        assert_eq!(events(&s), 5000, "no batch started after its time");
        assert!(purge_owner_log(&s, key, &never, None, &mut report).unwrap());
        assert_eq!(events(&s), 0);
    }

    #[test]
    fn a_batch_is_timed_from_when_it_holds_the_writer_not_while_it_waits_for_it() {
        let (_dir, s) = store("timed-held");
        versions(&s, 3000);
        let (taken, release) = (std::sync::Barrier::new(2), Duration::from_millis(400));
        let report = std::thread::scope(|scope| {
            scope.spawn(|| {
                let _writer = lock(&s.writer);
                taken.wait();
                std::thread::sleep(release);
            });
            taken.wait();
            compact_all(&s, NOW, &AtomicBool::new(false)).unwrap()
        });
        assert_eq!(report.deleted_events, 2999);
        assert!(
            report.longest_batch_ms < 400,
            "a batch counted the wait for the writer: {} ms",
            report.longest_batch_ms
        );
    }

    /// Each open owner's stored bytes and events as its counters say, and as its rows say;
    /// and the relay's totals against the sum of its owners'.
    fn counters_match_rows(s: &SqliteStore) {
        let c = lock(&s.writer);
        let mismatched: i64 = c
            .query_row(
                "SELECT count(*) FROM owners AS o WHERE closed_at IS NULL AND (
                   stored_bytes != (SELECT coalesce(sum(bytes), 0) FROM events AS e WHERE e.owner_key = o.owner_key)
                   OR event_count != (SELECT count(*) FROM events AS e WHERE e.owner_key = o.owner_key))",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(mismatched, 0, "an open owner's counters drifted from its rows");
        let (total, sum): (i64, i64) = c
            .query_row(
                "SELECT (SELECT value FROM relay_meta WHERE key = 'total_bytes'), (SELECT coalesce(sum(stored_bytes), 0) FROM owners)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(total, sum, "the relay's total drifted from its owners'");
        let closed_left: i64 = c
            .query_row("SELECT coalesce(sum(stored_bytes), 0) FROM owners WHERE closed_at IS NOT NULL", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(closed_left, 0, "a closed owner still counts bytes");
    }

    #[test]
    fn an_owner_closed_after_a_pass_listed_it_is_skipped_and_every_counter_still_matches_the_rows() {
        let (_dir, s) = store("close-race");
        let owners: Vec<String> = (0..2).map(|i| format!("{i:0>22}")).collect();
        for owner in &owners {
            for round in 0..3 {
                let events = (0..400)
                    .map(|i| NewEvent {
                        event_id: format!("{round}-{i:05}"),
                        stream_id: Some(format!("{:0>22}", i % 40)),
                        json: format!("{{\"i\":{i}}}"),
                    })
                    .collect();
                s.push(owner, "hash", events, NOW, MayRegister::Yes, None).unwrap();
            }
        }
        // The pass lists both owners, then waits for the writer; meanwhile the second owner is
        // closed (its log left for the purge, as when a close's own purge was cut short).
        let (held, closed) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|scope| {
            let closer = scope.spawn(|| {
                let mut conn = lock(&s.writer);
                held.wait();
                std::thread::sleep(Duration::from_millis(200)); // the pass is waiting by now
                let tx = conn.transaction().unwrap();
                super::super::mark_closed(&tx, &owners[1], "hash", NOW).unwrap();
                tx.commit().unwrap();
                drop(conn);
                closed.wait();
            });
            held.wait();
            let pass = scope.spawn(|| compact_all(&s, NOW, &AtomicBool::new(false)).unwrap());
            closed.wait();
            closer.join().unwrap();
            let report = pass.join().unwrap();
            assert_eq!(report.deleted_events, 1200 - 40, "the open owner's old versions only");
        });
        counters_match_rows(&s);
        compact_all(&s, NOW, &AtomicBool::new(false)).unwrap();
        counters_match_rows(&s);
        let left: i64 = lock(&s.writer).query_row("SELECT count(*) FROM events", [], |r| r.get(0)).unwrap();
        assert_eq!(left, 40, "the open owner's newest versions; the closed owner's log is purged");
    }
}
