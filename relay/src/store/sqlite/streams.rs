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
    // Counted before the insert: a stream is new if the index has none of its events yet.
    let new_streams = new_streams(conn, params![indexed as i64, head as i64])?;
    insert_range(conn, indexed, head)?;
    credit(conn, &new_streams)?;
    set_meta(conn, INDEXED_SEQ, &(head as i64))
}

/// Per owner, the streams of the events in `range` (`?1 < seq <= ?2`) that the index has no
/// event of yet.
fn new_streams(conn: &Connection, range: impl rusqlite::Params) -> Result<Vec<(i64, i64)>, StoreError> {
    Ok(conn
        .prepare_cached(
            "SELECT e.owner_key, count(DISTINCT e.stream_id) FROM events AS e
             WHERE e.seq > ?1 AND e.seq <= ?2 AND e.stream_id IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM event_streams AS s
                               WHERE s.owner_key = e.owner_key AND s.stream_id = e.stream_id)
             GROUP BY e.owner_key",
        )?
        .query_map(range, |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?)
}

/// Adds each owner's new streams to its stream count.
fn credit(conn: &Connection, new_streams: &[(i64, i64)]) -> Result<(), StoreError> {
    let mut credit = conn.prepare_cached("UPDATE owners SET stream_count = stream_count + ?2 WHERE owner_key = ?1")?;
    for (owner_key, streams) in new_streams {
        credit.execute(params![owner_key, streams])?;
    }
    Ok(())
}

/// The tail as the indexer's thread reads it ahead of the writer, on a connection of its own
/// in one read transaction: the rows to add in index order, and the streams each owner starts.
/// Reading and sorting the tail and probing the index for its new streams were about half of
/// a batch; done here they no longer hold the writer, which pushes wait for (BENCHMARKS.md,
/// round twenty-four).
#[derive(Debug)]
pub(super) struct ReadTail {
    indexed: u64,
    head: u64,
    rows: Vec<(i64, String, i64)>,
    new_streams: Vec<(i64, i64)>,
}

