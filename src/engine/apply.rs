//! Applying one received envelope, in the spec's order: skip what was seen → decrypt and
//! authenticate → classify schema version, table and HLC → defer what cannot be applied yet →
//! apply a row only when its HLC is strictly newer than the local row's → record it as seen.
//!
//! Nothing received is dropped: an event that cannot be applied *yet* is deferred (reason code
//! and retry time), one that can never be applied as it is — failed authentication, a
//! malformed payload — is quarantined for inspection and [`Engine::retry_quarantined`].

use rusqlite::Connection;

use super::columns::{self, Applied, Facts};
use super::events::{ChangeEvent, ChangeSource, RowChange};
use super::schema::{Merge, Table};
use super::values::to_sql;
use super::{Engine, EngineError};
use crate::protocol::envelope::decrypt_envelope_bytes;
use crate::protocol::hlc::{check_drift, HLC_MAX_FUTURE_DRIFT_MS};
use crate::protocol::json_fields::read_json;
use crate::protocol::json_parse::parse_json_bytes;
use crate::protocol::json_write::ToJson;
use crate::protocol::to_canonical_json;
use crate::protocol::{CryptoError, Identity, PayloadHead, SyncEnvelope, SyncPayload};
use crate::store::clocks;
use crate::store::inbox::{self, HeldEvent};
use crate::store::kept::{self, Kept, MAX_KEPT_BYTES};
use crate::store::outbox;

/// One classified event in this many is timed for the pull timings (from each page's first).
const CLASSIFY_SAMPLE: u32 = 8;

/// The checks' estimated time for `classified` events of which every [`CLASSIFY_SAMPLE`]th
/// (from the first) took `sampled_ms` in all: the samples' mean times the events.
pub(crate) fn sampled_checks_ms(sampled_ms: f64, classified: u32) -> f64 {
    match classified.div_ceil(CLASSIFY_SAMPLE) {
        0 => 0.0,
        samples => sampled_ms * f64::from(classified) / f64::from(samples),
    }
}

/// How much of an oversized quarantined envelope is kept (its start, for diagnosis).
const MAX_QUARANTINED_TEXT: usize = 64 * 1024;
use crate::store::purged;
use crate::store::rows::{self, RowData};

/// Why an event was deferred (retried later) — stable codes.
pub mod defer_reason {
    /// Written by a newer app schema version.
    pub const FUTURE_SCHEMA: &str = "FUTURE_SCHEMA";
    /// A table this app does not declare.
    pub const UNKNOWN_TABLE: &str = "UNKNOWN_TABLE";
    /// A column this app does not declare.
    pub const UNKNOWN_COLUMN: &str = "UNKNOWN_COLUMN";
    /// An HLC more than 5 minutes ahead of local time.
    pub const FUTURE_HLC: &str = "FUTURE_HLC";
}

/// Why an event was quarantined — stable codes.
pub mod quarantine_reason {
    /// The envelope names another owner.
    pub const FOREIGN_OWNER: &str = "FOREIGN_OWNER";
    /// GCM authentication failed: tampered ciphertext or header, or a wrong key.
    pub const AUTH_FAILED: &str = "AUTH_FAILED";
    /// An envelope version or field this engine cannot read.
    pub const MALFORMED_ENVELOPE: &str = "MALFORMED_ENVELOPE";
    /// The authenticated plaintext is not a valid payload.
    pub const MALFORMED_PAYLOAD: &str = "MALFORMED_PAYLOAD";
    /// The envelope's event id differs from the payload's HLC.
    pub const EVENT_ID_MISMATCH: &str = "EVENT_ID_MISMATCH";
    /// A row value does not fit its declared column type.
    pub const INVALID_ROW: &str = "INVALID_ROW";
}

