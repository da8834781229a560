//! `simplysync` — the native command line over the same core the browser runs.
//!
//! ```text
//! simplysync identity <secret> [--show-keys]   ownerId + relayAuth as JSON (keys in hex with --show-keys)
//! simplysync new-key                           mint an sf1_ recovery key
//! simplysync new-phrase                        mint a 12-word recovery phrase
//! ```
//! The secret may also come from `SIMPLYSYNC_SECRET`, so it need not appear in shell history.

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    cli::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
mod cli {
    use std::process::ExitCode;

    use clap::{Parser, Subcommand};
    use simplysync::protocol::entropy::OsEntropy;
    use simplysync::protocol::{create_mnemonic, create_recovery_key, Secret};

    #[derive(Parser)]
    #[command(name = "simplysync", version, about = "SimplySync command line")]
    struct Cli {
        #[command(subcommand)]
        command: Command,
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
    }

    pub fn main() -> ExitCode {
        let cli = Cli::parse();
        match run(cli.command) {
            Ok(out) => {
                println!("{out}");
                ExitCode::SUCCESS
            }
            Err(msg) => {
                eprintln!("error: {msg}");
                ExitCode::from(2)
            }
        }
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn run(command: Command) -> Result<String, String> {
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
                serde_json::to_string_pretty(&out).map_err(|e| e.to_string())
            }
            Command::NewKey => create_recovery_key(&mut OsEntropy).map_err(|e| e.to_string()),
            Command::NewPhrase => create_mnemonic(&mut OsEntropy).map_err(|e| e.to_string()),
        }
    }
}
