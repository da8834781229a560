//! What the app's own SQL (`query`, live queries) may read: the app's tables, never the
//! engine's (`_sync_*`: the outbox, the sealed secret, cursors) nor SQLite's internals
//! (`sqlite_*`, most pragmas). Enforced by SQLite's authorizer as a statement is compiled, so
//! no spelling (a view of a view, a CTE, a table-valued pragma, `main."_SYNC_META"`) gets
//! round it. The authorizer stays installed for the connection's life and refuses only while
//! an app statement is being compiled: installing and removing one per query would expire
//! every statement the engine keeps prepared.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::Connection;

use super::EngineError;

/// Pragmas an app may read (without an argument, as `query` allows): facts about its tables
/// and the database's health, nothing of the engine's rows.
const PRAGMAS: [&str; 12] = [
    "table_info",
    "table_xinfo",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
    "integrity_check",
    "quick_check",
    "user_version",
    "data_version",
    "page_count",
    "page_size",
];

/// The switch the connection's authorizer reads: on while app SQL is compiled.
#[derive(Debug, Clone, Default)]
pub(crate) struct AppSql(Arc<AtomicBool>);

impl AppSql {
    /// Installs the authorizer on `conn` (once, at open).
    pub(crate) fn install(conn: &mut Connection) -> Result<AppSql, EngineError> {
        let guard = AppSql::default();
        let on = guard.0.clone();
        conn.authorizer(Some(move |ctx: AuthContext<'_>| {
            if !on.load(Ordering::Relaxed) {
                return Authorization::Allow;
            }
            decide(&ctx.action)
        }))?;
        Ok(guard)
    }

    /// Runs `compile` with the app's rules in force (also if it panics and unwinds).
    pub(crate) fn compiling<T>(&self, compile: impl FnOnce() -> T) -> T {
        struct Off<'a>(&'a AtomicBool);
        impl Drop for Off<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Relaxed);
            }
        }
        self.0.store(true, Ordering::Relaxed);
        let _off = Off(&self.0);
        compile()
    }
}

/// Names what app SQL may read when SQLite's refusal ("not authorized") would not.
pub(crate) fn explain(e: EngineError) -> EngineError {
    match e {
        EngineError::InvalidQuery(m) if m.contains("not authorized") || m.contains("is prohibited") => {
            EngineError::InvalidQuery(format!(
                "{m}: app SQL reads the app's tables only, never the engine's own (_sync_*) nor SQLite's \
             (sqlite_*), and of the pragmas only {}",
                PRAGMAS.join(", ")
            ))
        }
        other => other,
    }
}

/// Whether app SQL may do `action`.
fn decide(action: &AuthAction<'_>) -> Authorization {
    match action {
        AuthAction::Read { table_name, .. } if hidden_table(table_name) => Authorization::Deny,
        AuthAction::Pragma { pragma_name, .. } if !PRAGMAS.iter().any(|p| p.eq_ignore_ascii_case(pragma_name)) => {
            Authorization::Deny
        }
        _ => Authorization::Allow,
    }
}

/// The engine's tables, SQLite's own, and table-valued pragmas other than those allowed.
fn hidden_table(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    if let Some(pragma) = lower.strip_prefix("pragma_") {
        return !PRAGMAS.contains(&pragma);
    }
    // `dbstat` (in native builds) tells the pages of every table, the engine's included.
    lower.starts_with("_sync_") || lower.starts_with("sqlite_") || lower == "dbstat"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engines_tables_and_sqlites_are_hidden_the_apps_are_not() {
        for name in [
            "_sync_meta",
            "_SYNC_OUTBOX",
            "sqlite_schema",
            "sqlite_master",
            "SQLITE_STAT1",
            "pragma_table_list",
            "dbstat",
        ] {
            assert!(hidden_table(name), "{name}");
        }
        for name in ["todos", "sync_todos", "_synced", "pragma_table_info", "PRAGMA_INDEX_LIST"] {
            assert!(!hidden_table(name), "{name}");
        }
    }
}
