//! Group commit. A push queues itself; if no push leads a group, it leads one: it waits for
//! the writer, then stores itself and the oldest pushes queued by then (up to [`MAX_GROUP`] in
//! all) in one transaction — the first as it is, each other in a savepoint of its own — and
//! commits once. The pushes it stored are woken with their answers (they never wait for the
//! writer, which the stream indexer's batch may take next for 30–50 ms); the others queued
//! meanwhile then have one of them lead the next group. One fsync serves the group
//! instead of one each, and every answer still comes after the commit that made it durable
//! (`synchronous = FULL`): the ack rule is unchanged.
//!
//! Only pushes already waiting join a group: taking those that arrive while the group is
//! stored too held one device's next push (two in flight) until its last was stored, and was
//! slower for it (BENCHMARKS.md, issue 17 round twenty-three).
//!
//! A push that fails (quota, a closed owner, a deadline that passed while it waited) rolls back
//! its own savepoint only; the others of the group go on. A commit that fails fails every push
//! the group stored — none of them was acknowledged, and their devices push again; a push the
//! group had not reached yet is stored by its own thread, which finds no answer.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use rusqlite::{params, Connection};

use super::owners::{apply, charged_total, check_quota, owner_or_register, Delta};
use super::schema::{meta_u64, set_meta};
use super::{indexer, lock, streams, SqliteStore};
use crate::store::{Deadline, MayRegister, NewEvent, PushOutcome, StoreError};

/// Most pushes stored in one transaction: bounds how long the writer is held and how long the
/// group's first push waits for its answer.
pub(super) const MAX_GROUP: usize = 32;

/// A push waiting to be stored, and its answer once it was.
#[derive(Debug)]
pub(super) struct PushJob {
    pub owner_id: String,
    pub token_hash: String,
    pub events: Vec<NewEvent>,
    pub now: String,
    pub register: MayRegister,
    pub deadline: Deadline,
    result: Mutex<Option<Result<PushOutcome, StoreError>>>,
}

impl PushJob {
    pub fn new(
        owner_id: &str,
        token_hash: &str,
        events: Vec<NewEvent>,
        now: &str,
        register: MayRegister,
        deadline: Deadline,
    ) -> PushJob {
        PushJob {
            owner_id: owner_id.to_owned(),
            token_hash: token_hash.to_owned(),
            events,
            now: now.to_owned(),
            register,
            deadline,
            result: Mutex::new(None),
        }
    }

    /// The answer, if another push stored this one.
    pub fn take_result(&self) -> Option<Result<PushOutcome, StoreError>> {
        lock(&self.result).take()
    }
}

/// The pushes waiting to be stored, in arrival order; whether a push leads a group now; and
/// how many groups were committed.
#[derive(Debug, Default)]
pub(super) struct Queue {
    state: Mutex<State>,
    /// Signalled when a group's leader is done: its answers are set and another may lead.
    changed: Condvar,
    commits: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    waiting: Vec<Arc<PushJob>>,
    leading: bool,
}

/// The lead of a group, given up (and the waiting pushes woken) when dropped — also when the
/// leader's thread unwinds, so no waiting push is left without a leader.
pub(super) struct Leading<'q>(&'q Queue);

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        lock(&self.0.state).leading = false;
        self.0.changed.notify_all();
    }
}

