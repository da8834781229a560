//! What arrives from relays and is not simply applied: the seen set (already processed event
//! ids), deferred events (authenticated but not appliable yet) and the quarantine (events that
//! can never be applied as they are, kept for inspection).

use rusqlite::{params, CachedStatement, Connection, OptionalExtension};

use super::StoreError;

/// Seen-set size: the lexicographically greatest ids are kept.
pub const SEEN_CAP: u64 = 50_000;
/// Quarantined events kept per relay (the newest); a hostile relay cannot grow the database
/// without end. Older ones are dropped and counted (`quarantine_dropped:<relay>`).
pub const QUARANTINE_CAP: u64 = 1000;
/// Quarantined bytes kept per relay (envelope text), newest first.
pub const QUARANTINE_BYTES_CAP: u64 = 16 * 1024 * 1024;
/// Deferred events held per relay: at this many, pulls from that relay wait (the relay keeps
/// the rest; nothing is dropped) until the app is updated or the events become due.
pub const DEFERRED_CAP: u64 = 100_000;

/// Received events claimed by one statement ([`SeenSet::claim_run`]).
pub const CLAIM_RUN: usize = 50;

/// True when the event was applied, or is deferred, already.
pub fn already_handled(conn: &Connection, event_id: &str) -> Result<bool, StoreError> {
    Ok(conn
        .prepare_cached(
            "SELECT 1 WHERE EXISTS (SELECT 1 FROM _sync_seen WHERE event_id = ?1)
                         OR EXISTS (SELECT 1 FROM _sync_deferred WHERE event_id = ?1)",
        )?
        .exists([event_id])?)
}

/// Records an event as processed.
pub fn mark_seen(conn: &Connection, event_id: &str) -> Result<(), StoreError> {
    conn.prepare_cached("INSERT OR IGNORE INTO _sync_seen (event_id) VALUES (?1)")?.execute([event_id])?;
    Ok(())
}

/// The seen-set statements a run of received events (one pulled page, one retry) shares,
/// taken from the statement cache once for the run.
pub struct SeenSet<'c> {
    conn: &'c Connection,
    claim: CachedStatement<'c>,
    mark: CachedStatement<'c>,
    /// The claim of [`CLAIM_RUN`] ids in one statement, once taken.
    claim_run: Option<CachedStatement<'c>>,
    /// Runs of claims not tried: after one stopped at its first id (most likely a page of
    /// events seen already, such as a device's own coming back), the next three go one by one.
    runs_skipped: u8,
    /// No event is deferred (none was when the run began, and none since): a claim is then a
    /// plain insert, without the lookup in the deferred set.
    none_deferred: bool,
}

impl std::fmt::Debug for SeenSet<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeenSet").finish_non_exhaustive()
    }
}

