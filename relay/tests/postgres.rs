//! The PostgreSQL backend's own guarantees, on the test server at `SIMPLYSYNC_TEST_PG`
//! (`scripts/test.sh` starts a throwaway one): versioned migrations that concurrent starts
//! share, lock and statement timeouts no longer than a request (a push answered 408/503 never
//! writes later), compaction in one process at a time, a password never logged, and TLS to a
//! server that requires it (`scripts/pg-throwaway.sh start-tls`: a certificate of its own).

mod common;

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Backend, Owner, Relay};
use serde_json::json;

/// A `psql` session kept open: statements are sent as lines; dropping it ends the session.
struct Session(Child);

impl Session {
    fn open(url: &str) -> Session {
        let child = Command::new("psql")
            .arg(url)
            .args(["-q", "-v", "ON_ERROR_STOP=1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("psql runs");
        Session(child)
    }

    fn send(&mut self, sql: &str) {
        let stdin = self.0.stdin.as_mut().unwrap();
        writeln!(stdin, "{sql}").unwrap();
        stdin.flush().unwrap();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn psql(url: &str, sql: &str) -> String {
    let out = Command::new("psql").arg(url).args(["-Atq", "-v", "ON_ERROR_STOP=1", "-c", sql]).output().unwrap();
    assert!(out.status.success(), "{sql}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn relays_started_together_on_a_new_database_migrate_it_once_and_share_one_epoch() {
    let url = common::fresh_pg_database();
    let extra = [("DATABASE_URL", url.as_str())];
    let (a, b, c) = (
        Relay::start_on(Backend::Postgres, &extra),
        Relay::start_on(Backend::Postgres, &extra),
        Relay::start_on(Backend::Postgres, &extra),
    );
    let epochs: Vec<_> = [&a, &b, &c].iter().map(|r| r.get("/health", None)).collect();
    let mut seen = Vec::new();
    for e in epochs {
        seen.push(e.await.json()["epoch"].clone());
    }
    assert!(seen.iter().all(|e| *e == seen[0]), "{seen:?}");
    assert_eq!(
        psql(&url, "SELECT string_agg(version::text, ',') FROM schema_migrations"),
        "1,2",
        "each migration once"
    );
    let alice = Owner::new();
    a.push(&alice, &[alice.event("x", 1)]).await;
    assert_eq!(c.pull_all(&alice).await.0.len(), 1, "one database behind every process");
}

#[tokio::test]
async fn a_push_waiting_on_a_locked_owner_gets_503_or_408_within_the_request_timeout_and_never_writes_later() {
    let relay = Relay::start_on(Backend::Postgres, &[("REQUEST_TIMEOUT_MS", "1000")]);
    let url = relay.database_url().unwrap().to_owned();
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("seed", 0)]).await;
    let mut lock = Session::open(&url);
    lock.send(&format!("BEGIN; SELECT 1 FROM owners WHERE owner_id = '{}' FOR UPDATE;", alice.owner_id()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let mut statuses = Vec::new();
    for i in 1..=3u64 {
        let r = relay.push(&alice, &[alice.event(&format!("r{i}"), i)]).await;
        match r.status.as_u16() {
            503 => r.assert_error(503, "busy"),
            _ => r.assert_error(408, "request_timeout"),
        }
        statuses.push(r.status.as_u16());
    }
    assert!(started.elapsed() < Duration::from_secs(6), "answered within the timeouts: {:?}", started.elapsed());
    lock.send("COMMIT;");
    drop(lock);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(relay.pull_all(&alice).await.0.len(), 1, "only the seed is stored ({statuses:?})");
    assert_eq!(relay.push(&alice, &[alice.event("after", 9)]).await.status, 200);
}

#[tokio::test]
async fn compaction_runs_in_one_process_at_a_time() {
    let relay = Relay::start_on(Backend::Postgres, &[("ADMIN_TOKEN", "ops")]);
    let url = relay.database_url().unwrap().to_owned();
    let alice = Owner::new();
    common::versions_of_three_rows(&relay, &alice).await;
    // Another process holds the compaction lock: this one leaves the pass to it.
    let mut other = Session::open(&url);
    other.send("SELECT pg_advisory_lock(91617545637200);");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = relay.post_json("/ops/compact", Some("ops"), json!({})).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.bytes));
    assert_eq!(relay.pull_all(&alice).await.0.len(), 6, "nothing compacted while another process holds the lock");
    assert!(relay.log_shows("another relay process is running it"), "{}", relay.log_text());
    drop(other);
    tokio::time::sleep(Duration::from_millis(300)).await;
    relay.post_json("/ops/compact", Some("ops"), json!({})).await;
    assert_eq!(relay.pull_all(&alice).await.0.len(), 3, "compacted once the lock is free");
    assert_ne!(psql(&url, "SELECT value FROM relay_meta WHERE key = 'last_compaction_at'"), "");
}

#[tokio::test]
async fn the_database_password_never_reaches_the_log() {
    let url = common::fresh_pg_database();
    // Roles belong to the whole server: one per test run.
    let role = url.rsplit('/').next().unwrap().replace("relay_", "role_");
    psql(&url, &format!("CREATE ROLE {role} LOGIN PASSWORD 'hunter2-secret'; GRANT ALL ON SCHEMA public TO {role};"));
    let with_password = url.replacen("postgres://postgres@", &format!("postgres://{role}:hunter2-secret@"), 1);
    let relay = Relay::start_on(Backend::Postgres, &[("DATABASE_URL", with_password.as_str())]);
    relay.get("/health", None).await;
    assert!(relay.log_shows(&format!("{role}:***@")), "{}", relay.log_text());
    let log = relay.log_text();
    assert!(!log.contains("hunter2-secret"), "{log}");
}

#[tokio::test]
async fn a_sqlite_relay_imported_into_postgres_keeps_its_epoch_seqs_and_cursors() {
    sqlite_relay_imported_into_postgres(false).await;
}

#[tokio::test]
async fn a_sqlite_relay_of_the_earlier_layout_imports_the_same() {
    sqlite_relay_imported_into_postgres(true).await;
}

/// `simplysync-relay import-sqlite --from DB` into the PostgreSQL database at `url`.
fn import_sqlite(db: &std::path::Path, url: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_simplysync-relay"))
        .args(["import-sqlite", "--from"])
        .arg(db)
        .env("DATABASE_URL", url)
        .output()
        .unwrap()
}

#[tokio::test]
async fn an_sqlite_file_with_events_of_no_owner_is_not_imported() {
    sqlite_file_with_an_orphan_is_refused(false).await;
}

#[tokio::test]
async fn an_sqlite_file_of_the_earlier_layout_with_events_of_no_owner_is_not_imported() {
    sqlite_file_with_an_orphan_is_refused(true).await;
}

async fn sqlite_file_with_an_orphan_is_refused(earlier_layout: bool) {
    let mut old = Relay::start_on(Backend::Sqlite, &[]);
    let alice = Owner::new();
    old.push(&alice, &[alice.event("a", 1)]).await;
    old.send_sigterm();
    old.wait_exit();
    let orphan = if earlier_layout {
        common::downgrade_to_layout(&old.db, true);
        "INSERT INTO events (seq, owner_id, event_id, stream_id, envelope, bytes) VALUES (9, 'nobody', 'x', NULL, '{}', 2)"
    } else {
        "INSERT INTO events (seq, owner_key, event_id, stream_id, envelope, bytes) VALUES (9, 999, 'x', NULL, '{}', 2)"
    };
    rusqlite::Connection::open(&old.db).unwrap().execute(orphan, []).unwrap();
    let url = common::fresh_pg_database();
    let out = import_sqlite(&old.db, &url);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("1 stored events belong to no owner row"), "{err}");
    assert_eq!(psql(&url, "SELECT (SELECT count(*) FROM owners) + (SELECT count(*) FROM events)"), "0");
}

/// With `earlier_layout`, the SQLite file is turned back into layout 2 (events under the owner
/// id) before the import, as a relay not yet upgraded leaves it.
async fn sqlite_relay_imported_into_postgres(earlier_layout: bool) {
    let mut old = Relay::start_on(Backend::Sqlite, &[]);
    let (alice, bob) = (Owner::new(), Owner::new());
    old.push(&alice, &[alice.event("a", 1), alice.event("b", 2)]).await;
    old.push(&bob, &[bob.event("x", 1)]).await;
    old.push(&alice, &[alice.event("c", 3)]).await;
    let chunk = b"an encrypted chunk".to_vec();
    let hash = simplysync_protocol::identity::sha256_base64url(&chunk);
    old.put_blob(&alice, &hash, chunk.clone()).await;
    let epoch = old.get("/health", None).await.json()["epoch"].clone();
    // A device paged up to alice's second event.
    let first = old.pull(&alice, "", Some(2)).await.json();
    let cursor = first["nextCursor"].as_str().unwrap().to_owned();
    let usage = old.status_of(&alice).await.json()["account"].clone();
    old.send_sigterm();
    old.wait_exit();
    if earlier_layout {
        common::downgrade_to_layout(&old.db, true);
    }

    let url = common::fresh_pg_database();
    let out = import_sqlite(&old.db, &url);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report, json!({"owners": 2, "events": 4, "blobs": 1, "headSeq": 4}));

    let new = Relay::start_on(Backend::Postgres, &[("DATABASE_URL", url.as_str())]);
    assert_eq!(new.get("/health", None).await.json()["epoch"], epoch, "devices see the same relay");
    let rest = new.pull(&alice, &cursor, None).await.json();
    let ids: Vec<&str> = rest["events"].as_array().unwrap().iter().map(|e| e["eventId"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![alice.event("c", 3).event_id.as_str()], "the old cursor continues where it was");
    assert_eq!(new.status_of(&alice).await.json()["account"], usage, "counters carried over");
    assert_eq!(new.blob(reqwest::Method::GET, &alice, &hash).await.bytes, chunk);
    new.push(&bob, &[bob.event("y", 2)]).await;
    let v = new.pull(&bob, "", None).await.json();
    assert_eq!(v["nextCursor"], "5", "new seqs continue past the imported ones");
    assert_eq!(
        new.push_as(alice.owner_id(), &"w".repeat(43), &[alice.event("d", 4)]).await.status,
        401,
        "tokens carried over"
    );

    // A second import into a database that holds data is refused.
    let again = import_sqlite(&old.db, &url);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("empty"));
}

#[tokio::test]
async fn compaction_keeps_the_newest_event_in_byte_order_whatever_the_databases_collation() {
    // A database whose default collation is ICU en-US: 'a' sorts before 'B' there, after it in
    // byte order (the HLC's order, and SQLite's).
    let admin = std::env::var("SIMPLYSYNC_TEST_PG").unwrap();
    let name = format!("icu_{}", common::fresh_pg_database().rsplit('/').next().unwrap());
    psql(&admin, &format!("CREATE DATABASE {name} LOCALE_PROVIDER icu ICU_LOCALE 'en-US' TEMPLATE template0"));
    let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
    assert_eq!(psql(&url, "SELECT 'x-a' < 'x-B'"), "t", "the collation under test orders a before B");
    let relay = Relay::start_on(Backend::Postgres, &[("DATABASE_URL", url.as_str()), ("ADMIN_TOKEN", "ops")]);
    let mut lower = Owner::new();
    lower.device = "a".into();
    let mut upper = lower.clone();
    upper.device = "B".into();
    // The same row, the same millisecond and counter: the device id decides, bytewise "a" > "B".
    let (newest, older) = (lower.event("row", 1), upper.event("row", 1));
    assert!(newest.event_id.as_bytes() > older.event_id.as_bytes());
    relay.push(&lower, &[older.clone(), newest.clone()]).await;
    relay.post_json("/ops/compact", Some("ops"), json!({})).await;
    let (kept, _) = relay.pull_all(&lower).await;
    let ids: Vec<&str> = kept.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids, vec![newest.event_id.as_str()]);
}