/// What became of one envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Written: it was newer than the local row.
    Applied(RowChange),
    /// Authenticated and valid, but not newer than the local row.
    Stale,
    /// Already seen or already deferred.
    Duplicate,
    /// This device's own event, sent back as it was sealed: not opened again.
    OwnEcho,
    /// Held for later.
    Deferred,
    /// Held for inspection.
    Quarantined,
    /// Valid, its row waiting in the run to be written with the rows of the events after it:
    /// [`Engine::finish_run`] says whether it applied.
    Staged,
}

/// What a run of received events (one pulled page, one retry of held events) shares inside
/// its transaction: the row writer and the seen set, each statement taken from the cache once
/// for the run instead of once per event (a cache lookup hashes the SQL text), and a pulled
/// page's rows not yet written.
#[derive(Debug)]
pub(crate) struct ApplyRun<'c> {
    tx: &'c Connection,
    rows: rows::RowWriter<'c>,
    seen: inbox::SeenSet<'c>,
    /// Pulled rows of one table waiting to be written, in the page's order, with their table's
    /// name. They are written together ([`rows::RowWriter::write_all`]: a fresh device's rows go
    /// many a statement) when a row of another table comes, and when the page ends. Nothing in
    /// between reads an app table, so each row still meets the rows before it as if written
    /// at once.
    staged: Vec<(String, RowData, Kept)>,
    /// The staged rows that were not newer (indexes into `staged`), per write.
    declined: Vec<usize>,
    /// The rows written so far, in the page's order.
    applied: Vec<RowChange>,
}

impl<'c> ApplyRun<'c> {
    /// A run inside `tx`.
    pub(crate) fn new(tx: &'c Connection) -> Result<ApplyRun<'c>, EngineError> {
        Ok(ApplyRun {
            tx,
            rows: rows::RowWriter::new(tx),
            seen: inbox::SeenSet::new(tx)?,
            staged: Vec::new(),
            declined: Vec::new(),
            applied: Vec::new(),
        })
    }

    /// Claims the ids of a page's next envelopes as far as one statement goes
    /// ([`inbox::SeenSet::claim_run`]): how many, from the first, are claimed.
    pub(crate) fn claim_run(&mut self, ids: &[&str]) -> Result<usize, EngineError> {
        Ok(self.seen.claim_run(ids)?)
    }
}

/// Where an envelope being processed comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arrival<'p> {
    /// A pulled page, with its opening when a page opener decrypted it ahead, and whether it
    /// was claimed already (in a run of claims, `inbox::SeenSet::claim_run`).
    Pulled { opened: Option<&'p [u8]>, claimed: bool },
    /// The deferred set or the quarantine.
    Held,
}

enum Verdict {
    Defer(&'static str, String, Option<i64>),
    Quarantine(&'static str, String),
}

/// A valid event, classified: what it writes.
enum Classified {
    /// A whole-row event of a whole-row table: the row version, and its values of columns this
    /// app does not declare (kept with the row, `store::kept`).
    Row(RowData, Kept),
    /// An event of a column-merge table: the cells it sets.
    Cells(Facts),
}

fn crypto_reason(e: &CryptoError) -> &'static str {
    match e {
        CryptoError::ForeignOwner { .. } => quarantine_reason::FOREIGN_OWNER,
        CryptoError::AuthenticationFailed => quarantine_reason::AUTH_FAILED,
        _ => quarantine_reason::MALFORMED_ENVELOPE,
    }
}

impl Engine {
    /// Decrypts `env` (or takes its opening from a page opener) and checks it in the spec's
    /// order. An opening that does not classify is not trusted to say why: the engine opens
    /// the envelope again itself, so what is filed is exactly what it would have filed.
    fn classify(
        &self,
        identity: &Identity,
        env: &SyncEnvelope,
        opened: Option<&[u8]>,
        now: u64,
    ) -> Result<(SyncPayload, Classified), Verdict> {
        if let Some(plain) = opened.filter(|_| env.owner_id == identity.owner_id()) {
            match self.classify_plain(env, plain, now) {
                Err(Verdict::Quarantine(..)) => {}
                verdict => {
                    self.opened_used.set(self.opened_used.get() + 1);
                    return verdict;
                }
            }
        }
        let plain =
            decrypt_envelope_bytes(identity, env).map_err(|e| Verdict::Quarantine(crypto_reason(&e), e.to_string()))?;
        self.classify_plain(env, &plain, now)
    }