impl<'c> SeenSet<'c> {
    /// The statements, on `conn` (inside the run's transaction).
    pub fn new(conn: &'c Connection) -> Result<SeenSet<'c>, StoreError> {
        Ok(SeenSet {
            conn,
            claim: conn.prepare_cached(
                "INSERT OR IGNORE INTO _sync_seen (event_id)
                 SELECT ?1 WHERE NOT EXISTS (SELECT 1 FROM _sync_deferred WHERE event_id = ?1)",
            )?,
            mark: conn.prepare_cached("INSERT OR IGNORE INTO _sync_seen (event_id) VALUES (?1)")?,
            none_deferred: !conn.prepare_cached("SELECT 1 FROM _sync_deferred LIMIT 1")?.exists([])?,
            claim_run: None,
            runs_skipped: 0,
        })
    }

    /// Claims `ids`, in order, as [`Self::claim`] each would, as far as one plain insert of them
    /// all goes, and answers how many (from the first) it claimed: the caller claims the rest
    /// one at a time, after processing those before (a repeated id's first copy may yet give its
    /// claim back). It claims none unless there are [`CLAIM_RUN`] ids and no event is deferred —
    /// then no claim needs the deferred set's lookup — and it stops at the first id already
    /// seen, or repeated. Fifty claims a statement skip most of a claim's statement start and
    /// end and its b-tree descent from the root (BENCHMARKS.md, issue 17 round twenty-seven).
    pub fn claim_run(&mut self, ids: &[&str]) -> Result<usize, StoreError> {
        if !self.none_deferred || ids.len() != CLAIM_RUN {
            return Ok(0);
        }
        if self.runs_skipped > 0 {
            self.runs_skipped -= 1;
            return Ok(0);
        }
        let stmt = match &mut self.claim_run {
            Some(stmt) => stmt,
            None => {
                let mut sql = String::from("INSERT OR FAIL INTO _sync_seen (event_id) VALUES (?)");
                sql.push_str(&", (?)".repeat(CLAIM_RUN - 1));
                self.claim_run.insert(self.conn.prepare_cached(&sql)?)
            }
        };
        for (i, id) in ids.iter().enumerate() {
            stmt.raw_bind_parameter(i + 1, id)?;
        }
        match stmt.raw_execute() {
            Ok(n) => Ok(n),
            Err(e) if super::is_taken_id(&e) => {
                let kept = self.conn.changes() as usize;
                if kept == 0 {
                    self.runs_skipped = 3;
                }
                Ok(kept)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Notes that an event of this run was deferred: later claims look in the deferred set.
    pub fn deferred_one(&mut self) {
        self.none_deferred = false;
    }

    /// Claims a received event for processing: records it as seen unless it was applied, or
    /// is deferred, already — then answers false. One b-tree write where a lookup first and an
    /// insert after the apply were two descents of the seen set (BENCHMARKS.md, issue 17 round
    /// five). A claimed event that is then deferred or quarantined gives its claim back
    /// ([`Self::release`]); an error rolls the whole run back, claims included.
    pub fn claim(&mut self, event_id: &str) -> Result<bool, StoreError> {
        let claim = if self.none_deferred { &mut self.mark } else { &mut self.claim };
        Ok(claim.execute([event_id])? == 1)
    }

    /// Records an event as processed (one that was not claimed: taken back from the deferred
    /// set or the quarantine).
    pub fn mark(&mut self, event_id: &str) -> Result<(), StoreError> {
        self.mark.execute([event_id])?;
        Ok(())
    }

    /// Gives a claim back: the event was deferred or quarantined, not handled.
    pub fn release(&self, event_id: &str) -> Result<(), StoreError> {
        self.conn.prepare_cached("DELETE FROM _sync_seen WHERE event_id = ?1")?.execute([event_id])?;
        Ok(())
    }
}

/// Trims the seen set to [`SEEN_CAP`], keeping the greatest ids.
pub fn cap_seen(conn: &Connection) -> Result<u64, StoreError> {
    let n = conn.execute(
        "DELETE FROM _sync_seen WHERE event_id < (SELECT event_id FROM _sync_seen ORDER BY event_id DESC LIMIT 1 OFFSET ?1)",
        [(SEEN_CAP - 1) as i64],
    )?;
    Ok(n as u64)
}

/// Number of ids in the seen set.
pub fn seen_count(conn: &Connection) -> Result<u64, StoreError> {
    Ok(conn.query_row("SELECT count(*) FROM _sync_seen", [], |r| r.get::<_, i64>(0))? as u64)
}

/// A deferred or quarantined event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldEvent {
    /// Event id.
    pub event_id: String,
    /// The relay it came from.
    pub relay: String,
    /// The envelope as received.
    pub envelope_json: String,
    /// Reason code.
    pub reason: String,
    /// Human-readable detail.
    pub detail: String,
    /// Deferred: when to retry (ms), if time-based. Quarantine: when it was quarantined.
    pub at: Option<i64>,
}

/// Stores (or updates) a deferred event.
pub fn defer(conn: &Connection, e: &HeldEvent, now: u64) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO _sync_deferred (event_id, relay, envelope_json, reason, detail, retry_at, attempts, first_seen_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7)
         ON CONFLICT (event_id) DO UPDATE SET reason = ?4, detail = ?5, retry_at = ?6, attempts = attempts + 1",
    )?
    .execute(params![e.event_id, e.relay, e.envelope_json, e.reason, e.detail, e.at, now as i64])?;
    Ok(())
}

/// Reads a held event from `SELECT event_id, relay, envelope_json, reason, detail, <time>`.
fn held_event(r: &rusqlite::Row<'_>) -> rusqlite::Result<HeldEvent> {
    Ok(HeldEvent {
        event_id: r.get(0)?,
        relay: r.get(1)?,
        envelope_json: r.get(2)?,
        reason: r.get(3)?,
        detail: r.get(4)?,
        at: r.get(5)?,
    })
}

/// Deferred events worth retrying now: time-based ones that are due, and — when
/// `include_schema` — those waiting for the app's schema.
pub fn due_deferred(conn: &Connection, now: u64, include_schema: bool) -> Result<Vec<HeldEvent>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT event_id, relay, envelope_json, reason, detail, retry_at FROM _sync_deferred
         WHERE (retry_at IS NOT NULL AND retry_at <= ?1) OR (?2 AND retry_at IS NULL) ORDER BY event_id",
    )?;
    let rows = stmt.query_map(params![now as i64, include_schema], held_event)?.collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Every deferred event.
