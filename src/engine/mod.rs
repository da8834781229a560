//! The sync engine: local store schema, mutations + outbox, seal/push/pull/apply with
//! row-level LWW, deferral and quarantine, purge queue, blobs, re-key and relay status.
//!
//! Contains no networking code and reads no time from the operating system: HTTP, the wall
//! clock and randomness come in through [`io`] traits, so the same code runs natively (tests,
//! CLI) and in a browser worker. It is single-threaded: state lives in `RefCell`s that are
//! never borrowed across an `await`, and sync passes are serialized by an async mutex.
//!
//! Order of use: [`Engine::open`] (schema migration, identity, clock) → mutations
//! ([`Engine::insert`], …, each one SQLite transaction with its outbox intent) → [`Engine::sync`]
//! (seal → per relay: backfill, blob chunks, push, pull + apply, purge queue) as often as the
//! driver likes.

pub mod driver;
pub mod error;
pub mod io;
pub mod live;
pub mod values;

/// The app's declared schema (kept in the store layer, which creates the tables).
pub use crate::store::schema;

mod app_sql;
mod apply;
mod backoff;
mod blobs;
mod columns;
mod events;
mod limits;
mod mutate;
mod opened;
mod pull;
mod purge;
mod push;
mod read;
mod rekey;
mod relay;
mod relay_api;
mod relay_set;
mod reports_json;
mod requests;
mod sent_ahead;
mod sorted;
mod sync;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use rusqlite::Connection;

pub use backoff::{retry_ceiling_ms, retry_delay_ms, MAX_RETRY_DELAY_MS, POLL_BASE_MS};
pub use driver::{Driver, DriverOptions};
pub use error::EngineError;
pub use events::{ChangeEvent, ChangeSource, Progress, RowChange};
pub use limits::{EngineOptions, DEFAULT_MAX_BLOB_BYTES, DEFAULT_MAX_EVENT_BYTES, DEFAULT_REQUEST_TIMEOUT_MS};
pub use live::{LiveInfo, LiveState, LiveStep};
pub use mutate::{Op, Written, WrittenRows};
pub use opened::{open_page, pack_openings, unpack_openings, PageToOpen};
pub use read::ListOptions;
pub use relay::{RelayErrorInfo, RelayState, RelayStatus, SetAsideInfo};
pub use requests::{Request, RECORD_ON_INTENT_MAX};
pub use sync::{
    PullTimings, RelayPassReport, SyncReport, SyncTrigger, MAX_PUSH_BYTES, MAX_RESEED_WINDOW_MS, RELAY_PASS_BUDGET_MS,
    RESEED_WINDOW_MS,
};

use crate::protocol::entropy::{random_bytes, Entropy};
use crate::protocol::hlc::validate_device_id;
use crate::protocol::json_write::ToJson;
use crate::protocol::{base64url, Hlc, HlcClock, Identity, Secret};
use crate::store::{rows, system, StoreError};
use events::Listeners;
use io::{Clock, PageOpener, Transport};
use relay::RelayRuntime;
use schema::{Schema, SchemaDef};

/// What an app passes to open an engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Recovery phrase or `sf1_` key.
    pub secret: String,
    /// Relay base URLs. Each URL is an opaque key: `https://r.example` and
    /// `https://r.example/` are different relays. Relays added or removed at run time
    /// ([`Engine::add_relay`], [`Engine::remove_relay`]) are remembered on top of this list.
    /// `None` uses the set the database was last opened with (tools that only read or write).
    pub relays: Option<Vec<String>>,
    /// The app's schema.
    pub schema: SchemaDef,
    /// Limits and timeouts.
    pub options: EngineOptions,
}

impl EngineConfig {
    /// A configuration with the default [`EngineOptions`].
    pub fn new(secret: impl Into<String>, relays: Vec<String>, schema: SchemaDef) -> EngineConfig {
        EngineConfig { secret: secret.into(), relays: Some(relays), schema, options: EngineOptions::default() }
    }

    /// A configuration that keeps the relay set stored in the database.
    pub fn with_stored_relays(secret: impl Into<String>, schema: SchemaDef) -> EngineConfig {
        EngineConfig { secret: secret.into(), relays: None, schema, options: EngineOptions::default() }
    }
}

/// The engine's I/O.
pub struct Env {
    /// HTTP.
    pub transport: Rc<dyn Transport>,
    /// Wall clock.
    pub clock: Rc<dyn Clock>,
    /// Randomness (nonces, ids, retry jitter).
    pub entropy: Box<dyn Entropy>,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Env")
    }
}

struct Keys {
    secret: Secret,
    identity: Identity,
}