    /// The checks after decryption, on `env`'s plaintext. The event's `table` names a declared
    /// table, or one of its cells (`<table>#<cell>`, a column-merge table's events). The
    /// columns of its row that this app declares are converted; the others are kept with the
    /// row (`store::kept`) — unless a name could never be declared, or they take more than a
    /// row may keep: then the event waits (`UNKNOWN_COLUMN`), as every event with an unknown
    /// column did before there were kept values.
    fn classify_plain(&self, env: &SyncEnvelope, plain: &[u8], now: u64) -> Result<(SyncPayload, Classified), Verdict> {
        let json = parse_json_bytes(plain)
            .map_err(|e| Verdict::Quarantine(quarantine_reason::MALFORMED_PAYLOAD, e.to_string()))?;
        // A newer schema version first, whatever the rest looks like: it may mean other things.
        let version = PayloadHead::schema_version(&json)
            .map_err(|e| Verdict::Quarantine(quarantine_reason::MALFORMED_PAYLOAD, e.to_string()))?;
        if version > self.schema.version {
            return Err(Verdict::Defer(
                defer_reason::FUTURE_SCHEMA,
                format!("schema version {version} (this app understands {})", self.schema.version),
                None,
            ));
        }
        let head = PayloadHead::read(&json)
            .map_err(|e| Verdict::Quarantine(quarantine_reason::MALFORMED_PAYLOAD, e.to_string()))?;
        if head.hlc.to_text() != env.event_id {
            return Err(Verdict::Quarantine(
                quarantine_reason::EVENT_ID_MISMATCH,
                format!("eventId {} but payload hlc {}", env.event_id, head.hlc),
            ));
        }
        let unknown_table =
            |why: &str| Verdict::Defer(defer_reason::UNKNOWN_TABLE, format!("table {:?}{why}", head.table), None);
        let (base, cell) = columns::split(&head.table);
        let Some(table) = self.schema.table(base) else { return Err(unknown_table("")) };
        // (An engine that only knows whole-row tables files these events as unknown tables too.)
        if cell.is_some() && table.merge == Merge::Row {
            return Err(unknown_table(&format!(": cells of table {base:?}, which this app merges as whole rows")));
        }
        if let Some(c) = cell.filter(|c| *c != columns::DELETED && !columns::is_column_cell(c)) {
            return Err(unknown_table(&format!(": a cell {c:?} this engine does not know")));
        }
        if let Err(e) = check_drift(&head.hlc, now) {
            let retry = head.hlc.ms.saturating_sub(HLC_MAX_FUTURE_DRIFT_MS) as i64;
            return Err(Verdict::Defer(defer_reason::FUTURE_HLC, e.to_string(), Some(retry)));
        }
        let payload = SyncPayload::from_head(head, json)
            .map_err(|e| Verdict::Quarantine(quarantine_reason::MALFORMED_PAYLOAD, e.to_string()))?;
        if payload.row_id.len() > super::mutate::MAX_ID_BYTES {
            return Err(Verdict::Quarantine(quarantine_reason::MALFORMED_PAYLOAD, "rowId too long".into()));
        }
        let malformed = |why: String| Verdict::Quarantine(quarantine_reason::MALFORMED_PAYLOAD, why);
        let cell = columns::split(&payload.table).1;
        match cell {
            Some(columns::DELETED) if !payload.row.is_empty() => {
                return Err(malformed("an event of a row's deletion carries no column".into()))
            }
            Some(c)
                if c != columns::DELETED && (payload.deleted || payload.row.len() != 1 || payload.row[0].0 != c) =>
            {
                return Err(malformed(format!("an event of cell {c:?} carries that column alone, deleted false")))
            }
            _ => {}
        }
        let mut values = table.new_values();
        let (mut known, mut unknown) = (Vec::new(), Vec::new());
        for (col, v) in &payload.row {
            // (A walk of the columns: a binary search of the row's fields cost a restore ~1%.)
            if let Some(i) = table.columns.iter().position(|c| c.name == *col) {
                let value = to_sql(&table.name, col, table.columns[i].column_type, v)
                    .map_err(|e| Verdict::Quarantine(quarantine_reason::INVALID_ROW, e.to_string()))?;
                match table.merge {
                    Merge::Row => values[i] = value,
                    Merge::Column => known.push((i, value)),
                }
            } else if !columns::is_column_cell(col) || table.columns.iter().any(|c| c.name.eq_ignore_ascii_case(col)) {
                // Never a column an app could declare: held as before kept values.
                return Err(Verdict::Defer(defer_reason::UNKNOWN_COLUMN, format!("column {}.{col}", table.name), None));
            } else {
                unknown.push((col.clone(), to_canonical_json(v)));
            }
        }
        if kept::size(&unknown) > MAX_KEPT_BYTES {
            return Err(Verdict::Defer(
                defer_reason::UNKNOWN_COLUMN,
                format!(
                    "columns {}.{} and more: {} bytes of columns this app does not declare (a row keeps at most {MAX_KEPT_BYTES})",
                    table.name,
                    unknown[0].0,
                    kept::size(&unknown)
                ),
                None,
            ));
        }
        let classified = match table.merge {
            Merge::Row => Classified::Row(
                RowData {
                    id: payload.row_id.clone(),
                    updated_at: env.event_id.clone(),
                    deleted: payload.deleted,
                    values,
                },
                unknown,
            ),
            Merge::Column => Classified::Cells(Facts {
                row_id: payload.row_id.clone(),
                hlc: env.event_id.clone(),
                known,
                unknown,
                whole: cell.is_none(),
                deleted: payload.deleted,
            }),
        };
        Ok((payload, classified))
    }

