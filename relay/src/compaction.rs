//! Log compaction: keep the newest event (max eventId = HLC) of each (owner, stream), drop
//! older versions, credit the bytes back. Seqs are never reused, so no cursor is stranded.
//! Runs on a schedule (`COMPACTION_INTERVAL_MS`), from `POST /ops/compact`, and from the
//! `simplysync-relay compact` command.

use std::sync::Arc;
use std::time::Duration;

use crate::http::error::ApiError;
use crate::metrics::Metrics;
use crate::store::{CompactionReport, RelayStore};

/// Runs one pass on the blocking pool.
pub async fn run_once(store: &Arc<dyn RelayStore>, metrics: &Metrics, now: &str) -> Result<CompactionReport, ApiError> {
    let (s, now) = (store.clone(), now.to_owned());
    let report = tokio::task::spawn_blocking(move || s.compact_all(&now))
        .await
        .map_err(|e| ApiError::Internal(format!("compaction task failed: {e}")))??;
    metrics.record_compaction(&report);
    tracing::info!(
        owners = report.owners,
        deleted_events = report.deleted_events,
        reclaimed_bytes = report.reclaimed_bytes,
        duration_ms = report.duration_ms,
        "log compaction finished"
    );
    Ok(report)
}

/// Runs a pass every `interval_ms`, the first one interval after start.
pub async fn schedule(store: Arc<dyn RelayStore>, metrics: Arc<Metrics>, interval_ms: u64) {
    let mut ticker = tokio::time::interval(Duration::from_millis(interval_ms));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await; // the first tick completes at once
    loop {
        ticker.tick().await;
        if let Err(e) = run_once(&store, &metrics, &crate::http::now_iso()).await {
            tracing::error!(error = %e, "scheduled compaction failed; will retry next interval");
        }
    }
}
