//! The outbox: local row versions waiting to reach every configured relay.
//!
//! A mutation inserts a *pending* intent — `(event_id = the row version's HLC, table, row_id)`,
//! `envelope_json` NULL — in the same transaction as the row. The plaintext is the row itself:
//! sealing reads the row and, if its `updatedAt` still equals the intent's event id, seals it;
//! otherwise a later local write superseded the intent, which is dropped (it never left the
//! device). Only sealed events are ever selected for a push, so plaintext never leaves the
//! device. An event stays until every configured relay acknowledged it.
//!
//! The table is clustered by event id: a local write's HLC is greater than every one before it
//! on this device, so that order is the order of the writes, and an intent costs one b-tree
//! (a seq and a unique index on the event id, as before, cost two: BENCHMARKS.md, issue 17
//! round twenty-three).

use rusqlite::{params, CachedStatement, Connection, OptionalExtension};

use super::StoreError;

/// A pending intent to seal.
#[derive(Debug, Clone)]
pub struct Unsealed {
    /// Event id (the HLC of the row version; the outbox is kept in its order).
    pub event_id: String,
    /// Table.
    pub table: String,
    /// Row id.
    pub row_id: String,
    /// Local wall time of the mutation, ms.
    pub created_at: i64,
}

/// Appends a pending intent. An event id already queued is left alone (returns false).
pub fn enqueue(conn: &Connection, event_id: &str, table: &str, row_id: &str, now: u64) -> Result<bool, StoreError> {
    Enqueuer::new(conn).enqueue(event_id, table, row_id, now)
}

/// [`enqueue`] for a run of intents in one transaction, its statements taken once for the run
/// (see `rows::RowWriter`).
pub struct Enqueuer<'c> {
    conn: &'c Connection,
    /// The statements appending one intent, [`CHUNK`] intents, and one intent with a request
    /// record, once taken.
    statements: [Option<CachedStatement<'c>>; 3],
}

impl std::fmt::Debug for Enqueuer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Enqueuer")
    }
}

/// Intents appended by one statement in [`Enqueuer::enqueue_all`].
const CHUNK: usize = 64;

/// An intent: `(event_id, table, row_id)`.
pub type Intent<'a> = (&'a str, &'a str, &'a str);

