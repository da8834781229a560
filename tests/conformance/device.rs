//! A device for the conformance suite: an engine on a named database — a file natively, an
//! OPFS file in the browser — with no network and a fixed clock.

use std::rc::Rc;

use simplysync::engine::io::{HttpRequest, HttpResponse, LocalFuture, ManualClock, Transport, TransportError};
use simplysync::engine::schema::{ColumnDef, ColumnType, SchemaDef, TableDef};
use simplysync::engine::{Engine, EngineConfig, EngineError, Env};
use simplysync::protocol::entropy::{random_bytes, OsEntropy};
use simplysync::protocol::{base64url, Json};

pub const T0: u64 = 1_764_504_000_000;
pub const KEY: &str = "sf1_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";
pub const OTHER_KEY: &str = "sf1_AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE";

struct NoNetwork;

impl Transport for NoNetwork {
    fn send(&self, _: HttpRequest) -> LocalFuture<'_, Result<HttpResponse, TransportError>> {
        Box::pin(async { Err(TransportError("no network in the conformance suite".into())) })
    }
}

pub fn schema() -> SchemaDef {
    SchemaDef {
        schema_version: 1,
        tables: vec![TableDef {
            name: "todos".into(),
            columns: vec![
                ColumnDef::new("title", ColumnType::Text),
                ColumnDef::new("done", ColumnType::Boolean),
                ColumnDef::new("position", ColumnType::Integer),
                ColumnDef::new("image", ColumnType::Blob),
                ColumnDef::new("meta", ColumnType::Json),
            ],
            merge: Default::default(),
            indexes: Vec::new(),
        }],
    }
}

/// A fresh database name.
pub fn unique_name(tag: &str) -> String {
    format!("{tag}-{}.db", base64url::encode(&random_bytes::<6>(&mut OsEntropy).unwrap()))
}

#[cfg(not(target_arch = "wasm32"))]
async fn connection(name: &str) -> rusqlite::Connection {
    // One directory per run (tests reopen databases by name); the first call removes those
    // of earlier runs.
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(|| crate::sweep::remove_dead_runs_dirs("simplysync-conformance-"));
    let dir = std::env::temp_dir().join(format!("simplysync-conformance-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    simplysync::store::open_path(dir.join(name).to_str().unwrap()).unwrap()
}

#[cfg(target_arch = "wasm32")]
async fn connection(name: &str) -> rusqlite::Connection {
    simplysync::store::opfs::open_database(name).await.unwrap()
}

pub struct Device {
    pub engine: Engine,
}

/// Opens the database `name` for `secret`.
pub async fn open_named(
    secret: &str,
    name: &str,
    schema: SchemaDef,
    relays: Vec<String>,
) -> Result<Device, EngineError> {
    let env = Env { transport: Rc::new(NoNetwork), clock: Rc::new(ManualClock::new(T0)), entropy: Box::new(OsEntropy) };
    let engine = Engine::open(connection(name).await, EngineConfig::new(secret, relays, schema), env)?;
    Ok(Device { engine })
}

/// A device on a fresh database.
pub async fn device() -> Device {
    open_named(KEY, &unique_name("conf"), schema(), vec![]).await.unwrap()
}

pub fn todo(id: &str, title: &str) -> Json {
    Json::object([("id", Json::from(id)), ("title", Json::from(title)), ("done", Json::Bool(false))])
}