    /// Processes one envelope inside the run's transaction. `arrival` says whether it comes
    /// from a pulled page or from the deferred set or the quarantine (then "already handled"
    /// does not apply to it).
    ///
    /// A new event is claimed in the seen set first — the spec's "skip what was seen" and its
    /// final "record it as seen" in one write, here or in a run of claims the page's loop made
    /// ([`Arrival::Pulled`]'s `claimed`) — and gives the claim back when it is deferred or
    /// quarantined instead; a held one is recorded as seen once it is handled.
    ///
    /// A pulled event's row is staged in the run ([`Outcome::Staged`]) and written with the
    /// rows after it ([`Engine::finish_run`]); a held one's is written at once.
    pub(crate) fn process(
        &self,
        run: &mut ApplyRun<'_>,
        identity: &Identity,
        relay: &str,
        env: &SyncEnvelope,
        arrival: Arrival<'_>,
        now: u64,
    ) -> Result<Outcome, EngineError> {
        let (held, opened, claimed) = match arrival {
            Arrival::Pulled { opened, claimed } => (false, opened, claimed),
            Arrival::Held => (true, None, false),
        };
        let tx = run.tx;
        if !held && !claimed && !run.seen.claim(&env.event_id)? {
            return Ok(Outcome::Duplicate);
        }
        if !held && self.own_echo(tx, env)? {
            return Ok(Outcome::OwnEcho);
        }
        let hold = |reason: &str, detail: String, at: Option<i64>| HeldEvent {
            event_id: env.event_id.clone(),
            relay: relay.to_owned(),
            envelope_json: env.to_json_text(),
            reason: reason.to_owned(),
            detail,
            at,
        };
        // The checks' time, for the pull timings: one event in eight is timed (the page's
        // total is scaled from them, [`sampled_checks_ms`]); a clock reading costs ~0.3 µs in
        // a browser, and two per event were ~3% of a restore.
        let timed = self.classified.get() % CLASSIFY_SAMPLE == 0;
        self.classified.set(self.classified.get().wrapping_add(1));
        let t0 = if timed { self.wall.precise_ms() } else { 0.0 };
        let verdict = self.classify(identity, env, opened, now);
        if timed {
            self.decrypt_ms.set(self.decrypt_ms.get() + (self.wall.precise_ms() - t0));
        }
        match verdict {
            Err(Verdict::Defer(reason, detail, retry)) => {
                if !held {
                    run.seen.release(&env.event_id)?;
                }
                inbox::defer(tx, &hold(reason, detail, retry), now)?;
                run.seen.deferred_one();
                Ok(Outcome::Deferred)
            }
            Err(Verdict::Quarantine(reason, detail)) => {
                if !held {
                    run.seen.release(&env.event_id)?;
                }
                let mut held = hold(reason, detail, None);
                // An envelope larger than any relay may store never applies: keep its start only,
                // so a hostile relay cannot fill the database through the quarantine.
                if held.envelope_json.len() > self.options.max_event_bytes {
                    let len = held.envelope_json.len();
                    let mut cut = MAX_QUARANTINED_TEXT.min(len);
                    while !held.envelope_json.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    held.envelope_json.truncate(cut);
                    held.detail.push_str(&format!(" (an envelope of {len} bytes; its first {cut} kept)"));
                }
                inbox::quarantine(tx, &held, now)?;
                Ok(Outcome::Quarantined)
            }
            Ok((payload, classified)) => {
                // Within the drift bound (checked above), so this cannot fail; the clock now
                // sorts later local writes after this event.
                let _ = self.observe_hlc(&payload.hlc);
                let base = columns::split(&payload.table).0;
                // A purged row stays purged: an older version still on a relay (or held here)
                // does not bring it back. A newer one — another device wrote the row again —
                // does, and its streams must then not be compacted away on any relay.
                // (Pulled rows are staged below and written later: nothing from here to
                // `finish_run` may read an app table; the purge records are a table of their own.)
                if self.purge_records.get() {
                    if let Some(at) = purged::purged_at(tx, base, &payload.row_id)? {
                        if env.event_id.as_str() <= at.as_str() {
                            if held {
                                run.seen.mark(&env.event_id)?;
                            }
                            return Ok(Outcome::Stale);
                        }
                        purged::revived(tx, base, &payload.row_id)?;
                    }
                }
                let (row, kept) = match classified {
                    Classified::Row(row, kept) => (row, kept),
                    Classified::Cells(facts) => {
                        let table = self.schema.table(base).expect("classified");
                        // The rows staged before it are written first: pages apply in order.
                        self.write_staged(run)?;
                        let outcome = match self.apply_facts(tx, table, &facts)? {
                            Applied::Changed => {
                                Outcome::Applied(RowChange { table: base.to_owned(), id: facts.row_id })
                            }
                            Applied::Stale => Outcome::Stale,
                            Applied::TooMuchKept => {
                                let detail = format!("columns of {base} this app does not declare: a row keeps at most {MAX_KEPT_BYTES} bytes of them");
                                if !held {
                                    run.seen.release(&env.event_id)?;
                                }
                                inbox::defer(tx, &hold(defer_reason::UNKNOWN_COLUMN, detail, None), now)?;
                                run.seen.deferred_one();
                                return Ok(Outcome::Deferred);
                            }
                        };
                        if held {
                            run.seen.mark(&env.event_id)?;
                        }
                        return Ok(outcome);
                    }
                };
                if !held {
                    if run.staged.first().is_some_and(|(t, _, _)| *t != payload.table) {
                        self.write_staged(run)?;
                    }
                    run.staged.push((payload.table, row, kept));
                    return Ok(Outcome::Staged);
                }
                let table = self.schema.table(base).expect("classified");
                let written = run.rows.write(table, &row, rows::WriteMode::IfNewer)?;
                if written {
                    self.whole_row_written(tx, table, &row.id, &kept)?;
                }
                run.seen.mark(&env.event_id)?;
                Ok(if written {
                    Outcome::Applied(RowChange { table: payload.table, id: payload.row_id })
                } else {
                    Outcome::Stale
                })
            }
        }
    }

