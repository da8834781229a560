//! WAL checkpoints on a thread of their own, so no push pays for one.
//!
//! With SQLite's automatic checkpoint, the commit that crosses 1000 WAL pages copies them into
//! the database file and fsyncs it before its push is acknowledged: one push in three paid
//! 10–30 ms for it (BENCHMARKS.md). Here the writer only signals "committed"; this thread runs
//! a PASSIVE checkpoint on its own connection — at most one per [`GAP`], so pages rewritten by
//! several pushes are copied once — while writers go on appending to the WAL. A commit is
//! durable in the WAL (`synchronous = FULL`) before its acknowledgement either way: the
//! checkpoint only moves pages into the main file, and a crash before it replays the WAL.
//!
//! The writer keeps a high automatic threshold ([`SAFETY_NET_BYTES`]) so the WAL stays bounded
//! even if this thread falls behind or cannot open its connection.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

/// The shortest time between two background checkpoints.
pub(super) const GAP: Duration = Duration::from_millis(200);

/// The writer's own automatic checkpoint threshold, in bytes of WAL (SQLite counts it in
/// pages of the file's size): reached only when the background checkpoints fall behind.
pub(super) const SAFETY_NET_BYTES: i64 = 64 << 20;

#[derive(Default)]
struct State {
    /// Commits since the last checkpoint began.
    pending: u64,
    stop: bool,
}

type Shared = Arc<(Mutex<State>, Condvar)>;

/// The background checkpointer of one database.
pub(super) struct Checkpointer {
    state: Shared,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Checkpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpointer").finish_non_exhaustive()
    }
}

fn guard(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Checkpointer {
    /// Starts the thread; its connection to `path` is opened by `open` on that thread. If the
    /// thread cannot start, the writer's safety net alone keeps the WAL bounded.
    pub fn start(
        path: &Path,
        open: impl FnOnce(&Path) -> Result<Connection, super::StoreError> + Send + 'static,
    ) -> Checkpointer {
        let state: Shared = Arc::default();
        let (p, s) = (path.to_owned(), state.clone());
        let thread = std::thread::Builder::new()
            .name("wal-checkpointer".into())
            .spawn(move || match open(&p) {
                Ok(conn) => run(&conn, &s),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot open the checkpointer's connection; the writer checkpoints")
                }
            })
            .map_err(|e| tracing::warn!(error = %e, "cannot start the checkpointer; the writer checkpoints"))
            .ok();
        Checkpointer { state, thread: Mutex::new(thread) }
    }

    /// A write transaction committed (returns at once).
    pub fn committed(&self) {
        let (lock, cv) = &*self.state;
        guard(lock).pending += 1;
        cv.notify_all();
    }

    /// Stops the thread, waiting for a checkpoint under way (at shutdown, before the final one).
    pub fn stop(&self) {
        {
            let (lock, cv) = &*self.state;
            guard(lock).stop = true;
            cv.notify_all();
        }
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

fn run(conn: &Connection, state: &(Mutex<State>, Condvar)) {
    let (lock, cv) = state;
    loop {
        {
            let mut st = guard(lock);
            while st.pending == 0 && !st.stop {
                st = cv.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            if st.stop {
                return;
            }
            st.pending = 0;
        }
        // (busy, frames in the WAL, frames copied): a checkpoint a reader held back is tried
        // again after the gap even if no commit comes.
        let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        });
        match done {
            Ok((busy, log, copied)) if busy != 0 || copied < log => guard(lock).pending += 1,
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "background WAL checkpoint failed; retried after the next commit"),
        }
        // Let commits gather before the next one (woken early only to stop).
        let st = guard(lock);
        let _ = cv.wait_timeout_while(st, GAP, |st| !st.stop).unwrap_or_else(|p| p.into_inner());
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop();
    }
}