impl Queue {
    /// Queues `job` and waits: for its answer, if another push stored it (`Ok`) — a waiting
    /// push never needs the writer for that — or for the lead, once no push has it (`Err`).
    pub fn join(&self, job: &Arc<PushJob>) -> Result<Result<PushOutcome, StoreError>, Leading<'_>> {
        let mut st = lock(&self.state);
        st.waiting.push(job.clone());
        loop {
            if let Some(answer) = job.take_result() {
                return Ok(answer);
            }
            if !st.leading {
                st.leading = true;
                return Err(Leading(self));
            }
            st = self.changed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// `own` (out of the queue wherever it is, or not queued any more: a push that took it
    /// failed before answering it) and up to `n − 1` of the oldest other waiting pushes.
    fn take(&self, own: &Arc<PushJob>, n: usize) -> Vec<Arc<PushJob>> {
        let q = &mut lock(&self.state).waiting;
        q.retain(|j| !Arc::ptr_eq(j, own));
        let others = n.saturating_sub(1).min(q.len());
        std::iter::once(own.clone()).chain(q.drain(..others)).collect()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        lock(&self.state).waiting.len()
    }
}

/// The same failure for each push of a group whose transaction failed.
fn each(e: &StoreError) -> StoreError {
    match e {
        StoreError::StorageFull(s) => StoreError::StorageFull(s.clone()),
        StoreError::Busy(s) => StoreError::Busy(s.clone()),
        other => StoreError::Backend(other.to_string()),
    }
}

/// Runs `f` in a savepoint of `tx`: kept if it succeeds, rolled back if it fails. The outer
/// error is the transaction's own (the group fails), the inner one the push's.
fn in_savepoint<T>(
    tx: &Connection,
    f: impl FnOnce() -> Result<T, StoreError>,
) -> Result<Result<T, StoreError>, StoreError> {
    tx.execute_batch("SAVEPOINT push")?;
    match f() {
        Ok(v) => {
            tx.execute_batch("RELEASE push")?;
            Ok(Ok(v))
        }
        Err(e) => match tx.execute_batch("ROLLBACK TO push; RELEASE push") {
            Ok(()) => Ok(Err(e)),
            // SQLite rolled the whole transaction back itself (a full disk, say): the group
            // fails, with this push's own error.
            Err(_) => Err(e),
        },
    }
}

impl SqliteStore {
    /// One push's writes inside the group's transaction `tx` (see group.rs): the outcome, and
    /// whether the stream index's tail grew past a batch.
    fn store_push(&self, tx: &Connection, job: &PushJob) -> Result<(PushOutcome, bool), StoreError> {
        let (quotas, rules) = (self.quotas, self.registration);
        let owner = owner_or_register(tx, &job.owner_id, &job.token_hash, &job.now, rules, job.register)?;
        let mut out = PushOutcome { registered: owner.registered, ..PushOutcome::default() };
        let mut seq = meta_u64(tx, "seq")?;
        let head_before = seq;
        let mut tail_grew = false;
        {
            // ON CONFLICT on the (owner, event id) key only: any other conflict — a seq that
            // somehow exists — is an error, never silently ignored.
            let mut insert = tx.prepare_cached(
                "INSERT INTO events (seq, owner_key, event_id, stream_id, envelope, bytes)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (owner_key, event_id) DO NOTHING",
            )?;
            let mut stored = tx.prepare_cached("SELECT envelope FROM events WHERE owner_key = ?1 AND event_id = ?2")?;
            for ev in &job.events {
                let bytes = ev.json.len() as i64;
                let n =
                    insert.execute(params![(seq + 1) as i64, owner.key, ev.event_id, ev.stream_id, ev.json, bytes])?;
                if n == 1 {
                    seq += 1;
                    out.accepted += 1;
                    out.added_bytes += bytes as u64;
                } else {
                    out.duplicate += 1;
                    let existing: String = stored.query_row(params![owner.key, ev.event_id], |r| r.get(0))?;
                    if existing != ev.json {
                        out.forged += 1;
                    }
                }
            }
        }
        check_quota(quotas, owner.stored_bytes, charged_total(tx)?, out.added_bytes)?;
        if seq != head_before {
            set_meta(tx, "seq", &(seq as i64))?;
            tx.prepare_cached("UPDATE owners SET head_seq = ?2 WHERE owner_id = ?1")?
                .execute(params![job.owner_id, seq as i64])?;
            // New streams are counted when their events reach the stream index (streams.rs),
            // which the indexer's thread adds to between pushes.
            let tail = seq.saturating_sub(meta_u64(tx, streams::INDEXED_SEQ)?);
            if tail >= indexer::SAFETY_NET {
                streams::index_tail(tx, 0)?;
            } else {
                tail_grew = tail >= streams::INDEX_BATCH;
            }
        }
        apply(tx, &job.owner_id, Delta { bytes: out.added_bytes as i64, events: out.accepted as i64, streams: 0 })?;
        out.head_seq = if seq != head_before { seq } else { 0 };
        Ok((out, tail_grew))
    }
}

impl SqliteStore {
    /// Stores `own` and the other pushes waiting (see the module docs), holding the writer
    /// `conn`; answers each of them, and returns `own`'s answer.
    pub(super) fn store_group(&self, conn: &mut Connection, own: &Arc<PushJob>) -> Result<PushOutcome, StoreError> {
        let jobs = self.queue.take(own, MAX_GROUP);
        let mut done: Vec<(Arc<PushJob>, Result<PushOutcome, StoreError>)> = Vec::with_capacity(jobs.len());
        let stored = self.store_jobs(conn, jobs, &mut done);
        let mut own_result = None;
        for (job, result) in done {
            let result = match &stored {
                Ok(()) => result,
                Err(e) => Err(each(e)),
            };
            if Arc::ptr_eq(&job, own) {
                own_result = Some(result);
            } else {
                *lock(&job.result) = Some(result);
            }
        }
        match (own_result, stored) {
            (Some(result), _) => result,
            (None, Err(e)) => Err(e),
            (None, Ok(())) => Err(StoreError::Backend("a push was not stored with its group".into())),
        }
    }

