//! Log compaction on PostgreSQL: one process at a time (a session advisory lock; a process
//! that does not get it leaves the pass to the one that has it), each owner in windows of
//! [`BATCH`] events, each window its own short transaction under the owner's row lock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::schema::{set_meta, LOCK_COMPACT};
use deadpool_postgres::GenericClient as _;

use super::{pg_error, PgStore};
use crate::store::{CompactionReport, StoreError};

/// Events examined per transaction.
const BATCH: i64 = 5000;

pub(super) async fn compact_all(
    store: &PgStore,
    now: &str,
    cancel: &AtomicBool,
) -> Result<CompactionReport, StoreError> {
    let started = Instant::now();
    let mut lock_holder = store.connection().await?;
    let got: bool =
        lock_holder.query_one("SELECT pg_try_advisory_lock($1)", &[&LOCK_COMPACT]).await.map_err(pg_error)?.get(0);
    if !got {
        tracing::info!("log compaction skipped: another relay process is running it");
        return Ok(CompactionReport { complete: false, ..CompactionReport::default() });
    }
    let result = run(store, &mut lock_holder, now, cancel, started).await;
    if lock_holder.execute("SELECT pg_advisory_unlock($1)", &[&LOCK_COMPACT]).await.is_err() {
        // The session still holds the lock: never hand that connection to anyone else.
        drop(deadpool_postgres::Object::take(lock_holder));
    }
    result
}

async fn run(
    store: &PgStore,
    client: &mut deadpool_postgres::Object,
    now: &str,
    cancel: &AtomicBool,
    started: Instant,
) -> Result<CompactionReport, StoreError> {
    let owners: Vec<String> = client
        .query("SELECT owner_id FROM owners WHERE closed_at IS NULL ORDER BY owner_id", &[])
        .await
        .map_err(pg_error)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut report = CompactionReport { owners: owners.len() as u64, complete: true, ..CompactionReport::default() };
    let closed: Vec<String> = client
        .query(
            "SELECT owner_id FROM owners AS o WHERE closed_at IS NOT NULL
             AND EXISTS (SELECT 1 FROM events AS e WHERE e.owner_id = o.owner_id)",
            &[],
        )
        .await
        .map_err(pg_error)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for owner_id in closed {
        if !purge_owner_log(&*client, &owner_id, cancel, None).await? {
            report.complete = false;
            break;
        }
    }
    'owners: for owner_id in owners {
        if !report.complete {
            break;
        }
        let mut cursor = 0i64;
        loop {
            if cancel.load(Ordering::Relaxed) {
                report.complete = false;
                break 'owners;
            }
            let batch_started = Instant::now();
            let tx = client.transaction().await.map_err(pg_error)?;
            // The owner's lock keeps its counters in step with concurrent pushes.
            if tx
                .query_opt("SELECT 1 FROM owners WHERE owner_id = $1 AND closed_at IS NULL FOR UPDATE", &[&owner_id])
                .await
                .map_err(pg_error)?
                .is_none()
            {
                break;
            }
            let upper: Option<i64> = tx
                .query_opt(
                    "SELECT seq FROM events WHERE owner_id = $1 AND seq > $2 ORDER BY seq LIMIT 1 OFFSET $3",
                    &[&owner_id, &cursor, &(BATCH - 1)],
                )
                .await
                .map_err(pg_error)?
                .map(|r| r.get(0));
            let upper_bound = upper.unwrap_or(i64::MAX);
            let row = tx
                .query_one(
                    "WITH gone AS (
                       DELETE FROM events AS e
                       WHERE e.owner_id = $1 AND e.seq > $2 AND e.seq <= $3 AND e.stream_id IS NOT NULL
                         AND EXISTS (SELECT 1 FROM events AS newer
                                     WHERE newer.owner_id = $1 AND newer.stream_id = e.stream_id
                                       AND newer.event_id > e.event_id)
                       RETURNING e.bytes)
                     SELECT count(*), coalesce(sum(bytes), 0)::BIGINT FROM gone",
                    &[&owner_id, &cursor, &upper_bound],
                )
                .await
                .map_err(pg_error)?;
            let (n, bytes): (i64, i64) = (row.get(0), row.get(1));
            if n > 0 {
                tx.execute(
                    "UPDATE owners SET stored_bytes = greatest(0, stored_bytes - $2),
                                       event_count = greatest(0, event_count - $3)
                     WHERE owner_id = $1",
                    &[&owner_id, &bytes, &n],
                )
                .await
                .map_err(pg_error)?;
            }
            tx.commit().await.map_err(pg_error)?;
            store.added_total(-bytes);
            report.longest_batch_ms = report.longest_batch_ms.max(batch_started.elapsed().as_millis() as u64);
            report.deleted_events += n as u64;
            report.reclaimed_bytes += bytes as u64;
            match upper {
                Some(u) => cursor = u,
                None => break,
            }
        }
    }
    report.duration_ms = started.elapsed().as_millis() as u64;
    store.forget_totals();
    if report.complete {
        set_meta(&*client, "last_compaction_at", now).await?;
        set_meta(&*client, "last_compaction_deleted", &report.deleted_events.to_string()).await?;
        set_meta(&*client, "last_compaction_ms", &report.duration_ms.to_string()).await?;
    }
    Ok(report)
}

/// Deletes a closed owner's events, [`BATCH`] per statement (each its own transaction): its
/// counters were zeroed when it closed, so these rows no longer count anywhere.
/// Stops early (false) once `cancel` is set or `until` has passed; the next pass goes on.
pub(super) async fn purge_owner_log(
    client: &impl deadpool_postgres::GenericClient,
    owner_id: &str,
    cancel: &AtomicBool,
    until: Option<Instant>,
) -> Result<bool, StoreError> {
    loop {
        if cancel.load(Ordering::Relaxed) || until.is_some_and(|u| Instant::now() >= u) {
            return Ok(false);
        }
        let n = client
            .execute(
                "DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE owner_id = $1 ORDER BY seq LIMIT $2)",
                &[&owner_id, &BATCH],
            )
            .await
            .map_err(pg_error)?;
        if (n as i64) < BATCH {
            return Ok(true);
        }
    }
}