impl<'c> Enqueuer<'c> {
    /// An enqueuer on `conn` (inside the run's transaction).
    pub fn new(conn: &'c Connection) -> Enqueuer<'c> {
        Enqueuer { conn, statements: [None, None, None] }
    }

    /// Appends a pending intent. An event id already queued is left alone (returns false).
    pub fn enqueue(&mut self, event_id: &str, table: &str, row_id: &str, now: u64) -> Result<bool, StoreError> {
        Ok(self.enqueue_all(&[(event_id, table, row_id)], now)? > 0)
    }

    /// Appends pending `intents`, all made at `now`, and returns how many: an event id already
    /// queued is left alone. Runs of [`CHUNK`] go in one statement each: one statement run per
    /// intent was ~5,000 instructions of SQLite's, mostly the statement's start and end and a
    /// search of the b-tree from its root, which one statement appending in order skips
    /// (BENCHMARKS.md, issue 17 round twenty-six).
    pub fn enqueue_all(&mut self, intents: &[Intent<'_>], now: u64) -> Result<usize, StoreError> {
        let mut added = 0;
        let mut rest = intents;
        while !rest.is_empty() {
            let n = if rest.len() >= CHUNK { CHUNK } else { 1 };
            let stmt = match &mut self.statements[usize::from(n > 1)] {
                Some(stmt) => stmt,
                taken @ None => {
                    // `?1` the time, then each `?` the one after the last: 2, 3, 4, then 5, 6, 7…
                    let mut sql = String::from(
                        "INSERT OR IGNORE INTO _sync_outbox (created_at, event_id, table_name, row_id) VALUES (?1, ?, ?, ?)",
                    );
                    for _ in 1..n {
                        sql.push_str(", (?1, ?, ?, ?)");
                    }
                    taken.insert(self.conn.prepare_cached(&sql)?)
                }
            };
            stmt.raw_bind_parameter(1, now as i64)?;
            for (k, (event_id, table, row_id)) in rest[..n].iter().enumerate() {
                stmt.raw_bind_parameter(2 + 3 * k, event_id)?;
                stmt.raw_bind_parameter(3 + 3 * k, table)?;
                stmt.raw_bind_parameter(4 + 3 * k, row_id)?;
            }
            added += stmt.raw_execute()?;
            rest = &rest[n..];
        }
        Ok(added)
    }

    /// [`Self::enqueue_all`], with request `record` — `(id, result)` — on the last intent, in
    /// the same statement that appends it: recorded by an `UPDATE` after it, a single write's
    /// record had cost ~10,000 of its ~47,000 instructions natively, the intent's key sought and
    /// its row written twice (BENCHMARKS.md, issue 17 round thirty). Returns how many intents
    /// were added and whether the record was (not when there are no intents, or when the last
    /// one's event id was already queued).
    pub fn enqueue_all_recorded(
        &mut self,
        intents: &[Intent<'_>],
        now: u64,
        record: (&str, &str),
    ) -> Result<(usize, bool), StoreError> {
        let Some(((event_id, table, row_id), before)) = intents.split_last() else { return Ok((0, false)) };
        let added = self.enqueue_all(before, now)?;
        let stmt = match &mut self.statements[2] {
            Some(stmt) => stmt,
            taken @ None => taken.insert(self.conn.prepare_cached(
                "INSERT OR IGNORE INTO _sync_outbox (created_at, event_id, table_name, row_id, request_id, request_result)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?),
        };
        stmt.raw_bind_parameter(1, now as i64)?;
        stmt.raw_bind_parameter(2, event_id)?;
        stmt.raw_bind_parameter(3, table)?;
        stmt.raw_bind_parameter(4, row_id)?;
        stmt.raw_bind_parameter(5, record.0)?;
        stmt.raw_bind_parameter(6, record.1)?;
        let last = stmt.raw_execute()?;
        Ok((added + last, last == 1))
    }
}

/// Up to `limit` unsealed intents with event ids after `after` (`""`: from the first), oldest
/// first.
pub fn unsealed(conn: &Connection, after: &str, limit: u32) -> Result<Vec<Unsealed>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT event_id, table_name, row_id, created_at FROM _sync_outbox
         WHERE event_id > ?1 AND envelope_json IS NULL ORDER BY event_id LIMIT ?2",
    )?;
    let rows = stmt
        .query_map(params![after, limit], |r| {
            Ok(Unsealed { event_id: r.get(0)?, table: r.get(1)?, row_id: r.get(2)?, created_at: r.get(3)? })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Stores an intent's envelope.
pub fn mark_sealed(conn: &Connection, event_id: &str, envelope_json: &str) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE _sync_outbox SET envelope_json = ?2 WHERE event_id = ?1")?
        .execute(params![event_id, envelope_json])?;
    Ok(())
}

/// The envelope event `event_id` was sealed in, while the outbox keeps it (until every relay
/// acknowledged it and the pass pruned it); `None` for an intent not sealed yet, or no event.
pub fn sealed_envelope(conn: &Connection, event_id: &str) -> Result<Option<String>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT envelope_json FROM _sync_outbox WHERE event_id = ?1")?
        .query_row([event_id], |r| r.get(0))
        .optional()?
        .flatten())
}

/// Drops an intent a later write superseded (never sealed, never sent).
pub fn drop_intent(conn: &Connection, event_id: &str) -> Result<(), StoreError> {
    conn.prepare_cached("DELETE FROM _sync_outbox WHERE event_id = ?1 AND envelope_json IS NULL")?
        .execute([event_id])?;
    Ok(())
}

/// The greatest event id in the outbox (to resume the clock).
pub fn max_event_id(conn: &Connection) -> Result<Option<String>, StoreError> {
    Ok(conn.query_row("SELECT max(event_id) FROM _sync_outbox", [], |r| r.get(0))?)
}

/// One sealed event selected for a push.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// Event id (the push continues after it).
    pub event_id: String,
    /// The envelope JSON.
    pub envelope: String,
}

/// Up to `limit` sealed events with event ids after `after` (`""`: from the first; and at most
/// `max_bytes` of envelopes) that `relay` has not acknowledged, oldest first. A push passes the
/// last event id it sent as `after`, so draining a large outbox is linear, not quadratic.
pub fn unacked_batch(
    conn: &Connection,
    relay: &str,
    after: &str,
    limit: u32,
    max_bytes: usize,
) -> Result<Vec<Outgoing>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT o.event_id, o.envelope_json FROM _sync_outbox o
         WHERE o.event_id > ?3 AND o.envelope_json IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM _sync_acks a WHERE a.relay = ?1 AND a.event_id = o.event_id)
           AND NOT EXISTS (SELECT 1 FROM _sync_set_aside s WHERE s.relay = ?1 AND s.kind = 'event' AND s.item = o.event_id)
         ORDER BY o.event_id LIMIT ?2",
    )?;
    let mut rows = stmt.query(params![relay, limit, after])?;
    let (mut out, mut bytes) = (Vec::new(), 0usize);
    while let Some(r) = rows.next()? {
        let o = Outgoing { event_id: r.get(0)?, envelope: r.get(1)? };
        bytes += o.envelope.len();
        if !out.is_empty() && bytes > max_bytes {
            break;
        }
        out.push(o);
    }
    Ok(out)
}