/// The sync engine over one SQLite database.
pub struct Engine {
    db: RefCell<Connection>,
    schema: Schema,
    options: EngineOptions,
    keys: RefCell<Keys>,
    device_id: String,
    clock: RefCell<HlcClock>,
    relays: RefCell<Vec<RelayRuntime>>,
    /// Registration tokens by relay URL (`REGISTRATION=token` relays; see [`Engine::set_registration_token`]).
    /// A list, not a map: a handful of relays at most, and no tree map's code in the module.
    registration_tokens: RefCell<Vec<(String, String)>>,
    transport: Rc<dyn Transport>,
    wall: Rc<dyn Clock>,
    rng: RefCell<Box<dyn Entropy>>,
    listeners: Listeners,
    sync_lock: futures_util::lock::Mutex<()>,
    /// An automatic pass is waiting for the running one (at most one is ever queued).
    pass_waiting: Cell<Option<SyncTrigger>>,
    schema_retry_pending: Cell<bool>,
    /// Whether `_sync_purged` may hold rows (skips a lookup per applied event when not).
    purge_records: Cell<bool>,
    /// Whether `_sync_kept` may hold values (skips a lookup per sealed or applied row when not).
    kept_any: Cell<bool>,
    /// Whether `_sync_clocks` may hold rows (skips a removal per whole-row write when not).
    clocks_any: Cell<bool>,
    /// Time spent classifying (decrypting) events of the page being applied, for timings.
    decrypt_ms: Cell<f64>,
    /// Events classified since the page began (one in [`apply::CLASSIFY_SAMPLE`] is timed).
    classified: Cell<u32>,
    /// Events of the page being applied classified from a page opener's opening, for timings.
    opened_used: Cell<u64>,
    /// Sends pulls ahead and opens their pages on another thread, if the host has one.
    opener: RefCell<Option<Rc<dyn PageOpener>>>,
    /// The request id of the [`Engine::once`] call running, recorded with its effect.
    request: RefCell<Option<String>>,
    /// When recorded request ids were last swept for expiry (engine clock, ms; `None`: not yet).
    requests_swept_at: Cell<Option<u64>>,
    /// When the last pass ended (engine clock, ms; 0 before the first).
    last_pass_at: Cell<u64>,
    /// What the app's SQL may read (app_sql.rs).
    app_sql: app_sql::AppSql,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("owner_id", &self.owner_id()).field("device_id", &self.device_id).finish()
    }
}

/// The schema the database was last opened with, if any (lets tools reopen an app's database).
pub fn stored_schema(conn: &Connection) -> Result<Option<SchemaDef>, EngineError> {
    Ok(system::meta_get_if_table(conn, "schema")?
        .and_then(|s| crate::protocol::json_fields::read_json(s.as_bytes(), "schema").ok()))
}

pub use rekey::stored_wrapped_secret;

/// Checks a relay URL: http or https, no whitespace.
pub fn validate_relay_url(url: &str) -> Result<(), EngineError> {
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    let ok = rest.is_some_and(|r| !r.is_empty()) && !url.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(EngineError::InvalidRelay { url: url.into(), reason: "expected an http:// or https:// base URL".into() })
    }
}

impl Engine {
    /// Opens an engine on `conn`: checks that the database belongs to the secret's owner (or
    /// finishes a re-key hand-over, see [`Engine::rekey`]), creates/extends the tables, resumes
    /// the device's clock and reconciles the relay set. Makes no request. A secret of another
    /// owner fails with `OWNER_MISMATCH` before any app table is touched.
    pub fn open(mut conn: Connection, config: EngineConfig, mut env: Env) -> Result<Engine, EngineError> {
        config.options.validate()?;
        let schema_json = config.schema.to_json_text();
        let schema = Schema::new(config.schema)?;
        let secret = Secret::parse(&config.secret)?;
        let identity = secret.identity();
        let relays = config.relays.as_deref().map(relay_set::normalize).transpose()?;
        conn.set_prepared_statement_cache_capacity(256);
        let app_sql = app_sql::AppSql::install(&mut conn)?;
        system::create_system_tables(&conn)?;
        let stored_owner = system::meta_get(&conn, "owner_id")?;
        let handover = rekey::Handover::load(&conn)?;
        let opening = rekey::opening_as(stored_owner.as_deref(), handover.as_ref(), identity.owner_id())?;
        let prior = stored_schema(&conn)?;
        system::migrate_app_tables(&mut conn, &schema, prior.as_ref())?;
        system::meta_set(&conn, "schema", &schema_json)?;
        if stored_owner.is_none() {
            system::meta_set(&conn, "owner_id", identity.owner_id())?;
        }
        let device_id = match system::meta_get(&conn, "device_id")? {
            Some(d) => d,
            None => {
                let d = base64url::encode(
                    &random_bytes::<16>(env.entropy.as_mut()).map_err(crate::protocol::CryptoError::from)?,
                );
                system::meta_set(&conn, "device_id", &d)?;
                d
            }
        };
        validate_device_id(&device_id).map_err(|e| {
            StoreError::Corrupt(format!("the stored device id {device_id:?} is not a valid device id: {e}"))
        })?;
        let last_clock = system::meta_get(&conn, "hlc")?.and_then(|s| Hlc::parse(&s).ok());
        let last_row = rows::max_updated_at(&conn, schema.tables())?.and_then(|s| Hlc::parse(&s).ok());
        let last_queued = crate::store::outbox::max_event_id(&conn)?.and_then(|s| Hlc::parse(&s).ok());
        let last = last_clock.max(last_row).max(last_queued);
        let clock = HlcClock::resume(&device_id, last.as_ref()).expect("device id validated");
        let purge_records = crate::store::purged::any(&conn)?;
        let kept_any = crate::store::kept::any(&conn)?;
        let clocks_any = crate::store::clocks::any(&conn)?;
        let engine = Engine {
            db: RefCell::new(conn),
            schema,
            options: config.options,
            keys: RefCell::new(Keys { secret, identity }),
            device_id,
            clock: RefCell::new(clock),
            relays: RefCell::new(Vec::new()),
            registration_tokens: RefCell::new(Vec::new()),
            transport: env.transport,
            wall: env.clock,
            rng: RefCell::new(env.entropy),
            listeners: Listeners::default(),
            sync_lock: futures_util::lock::Mutex::new(()),
            pass_waiting: Cell::new(None),
            schema_retry_pending: Cell::new(true),
            purge_records: Cell::new(purge_records),
            kept_any: Cell::new(kept_any),
            clocks_any: Cell::new(clocks_any),
            decrypt_ms: Cell::new(0.0),
            classified: Cell::new(0),
            opened_used: Cell::new(0),
            opener: RefCell::new(None),
            request: RefCell::new(None),
            requests_swept_at: Cell::new(None),
            last_pass_at: Cell::new(0),
            app_sql,
        };
        engine.reconcile_relays(relays.as_deref())?;
        engine.finish_handover(opening, handover)?;
        Ok(engine)
    }

