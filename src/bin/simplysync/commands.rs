use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;

use clap::{Args, Parser, Subcommand};
use simplysync::engine::schema::SchemaDef;
use simplysync::engine::{stored_schema, Driver, DriverOptions, Engine, EngineConfig, Env, ListOptions, SyncTrigger};
use simplysync::native::{HttpTransport, SystemClock, TokioTimer};
use simplysync::protocol::entropy::OsEntropy;
use simplysync::protocol::{create_mnemonic, create_recovery_key, Secret};

use crate::writes;

/// Most passes `sync` and `restore` run in a row while a relay has work left (each pass takes at
/// most a million events or a minute per relay).
const MAX_PASSES: u32 = 10_000;

#[derive(Parser)]
#[command(name = "simplysync", version, about = "SimplySync command line: identities, and sync without a browser")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
pub(crate) struct Store {
    /// The SQLite database file.
    #[arg(long)]
    db: PathBuf,
    /// Recovery phrase or sf1_ key.
    #[arg(long, env = "SIMPLYSYNC_SECRET", hide_env_values = true)]
    secret: String,
    /// Schema file (JSON: {"schemaVersion": 1, "tables": [{"name", "columns": [{"name", "type"}]}]});
    /// defaults to the schema the database was last opened with.
    #[arg(long)]
    schema: Option<PathBuf>,
}

#[derive(Args)]
struct Relays {
    /// A relay base URL (repeatable); defaults to the relays the database was last used with.
    #[arg(long = "relay", env = "SIMPLYSYNC_RELAYS", value_delimiter = ',')]
    relays: Vec<String>,
    /// Each request's deadline, in ms.
    #[arg(long, default_value_t = simplysync::engine::DEFAULT_REQUEST_TIMEOUT_MS)]
    timeout_ms: u32,
    /// URL=TOKEN: the registration token a relay run with REGISTRATION=token needs before it
    /// registers this owner (repeatable; sent to that relay only).
    #[arg(
        long = "registration-token",
        env = "SIMPLYSYNC_REGISTRATION_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    registration_tokens: Vec<String>,
}

impl Relays {
    fn list(&self) -> Option<Vec<String>> {
        (!self.relays.is_empty()).then(|| self.relays.clone())
    }

    /// Opens the engine on `store` with these relays and their registration tokens.
    fn open(&self, store: &Store) -> Result<Engine, String> {
        let engine = open(store, self.list(), self.timeout_ms)?;
        for pair in &self.registration_tokens {
            let (url, token) = pair
                .rsplit_once('=')
                .filter(|(url, token)| !url.trim().is_empty() && !token.trim().is_empty())
                .ok_or("--registration-token takes URL=TOKEN")?;
            engine.set_registration_token(url.trim(), Some(token.trim().to_owned()));
        }
        Ok(engine)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Print the identity a secret derives: ownerId and relayAuth as JSON.
    Identity {
        /// A recovery phrase or an sf1_ key (quote a phrase).
        #[arg(env = "SIMPLYSYNC_SECRET", hide_env_values = true)]
        secret: String,
        /// Also print dataKey and streamKey in hex (diagnostics; these are secrets).
        #[arg(long)]
        show_keys: bool,
    },
    /// Mint a new sf1_ recovery key.
    NewKey,
    /// Mint a new 12-word recovery phrase.
    NewPhrase,
    /// Sync with the relays: once with --once, else until interrupted — at once on the live
    /// notices of relays that offer them, and every --interval-ms (every minute while every
    /// relay's live channel is healthy). Prints each status change as a JSON line.
    Sync {
        #[command(flatten)]
        store: Store,
        #[command(flatten)]
        relays: Relays,
        /// One pass, then exit.
        #[arg(long)]
        once: bool,
        /// Pause between passes.
        #[arg(long, default_value_t = 5000)]
        interval_ms: u64,
        /// Poll only: open no live channel.
        #[arg(long)]
        no_live: bool,
    },
    /// Fill a new (empty) database from the relays: a restore on a new device.
    Restore {
        #[command(flatten)]
        store: Store,
        #[command(flatten)]
        relays: Relays,
    },
    /// Relay statuses (state, pending events, account figures) as JSON.
    Status {
        #[command(flatten)]
        store: Store,
        #[command(flatten)]
        relays: Relays,
    },
    /// Current rows of every table as JSON.
    Export {
        #[command(flatten)]
        store: Store,
        /// Include soft-deleted rows.
        #[arg(long)]
        include_deleted: bool,
    },
    #[command(flatten)]
    Write(writes::Write),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start the async runtime: {e}")),
    };
    match runtime.block_on(run(cli.command)) {
        Ok(out) => {
            if !out.is_empty() {
                println!("{out}");
            }
            ExitCode::SUCCESS
        }
        Err(msg) => fail(msg),
    }
}