/// Records that `relay` stored these events, and that they reached at least one relay.
pub fn record_acks(conn: &Connection, relay: &str, event_ids: &[String], now: u64) -> Result<(), StoreError> {
    let mut ack = conn.prepare_cached("INSERT OR IGNORE INTO _sync_acks (relay, event_id) VALUES (?1, ?2)")?;
    let mut pushed =
        conn.prepare_cached("UPDATE _sync_outbox SET pushed_at = ?2 WHERE event_id = ?1 AND pushed_at IS NULL")?;
    for id in event_ids {
        ack.execute(params![relay, id])?;
        pushed.execute(params![id, now as i64])?;
    }
    Ok(())
}

/// Events of the outbox `relay` has not acknowledged (sealed or not), not counting those set
/// aside for it.
///
/// Counted as the outbox's size less what `relay` acknowledged and what was set aside for it
/// (and not acknowledged), each of those counted only while its event is still queued. The
/// outbox's size is a count of its pages' cells, not of lookups, so a status costs a read of the
/// outbox's pages and a lookup per acknowledgement and set-aside event, not two lookups per
/// queued event (a 100,000-event backlog cost 200,000 at each status: BENCHMARKS.md, issue 17
/// round thirty-two). Between passes acknowledgements are few — a pass prunes what every relay
/// acknowledged — except while another relay lags: its peers' stay, a lookup each, as before.
pub fn pending_count(conn: &Connection, relay: &str) -> Result<u64, StoreError> {
    let n: i64 = conn
        .prepare_cached(
            "SELECT (SELECT count(*) FROM _sync_outbox)
              - (SELECT count(*) FROM _sync_acks a WHERE a.relay = ?1
                   AND EXISTS (SELECT 1 FROM _sync_outbox o WHERE o.event_id = a.event_id))
              - (SELECT count(*) FROM _sync_set_aside s WHERE s.relay = ?1 AND s.kind = 'event'
                   AND EXISTS (SELECT 1 FROM _sync_outbox o WHERE o.event_id = s.item)
                   AND NOT EXISTS (SELECT 1 FROM _sync_acks a WHERE a.relay = ?1 AND a.event_id = s.item))",
        )?
        .query_row([relay], |r| r.get(0))?;
    Ok(n as u64)
}