    /// After a whole-row version of a row was written: its kept values are the version's, and
    /// its cells are all at its HLC (no clocks entry).
    fn whole_row_written(&self, tx: &Connection, table: &Table, id: &str, kept: &Kept) -> Result<(), EngineError> {
        if !kept.is_empty() || self.kept_any.get() {
            kept::replace(tx, &table.name, id, kept)?;
            if !kept.is_empty() {
                self.kept_any.set(true);
            }
        }
        if self.clocks_any.get() {
            clocks::delete(tx, &table.name, id)?;
        }
        Ok(())
    }

    /// Whether `env` is one of this device's own events that the relay sent back (a device
    /// pulls what it pushed) with every field as it was sealed — its canonical text equal to
    /// the outbox's — so its row version is here already and opening it again would only find
    /// it stale. Every field compared is authenticated (the header is the AAD; nonce and
    /// ciphertext are GCM's input), so a copy that differs in any of them would fail to open:
    /// it is opened like any other event and quarantined — a relay that altered a device's own
    /// events still shows — and so is an event the outbox no longer keeps. (As for any event,
    /// a copy that arrives after its id was seen is a duplicate and is not opened.)
    fn own_echo(&self, tx: &Connection, env: &SyncEnvelope) -> Result<bool, EngineError> {
        // (Only this device's are looked up. Its device id, not its event id: a re-seed or a
        // re-key seals rows written elsewhere under their own event ids — though a device has
        // usually seen those, and a seen id is a duplicate before it gets here.)
        if env.device_id != self.device_id {
            return Ok(false);
        }
        Ok(outbox::sealed_envelope(tx, &env.event_id)?.is_some_and(|sealed| sealed == env.to_json_text()))
    }

