//! The stream index, kept in batches: `event_streams` maps (owner, stream) to the seqs of its
//! events, for stream compaction, log compaction and each owner's stream count.
//!
//! Stream ids are HMACs, so an index over them takes each new event at a random place: kept
//! with every push, it dirtied about one index page per event — several MB of WAL per push of
//! 1000, most of a push's commit (BENCHMARKS.md, round nine). Instead, a push only appends its
//! events, and the events after `streams_indexed_seq` (the *tail*) are added to the index in
//! one sorted batch once there are [`INDEX_BATCH`] of them, by the indexer's thread between
//! pushes (indexer.rs; a push that finds four batches unindexed does it in its transaction).
//! Whatever reads the index first indexes the tail in its own write transaction
//! ([`index_tail`]), and the account's stream count adds the tail's new streams
//! ([`pending_new_streams`]), so no answer depends on when the batch ran.

use rusqlite::{params, Connection};

use super::schema::{meta_u64, set_meta};
use crate::store::StoreError;

/// Unindexed events a push leaves before the indexer's thread indexes them (bounds the work a
/// reader of the index does first, and the tail an account query counts).
pub(super) const INDEX_BATCH: u64 = 8192;

/// The `relay_meta` key: every event with a seq at or below it is in `event_streams`.
pub(super) const INDEXED_SEQ: &str = "streams_indexed_seq";

/// Streams of `owner_key` that only the tail after `indexed` holds (SQL; `?1` the owner's key,
/// `?2` the indexed seq).
const PENDING_NEW_STREAMS: &str = "SELECT count(DISTINCT e.stream_id) FROM events AS e
     WHERE e.owner_key = ?1 AND e.seq > ?2 AND e.stream_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM event_streams AS s WHERE s.owner_key = ?1 AND s.stream_id = e.stream_id)";

/// Adds the tail to the index if it holds at least `at_least` events (0: any), crediting each
/// owner's stream count with the streams it starts. Runs inside the caller's write transaction.
pub(super) fn index_tail(conn: &Connection, at_least: u64) -> Result<(), StoreError> {
    let (indexed, head) = (meta_u64(conn, INDEXED_SEQ)?, meta_u64(conn, "seq")?);
    if head <= indexed || head - indexed < at_least.max(1) {
        return Ok(());
    }
    let range = params![indexed as i64, head as i64];
    // Counted before the insert: a stream is new if the index has none of its events yet.
    let new_streams: Vec<(i64, i64)> = conn
        .prepare_cached(
            "SELECT e.owner_key, count(DISTINCT e.stream_id) FROM events AS e
             WHERE e.seq > ?1 AND e.seq <= ?2 AND e.stream_id IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM event_streams AS s
                               WHERE s.owner_key = e.owner_key AND s.stream_id = e.stream_id)
             GROUP BY e.owner_key",
        )?
        .query_map(range, |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    insert_range(conn, indexed, head)?;
    let mut credit = conn.prepare_cached("UPDATE owners SET stream_count = stream_count + ?2 WHERE owner_key = ?1")?;
    for (owner_key, streams) in new_streams {
        credit.execute(params![owner_key, streams])?;
    }
    set_meta(conn, INDEXED_SEQ, &(head as i64))
}

/// Adds the tail to the index without touching the stream counts: for a migration that counts
/// (or has counted) the streams from the rows themselves.
pub(super) fn index_tail_uncounted(conn: &Connection) -> Result<(), StoreError> {
    let (indexed, head) = (meta_u64(conn, INDEXED_SEQ)?, meta_u64(conn, "seq")?);
    // No upper bound: a migrated file's rows are all indexed, whatever its seq counter says.
    insert_range(conn, indexed, i64::MAX as u64)?;
    set_meta(conn, INDEXED_SEQ, &(head.max(indexed) as i64))
}

/// Copies the events with `indexed < seq <= head` into the index, in index order (one sorted
/// pass over the new pages instead of a random write per event).
fn insert_range(conn: &Connection, indexed: u64, head: u64) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO event_streams (owner_key, stream_id, seq)
         SELECT owner_key, stream_id, seq FROM events WHERE seq > ?1 AND seq <= ?2 AND stream_id IS NOT NULL
         ORDER BY owner_key, stream_id, seq",
    )?
    .execute(params![indexed as i64, head as i64])?;
    Ok(())
}

/// The streams of `owner_key` that the tail starts (not yet in its stream count).
pub(super) fn pending_new_streams(conn: &Connection, owner_key: i64) -> Result<u64, StoreError> {
    let indexed = meta_u64(conn, INDEXED_SEQ)?;
    let n: i64 =
        conn.prepare_cached(PENDING_NEW_STREAMS)?.query_row(params![owner_key, indexed as i64], |r| r.get(0))?;
    Ok(n.max(0) as u64)
}