/// Deletes events every relay in `relays` acknowledged, and acks of events no longer queued.
pub fn prune(conn: &Connection, relays: &[String]) -> Result<u64, StoreError> {
    if relays.is_empty() {
        return Ok(0);
    }
    let marks: Vec<String> = (1..=relays.len()).map(|i| format!("?{i}")).collect();
    let sql = format!(
        "DELETE FROM _sync_outbox WHERE envelope_json IS NOT NULL AND
         (SELECT count(*) FROM _sync_acks a WHERE a.event_id = _sync_outbox.event_id AND a.relay IN ({})) = {}",
        marks.join(", "),
        relays.len()
    );
    let n = conn.execute(&sql, rusqlite::params_from_iter(relays.iter()))?;
    conn.execute_batch(
        "DELETE FROM _sync_acks WHERE NOT EXISTS (SELECT 1 FROM _sync_outbox o WHERE o.event_id = _sync_acks.event_id)",
    )?;
    Ok(n as u64)
}

/// Marks an event as acknowledged by `relay` without pushing it there (used when an event is
/// meant for other relays only).
pub fn ack_without_push(conn: &Connection, relay: &str, event_id: &str) -> Result<(), StoreError> {
    conn.prepare_cached("INSERT OR IGNORE INTO _sync_acks (relay, event_id) VALUES (?1, ?2)")?
        .execute(params![relay, event_id])?;
    Ok(())
}

/// Forgets every acknowledgement by `relay`, and what was set aside for it.
pub fn forget_relay(conn: &Connection, relay: &str) -> Result<(), StoreError> {
    conn.prepare_cached("DELETE FROM _sync_acks WHERE relay = ?1")?.execute([relay])?;
    conn.prepare_cached("DELETE FROM _sync_set_aside WHERE relay = ?1")?.execute([relay])?;
    Ok(())
}

/// Drops queued events of one row (used by purge): its whole-row events and, on a column-merge
/// table, the events of its cells (`<table>#<cell>`).
pub fn drop_row_events(conn: &Connection, table: &str, row_id: &str) -> Result<(), StoreError> {
    conn.prepare_cached(
        "DELETE FROM _sync_outbox WHERE row_id = ?2
           AND (table_name = ?1 OR substr(table_name, 1, length(?1) + 1) = ?1 || '#')",
    )?
    .execute(params![table, row_id])?;
    Ok(())
}

