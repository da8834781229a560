//! Log compaction: keep the newest event (max eventId = HLC) of each (owner, stream), drop
//! older versions, credit their bytes back. It walks each owner's log in seq order, a few
//! thousand events per short write transaction, so pushes interleave with it and a shutdown
//! can stop it between batches. Seqs are never reused, so no cursor is stranded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rusqlite::{params, OptionalExtension};

use super::owners::{apply, Delta};
use super::schema::set_meta;
use super::streams::index_tail;
use super::SqliteStore;
use crate::store::{CompactionReport, StoreError};

/// Events of one owner examined per write transaction.
pub(super) const BATCH: i64 = 5000;

pub(super) fn compact_all(store: &SqliteStore, now: &str, cancel: &AtomicBool) -> Result<CompactionReport, StoreError> {
    let started = Instant::now();
    let owners: Vec<(String, i64)> = store.read(|conn| {
        let mut stmt =
            conn.prepare("SELECT owner_id, owner_key FROM owners WHERE closed_at IS NULL ORDER BY owner_id")?;
        let ids = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<Vec<_>, _>>()?;
        Ok(ids)
    })?;
    let mut report = CompactionReport { owners: owners.len() as u64, complete: true, ..CompactionReport::default() };
    'owners: for (owner_id, owner_key) in owners {
        let mut cursor = 0i64;
        loop {
            if cancel.load(Ordering::Relaxed) {
                report.complete = false;
                break 'owners;
            }
            let (deleted, bytes, next) = store.write(None, |tx| {
                // Pushes since the last batch may have left a tail outside the stream index.
                index_tail(tx, 0)?;
                // The window: this owner's next BATCH events after the cursor.
                let upper: Option<i64> = tx
                    .prepare_cached(
                        "SELECT seq FROM events WHERE owner_key = ?1 AND seq > ?2 ORDER BY seq LIMIT 1 OFFSET ?3",
                    )?
                    .query_row(params![owner_key, cursor, BATCH - 1], |r| r.get(0))
                    .optional()?;
                let upper = upper.unwrap_or(i64::MAX);
                let deleted: Vec<(String, i64, i64)> = tx
                    .prepare_cached(
                        "DELETE FROM events WHERE seq IN (
                           SELECT e.seq FROM events AS e
                           WHERE e.owner_key = ?1 AND e.seq > ?2 AND e.seq <= ?3 AND e.stream_id IS NOT NULL
                             AND EXISTS (SELECT 1 FROM event_streams AS s JOIN events AS newer ON newer.seq = s.seq
                                         WHERE s.owner_key = ?1 AND s.stream_id = e.stream_id
                                           AND newer.event_id > e.event_id))
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
