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
            let batch_started = Instant::now();
            let (deleted, bytes, next) = store.write(None, |tx| {
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
            let took = batch_started.elapsed().as_millis() as u64;
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
        if !purge_owner_log(store, owner_key, cancel, report)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Deletes one closed owner's events, then their index entries, in batches. The counters were
/// settled when the owner closed; these rows no longer count anywhere.
pub(super) fn purge_owner_log(
    store: &SqliteStore,
    owner_key: i64,
    cancel: &AtomicBool,
    report: &mut CompactionReport,
) -> Result<bool, StoreError> {
    for sql in [
        "DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE owner_key = ?1 ORDER BY seq LIMIT ?2)",
        "DELETE FROM event_streams WHERE (owner_key, stream_id, seq) IN
           (SELECT owner_key, stream_id, seq FROM event_streams WHERE owner_key = ?1 LIMIT ?2)",
    ] {
        loop {
            if cancel.load(Ordering::Relaxed) {
                return Ok(false);
            }
            let started = Instant::now();
            let n = store.write(None, |tx| Ok(tx.prepare_cached(sql)?.execute(params![owner_key, PURGE_BATCH])?))?;
            report.longest_batch_ms = report.longest_batch_ms.max(started.elapsed().as_millis() as u64);
            if (n as i64) < PURGE_BATCH {
                break;
            }
        }
    }
    Ok(true)
}