pub fn all_deferred(conn: &Connection) -> Result<Vec<HeldEvent>, StoreError> {
    due_deferred(conn, u64::MAX >> 2, true)
}

/// Removes a deferred event (it was applied or superseded).
pub fn undefer(conn: &Connection, event_id: &str) -> Result<(), StoreError> {
    conn.prepare_cached("DELETE FROM _sync_deferred WHERE event_id = ?1")?.execute([event_id])?;
    Ok(())
}

/// Quarantines an event.
pub fn quarantine(conn: &Connection, e: &HeldEvent, now: u64) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO _sync_quarantine (relay, event_id, envelope_json, reason, detail, at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![e.relay, e.event_id, e.envelope_json, e.reason, e.detail, now as i64])?;
    Ok(())
}

/// Quarantined events from `relay`.
pub fn quarantine_count(conn: &Connection, relay: &str) -> Result<u64, StoreError> {
    Ok(conn
        .prepare_cached("SELECT count(*) FROM _sync_quarantine WHERE relay = ?1")?
        .query_row([relay], |r| r.get::<_, i64>(0))? as u64)
}

/// Keeps the newest `cap` quarantined events of `relay`, and of those no more than
/// [`QUARANTINE_BYTES_CAP`] bytes of envelope text; returns how many older ones went.
pub fn cap_quarantine(conn: &Connection, relay: &str, cap: u64) -> Result<u64, StoreError> {
    let n = conn.execute(
        "DELETE FROM _sync_quarantine WHERE relay = ?1 AND event_id IN (
           SELECT event_id FROM (
             SELECT event_id,
                    row_number() OVER newest AS rank,
                    sum(length(CAST(envelope_json AS BLOB))) OVER newest AS bytes
             FROM _sync_quarantine WHERE relay = ?1
             WINDOW newest AS (ORDER BY at DESC, event_id DESC))
           WHERE rank > ?2 OR bytes > ?3)",
        params![relay, cap as i64, QUARANTINE_BYTES_CAP as i64],
    )?;
    Ok(n as u64)
}

/// Deferred events held from `relay`.
pub fn deferred_count(conn: &Connection, relay: &str) -> Result<u64, StoreError> {
    Ok(conn
        .prepare_cached("SELECT count(*) FROM _sync_deferred WHERE relay = ?1")?
        .query_row([relay], |r| r.get::<_, i64>(0))? as u64)
}