    /// Writes the run's staged rows, each only when newer than the stored row.
    fn write_staged(&self, run: &mut ApplyRun<'_>) -> Result<(), EngineError> {
        let Some((name, _, _)) = run.staged.first() else { return Ok(()) };
        let table = self.schema.table(name).expect("classified");
        let rows: Vec<&RowData> = run.staged.iter().map(|(_, row, _)| row).collect();
        run.declined.clear();
        run.rows.write_all(table, &rows, rows::WriteMode::IfNewer, &mut run.declined)?;
        let mut declined = run.declined.iter().copied().peekable();
        let tx = run.tx;
        for (i, (name, row, kept)) in run.staged.drain(..).enumerate() {
            if declined.next_if_eq(&i).is_none() {
                if !kept.is_empty() || self.kept_any.get() || self.clocks_any.get() {
                    self.whole_row_written(tx, table, &row.id, &kept)?;
                }
                run.applied.push(RowChange { table: name, id: row.id });
            }
        }
        Ok(())
    }

    /// Writes what `run` still holds, and gives the rows it applied, in the order received
    /// (the [`Outcome::Staged`] events' outcomes).
    pub(crate) fn finish_run(&self, run: &mut ApplyRun<'_>) -> Result<Vec<RowChange>, EngineError> {
        self.write_staged(run)?;
        Ok(std::mem::take(&mut run.applied))
    }

