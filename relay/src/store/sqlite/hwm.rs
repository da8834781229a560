//! The seq high-water mark: a small file beside the database (or at `HWM_PATH`) holding the
//! highest seq this relay ever acknowledged for its epoch. Restoring an older copy of the
//! database leaves the mark behind, so the relay notices and rotates its epoch.
//!
//! The file is replaced atomically (a temporary file, fsync, rename, fsync of the directory).
//! Writes happen on a thread of their own, coalesced: a push never waits for this fsync, and
//! the mark only ever moves up (a late write of an older seq cannot overwrite a newer one).

use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

#[derive(Default)]
struct State {
    /// The highest seq asked for.
    wanted: u64,
    /// The highest seq on disk.
    written: u64,
    stop: bool,
}

/// The writer of one database's mark.
pub(super) struct HighWaterMark {
    path: PathBuf,
    epoch: String,
    state: Arc<(Mutex<State>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for HighWaterMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HighWaterMark").field("path", &self.path).finish_non_exhaustive()
    }
}

/// Reads a mark: `(epoch, seq)`, if the file exists and parses.
pub(super) fn read(path: &Path) -> Option<(String, u64)> {
    let text = fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some((v["epoch"].as_str()?.to_owned(), v["seq"].as_u64()?))
}

/// Writes a mark now, atomically.
pub(super) fn write_now(path: &Path, epoch: &str, seq: u64) -> std::io::Result<()> {
    let text = serde_json::json!({ "epoch": epoch, "seq": seq }).to_string() + "\n";
    let tmp = path.with_file_name(format!(
        "{}.tmp",
        path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "hwm".into())
    ));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // The rename itself must survive a power cut.
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

impl HighWaterMark {
    /// Starts the writer for `path`, whose mark is `seq` now (written at once, its directory
    /// created). A mark that cannot be written is an error: the relay would not notice a
    /// restored older database, and devices would be stranded.
    pub fn start(path: PathBuf, epoch: String, seq: u64) -> std::io::Result<HighWaterMark> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir)?;
        }
        write_now(&path, &epoch, seq)?;
        let state = Arc::new((Mutex::new(State { wanted: seq, written: seq, stop: false }), Condvar::new()));
        let (p, e, s) = (path.clone(), epoch.clone(), state.clone());
        let thread = std::thread::Builder::new().name("hwm-writer".into()).spawn(move || writer(&p, &e, &s)).ok();
        Ok(HighWaterMark { path, epoch, state, thread })
    }

    /// Asks for `seq` to be recorded (returns at once).
    pub fn record(&self, seq: u64) {
        let (lock, cv) = &*self.state;
        let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
        if seq > st.wanted {
            st.wanted = seq;
            cv.notify_all();
        }
    }

    /// Waits until everything asked for is on disk (at shutdown).
    pub fn flush(&self) {
        let (lock, cv) = &*self.state;
        let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
        while st.written < st.wanted && self.thread.is_some() {
            st = cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if self.thread.is_none() && st.written < st.wanted {
            let _ = write_now(&self.path, &self.epoch, st.wanted);
            st.written = st.wanted;
        }
    }
}

fn writer(path: &Path, epoch: &str, state: &(Mutex<State>, Condvar)) {
    let (lock, cv) = state;
    loop {
        let seq = {
            let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
            while st.written >= st.wanted && !st.stop {
                st = cv.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            if st.written >= st.wanted {
                return; // stopping, and nothing left
            }
            st.wanted
        };
        if let Err(e) = write_now(path, epoch, seq) {
            tracing::warn!(path = %path.display(), error = %e, "cannot write the seq high-water mark");
        }
        let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
        st.written = st.written.max(seq);
        cv.notify_all();
    }
}

impl Drop for HighWaterMark {
    fn drop(&mut self) {
        self.flush();
        {
            let (lock, cv) = &*self.state;
            lock.lock().unwrap_or_else(|p| p.into_inner()).stop = true;
            cv.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