/// Reads the tail ahead of the writer if it holds at least `at_least` events: its first
/// `at_most` seqs (a longer tail is indexed in parts). `None` if it is shorter.
pub(super) fn read_tail(conn: &mut Connection, at_least: u64, at_most: u64) -> Result<Option<ReadTail>, StoreError> {
    let tx = conn.transaction()?; // one snapshot for every read below
    let (indexed, head) = (meta_u64(&tx, INDEXED_SEQ)?, meta_u64(&tx, "seq")?);
    if head <= indexed || head - indexed < at_least.max(1) {
        return Ok(None);
    }
    let head = head.min(indexed.saturating_add(at_most.max(1)));
    // One pass over the tail's rows in seq order, sorted here into the index's order…
    let mut rows: Vec<(i64, String, i64)> = tx
        .prepare_cached(
            "SELECT owner_key, stream_id, seq FROM events WHERE seq > ?1 AND seq <= ?2 AND stream_id IS NOT NULL",
        )?
        .query_map(params![indexed as i64, head as i64], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    // In byte order, SQLite's BINARY collation: the index's order.
    rows.sort_unstable();
    // …then one look into the index per distinct stream: new if it has none of its events.
    let mut known =
        tx.prepare_cached("SELECT EXISTS (SELECT 1 FROM event_streams WHERE owner_key = ?1 AND stream_id = ?2)")?;
    let mut new_streams: Vec<(i64, i64)> = Vec::new();
    let mut previous: Option<(i64, &str)> = None;
    for (owner_key, stream_id, _) in &rows {
        if previous == Some((*owner_key, stream_id.as_str())) {
            continue;
        }
        previous = Some((*owner_key, stream_id));
        if !known.query_row(params![owner_key, stream_id], |r| r.get::<_, bool>(0))? {
            match new_streams.last_mut() {
                Some((o, n)) if o == owner_key => *n += 1,
                _ => new_streams.push((*owner_key, 1)),
            }
        }
    }
    drop(known);
    Ok(Some(ReadTail { indexed, head, rows, new_streams }))
}

/// Adds a tail read ahead ([`read_tail`]) to the index, inside the writer's transaction, if
/// what it read still holds: `unchanged` — the caller knows no transaction but pushes wrote
/// since the read began (pushes only add events after its head) — and the index still ends
/// where it did (no push indexed it at the safety net). Otherwise indexes the tail as it is
/// now, whatever its length, as [`index_tail`] does.
pub(super) fn index_read_tail(conn: &Connection, tail: &ReadTail, unchanged: bool) -> Result<(), StoreError> {
    if !unchanged || meta_u64(conn, INDEXED_SEQ)? != tail.indexed {
        return index_tail(conn, 0);
    }
    let mut insert =
        conn.prepare_cached("INSERT INTO event_streams (owner_key, stream_id, seq) VALUES (?1, ?2, ?3)")?;
    for (owner_key, stream_id, seq) in &tail.rows {
        insert.execute(params![owner_key, stream_id, seq])?;
    }
    credit(conn, &tail.new_streams)?;
    set_meta(conn, INDEXED_SEQ, &(tail.head as i64))
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

#[cfg(test)]
pub(super) mod tests {
    use rusqlite::Connection;

    use super::super::schema::meta_u64;
    use super::super::test_store::{self, Dir};
    use super::super::{lock, Quotas, SqliteStore};
    use super::{index_read_tail, index_tail, read_tail, INDEXED_SEQ};
    use crate::store::{MayRegister, NewEvent, RelayStore};

    const NOW: &str = "2026-12-06T00:00:00.000Z";

    fn store(tag: &str) -> (Dir, SqliteStore) {
        test_store::open(&format!("streams-{tag}"), Quotas { max_owner_bytes: 1 << 30, max_total_bytes: 1 << 30 })
    }

    /// Pushes one event per `(event id, stream)` for `owner`.
    fn push(s: &SqliteStore, owner: &str, events: &[(&str, Option<&str>)]) {
        let events = events
            .iter()
            .map(|(id, stream)| NewEvent {
                event_id: (*id).into(),
                stream_id: stream.map(Into::into),
                json: "{}".into(),
            })
            .collect();
        s.push(owner, "hash", events, NOW, MayRegister::Yes, None).unwrap();
    }

    /// The index's entries, each owner's stream count, and the seq the index has reached.
    pub(in super::super) type State = (Vec<(i64, String, i64)>, Vec<(String, i64)>, u64);

    /// The rows of `sql`, each of `columns` values.
    fn rows<T>(c: &Connection, sql: &str, columns: impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>) -> Vec<T> {
        c.prepare(sql).unwrap().query_map([], columns).unwrap().collect::<Result<_, _>>().unwrap()
    }

    fn entry(r: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, String, i64)> {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
    }

    fn count(r: &rusqlite::Row<'_>) -> rusqlite::Result<(String, i64)> {
        Ok((r.get(0)?, r.get(1)?))
    }

    pub(in super::super) fn state(s: &SqliteStore) -> State {
        let c = lock(&s.writer);
        (
            rows(&c, "SELECT owner_key, stream_id, seq FROM event_streams ORDER BY 1, 2, 3", entry),
            rows(&c, "SELECT owner_id, stream_count FROM owners ORDER BY 1", count),
            meta_u64(&c, INDEXED_SEQ).unwrap(),
        )
    }

    /// What a complete index holds for the events as they are: an entry per event with a
    /// stream, each open owner's distinct streams, and the head.
    fn complete(s: &SqliteStore) -> State {
        let c = lock(&s.writer);
        (
            rows(
                &c,
                "SELECT owner_key, stream_id, seq FROM events WHERE stream_id IS NOT NULL ORDER BY 1, 2, 3",
                entry,
            ),
            rows(
                &c,
                "SELECT owner_id, (SELECT count(DISTINCT stream_id) FROM events AS e WHERE e.owner_key = o.owner_key)
                 FROM owners AS o ORDER BY 1",
                count,
            ),
            meta_u64(&c, "seq").unwrap(),
        )
    }

    fn reader(s: &SqliteStore) -> Connection {
        Connection::open(&s.path).unwrap()
    }

    /// Indexes a tail read ahead the way the indexer's thread does, in a write transaction.
    fn index(s: &SqliteStore, tail: &super::ReadTail, unchanged: bool) {
        let mut c = lock(&s.writer);
        let tx = c.transaction().unwrap();
        index_read_tail(&tx, tail, unchanged).unwrap();
        tx.commit().unwrap();
    }

    #[test]
    fn a_tail_read_ahead_of_the_writer_is_indexed_with_its_new_streams_counted() {
        let (_dir, s) = store("ahead");
        push(&s, "a", &[("a1", Some("s1")), ("a2", Some("s2")), ("a3", None)]);
        push(&s, "b", &[("b1", Some("s1"))]);
        {
            let c = lock(&s.writer);
            index_tail(&c, 0).unwrap();
        }
        // s2 again and a new s3 for a (one new stream), s1 again and a new s2 twice for b.
        push(&s, "a", &[("a4", Some("s3")), ("a5", Some("s2")), ("a6", None), ("a7", Some("s3"))]);
        push(&s, "b", &[("b2", Some("s2")), ("b3", Some("s1")), ("b4", Some("s2"))]);
        let tail = read_tail(&mut reader(&s), 1, u64::MAX).unwrap().expect("a tail of 7 events");
        index(&s, &tail, true);
        let after = state(&s);
        assert_eq!(after, complete(&s));
        assert_eq!(after.1, vec![("a".into(), 3), ("b".into(), 2)]);
    }

    #[test]
    fn a_tail_shorter_than_asked_is_not_read() {
        let (_dir, s) = store("short");
        push(&s, "a", &[("a1", Some("s1")), ("a2", Some("s2"))]);
        assert!(read_tail(&mut reader(&s), 3, u64::MAX).unwrap().is_none());
        assert!(read_tail(&mut reader(&s), 2, u64::MAX).unwrap().is_some());
    }

    #[test]
    fn a_long_tail_is_read_ahead_in_parts() {
        let (_dir, s) = store("parts");
        let ids: Vec<String> = (0..12).map(|i| format!("e{i}")).collect();
        let events: Vec<(&str, Option<&str>)> = ids.iter().map(|id| (id.as_str(), Some("s1"))).collect();
        push(&s, "a", &events);
        let mut reached = Vec::new();
        while let Some(tail) = read_tail(&mut reader(&s), 1, 5).unwrap() {
            index(&s, &tail, true);
            reached.push(state(&s).2);
        }
        assert_eq!(reached, vec![5, 10, 12]);
        assert_eq!(state(&s), complete(&s), "one stream, counted once over the parts");
    }

    #[test]
    fn a_tail_indexed_by_the_writer_meanwhile_is_not_added_twice() {
        let (_dir, s) = store("meanwhile");
        push(&s, "a", &[("a1", Some("s1")), ("a2", Some("s2"))]);
        let tail = read_tail(&mut reader(&s), 1, u64::MAX).unwrap().unwrap();
        push(&s, "a", &[("a3", Some("s3"))]);
        {
            let c = lock(&s.writer);
            index_tail(&c, 0).unwrap(); // as a push at the safety net does
        }
        index(&s, &tail, true);
        assert_eq!(state(&s), complete(&s));
    }

    #[test]
    fn a_tail_read_before_another_write_is_read_again() {
        let (_dir, s) = store("again");
        push(&s, "a", &[("a1", Some("s1")), ("a2", Some("s2"))]);
        push(&s, "b", &[("b1", Some("s1"))]);
        let tail = read_tail(&mut reader(&s), 1, u64::MAX).unwrap().unwrap();
        s.close_owner("a", "hash", NOW, None).unwrap();
        index(&s, &tail, false);
        let after = state(&s);
        assert_eq!(after, complete(&s), "no entry for a closed owner's deleted events");
        assert_eq!(after.0.len(), 1);
    }
}
