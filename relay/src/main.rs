//! `simplysync-relay` — serve (default) or run one compaction pass and exit.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use simplysync_relay::config::{Config, LogFormat, SETTINGS};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(name = "simplysync-relay", version, about = "SimplySync relay: stores ciphertext, serves it back in order")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (the default).
    Serve,
    /// Run log compaction once on DB_PATH and exit (safe while a relay serves the same file).
    Compact,
    /// Give the database at DB_PATH a new epoch (after restoring it from a backup): every
    /// device re-uploads what it holds. Stop the relay first.
    RotateEpoch,
    /// Copy a SQLite relay database into the empty PostgreSQL database at DATABASE_URL, keeping
    /// its epoch and seqs (devices' cursors stay valid). Stop the SQLite relay first.
    ImportSqlite {
        /// The SQLite database file to copy.
        #[arg(long)]
        from: std::path::PathBuf,
    },
    /// Make an Ed25519 key pair for REGISTRATION=token: prints {"publicKey", "signingKey"}.
    /// The public key goes in REGISTRATION_KEYS; keep the signing key on the app's server.
    RegistrationKey,
    /// Sign a registration token with the signing key in FILE (as `registration-key` printed
    /// it): what the app's server hands a signed-in user's engine. Prints the token.
    RegistrationToken {
        /// File holding the signing key (base64url).
        #[arg(long)]
        signing_key_file: std::path::PathBuf,
        /// Seconds the token stays valid (keep it short: a token registers owners until then).
        #[arg(long, default_value_t = 600)]
        ttl_secs: u64,
        /// Valid for this owner id only (else for any owner until it expires).
        #[arg(long)]
        owner: Option<String>,
    },
}

/// `registration-key` and `registration-token`: they need no configuration.
fn registration_command(command: &Command) -> Option<Result<String, String>> {
    use simplysync_relay::registration::SigningKey;
    match command {
        Command::RegistrationKey => {
            Some(SigningKey::generate().map(|(key, seed)| {
                serde_json::json!({ "publicKey": key.public_key(), "signingKey": seed }).to_string()
            }))
        }
        Command::RegistrationToken { signing_key_file, ttl_secs, owner } => Some((|| {
            let seed = std::fs::read_to_string(signing_key_file)
                .map_err(|e| format!("cannot read {}: {e}", signing_key_file.display()))?;
            let key = SigningKey::from_seed(&seed)?;
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_err(|e| e.to_string())?;
            Ok(key.token(now.as_secs().saturating_add(*ttl_secs), owner.as_deref()))
        })()),
        _ => None,
    }
}

fn settings_help() -> String {
    let mut s = String::from("Configuration (environment variables):\n");
    for (name, default, meaning) in SETTINGS {
        s.push_str(&format!("  {name:<24} {meaning} [default: {default}]\n"));
    }
    s
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    tracing::info!("shutdown signal received: finishing in-flight requests");
}

fn main() -> ExitCode {
    let matches = Cli::command().after_help(settings_help()).get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if let Some(result) = cli.command.as_ref().and_then(registration_command) {
        return match result {
            Ok(out) => {
                println!("{out}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("simplysync-relay: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("simplysync-relay: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(config.log_format);
    // TLS to object storage (BLOB_STORE_URL over https) uses rustls with the ring provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("simplysync-relay: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command.unwrap_or(Command::Serve) {
            Command::Serve => simplysync_relay::serve(config, shutdown_signal()).await,
            Command::Compact => {
                let store = simplysync_relay::open_store(&config).await?;
                let now = simplysync_relay::clock::now_iso();
                let never = std::sync::atomic::AtomicBool::new(false);
                let report = tokio::task::spawn_blocking(move || store.compact_all(&now, &never))
                    .await
                    .map_err(|e| std::io::Error::other(e.to_string()))?
                    .map_err(|source| simplysync_relay::RelayError::Store {
                        path: simplysync_relay::store_location(&config),
                        source,
                    })?;
                if !report.complete {
                    return Err(simplysync_relay::RelayError::Io(std::io::Error::other(
                        "compaction did not run: another relay process is compacting this database",
                    )));
                }
                println!(
                    "{}",
                    serde_json::json!({
                        "owners": report.owners,
                        "deletedEvents": report.deleted_events,
                        "reclaimedBytes": report.reclaimed_bytes,
                        "durationMs": report.duration_ms,
                    })
                );
                Ok(())
            }
            Command::ImportSqlite { from } => {
                let Some(url) = &config.database_url else {
                    return Err(simplysync_relay::RelayError::Io(std::io::Error::other(
                        "import-sqlite copies into PostgreSQL: set DATABASE_URL",
                    )));
                };
                let pg = simplysync_relay::open_postgres(&config, url).await?;
                let report = pg.import_sqlite(&from).await.map_err(|source| simplysync_relay::RelayError::Store {
                    path: simplysync_relay::store_location(&config),
                    source,
                })?;
                println!(
                    "{}",
                    serde_json::json!({
                        "owners": report.owners,
                        "events": report.events,
                        "blobs": report.blobs,
                        "headSeq": report.head_seq,
                    })
                );
                Ok(())
            }
            // Answered before the configuration was read.
            Command::RegistrationKey | Command::RegistrationToken { .. } => Ok(()),
            Command::RotateEpoch => {
                let failed = |source| simplysync_relay::RelayError::Store {
                    path: simplysync_relay::store_location(&config),
                    source,
                };
                let (old, new) = match &config.database_url {
                    Some(url) => {
                        let fresh = simplysync_relay::store::new_epoch().map_err(failed)?;
                        simplysync_relay::store::postgres::rotate_epoch(&url.0, url.1.as_deref(), &fresh)
                            .await
                            .map_err(failed)?
                    }
                    None => simplysync_relay::store::sqlite::rotate_epoch(&config.db_path, config.hwm_path.as_deref())
                        .map_err(failed)?,
                };
                println!("{}", serde_json::json!({ "previousEpoch": old, "epoch": new }));
                Ok(())
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("simplysync-relay: {e}");
            ExitCode::FAILURE
        }
    }
}