    /// The group's transaction: every job in `jobs`, each with its result in `done`;
    /// committed once.
    fn store_jobs(
        &self,
        conn: &Connection,
        jobs: Vec<Arc<PushJob>>,
        done: &mut Vec<(Arc<PushJob>, Result<PushOutcome, StoreError>)>,
    ) -> Result<(), StoreError> {
        let mut tx = match Tx::begin(conn) {
            Ok(tx) => tx,
            Err(e) => {
                done.extend(jobs.into_iter().map(|j| (j, Err(each(&e)))));
                return Err(e);
            }
        };
        let (mut head, mut tail_grew) = (0u64, false);
        // Whether the transaction holds no push yet: its first needs no savepoint (SQLite
        // keeps a copy of every page changed inside one: 5% of a lone 1000-event push).
        let mut empty = true;
        for job in jobs {
            let result = if job.deadline.is_some_and(|d| Instant::now() >= d) {
                Ok(Err(StoreError::DeadlinePassed))
            } else if empty {
                match self.store_push(conn, &job) {
                    Ok(stored) => Ok(Ok(stored)),
                    // Nothing else to keep: the transaction is rolled back and begun again.
                    Err(e) => match tx.rollback() {
                        Ok(()) => match tx.begin_again() {
                            Ok(()) => Ok(Err(e)),
                            Err(group) => {
                                done.push((job, Err(e)));
                                return Err(group);
                            }
                        },
                        // SQLite rolled it back itself (a full disk, say): the group fails,
                        // with this push's own error.
                        Err(_) => Err(e),
                    },
                }
            } else {
                in_savepoint(conn, || self.store_push(conn, &job))
            };
            match result {
                Ok(Ok((out, grew))) => {
                    empty = false;
                    head = head.max(out.head_seq);
                    tail_grew |= grew;
                    done.push((job, Ok(out)));
                }
                Ok(Err(e)) => done.push((job, Err(e))),
                Err(e) => {
                    done.push((job, Err(each(&e))));
                    return Err(e); // the transaction rolls back on drop
                }
            }
        }
        tx.commit()?;
        self.queue.commits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.checkpointer.committed();
        if tail_grew {
            self.indexer.tail_grew();
        }
        if head > 0 {
            // Still under the writer lock: marks are asked for in seq order.
            self.mark.record(head);
        }
        Ok(())
    }
}

/// The group's write transaction on the writer connection; rolled back when dropped open.
struct Tx<'c> {
    conn: &'c Connection,
    open: bool,
}