/// Every quarantined event.
pub fn quarantined(conn: &Connection) -> Result<Vec<HeldEvent>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT event_id, relay, envelope_json, reason, detail, at FROM _sync_quarantine ORDER BY at, event_id",
    )?;
    let rows = stmt.query_map([], held_event)?.collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Releases a quarantined event (it applied on a retry).
pub fn release(conn: &Connection, relay: &str, event_id: &str) -> Result<(), StoreError> {
    conn.prepare_cached("DELETE FROM _sync_quarantine WHERE relay = ?1 AND event_id = ?2")?
        .execute(params![relay, event_id])?;
    Ok(())
}

/// Counts deferred and quarantined events.
pub fn held_counts(conn: &Connection) -> Result<(u64, u64), StoreError> {
    let d: i64 = conn.query_row("SELECT count(*) FROM _sync_deferred", [], |r| r.get(0))?;
    let q: i64 = conn.query_row("SELECT count(*) FROM _sync_quarantine", [], |r| r.get(0))?;
    Ok((d as u64, q as u64))
}

/// The deferral reason of one event, if deferred.
pub fn deferral_reason(conn: &Connection, event_id: &str) -> Result<Option<String>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT reason FROM _sync_deferred WHERE event_id = ?1")?
        .query_row([event_id], |r| r.get(0))
        .optional()?)
}

#[cfg(test)]
mod claims {
    use super::*;

    fn seen_set() -> Connection {
        let conn = crate::store::open_memory().unwrap();
        crate::store::system::create_system_tables(&conn).unwrap();
        conn
    }

    fn ids(from: usize) -> Vec<String> {
        (from..from + CLAIM_RUN).map(|i| format!("e{i:04}")).collect()
    }

    fn claim_run(seen: &mut SeenSet<'_>, ids: &[String]) -> usize {
        seen.claim_run(&ids.iter().map(String::as_str).collect::<Vec<_>>()).unwrap()
    }

    fn count(conn: &Connection) -> u64 {
        seen_count(conn).unwrap()
    }

    #[test]
    fn a_run_of_claims_keeps_the_ids_before_the_first_one_seen() {
        let conn = seen_set();
        mark_seen(&conn, "e0020").unwrap();
        let mut seen = SeenSet::new(&conn).unwrap();
        assert_eq!(claim_run(&mut seen, &ids(0)), 20);
        assert_eq!(count(&conn), 21, "e0000–e0019 claimed besides e0020; none after it");
        assert_eq!(claim_run(&mut seen, &ids(100)), CLAIM_RUN, "the next run whole");
        let mut repeated = ids(200);
        repeated[30] = repeated[29].clone();
        assert_eq!(claim_run(&mut seen, &repeated), 30, "an id twice in a run stops it at the second");
    }

    #[test]
    fn after_a_run_of_claims_stops_at_its_first_id_the_next_three_are_left_to_single_claims() {
        let conn = seen_set();
        mark_seen(&conn, "e0000").unwrap();
        let mut seen = SeenSet::new(&conn).unwrap();
        assert_eq!(claim_run(&mut seen, &ids(0)), 0);
        for run in 1..=3 {
            assert_eq!(claim_run(&mut seen, &ids(100 * run)), 0, "run {run} left alone");
        }
        assert_eq!(claim_run(&mut seen, &ids(400)), CLAIM_RUN, "the fifth tried again");
    }

    #[test]
    fn no_run_of_claims_while_an_event_is_deferred_or_with_fewer_ids() {
        let conn = seen_set();
        let mut seen = SeenSet::new(&conn).unwrap();
        assert_eq!(claim_run(&mut seen, &ids(0)[..CLAIM_RUN - 1]), 0);
        seen.deferred_one();
        assert_eq!(claim_run(&mut seen, &ids(100)), 0);
        assert_eq!(count(&conn), 0);
    }
}