fn fail(msg: String) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::from(2)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn pretty(v: &impl serde::Serialize) -> Result<String, String> {
    serde_json::to_string_pretty(v).map_err(|e| e.to_string())
}

/// The events the engine holds back (deferred), grouped by reason and what it names (a table,
/// a column, a schema version): `[{reason, detail, count}]`. Each group is also told on stderr,
/// so a sync or restore that left events waiting says which and why.
fn deferred_summary(engine: &Engine) -> Result<Vec<serde_json::Value>, String> {
    let mut counts: std::collections::BTreeMap<(String, String), u64> = std::collections::BTreeMap::new();
    for held in engine.deferred().map_err(|e| e.to_string())? {
        *counts.entry((held.reason, held.detail)).or_default() += 1;
    }
    let groups: Vec<(String, String, u64)> = counts.into_iter().map(|((r, d), n)| (r, d, n)).collect();
    // At most this many lines on stderr (a relay may send thousands of distinct details).
    const TOLD: usize = 20;
    for (reason, detail, count) in groups.iter().take(TOLD) {
        eprintln!("{count} event(s) wait: {reason} ({detail})");
    }
    if groups.len() > TOLD {
        eprintln!("… and {} more kinds of waiting events (the JSON output lists them all)", groups.len() - TOLD);
    }
    Ok(groups
        .into_iter()
        .map(|(reason, detail, count)| serde_json::json!({"reason": reason, "detail": detail, "count": count}))
        .collect())
}

/// Opens the engine on `store`'s database; `relays: None` keeps the relays stored there.
pub(crate) fn open(store: &Store, relays: Option<Vec<String>>, timeout_ms: u32) -> Result<Engine, String> {
    let path = store.db.to_str().ok_or("the --db path is not UTF-8")?;
    let conn = simplysync::store::open_path(path).map_err(|e| format!("{}: {e}", store.db.display()))?;
    let schema: SchemaDef = match &store.schema {
        Some(file) => {
            let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
            simplysync::protocol::json_fields::read_json(text.as_bytes(), "schema")
                .map_err(|e| format!("{}: not a schema: {e}", file.display()))?
        }
        None => {
            stored_schema(&conn).map_err(|e| e.to_string())?.unwrap_or(SchemaDef { schema_version: 1, tables: vec![] })
        }
    };
    let transport = HttpTransport::new().map_err(|e| e.to_string())?;
    let env = Env { transport: Rc::new(transport), clock: Rc::new(SystemClock), entropy: Box::new(OsEntropy) };
    let mut config = EngineConfig::with_stored_relays(store.secret.clone(), schema);
    config.relays = relays;
    config.options.request_timeout_ms = timeout_ms;
    Engine::open(conn, config, env).map_err(|e| format!("{} ({})", e, e.code()))
}

