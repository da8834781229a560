//! The stream index's batches on a thread of their own, so no push waits for one.
//!
//! A push only appends its events; once the unindexed tail holds [`streams::INDEX_BATCH`]
//! events the push signals this thread, which takes the writer connection between pushes and
//! indexes the tail in a write transaction of its own (30–50 ms per batch of 9000 when a push
//! did it: BENCHMARKS.md, round twelve). The next push's parse and validation run meanwhile.
//! It reads each batch first on a connection of its own ([`streams::read_tail`]) while pushes
//! hold the writer, and takes the writer only to add the entries (round twenty-four: the
//! writer held 9–17 ms a batch of 8192 instead of ~25, one-owner pushes +13–18%).
//!
//! That transaction commits like every other, with `synchronous = FULL`. (Until round
//! twenty-four it committed with `NORMAL`, sparing one fsync a batch; through the
//! write-coalescing VFS a commit without a sync would leave its last WAL frames held in memory
//! while readers could already see them.)
//!
//! If this thread cannot start or falls behind, a push that finds [`SAFETY_NET`] unindexed
//! events indexes them itself, so the tail (what a reader of the index indexes first, and what
//! an account query counts) stays bounded.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use rusqlite::{Connection, TransactionBehavior};

use super::{lock, streams, StoreError};

/// The tail a push indexes itself, inside its own transaction (the thread fell behind).
pub(super) const SAFETY_NET: u64 = 4 * streams::INDEX_BATCH;

/// The most seqs one batch reads ahead (a longer tail, left while the thread could not run, is
/// indexed in parts): at most ~5 MB of rows in memory (~0.6 MB for a batch of 8192).
const READ_AHEAD: u64 = 2 * SAFETY_NET;

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
    /// Write transactions other than pushes' that ended ([`Indexer::wrote`]): a batch read
    /// ahead across one of them may name events since deleted, and is read again.
    generation: AtomicU64,
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
    /// Starts the thread over the `writer` connection, reading each batch ahead on a
    /// connection to `path` of its own (`open`, again after a failed read; without one, it
    /// reads under the writer). If the thread cannot start, pushes index the tail themselves
    /// at [`SAFETY_NET`].
    pub fn start(
        writer: Arc<Mutex<Connection>>,
        path: &Path,
        open: impl Fn(&Path) -> Result<Connection, StoreError> + Send + 'static,
    ) -> Indexer {
        let shared = Arc::new(Shared::default());
        let (s, path) = (shared.clone(), path.to_owned());
        let thread = std::thread::Builder::new()
            .name("stream-indexer".into())
            .spawn(move || run(&writer, || open(&path), &s))
            .map_err(|e| tracing::warn!(error = %e, "cannot start the stream indexer; pushes index the tail"))
            .ok();
        Indexer { shared, thread: Mutex::new(thread) }
    }

    /// A write transaction other than a push's ended (committed or not), the writer still
    /// held: called after its commit, so a batch that reads ahead after this call sees it.
    /// Every write that may delete events or index entries must come through here
    /// (`SqliteStore::write`); pushes only add events after every head read so far.
    pub fn wrote(&self) {
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// A push left a batch's worth of unindexed events (returns at once).
    pub fn tail_grew(&self) {
        lock(&self.shared.state).pending = true;
        self.shared.wake.notify_all();
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

fn run(writer: &Mutex<Connection>, open: impl Fn() -> Result<Connection, StoreError>, shared: &Shared) {
    let mut reader: Option<Connection> = None;
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
        if reader.is_none() {
            reader = open()
                .map_err(|e| tracing::warn!(error = %e, "the stream indexer reads this batch under the writer"))
                .ok();
        }
        // The batch read ahead, while pushes hold the writer; a failed read is done under it.
        // The generation is taken before the read's snapshot begins (its first SELECT), and
        // `wrote` counts after a commit: a write that ended before the snapshot either is in
        // the snapshot or changed the generation since this load.
        let generation = shared.generation.load(Ordering::Acquire);
        let read = reader.as_mut().map(|c| streams::read_tail(c, streams::INDEX_BATCH, READ_AHEAD));
        let tail = match read {
            Some(Ok(None)) => continue, // indexed meanwhile (a push at the safety net, a reader)
            Some(Ok(Some(tail))) => Some((tail, generation)),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "reading the stream index's batch ahead failed; read under the writer");
                reader = None; // opened again for the next batch
                None
            }
            None => None,
        };
        let mut conn = lock(writer);
        if let Err(e) = index_batch(&mut conn, tail.as_ref(), shared) {
            // The tail stays; the next push past a batch signals again.
            tracing::warn!(error = %e, "background stream indexing failed; retried after the next push");
        }
    }
}

/// One batch in its own transaction: `tail` as read ahead, or (`None`) the tail read under
/// the writer. (No checkpoint signal: the batch's frames are copied with the next push's.)
fn index_batch(
    conn: &mut Connection,
    tail: Option<&(streams::ReadTail, u64)>,
    shared: &Shared,
) -> Result<(), StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    match tail {
        Some((tail, generation)) => {
            let unchanged = shared.generation.load(Ordering::Acquire) == *generation;
            streams::index_read_tail(&tx, tail, unchanged)?
        }
        None => streams::index_tail(&tx, streams::INDEX_BATCH)?,
    }
    tx.commit()?;
    Ok(())
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
    use super::{index_batch, streams, Shared};
    use crate::store::{MayRegister, NewEvent, RelayStore};

    const NOW: &str = "2026-12-03T00:00:00.000Z";

    fn store(tag: &str) -> (Dir, SqliteStore) {
        test_store::open(&format!("indexer-{tag}"), Quotas { max_owner_bytes: 1 << 30, max_total_bytes: 1 << 30 })
    }

    fn synchronous(s: &SqliteStore) -> i64 {
        lock(&s.writer).query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn a_background_batch_commits_with_full_sync_like_every_write() {
        let (_dir, s) = store("batch");
        index_batch(&mut lock(&s.writer), None, &Shared::default()).unwrap();
        assert_eq!(synchronous(&s), 2, "FULL: the coalescing VFS holds the frames of a commit without a sync");
    }

    #[test]
    fn a_batch_read_ahead_across_another_write_is_read_again_under_the_writer() {
        let (_dir, s) = store("generation");
        let ev = |id: &str, stream: &str| NewEvent {
            event_id: id.into(),
            stream_id: Some(stream.into()),
            json: "{}".into(),
        };
        s.push("a", "hash", vec![ev("a1", "s1"), ev("a2", "s2")], NOW, MayRegister::Yes, None).unwrap();
        s.push("b", "hash", vec![ev("b1", "s1")], NOW, MayRegister::Yes, None).unwrap();
        let generation = s.indexer.shared.generation.load(Ordering::Acquire);
        let mut reader = rusqlite::Connection::open(&s.path).unwrap();
        let tail = streams::read_tail(&mut reader, 1, u64::MAX).unwrap().unwrap();
        // Deletes a's events (and a's index entries) after the batch was read.
        s.close_owner("a", "hash", NOW, None).unwrap();
        index_batch(&mut lock(&s.writer), Some(&(tail, generation)), &s.indexer.shared).unwrap();
        let (entries, counts, _) = streams::tests::state(&s);
        assert_eq!(entries, vec![(2, "s1".to_string(), 3)], "only b's event: none for a's deleted ones");
        assert_eq!(counts, vec![("a".to_string(), 0), ("b".to_string(), 1)]);
    }
}
