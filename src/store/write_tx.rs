//! The engine's write transactions, begun and committed by statements prepared once per
//! connection. rusqlite's `Transaction` runs `BEGIN` and `COMMIT` through `execute_batch`, which
//! compiles each of them again every time: ~3,200 instructions of a single write's ~47,000
//! natively (BENCHMARKS.md, issue 17 round thirty).

use rusqlite::Connection;

use super::StoreError;

/// An open write transaction on a connection: committed by [`WriteTx::commit`], rolled back
/// when dropped without one (an error, or a panic that unwinds through the caller).
#[derive(Debug)]
pub struct WriteTx<'c> {
    conn: &'c Connection,
}

impl<'c> WriteTx<'c> {
    /// Begins a (deferred) transaction on `conn`, which must not be in one.
    pub fn begin(conn: &'c Connection) -> Result<WriteTx<'c>, StoreError> {
        conn.prepare_cached("BEGIN")?.execute([])?;
        Ok(WriteTx { conn })
    }

    /// The connection the transaction runs on.
    pub fn conn(&self) -> &'c Connection {
        self.conn
    }

    /// Commits. On an error the transaction is rolled back (if SQLite left it open).
    pub fn commit(self) -> Result<(), StoreError> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(())
    }
}

impl Drop for WriteTx<'_> {
    fn drop(&mut self) {
        // Committed, or SQLite already ended it (a failed COMMIT can roll back by itself).
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (x INTEGER PRIMARY KEY)").unwrap();
        conn
    }

    fn count(conn: &Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap()
    }

    /// One row `x` of `t`, in a transaction of its own that commits.
    fn insert_committed(conn: &Connection, x: i64) {
        let tx = WriteTx::begin(conn).unwrap();
        tx.conn().execute("INSERT INTO t VALUES (?1)", [x]).unwrap();
        tx.commit().unwrap();
    }

    #[test]
    fn a_committed_transaction_keeps_its_writes_and_ends() {
        let conn = conn();
        for x in 1..=3 {
            let tx = WriteTx::begin(&conn).unwrap();
            assert!(!conn.is_autocommit(), "a transaction is open");
            tx.conn().execute("INSERT INTO t VALUES (?1)", [x]).unwrap();
            tx.commit().unwrap();
            assert!(conn.is_autocommit(), "and ended by the commit");
        }
        assert_eq!(count(&conn), 3);
    }

    #[test]
    fn a_transaction_dropped_without_a_commit_is_rolled_back() {
        let conn = conn();
        {
            let tx = WriteTx::begin(&conn).unwrap();
            tx.conn().execute("INSERT INTO t VALUES (1)", []).unwrap();
        }
        assert!(conn.is_autocommit());
        assert_eq!(count(&conn), 0);
        // The next one begins as usual.
        insert_committed(&conn, 2);
        assert_eq!(count(&conn), 1);
    }

    #[test]
    fn a_commit_that_fails_rolls_back_and_the_next_transaction_begins() {
        let conn = conn();
        conn.execute_batch(
            "CREATE TABLE c (x INTEGER REFERENCES t(x) DEFERRABLE INITIALLY DEFERRED); PRAGMA foreign_keys = ON",
        )
        .unwrap();
        let tx = WriteTx::begin(&conn).unwrap();
        tx.conn().execute("INSERT INTO c VALUES (7)", []).unwrap();
        assert!(tx.commit().is_err(), "a deferred foreign key fails the commit");
        assert!(conn.is_autocommit(), "and the transaction is not left open");
        assert_eq!(conn.query_row("SELECT count(*) FROM c", [], |r| r.get::<_, i64>(0)).unwrap(), 0);
        insert_committed(&conn, 1);
        assert_eq!(count(&conn), 1);
    }

    #[test]
    fn begin_inside_a_transaction_is_refused() {
        let conn = conn();
        let _tx = WriteTx::begin(&conn).unwrap();
        assert!(WriteTx::begin(&conn).is_err());
    }
}