    /// Retries deferred events whose time has come, and — once after the engine opened with
    /// its (possibly new) schema — those waiting for a schema. Returns how many applied.
    pub(crate) fn retry_deferred(&self) -> Result<u64, EngineError> {
        let now = self.now();
        let include_schema = self.schema_retry_pending.replace(false);
        let due = inbox::due_deferred(&self.db.borrow(), now, include_schema)?;
        if due.is_empty() {
            return Ok(0);
        }
        let identity = self.identity();
        let changes = self.write(|tx| {
            let mut changes = Vec::new();
            let mut run = ApplyRun::new(tx)?;
            for held in &due {
                let Ok(env) = read_json::<SyncEnvelope>(held.envelope_json.as_bytes(), "envelope") else {
                    inbox::undefer(tx, &held.event_id)?;
                    continue;
                };
                match self.process(&mut run, &identity, &held.relay, &env, Arrival::Held, now)? {
                    Outcome::Applied(c) => {
                        inbox::undefer(tx, &held.event_id)?;
                        changes.push(c);
                    }
                    Outcome::Stale | Outcome::OwnEcho | Outcome::Quarantined | Outcome::Duplicate => {
                        inbox::undefer(tx, &held.event_id)?
                    }
                    // (Held events are written at once: none is staged.)
                    Outcome::Deferred | Outcome::Staged => debug_assert!(run.staged.is_empty()),
                }
            }
            self.persist_clock(tx)?;
            Ok(changes)
        })?;
        let n = changes.len() as u64;
        self.listeners.emit_change(&ChangeEvent::new(ChangeSource::Remote, changes));
        Ok(n)
    }

    /// Re-processes every quarantined event (e.g. after an app update); returns how many were
    /// released (applied, or found stale). Events that still fail stay quarantined.
    pub fn retry_quarantined(&self) -> Result<u64, EngineError> {
        let held = inbox::quarantined(&self.db.borrow())?;
        let identity = self.identity();
        let now = self.now();
        let (released, changes) = self.write(|tx| {
            let (mut released, mut changes) = (0, Vec::new());
            let mut run = ApplyRun::new(tx)?;
            for h in &held {
                let Ok(env) = read_json::<SyncEnvelope>(h.envelope_json.as_bytes(), "envelope") else { continue };
                // Process as if new: a fresh quarantine entry replaces the old one.
                match self.process(&mut run, &identity, &h.relay, &env, Arrival::Held, now)? {
                    Outcome::Applied(c) => {
                        inbox::release(tx, &h.relay, &h.event_id)?;
                        changes.push(c);
                        released += 1;
                    }
                    Outcome::Stale | Outcome::OwnEcho | Outcome::Deferred | Outcome::Duplicate => {
                        inbox::release(tx, &h.relay, &h.event_id)?;
                        released += 1;
                    }
                    Outcome::Quarantined | Outcome::Staged => debug_assert!(run.staged.is_empty()),
                }
            }
            self.record_request(tx, &released)?;
            Ok((released, changes))
        })?;
        self.listeners.emit_change(&ChangeEvent::new(ChangeSource::Remote, changes));
        Ok(released)
    }

    /// Quarantined events, for inspection.
    pub fn quarantined(&self) -> Result<Vec<HeldEvent>, EngineError> {
        Ok(inbox::quarantined(&self.db.borrow())?)
    }

    /// Deferred events, for inspection.
    pub fn deferred(&self) -> Result<Vec<HeldEvent>, EngineError> {
        Ok(inbox::all_deferred(&self.db.borrow())?)
    }
}

#[cfg(test)]
mod sampling {
    use super::sampled_checks_ms;

    #[test]
    fn the_checks_time_is_the_samples_mean_times_the_events() {
        assert_eq!(sampled_checks_ms(2.0, 1), 2.0, "one event, timed");
        assert_eq!(sampled_checks_ms(2.0, 8), 16.0, "eight events, the first timed");
        assert_eq!(sampled_checks_ms(3.0, 17), 17.0, "events 0, 8 and 16 timed, 1 ms each");
        assert_eq!(sampled_checks_ms(125.0, 1000), 1000.0, "a full page: 125 samples of 1 ms");
        assert_eq!(sampled_checks_ms(0.0, 0), 0.0, "an empty page");
    }
}
