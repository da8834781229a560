//! The PostgreSQL backend's tables and their versioned migrations. Every relay process runs
//! [`migrate`] on start; an advisory lock held for the migration's transaction makes concurrent
//! starts take turns, and `schema_migrations` records what ran.

use deadpool_postgres::GenericClient;

use super::pg_error;
use crate::store::StoreError;

/// Advisory lock keys (one namespace per purpose; arbitrary constants).
pub(super) const LOCK_MIGRATE: i64 = 0x5353_5f4d_4947;
pub(super) const LOCK_COMPACT: i64 = 0x5353_5f43_4d50;
pub(super) const LOCK_REGISTER: i64 = 0x5353_5f52_4547;

/// `(version, SQL)`, applied in order, each once.
const MIGRATIONS: &[(i32, &str)] = &[
    (
        1,
        "CREATE TABLE relay_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
     CREATE SEQUENCE event_seq AS BIGINT MINVALUE 1;
     CREATE TABLE owners (
         owner_id     TEXT PRIMARY KEY,
         token_hash   TEXT NOT NULL,
         created_at   TEXT NOT NULL,
         closed_at    TEXT,
         stored_bytes BIGINT NOT NULL DEFAULT 0,
         head_seq     BIGINT NOT NULL DEFAULT 0,
         event_count  BIGINT NOT NULL DEFAULT 0,
         stream_count BIGINT NOT NULL DEFAULT 0,
         blob_count   BIGINT NOT NULL DEFAULT 0
     );
     CREATE TABLE events (
         seq       BIGINT PRIMARY KEY,
         owner_id  TEXT NOT NULL,
         event_id  TEXT COLLATE \"C\" NOT NULL,
         stream_id TEXT COLLATE \"C\",
         envelope  TEXT NOT NULL,
         bytes     BIGINT NOT NULL,
         CONSTRAINT events_owner_event UNIQUE (owner_id, event_id)
     );
     CREATE INDEX events_by_owner_seq ON events (owner_id, seq);
     CREATE INDEX events_by_owner_stream ON events (owner_id, stream_id, event_id) WHERE stream_id IS NOT NULL;
     CREATE TABLE blobs (
         owner_id   TEXT NOT NULL,
         hash       TEXT NOT NULL,
         data       BYTEA,
         bytes      BIGINT NOT NULL,
         created_at TEXT NOT NULL,
         PRIMARY KEY (owner_id, hash)
     );",
    ),
    (
        2,
        // The orphan sweep's claims and the closed owners whose objects are gone (objects.rs).
        "CREATE TABLE object_claims (
             owner_id   TEXT NOT NULL,
             hash       TEXT NOT NULL,
             expires_at TIMESTAMPTZ NOT NULL,
             PRIMARY KEY (owner_id, hash)
         );
         CREATE TABLE swept_owners (owner_id TEXT PRIMARY KEY, swept_at TEXT NOT NULL);",
    ),
];

/// Brings the database to the newest schema and returns its epoch (created with the
/// database's first migration, kept for its life).
pub(super) async fn migrate(
    client: &mut deadpool_postgres::Object,
    fresh_epoch: &str,
    now: &str,
) -> Result<String, StoreError> {
    let tx = client.transaction().await.map_err(pg_error)?;
    // A migration (or waiting for another process's) may take longer than a request.
    tx.batch_execute("SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0").await.map_err(pg_error)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_MIGRATE]).await.map_err(pg_error)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)",
    )
    .await
    .map_err(pg_error)?;
    let applied: Vec<i32> = tx
        .query("SELECT version FROM schema_migrations", &[])
        .await
        .map_err(pg_error)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let known = MIGRATIONS.iter().map(|(v, _)| *v).max().unwrap_or(0);
    if let Some(newer) = applied.iter().copied().filter(|v| *v > known).max() {
        return Err(StoreError::Setup(format!(
            "the database has schema version {newer}, migrated by a newer relay; this relay knows up to {known}"
        )));
    }
    for (version, sql) in MIGRATIONS {
        if applied.contains(version) {
            continue;
        }
        tx.batch_execute(sql).await.map_err(pg_error)?;
        tx.execute("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)", &[version, &now])
            .await
            .map_err(pg_error)?;
        tracing::info!(version, "database migration applied");
    }
    for (key, value) in [("epoch", fresh_epoch), ("created_at", now)] {
        tx.execute("INSERT INTO relay_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING", &[&key, &value])
            .await
            .map_err(pg_error)?;
    }
    let epoch: String =
        tx.query_one("SELECT value FROM relay_meta WHERE key = 'epoch'", &[]).await.map_err(pg_error)?.get(0);
    tx.commit().await.map_err(pg_error)?;
    Ok(epoch)
}

/// Reads a `relay_meta` value.
pub(super) async fn meta(client: &impl GenericClient, key: &str) -> Result<Option<String>, StoreError> {
    Ok(client
        .query_opt("SELECT value FROM relay_meta WHERE key = $1", &[&key])
        .await
        .map_err(pg_error)?
        .map(|r| r.get(0)))
}

/// Writes a `relay_meta` value.
pub(super) async fn set_meta(client: &impl GenericClient, key: &str, value: &str) -> Result<(), StoreError> {
    client
        .execute(
            "INSERT INTO relay_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            &[&key, &value],
        )
        .await
        .map_err(pg_error)?;
    Ok(())
}
