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

pub mod error;
pub mod io;
pub mod schema;
pub mod values;

mod apply;
mod blobs;
mod events;
mod mutate;
mod purge;
mod read;
mod rekey;
mod relay;
mod relay_api;
mod sync;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use rusqlite::Connection;

pub use error::EngineError;
pub use events::{ChangeEvent, ChangeSource, Progress, RowChange};
pub use mutate::Op;
pub use read::ListOptions;
pub use relay::{RelayErrorInfo, RelayState, RelayStatus};
pub use sync::{PullTimings, RelayPassReport, SyncReport, SyncTrigger};

use crate::protocol::entropy::{random_bytes, Entropy};
use crate::protocol::hlc::validate_device_id;
use crate::protocol::{base64url, Hlc, HlcClock, Identity, Secret};
use crate::store::{rows, system};
use events::Listeners;
use io::{Clock, Transport};
use relay::RelayRuntime;
use schema::{Schema, SchemaDef};

/// What an app passes to open an engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Recovery phrase or `sf1_` key.
    pub secret: String,
    /// Relay base URLs. Each URL is an opaque key: `https://r.example` and
    /// `https://r.example/` are different relays.
    pub relays: Vec<String>,
    /// The app's schema.
    pub schema: SchemaDef,
}

/// The engine's I/O.
pub struct Env {
    /// HTTP.
    pub transport: Rc<dyn Transport>,
    /// Wall clock.
    pub clock: Rc<dyn Clock>,
    /// Randomness (nonces, ids).
    pub entropy: Box<dyn Entropy>,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Env")
    }
}

/// Points where tests make the engine fail as a crash would (never set in production).
#[derive(Debug, Default)]
pub struct Faults {
    /// Fail right after a pulled page committed, before its cursor is saved.
    pub crash_after_page_commit: bool,
}

struct Keys {
    secret: Secret,
    identity: Identity,
}

/// The sync engine over one SQLite database.
pub struct Engine {
    db: RefCell<Connection>,
    schema: Schema,
    keys: RefCell<Keys>,
    device_id: String,
    clock: RefCell<HlcClock>,
    relays: RefCell<Vec<RelayRuntime>>,
    transport: Rc<dyn Transport>,
    wall: Rc<dyn Clock>,
    rng: RefCell<Box<dyn Entropy>>,
    listeners: Listeners,
    sync_lock: futures_util::lock::Mutex<()>,
    schema_retry_pending: Cell<bool>,
    /// Time spent classifying (decrypting) events of the page being applied, for timings.
    decrypt_ms: Cell<f64>,
    /// Test-only fault injection.
    pub faults: RefCell<Faults>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("owner_id", &self.owner_id()).field("device_id", &self.device_id).finish()
    }
}

/// The schema the database was last opened with, if any (lets tools reopen an app's database).
pub fn stored_schema(conn: &Connection) -> Result<Option<SchemaDef>, EngineError> {
    let exists: bool = conn
        .query_row("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sync_meta'", [], |_| Ok(true))
        .unwrap_or(false);
    if !exists {
        return Ok(None);
    }
    Ok(system::meta_get(conn, "schema")?.and_then(|s| serde_json::from_str(&s).ok()))
}

/// Checks a relay URL: http or https, no whitespace.
pub fn validate_relay_url(url: &str) -> Result<(), EngineError> {
    let ok = (url.starts_with("http://") || url.starts_with("https://"))
        && url.len() > "https://".len()
        && !url.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(EngineError::InvalidRelay { url: url.into(), reason: "expected an http:// or https:// base URL".into() })
    }
}

impl Engine {
    /// Opens an engine on `conn`: creates/extends the tables, checks that the database belongs
    /// to the secret's owner, and resumes the device's clock. Makes no request.
    pub fn open(mut conn: Connection, config: EngineConfig, mut env: Env) -> Result<Engine, EngineError> {
        let schema_json = serde_json::to_string(&config.schema).expect("schemas serialize");
        let schema = Schema::new(config.schema)?;
        let secret = Secret::parse(&config.secret)?;
        let identity = secret.identity();
        for url in &config.relays {
            validate_relay_url(url)?;
        }
        conn.set_prepared_statement_cache_capacity(256);
        system::create_system_tables(&conn)?;
        system::migrate_app_tables(&mut conn, &schema)?;
        system::meta_set(&conn, "schema", &schema_json)?;
        match system::meta_get(&conn, "owner_id")? {
            Some(stored) if stored != identity.owner_id() => {
                return Err(EngineError::OwnerMismatch { stored, given: identity.owner_id().to_owned() });
            }
            Some(_) => {}
            None => system::meta_set(&conn, "owner_id", identity.owner_id())?,
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
        validate_device_id(&device_id)
            .map_err(|e| EngineError::Store(crate::store::StoreError::Opfs(e.to_string())))?;
        let last_clock = system::meta_get(&conn, "hlc")?.and_then(|s| Hlc::parse(&s).ok());
        let last_row = rows::max_updated_at(&conn, schema.tables())?.and_then(|s| Hlc::parse(&s).ok());
        let last_queued = crate::store::outbox::max_event_id(&conn)?.and_then(|s| Hlc::parse(&s).ok());
        let last = last_clock.max(last_row).max(last_queued);
        let clock = HlcClock::resume(&device_id, last.as_ref()).expect("device id validated");
        let mut relays = Vec::new();
        for url in &config.relays {
            let mut r = RelayRuntime::new(url);
            r.last_sync_at = system::meta_get(&conn, &format!("synced:{url}"))?.and_then(|t| t.parse().ok());
            relays.push(r);
        }
        Ok(Engine {
            db: RefCell::new(conn),
            schema,
            keys: RefCell::new(Keys { secret, identity }),
            device_id,
            clock: RefCell::new(clock),
            relays: RefCell::new(relays),
            transport: env.transport,
            wall: env.clock,
            rng: RefCell::new(env.entropy),
            listeners: Listeners::default(),
            sync_lock: futures_util::lock::Mutex::new(()),
            schema_retry_pending: Cell::new(true),
            decrypt_ms: Cell::new(0.0),
            faults: RefCell::new(Faults::default()),
        })
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

    /// Configured relay URLs.
    pub fn relay_urls(&self) -> Vec<String> {
        self.relays.borrow().iter().map(|r| r.url.clone()).collect()
    }

    fn now(&self) -> u64 {
        self.wall.now_ms()
    }

    fn identity(&self) -> Identity {
        self.keys.borrow().identity.clone()
    }

    /// Runs `f` in one SQLite transaction on the engine's connection.
    fn write<T>(&self, f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, EngineError>) -> Result<T, EngineError> {
        let mut db = self.db.borrow_mut();
        let tx = db.transaction()?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    fn persist_clock(&self, conn: &Connection) -> Result<(), EngineError> {
        let (ms, counter) = self.clock.borrow().last();
        let hlc = Hlc { ms, counter, device_id: self.device_id.clone() };
        system::meta_set(conn, "hlc", &hlc.to_string())?;
        Ok(())
    }
}