async fn run(command: Command) -> Result<String, String> {
    match command {
        Command::Identity { secret, show_keys } => {
            let secret = Secret::parse(&secret).map_err(|e| e.to_string())?;
            let id = secret.identity();
            let mut out = serde_json::json!({
                "kind": match secret { Secret::Mnemonic(_) => "mnemonic", Secret::RecoveryKey(_) => "sf1" },
                "ownerId": id.owner_id(),
                "relayAuth": id.relay_auth(),
            });
            if show_keys {
                out["dataKey"] = hex(id.data_key()).into();
                out["streamKey"] = hex(id.stream_key()).into();
            }
            pretty(&out)
        }
        Command::NewKey => create_recovery_key(&mut OsEntropy).map_err(|e| e.to_string()),
        Command::NewPhrase => create_mnemonic(&mut OsEntropy).map_err(|e| e.to_string()),
        Command::Sync { store, relays, once, interval_ms, no_live } => {
            let engine = relays.open(&store)?;
            if once {
                let report = engine.sync_all(SyncTrigger::Manual, MAX_PASSES).await.map_err(|e| e.to_string())?;
                deferred_summary(&engine)?;
                let failed = report.relays.iter().any(|r| r.error.is_some());
                let text = pretty(&report)?;
                return if failed { Err(format!("a relay failed:\n{text}")) } else { Ok(text) };
            }
            // The engine's driver: passes at start, on the poll timer and on live notices.
            // Every status change is printed as one JSON line.
            let engine = Rc::new(engine);
            let last = std::cell::RefCell::new(String::new());
            engine.on_status(move |statuses| {
                if let Ok(line) = serde_json::to_string(&statuses) {
                    if *last.borrow() != line {
                        println!("{line}");
                        *last.borrow_mut() = line;
                    }
                }
            });
            let options = DriverOptions { interval_ms, live: !no_live };
            let driver = Driver::new(engine.clone(), Rc::new(TokioTimer), options, None);
            let run = driver.clone().run();
            tokio::pin!(run);
            tokio::select! {
                () = &mut run => {}
                _ = tokio::signal::ctrl_c() => {
                    driver.stop();
                    run.await;
                }
            }
            Ok(String::new())
        }
        Command::Restore { store, relays } => {
            let schema_given = store.schema.is_some();
            let engine = relays.open(&store)?;
            if engine.relay_urls().is_empty() {
                return Err("restore needs a relay: pass --relay URL".into());
            }
            // (Only the engine's own `blob` table: no app schema was given or stored.)
            if !schema_given && engine.schema().tables().count() == 1 {
                return Err("restore into a new database needs the app's schema: pass --schema FILE (without it \
                            every event would wait for tables this database does not declare)"
                    .into());
            }
            let opts = ListOptions { include_deleted: true, limit: Some(1), ..Default::default() };
            let mut has_rows = false;
            for t in engine.schema().tables() {
                has_rows |= !engine.list(&t.name, &opts).map_err(|e| e.to_string())?.is_empty();
            }
            if has_rows {
                return Err("restore fills a new database; this one already has rows (use sync)".into());
            }
            let report = engine.sync_all(SyncTrigger::Manual, MAX_PASSES).await.map_err(|e| e.to_string())?;
            if let Some(r) = report.relays.iter().find(|r| r.error.is_some()) {
                return Err(format!(
                    "restore from {} failed: {}",
                    r.url,
                    r.error.as_ref().map(|e| e.message.as_str()).unwrap_or("")
                ));
            }
            let received: u64 = report.relays.iter().map(|r| r.received).sum();
            let held = deferred_summary(&engine)?;
            let deferred: u64 = held.iter().map(|h| h["count"].as_u64().unwrap_or(0)).sum();
            pretty(&serde_json::json!({
                "ownerId": engine.owner_id(),
                "eventsReceived": received,
                "deferred": deferred,
                "deferredEvents": held,
            }))
        }
        Command::Status { store, relays } => {
            let engine = relays.open(&store)?;
            pretty(&engine.relay_statuses().await.map_err(|e| e.to_string())?)
        }
        Command::Export { store, include_deleted } => {
            let engine = open(&store, None, simplysync::engine::DEFAULT_REQUEST_TIMEOUT_MS)?;
            let opts = ListOptions { include_deleted, ..Default::default() };
            let mut out = serde_json::Map::new();
            for t in engine.schema().tables() {
                let rows = engine.list(&t.name, &opts).map_err(|e| e.to_string())?;
                out.insert(t.name.clone(), rows.iter().map(|r| r.to_serde()).collect());
            }
            pretty(&out)
        }
        Command::Write(w) => writes::run(w),
    }
}
