//! Log compaction: keep the newest event (max eventId = HLC) of each (owner, stream), drop
//! older versions, credit the bytes back. Seqs are never reused, so no cursor is stranded.
//! Runs on a schedule (`COMPACTION_INTERVAL_MS`, counted from the last pass the database
//! records — a relay restarted more often than the interval still compacts), from
//! `POST /ops/compact`, and from the `simplysync-relay compact` command. A shutdown stops a
//! pass between two of its short batches.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use simplysync_protocol::time::iso8601_ms;

use crate::clock::{now_iso, now_ms};
use crate::metrics::Metrics;
use crate::store::{CompactionReport, RelayStore, StoreError};

/// Runs one pass on the blocking pool; `cancel` stops it at a safe point.
pub async fn run_once(
    store: &Arc<dyn RelayStore>,
    metrics: &Metrics,
    cancel: &Arc<AtomicBool>,
) -> Result<CompactionReport, StoreError> {
    let (s, c, now) = (store.clone(), cancel.clone(), now_iso());
    let report = tokio::task::spawn_blocking(move || s.compact_all(&now, &c))
        .await
        .map_err(|e| StoreError::Setup(format!("compaction task failed: {e}")))??;
    metrics.record_compaction(&report);
    tracing::info!(
        owners = report.owners,
        deleted_events = report.deleted_events,
        reclaimed_bytes = report.reclaimed_bytes,
        duration_ms = report.duration_ms,
        complete = report.complete,
        "log compaction finished"
    );
    Ok(report)
}

/// When the next scheduled pass is due (ms since the epoch): one interval after the last
/// recorded pass, or after the database was created.
pub fn next_due(last: Option<&str>, created: &str, interval_ms: u64) -> u64 {
    let base = last.or(Some(created)).and_then(iso8601_ms).unwrap_or_else(now_ms);
    base.saturating_add(interval_ms)
}

/// How often the store's upkeep ([`RelayStore::maintain`]) runs, besides once at start.
pub const MAINTENANCE_INTERVAL: Duration = Duration::from_secs(300);

/// Runs the store's upkeep at start and every `every`, until `cancel` is set.
pub async fn maintain(store: Arc<dyn RelayStore>, every: Duration, cancel: Arc<AtomicBool>) {
    loop {
        let s = store.clone();
        let _ = tokio::task::spawn_blocking(move || s.maintain()).await;
        let next = tokio::time::Instant::now() + every;
        while tokio::time::Instant::now() < next {
            if cancel.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1000).min(every)).await;
        }
    }
}

/// Runs a pass whenever one is due, until `cancel` is set.
pub async fn schedule(store: Arc<dyn RelayStore>, metrics: Arc<Metrics>, interval_ms: u64, cancel: Arc<AtomicBool>) {
    loop {
        let times = {
            let s = store.clone();
            tokio::task::spawn_blocking(move || s.compaction_times()).await
        };
        let due = match times {
            Ok(Ok((last, created))) => next_due(last.as_deref(), &created, interval_ms),
            _ => now_ms().saturating_add(interval_ms),
        };
        // Sleep in bounded steps, so a shutdown is noticed.
        while now_ms() < due {
            if cancel.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            tokio::time::sleep(Duration::from_millis((due - now_ms()).min(1000))).await;
        }
        if cancel.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        match run_once(&store, &metrics, &cancel).await {
            // Done: the next pass is due one interval after the time it recorded.
            Ok(report) if report.complete => {}
            // Stopped by a shutdown, or another relay process holds the compaction lock: look
            // again later rather than at once.
            Ok(_) => tokio::time::sleep(Duration::from_millis(interval_ms.min(60_000))).await,
            Err(e) => {
                tracing::error!(error = %e, "scheduled compaction failed; will retry next interval");
                tokio::time::sleep(Duration::from_millis(interval_ms.min(60_000))).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_pass_is_one_interval_after_the_last_recorded_one() {
        let created = "2026-01-01T00:00:00.000Z";
        let last = "2026-01-02T00:00:00.000Z";
        let hour = 3_600_000;
        assert_eq!(next_due(Some(last), created, hour), iso8601_ms(last).unwrap() + hour);
        assert_eq!(next_due(None, created, hour), iso8601_ms(created).unwrap() + hour, "never ran: from creation");
    }
}