    /// Lets `opener` send the pulls sent ahead and open their pages on its own thread (the
    /// browser's opener worker); `None` goes back to opening everything here.
    pub fn set_page_opener(&self, opener: Option<Rc<dyn PageOpener>>) {
        *self.opener.borrow_mut() = opener;
    }

    /// The public owner id.
    pub fn owner_id(&self) -> String {
        self.keys.borrow().identity.owner_id().to_owned()
    }

    /// This device's id.
    pub fn device_id(&self) -> &str {
        &self.device_id
    }

    /// The secret, for showing the recovery phrase to its owner. The only API that reveals it.
    pub fn recovery_secret(&self) -> String {
        self.keys.borrow().secret.expose().to_owned()
    }

    /// The declared schema.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The limits and timeouts this engine was opened with.
    pub fn options(&self) -> EngineOptions {
        self.options
    }

    fn now(&self) -> u64 {
        self.wall.now_ms()
    }

    /// When the last sync pass ended (engine clock, ms; 0 before the first).
    pub fn last_pass_at(&self) -> u64 {
        self.last_pass_at.get()
    }

    /// A random number (retry jitter); 0 if the platform has no randomness.
    fn random_u64(&self) -> u64 {
        u64::from_le_bytes(random_bytes::<8>(self.rng.borrow_mut().as_mut()).unwrap_or([0; 8]))
    }

    fn identity(&self) -> Identity {
        self.keys.borrow().identity.clone()
    }

    /// Runs `f` in one SQLite transaction on the engine's connection.
    fn write<T>(&self, f: impl FnOnce(&rusqlite::Connection) -> Result<T, EngineError>) -> Result<T, EngineError> {
        let db = self.db.borrow_mut();
        let tx = crate::store::write_tx::WriteTx::begin(&db)?;
        let out = f(tx.conn())?;
        tx.commit()?;
        Ok(out)
    }

    /// Deletes the intents every relay in `relays` acknowledged, and saves the clock in the
    /// same transaction: mutations do not save it (their HLCs stay in rows and intents, which
    /// `open` resumes from), and a pruned intent's row may be in a table a later schema drops.
    fn prune_intents(&self, tx: &Connection, relays: &[String]) -> Result<(), EngineError> {
        crate::store::outbox::prune(tx, relays)?;
        self.persist_clock(tx)
    }

    fn persist_clock(&self, conn: &Connection) -> Result<(), EngineError> {
        let (ms, counter) = self.clock.borrow().last();
        let hlc = Hlc { ms, counter, device_id: self.device_id.clone() };
        system::meta_set(conn, "hlc", &hlc.to_string())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relay_urls_must_be_http_or_https_with_a_host_and_no_whitespace() {
        for ok in ["http://a", "https://relay.example/v2", "http://127.0.0.1:8787"] {
            assert!(validate_relay_url(ok).is_ok(), "{ok}");
        }
        for bad in ["https://", "http://", "ftp://x", "relay.example", "https://a b", "https://a\n", "https://a\u{7}"] {
            assert_eq!(validate_relay_url(bad).unwrap_err().code(), "INVALID_RELAY", "{bad:?}");
        }
    }
}
