//! The stream index's batches on a thread of their own, so no push waits for one.
//!
//! A push only appends its events; once the unindexed tail holds [`streams::INDEX_BATCH`]
//! events the push signals this thread, which takes the writer connection between pushes and
//! indexes the tail in a write transaction of its own (30–50 ms per batch of 9000 when a push
//! did it: BENCHMARKS.md, round twelve). The next push's parse and validation run meanwhile.
//!
//! That transaction commits with `synchronous = NORMAL` — written to the WAL but not fsynced:
//! the index is derived from events already durable, a crash that loses the batch leaves the
//! tail unindexed (and indexed again later), and the next push's FULL commit fsyncs the WAL
//! up to and past it. FULL is restored before the connection is given back; if restoring it
//! fails, [`Shared::relaxed`] stays set and the next writer restores it before it writes.
//!
//! If this thread cannot start or falls behind, a push that finds [`SAFETY_NET`] unindexed
//! events indexes them itself, so the tail (what a reader of the index indexes first, and what
//! an account query counts) stays bounded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use rusqlite::{Connection, TransactionBehavior};

use super::{lock, streams, StoreError};

/// The tail a push indexes itself, inside its own transaction (the thread fell behind).
pub(super) const SAFETY_NET: u64 = 4 * streams::INDEX_BATCH;

#[derive(Default)]
struct State {
    /// A push left at least a batch unindexed since the last run began.
    pending: bool,
    stop: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// The writer connection runs with `synchronous = NORMAL` (restoring FULL failed).
    relaxed: AtomicBool,
}

/// The background stream indexer of one database.
pub(super) struct Indexer {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Indexer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Indexer").finish_non_exhaustive()
    }
}

impl Indexer {
    /// Starts the thread over the `writer` connection. If it cannot start, pushes index the
    /// tail themselves at [`SAFETY_NET`].
    pub fn start(writer: Arc<Mutex<Connection>>) -> Indexer {
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("stream-indexer".into())
            .spawn(move || run(&writer, &s))
            .map_err(|e| tracing::warn!(error = %e, "cannot start the stream indexer; pushes index the tail"))
            .ok();
        Indexer { shared, thread: Mutex::new(thread) }
    }

    /// A push left a batch's worth of unindexed events (returns at once).
    pub fn tail_grew(&self) {
        lock(&self.shared.state).pending = true;
        self.shared.wake.notify_all();
    }

    /// Restores `synchronous = FULL` on `conn` (the writer, locked) if a run left it relaxed.
    pub fn ensure_durable(&self, conn: &Connection) -> Result<(), StoreError> {
        if self.shared.relaxed.load(Ordering::Acquire) {
            conn.execute_batch("PRAGMA synchronous = FULL;")?;
            self.shared.relaxed.store(false, Ordering::Release);
        }
        Ok(())
    }

    /// Stops the thread, waiting for a run under way.
    pub fn stop(&self) {
        {
            lock(&self.shared.state).stop = true;
            self.shared.wake.notify_all();
        }
        let thread = lock(&self.thread).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

fn run(writer: &Mutex<Connection>, shared: &Shared) {
    loop {
        {
            let mut st = lock(&shared.state);
            while !st.pending && !st.stop {
                st = shared.wake.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            if st.stop {
                return;
            }
            st.pending = false;
        }
        let mut conn = lock(writer);
        if let Err(e) = index_relaxed(&mut conn, shared) {
            // The tail stays; the next push past a batch signals again.
            tracing::warn!(error = %e, "background stream indexing failed; retried after the next push");
        }
    }
}

/// One batch in its own transaction, committed without an fsync of its own.
fn index_relaxed(conn: &mut Connection, shared: &Shared) -> Result<(), StoreError> {
    shared.relaxed.store(true, Ordering::Release);
    conn.execute_batch("PRAGMA synchronous = NORMAL;")?;
    let done = (|| {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        streams::index_tail(&tx, streams::INDEX_BATCH)?;
        tx.commit()?;
        Ok::<(), StoreError>(())
    })();
    // No checkpoint signal: the batch's frames are copied with the next push's.
    match (done, conn.execute_batch("PRAGMA synchronous = FULL;")) {
        (done, Ok(())) => {
            shared.relaxed.store(false, Ordering::Release);
            done
        }
        // The flag stays set: the next writer restores FULL before it writes.
        (Ok(()), Err(r)) => Err(r.into()),
        (Err(e), Err(r)) => Err(StoreError::Backend(format!("{e}; restoring synchronous = FULL failed too: {r}"))),
    }
}

impl Drop for Indexer {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::super::test_store::{self, Dir};
    use super::super::{lock, Quotas, SqliteStore};
    use super::{index_relaxed, Shared};
    use crate::store::{MayRegister, NewEvent, RelayStore};

    const NOW: &str = "2026-12-03T00:00:00.000Z";

    fn store(tag: &str) -> (Dir, SqliteStore) {
        test_store::open(&format!("indexer-{tag}"), Quotas { max_owner_bytes: 1 << 30, max_total_bytes: 1 << 30 })
    }

    fn synchronous(s: &SqliteStore) -> i64 {
        lock(&s.writer).query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap()
    }

    fn relax(s: &SqliteStore) {
        lock(&s.writer).execute_batch("PRAGMA synchronous = NORMAL;").unwrap();
        s.indexer.shared.relaxed.store(true, Ordering::Release);
    }

    #[test]
    fn a_background_batch_gives_the_writer_back_with_full_sync() {
        let (_dir, s) = store("batch");
        let shared = Shared::default();
        index_relaxed(&mut lock(&s.writer), &shared).unwrap();
        assert_eq!(synchronous(&s), 2, "FULL");
        assert!(!shared.relaxed.load(Ordering::Acquire));
    }

    #[test]
    fn a_writer_left_relaxed_is_made_durable_before_it_writes() {
        let (_dir, s) = store("relaxed");
        let ev = NewEvent { event_id: "e1".into(), stream_id: Some("s1".into()), json: "{}".into() };
        relax(&s);
        s.push("owner", "hash", vec![ev], NOW, MayRegister::Yes, None).unwrap();
        assert_eq!(synchronous(&s), 2, "a push restores FULL before its commit");
        relax(&s);
        s.close_owner("owner", "hash", NOW, None).unwrap();
        assert_eq!(synchronous(&s), 2, "so does every other write");
    }
}