#[tokio::test]
async fn a_database_migrated_by_a_newer_relay_is_refused_with_its_version_named() {
    let url = common::fresh_pg_database();
    drop(Relay::start_on(Backend::Postgres, &[("DATABASE_URL", url.as_str())]));
    psql(&url, "INSERT INTO schema_migrations (version, applied_at) VALUES (99, 'later')");
    let out = Command::new(env!("CARGO_BIN_EXE_simplysync-relay"))
        .env("DATABASE_URL", &url)
        .env("PORT", "0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("schema version 99") && err.contains("newer relay"), "{err}");
}

#[tokio::test]
async fn ready_answers_503_naming_the_database_once_postgresql_stops_answering_and_200_before() {
    let url = common::fresh_pg_database();
    let relay = Relay::start_on(Backend::Postgres, &[("DATABASE_URL", url.as_str())]);
    let r = relay.get("/ready", None).await;
    assert_eq!((r.status.as_u16(), r.json()), (200, json!({"ready": true})));
    // The database goes away under the running relay (its connections are terminated).
    let admin = std::env::var("SIMPLYSYNC_TEST_PG").unwrap();
    let name = url.rsplit('/').next().unwrap();
    psql(&admin, &format!("DROP DATABASE {name} WITH (FORCE)"));
    let r = relay.get("/ready", None).await;
    assert_eq!((r.status.as_u16(), r.json()), (503, json!({"ready": false, "reason": "the database did not answer"})));
    assert_eq!(relay.get("/health", None).await.status, 200, "liveness is another question");
}

/// A throwaway server that speaks TLS only (scripts/pg-throwaway.sh start-tls): DIR/ca.pem issued
/// its certificate (localhost, 127.0.0.1); DIR/other-ca.pem issued nothing here.
struct TlsServer {
    dir: PathBuf,
    url: String,
}

const THROWAWAY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/pg-throwaway.sh");

impl TlsServer {
    fn start() -> TlsServer {
        // A world-traversable parent (/tmp): as root, the server runs as 'postgres'.
        let dir = std::env::temp_dir().join(format!("simplysync-pg-tls-{}", std::process::id()));
        let out = Command::new("bash").arg(THROWAWAY).arg("start-tls").arg(&dir).output().unwrap();
        assert!(out.status.success(), "start-tls: {}", String::from_utf8_lossy(&out.stderr));
        TlsServer { dir, url: String::from_utf8(out.stdout).unwrap().trim().to_owned() }
    }

    fn ca(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// Database `db` on host `host` with the query `query`.
    fn url(&self, host: &str, db: &str, query: &str) -> String {
        let base = self.url.rsplit_once('/').unwrap().0.replacen("localhost", host, 1);
        format!("{base}/{db}?{query}")
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(THROWAWAY).arg("stop").arg(&self.dir).status();
    }
}

/// Starts the relay on `url`, which must refuse to start within 20 s; returns its stderr.
fn refused_start(url: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_simplysync-relay"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOST", "127.0.0.1")
        .env("PORT", "0")
        .env("DATABASE_URL", url)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(!status.success());
            let mut err = String::new();
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            return err;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the relay started on {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test]
async fn the_relay_speaks_tls_to_a_server_that_requires_it_and_verifies_its_certificate() {
    let server = TlsServer::start();
    let (ca, other) = (server.ca("ca.pem"), server.ca("other-ca.pem"));
    let admin = server.url("localhost", "postgres", &format!("sslmode=verify-full&sslrootcert={ca}"));
    psql(&admin, "CREATE DATABASE relay_tls");
    let alice = Owner::new();

    // require: encrypted, the certificate not checked; other parameters survive the rewrite.
    let require = server.url("localhost", "relay_tls", "application_name=relay-tls&sslmode=require");
    let relay = Relay::start_on(Backend::Postgres, &[("DATABASE_URL", require.as_str())]);
    assert_eq!(relay.get("/health", None).await.status, 200);
    assert_eq!(relay.push(&alice, &[alice.event("a", 1)]).await.status, 200);
    assert_eq!(
        psql(
            &admin,
            "SELECT bool_and(s.ssl) AND count(*) > 0 FROM pg_stat_ssl s \
             JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'relay-tls'"
        ),
        "t",
        "every connection of the relay's is encrypted"
    );
    drop(relay);

    // verify-full with the issuing CA, by name and by address (both in the certificate).
    for (n, host) in [(2, "localhost"), (3, "127.0.0.1")] {
        let url = server.url(host, "relay_tls", &format!("sslmode=verify-full&sslrootcert={ca}"));
        let relay = Relay::start_on(Backend::Postgres, &[("DATABASE_URL", url.as_str())]);
        assert_eq!(relay.push(&alice, &[alice.event(host, n)]).await.status, 200, "{host}");
        assert_eq!(relay.pull_all(&alice).await.0.len(), n as usize, "{host}");
    }

    // A host name the certificate does not carry (reached at its address): verify-full refuses,
    // verify-ca (the chain only) goes through.
    let misnamed =
        |mode: &str| server.url("vm", "relay_tls", &format!("hostaddr=127.0.0.1&sslmode={mode}&sslrootcert={ca}"));
    let err = refused_start(&misnamed("verify-full"));
    assert!(err.contains("not valid for name"), "{err}");
    let relay = Relay::start_on(Backend::Postgres, &[("DATABASE_URL", misnamed("verify-ca").as_str())]);
    assert_eq!(relay.get("/ready", None).await.status, 200);
    drop(relay);

    // A CA that did not issue the certificate: no start, and the reason named.
    for mode in ["verify-full", "verify-ca", "require"] {
        let err = refused_start(&server.url("localhost", "relay_tls", &format!("sslmode={mode}&sslrootcert={other}")));
        assert!(err.contains("UnknownIssuer"), "{mode}: {err}");
    }
    // verify-full needs root certificates; an unknown mode is named, the password never.
    let err = refused_start(&server.url("localhost", "relay_tls", "sslmode=verify-full"));
    assert!(err.contains("sslrootcert"), "{err}");
    let err = refused_start(&server.url("localhost", "relay_tls", "sslmode=verify").replacen(
        "postgres@",
        "postgres:hunter2@",
        1,
    ));
    assert!(err.contains("verify-full") && !err.contains("hunter2"), "{err}");
    // disable: the server refuses unencrypted connections.
    let err = refused_start(&server.url("localhost", "relay_tls", "sslmode=disable"));
    assert!(err.contains("no encryption"), "{err}");

    // rotate-epoch opens its own connection: over TLS too.
    let url = server.url("localhost", "relay_tls", &format!("sslmode=verify-full&sslrootcert={ca}"));
    let out = Command::new(env!("CARGO_BIN_EXE_simplysync-relay"))
        .arg("rotate-epoch")
        .env("DATABASE_URL", &url)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test]
async fn metrics_scrapes_do_not_sum_over_every_owner_each_time() {
    let url = common::fresh_pg_database();
    let relay = Relay::start_on(Backend::Postgres, &[("DATABASE_URL", url.as_str())]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let scrape = || async { String::from_utf8(relay.get("/metrics", None).await.bytes).unwrap() };
    assert!(scrape().await.contains("simplysync_owners 1\n"));
    // Another process registers an owner and takes a seq (written here behind the relay's back).
    psql(&url, "INSERT INTO owners (owner_id, token_hash, created_at) VALUES ('other-process-owner', 'x', 'now')");
    psql(&url, "SELECT nextval('event_seq')");
    for _ in 0..10 {
        let text = scrape().await;
        assert!(text.contains("simplysync_owners 1\n"), "the sums over owners are reused, not re-read per scrape");
        assert!(text.contains("simplysync_head_seq 2\n"), "the head is read fresh every time: {text}");
    }
    // This process's own writes show at once.
    let bob = Owner::new();
    relay.push(&bob, &[bob.event("b", 2)]).await;
    let text = scrape().await;
    assert!(text.contains("simplysync_owners 2\n") && text.contains("simplysync_head_seq 3\n"), "{text}");
}