/// Drops the whole outbox and its acks (re-key).
pub fn clear(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch("DELETE FROM _sync_outbox; DELETE FROM _sync_acks;")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox() -> Connection {
        let conn = super::super::open_memory().unwrap();
        super::super::system::create_system_tables(&conn).unwrap();
        conn
    }

    fn record_of(conn: &Connection, event_id: &str) -> (Option<String>, Option<String>) {
        conn.query_row("SELECT request_id, request_result FROM _sync_outbox WHERE event_id = ?1", [event_id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap()
    }

    /// What `pending_count` means, row by row: the definition it must agree with.
    fn pending_by_definition(conn: &Connection, relay: &str) -> u64 {
        conn.query_row(
            "SELECT count(*) FROM _sync_outbox o
             WHERE NOT EXISTS (SELECT 1 FROM _sync_acks a WHERE a.relay = ?1 AND a.event_id = o.event_id)
               AND NOT EXISTS (SELECT 1 FROM _sync_set_aside s WHERE s.relay = ?1 AND s.kind = 'event' AND s.item = o.event_id)",
            [relay],
            |r| r.get::<_, i64>(0),
        )
        .unwrap() as u64
    }

    #[test]
    fn the_pending_count_agrees_with_its_definition_whatever_is_acknowledged_set_aside_or_gone() {
        let relays = ["https://a", "https://b"];
        // One event id in each of the 128 states: queued or gone (an ack or a set-aside
        // outliving its purged intent until the pass's prune), sealed or not, acknowledged by
        // each relay or not, set aside for each or not, as an event or a chunk of the same name.
        let conn = outbox();
        for bits in 0u32..128 {
            let id = format!("e{bits:03}");
            if bits & 1 == 0 {
                enqueue(&conn, &id, "t", &id, 1).unwrap();
                if bits & 2 == 0 {
                    mark_sealed(&conn, &id, "{}").unwrap();
                }
            }
            let kind = if bits & 64 == 0 { "event" } else { "chunk" };
            for (k, relay) in relays.iter().enumerate() {
                if bits >> (2 + k) & 1 == 1 {
                    ack_without_push(&conn, relay, &id).unwrap();
                }
                if bits >> (4 + k) & 1 == 1 {
                    conn.execute(
                        "INSERT INTO _sync_set_aside (relay, kind, item, reason, at) VALUES (?1, ?2, ?3, 'TOO_LARGE', 1)",
                        params![relay, kind, id],
                    )
                    .unwrap();
                }
            }
        }
        for relay in relays {
            let n = pending_count(&conn, relay).unwrap();
            assert_eq!(n, pending_by_definition(&conn, relay), "{relay}");
            assert!(n > 0 && n < 64, "{relay}: {n} of the 64 queued — some pending and some not");
        }
        assert_eq!(
            pending_count(&conn, "https://none").unwrap(),
            64,
            "a relay nothing was acknowledged by or set aside for"
        );
    }

    #[test]
    fn an_acknowledgement_or_a_set_aside_counts_once_and_only_while_its_event_is_queued() {
        let conn = outbox();
        for id in ["e1", "e2", "e3", "e4"] {
            enqueue(&conn, id, "t", id, 1).unwrap();
            mark_sealed(&conn, id, "{}").unwrap();
        }
        assert_eq!(pending_count(&conn, "r").unwrap(), 4);
        ack_without_push(&conn, "r", "e1").unwrap();
        ack_without_push(&conn, "other", "e2").unwrap();
        for id in ["e1", "e3", "e4"] {
            conn.execute("INSERT INTO _sync_set_aside VALUES ('r', 'event', ?1, 'TOO_LARGE', 1)", [id]).unwrap();
        }
        assert_eq!(pending_count(&conn, "r").unwrap(), 1, "e1 acknowledged and set aside, e3 and e4 set aside");
        drop_row_events(&conn, "t", "e1").unwrap();
        drop_row_events(&conn, "t", "e4").unwrap();
        ack_without_push(&conn, "r", "gone").unwrap();
        assert_eq!(
            pending_count(&conn, "r").unwrap(),
            1,
            "e2 waits, e3 is set aside; the ack and set-asides of events not queued count nothing"
        );
    }

    #[test]
    fn a_record_goes_on_the_last_intent_only() {
        let conn = outbox();
        let intents = [("e1", "t", "a"), ("e2", "t", "b")];
        let added = Enqueuer::new(&conn).enqueue_all_recorded(&intents, 5, ("req", "[\"e1\",\"e2\"]")).unwrap();
        assert_eq!(added, (2, true));
        assert_eq!(record_of(&conn, "e1"), (None, None));
        assert_eq!(record_of(&conn, "e2"), (Some("req".into()), Some("[\"e1\",\"e2\"]".into())));
    }

    #[test]
    fn a_last_intent_already_queued_keeps_its_own_record_and_says_this_one_is_not_kept() {
        let conn = outbox();
        Enqueuer::new(&conn).enqueue_all_recorded(&[("e2", "t", "b")], 5, ("first", "[1]")).unwrap();
        let added =
            Enqueuer::new(&conn).enqueue_all_recorded(&[("e1", "t", "a"), ("e2", "t", "b")], 6, ("second", "[2]"));
        assert_eq!(added.unwrap(), (1, false), "the caller keeps the record elsewhere");
        assert_eq!(record_of(&conn, "e2"), (Some("first".into()), Some("[1]".into())));
        assert_eq!(Enqueuer::new(&conn).enqueue_all_recorded(&[], 7, ("third", "[]")).unwrap(), (0, false));
    }
}