impl<'c> Tx<'c> {
    fn begin(conn: &'c Connection) -> Result<Tx<'c>, StoreError> {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        Ok(Tx { conn, open: true })
    }

    fn rollback(&mut self) -> Result<(), StoreError> {
        self.open = false;
        self.conn.execute_batch("ROLLBACK")?;
        Ok(())
    }

    fn begin_again(&mut self) -> Result<(), StoreError> {
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        self.open = true;
        Ok(())
    }

    fn commit(mut self) -> Result<(), StoreError> {
        self.conn.execute_batch("COMMIT")?;
        self.open = false;
        Ok(())
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if self.open || !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_store::{self, Dir};
    use super::super::Quotas;
    use super::*;
    use crate::store::RelayStore;

    fn event(i: usize, size: usize) -> NewEvent {
        NewEvent { event_id: format!("e{i:05}"), stream_id: None, json: format!("{{\"n\":\"{}\"}}", "x".repeat(size)) }
    }

    fn store(tag: &str, quotas: Quotas) -> (Dir, Arc<SqliteStore>) {
        let (dir, s) = test_store::open(&format!("group-{tag}"), quotas);
        (dir, Arc::new(s))
    }

    /// Starts `pushes` (owner, token, events) on threads of their own while the test holds the
    /// writer, waits until every one is queued, then lets them go: the first to get the writer
    /// stores the whole group.
    fn pushed_as_one_group(
        s: &Arc<SqliteStore>,
        pushes: Vec<(String, Vec<NewEvent>)>,
    ) -> Vec<Result<PushOutcome, StoreError>> {
        let held = lock(&s.writer);
        let mut threads = Vec::new();
        // One at a time, so the group stores them in this order.
        for (i, (owner, events)) in pushes.into_iter().enumerate() {
            let s2 = s.clone();
            threads
                .push(std::thread::spawn(move || s2.push(&owner, "token-hash", events, "now", MayRegister::Yes, None)));
            while s.queue.len() < i + 1 {
                std::thread::yield_now();
            }
        }
        drop(held);
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    fn seq(s: &SqliteStore) -> u64 {
        meta_u64(&lock(&s.writer), "seq").unwrap()
    }

    fn commits(s: &SqliteStore) -> u64 {
        s.queue.commits.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[test]
    fn a_push_goes_down_in_few_writes_and_is_in_the_file_when_it_is_answered() {
        let (_dir, s) = store("coalesced", Quotas { max_owner_bytes: u64::MAX, max_total_bytes: u64::MAX });
        let before = simplysync_coalesce::write_counts();
        let events: Vec<NewEvent> = (0..200).map(|i| event(i, 1000)).collect();
        s.push("owner", "token-hash", events, "now", MayRegister::Yes, None).unwrap();
        let after = simplysync_coalesce::write_counts();
        let (received, sent) = (after.received - before.received, after.sent - before.sent);
        // ~30 pages of 8 KiB, each a frame of two writes: through the shim, a few writes.
        assert!(received >= 60, "SQLite wrote {received} times");
        assert!(sent * 4 <= received, "{received} writes went down as {sent}");
        // Read by a connection of its own that is not the shim's, at once: nothing was held.
        let plain = rusqlite::Connection::open(&s.path).unwrap();
        let n: i64 = plain.query_row("SELECT count(*) FROM events", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 200);
    }

    #[test]
    fn pushes_waiting_for_the_writer_are_stored_in_one_commit_and_each_gets_its_own_answer() {
        let (_dir, s) = store("one-commit", Quotas { max_owner_bytes: u64::MAX, max_total_bytes: u64::MAX });
        let pushes: Vec<_> =
            (0..5).map(|o| (format!("owner-{o}"), (0..100).map(|i| event(o * 1000 + i, 50)).collect())).collect();
        let results = pushed_as_one_group(&s, pushes);
        for r in &results {
            let out = r.as_ref().unwrap();
            assert_eq!((out.accepted, out.duplicate, out.registered), (100, 0, true));
        }
        assert_eq!(seq(&s), 500);
        let heads: std::collections::BTreeSet<u64> = results.iter().map(|r| r.as_ref().unwrap().head_seq).collect();
        assert_eq!(heads.into_iter().collect::<Vec<_>>(), [100, 200, 300, 400, 500], "each push its own head");
        assert_eq!(commits(&s), 1, "one commit for the five pushes");
    }

    #[test]
    fn a_group_led_by_the_push_queued_last_takes_it_out_of_the_queue_and_holds_at_most_32() {
        let (_dir, s) = store("last", Quotas { max_owner_bytes: u64::MAX, max_total_bytes: u64::MAX });
        let mut held = lock(&s.writer);
        let threads: Vec<_> = (0..40)
            .map(|o| {
                let s2 = s.clone();
                let t = std::thread::spawn(move || {
                    s2.push(&format!("owner-{o}"), "token-hash", vec![event(o, 10)], "now", MayRegister::Yes, None)
                });
                while s.queue.len() < o + 1 {
                    std::thread::yield_now();
                }
                t
            })
            .collect();
        // The last push to queue gets the writer first (as an unfair mutex may let it).
        let last = lock(&s.queue.state).waiting[39].clone();
        let answer = s.store_group(&mut held, &last);
        assert_eq!(answer.as_ref().unwrap().accepted, 1);
        assert_eq!(s.queue.len(), 40 - 32, "the group: the last push and the 31 oldest");
        assert!(
            !lock(&s.queue.state).waiting.iter().any(|j| Arc::ptr_eq(j, &last)),
            "the last push is not queued twice"
        );
        *lock(&last.result) = Some(answer);
        drop(held);
        for t in threads {
            let out = t.join().unwrap().unwrap();
            assert_eq!((out.accepted, out.duplicate), (1, 0), "every push stored once");
        }
        assert_eq!(seq(&s), 40);
        assert_eq!(s.queue.len(), 0);
    }

    #[test]
    fn pushes_stored_by_another_get_their_answers_while_the_writer_is_still_held() {
        let (_dir, s) = store("no-writer", Quotas { max_owner_bytes: u64::MAX, max_total_bytes: u64::MAX });
        let mut held = lock(&s.writer);
        let (sent, answered) = std::sync::mpsc::channel();
        let threads: Vec<_> = (0..3)
            .map(|o| {
                let (s2, sent) = (s.clone(), sent.clone());
                let t = std::thread::spawn(move || {
                    let r =
                        s2.push(&format!("owner-{o}"), "token-hash", vec![event(o, 10)], "now", MayRegister::Yes, None);
                    sent.send(o).unwrap();
                    r
                });
                while s.queue.len() < o + 1 {
                    std::thread::yield_now();
                }
                t
            })
            .collect();
        // The first push leads and waits for the writer; the test stores its group as it would.
        let first = lock(&s.queue.state).waiting[0].clone();
        let answer = s.store_group(&mut held, &first);
        *lock(&first.result) = Some(answer);
        s.queue.changed.notify_all();
        // The two others return while the writer is still held (in a relay: by the indexer).
        let mut early: Vec<usize> =
            (0..2).map(|_| answered.recv_timeout(std::time::Duration::from_secs(10)).expect("answered")).collect();
        early.sort_unstable();
        assert_eq!(early, [1, 2]);
        drop(held);
        for t in threads {
            assert_eq!(t.join().unwrap().unwrap().accepted, 1);
        }
        assert_eq!(seq(&s), 3);
    }

    /// A group of three where the push at `refused` goes over its owner's quota.
    fn group_with_a_push_over_quota(refused: usize) {
        let (_dir, s) =
            store(&format!("quota-{refused}"), Quotas { max_owner_bytes: 10_000, max_total_bytes: u64::MAX });
        let mut pushes: Vec<(String, Vec<NewEvent>)> =
            (0..2).map(|o| (format!("small-{o}"), (0..10).map(|i| event(i, 50)).collect())).collect();
        pushes.insert(refused, ("too-big".to_owned(), (0..10).map(|i| event(i, 2_000)).collect()));
        let results = pushed_as_one_group(&s, pushes);
        for (i, r) in results.iter().enumerate() {
            if i == refused {
                assert!(matches!(r, Err(StoreError::OwnerQuota { .. })), "{results:?}");
            } else {
                assert_eq!(r.as_ref().unwrap().accepted, 10, "{results:?}");
            }
        }
        assert_eq!(seq(&s), 20, "the refused push left nothing, not even its owner's registration");
        assert_eq!(s.authenticate("too-big", "token-hash").unwrap(), crate::store::OwnerState::Unknown);
        assert_eq!(s.authenticate("small-1", "token-hash").unwrap(), crate::store::OwnerState::Known);
    }

    #[test]
    fn a_push_over_its_quota_first_in_a_group_fails_alone_and_the_others_are_stored() {
        group_with_a_push_over_quota(0);
    }

    #[test]
    fn a_push_over_its_quota_later_in_a_group_fails_alone_and_the_others_are_stored() {
        group_with_a_push_over_quota(1);
    }

    #[test]
    fn a_push_whose_deadline_passed_while_it_waited_in_a_group_stores_nothing() {
        let (_dir, s) = store("deadline", Quotas { max_owner_bytes: u64::MAX, max_total_bytes: u64::MAX });
        let held = lock(&s.writer);
        let late = {
            let s = s.clone();
            let deadline = Some(Instant::now() + std::time::Duration::from_millis(50));
            std::thread::spawn(move || {
                s.push("late", "token-hash", vec![event(1, 10)], "now", MayRegister::Yes, deadline)
            })
        };
        while s.queue.len() < 1 {
            std::thread::yield_now();
        }
        let on_time = {
            let s = s.clone();
            std::thread::spawn(move || {
                s.push("on-time", "token-hash", vec![event(2, 10)], "now", MayRegister::Yes, None)
            })
        };
        while s.queue.len() < 2 {
            std::thread::yield_now();
        }
        std::thread::sleep(std::time::Duration::from_millis(80));
        drop(held);
        assert!(matches!(late.join().unwrap(), Err(StoreError::DeadlinePassed)));
        assert_eq!(on_time.join().unwrap().unwrap().accepted, 1);
        assert_eq!(seq(&s), 1);
    }
}
