//! The CLI's writes: each command is one engine transaction (rows + outbox), so a script or an
//! operator writes exactly as an app does; the next `sync` ships the events. A JSON argument
//! given as `-` is read from stdin (rows can be larger than a command line).

use std::io::Read;
use std::path::PathBuf;

use clap::Subcommand;
use simplysync::engine::{Engine, Op, DEFAULT_REQUEST_TIMEOUT_MS};
use simplysync::protocol::{parse_json, Json};

use crate::commands::{open, pretty, Store};

#[derive(Subcommand)]
pub(crate) enum Write {
    /// Create a row: `insert todos '{"id":"a","title":"milk"}'` (prints the row as written).
    Insert {
        #[command(flatten)]
        store: Store,
        /// The table.
        table: String,
        /// The row as JSON (with its `id`), or `-` to read it from stdin.
        row: String,
    },
    /// Change the given columns of a live row.
    Update {
        #[command(flatten)]
        store: Store,
        /// The table.
        table: String,
        /// The row id.
        id: String,
        /// The columns to change as a JSON object, or `-` to read it from stdin.
        patch: String,
    },
    /// Write a whole row, creating it if needed (absent columns become null).
    Upsert {
        #[command(flatten)]
        store: Store,
        /// The table.
        table: String,
        /// The row as JSON (with its `id`), or `-` to read it from stdin.
        row: String,
    },
    /// Soft-delete a live row.
    Delete {
        #[command(flatten)]
        store: Store,
        /// The table.
        table: String,
        /// The row id.
        id: String,
    },
    /// Hard-delete rows and queue their compaction on every relay: the given rows of a table,
    /// or (without arguments) every soft-deleted row.
    Purge {
        #[command(flatten)]
        store: Store,
        /// The table (with ids).
        table: Option<String>,
        /// Row ids.
        ids: Vec<String>,
    },
    /// Upsert every row of a JSON Lines file (one row object per line) in one transaction;
    /// `-` reads stdin.
    Import {
        #[command(flatten)]
        store: Store,
        /// The table.
        table: String,
        /// The file.
        file: PathBuf,
    },
}

fn read_stdin() -> Result<String, String> {
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text).map_err(|e| format!("cannot read stdin: {e}"))?;
    Ok(text)
}

fn json_arg(arg: &str, what: &str) -> Result<Json, String> {
    let text = if arg == "-" { read_stdin()? } else { arg.to_owned() };
    parse_json(text.trim()).map_err(|e| format!("the {what} is not JSON: {e}"))
}

fn engine(store: &Store) -> Result<Engine, String> {
    open(store, None, DEFAULT_REQUEST_TIMEOUT_MS)
}

fn fail(e: simplysync::engine::EngineError) -> String {
    format!("{e} ({})", e.code())
}

fn one(store: &Store, op: Op) -> Result<String, String> {
    let rows = engine(store)?.transaction(std::slice::from_ref(&op)).map_err(fail)?;
    pretty(&rows.first().map(Json::to_serde))
}

/// Reads the rows of a JSON Lines text (blank lines skipped); errors name the line.
fn jsonl_rows(text: &str) -> Result<Vec<Json>, String> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        rows.push(parse_json(line.trim()).map_err(|e| format!("line {}: not JSON: {e}", i + 1))?);
    }
    Ok(rows)
}

pub(crate) fn run(w: Write) -> Result<String, String> {
    match w {
        Write::Insert { store, table, row } => one(&store, Op::Insert { table, row: json_arg(&row, "row")? }),
        Write::Update { store, table, id, patch } => {
            one(&store, Op::Update { table, id, patch: json_arg(&patch, "patch")? })
        }
        Write::Upsert { store, table, row } => one(&store, Op::Upsert { table, row: json_arg(&row, "row")? }),
        Write::Delete { store, table, id } => one(&store, Op::Delete { table, id }),
        Write::Purge { store, table, ids } => {
            let engine = engine(&store)?;
            let purged = match table {
                None => engine.purge_deleted().map_err(fail)?,
                Some(_) if ids.is_empty() => return Err("purge <table> needs at least one row id".into()),
                Some(t) => engine.purge_rows(&t, &ids).map_err(fail)?,
            };
            pretty(&serde_json::json!({ "purged": purged }))
        }
        Write::Import { store, table, file } => {
            let text = if file.as_os_str() == "-" {
                read_stdin()?
            } else {
                std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?
            };
            let ops: Vec<Op> =
                jsonl_rows(&text)?.into_iter().map(|row| Op::Upsert { table: table.clone(), row }).collect();
            let n = engine(&store)?.transaction(&ops).map_err(fail)?.len();
            pretty(&serde_json::json!({ "imported": n }))
        }
    }
}
