//! Profiling aid: bulk mutations, sealing and a restore through an in-process relay, natively,
//! with timings. `cargo run --release --example engine_hot -- [ROWS] [bulk]` (run it under `perf`;
//! `bulk` (or `bulk-once`: with a request id, as the package calls it) stops after the bulk
//! transaction (`once-after-bulk`: then 1000 single writes with request ids; `upsert-after-bulk`: then
//! the same rows as upserts, all of them there), for exact instruction counts of that phase with
//! `valgrind --tool=callgrind`: this VM has no hardware counters for `perf stat`; the restore alone
//! with `--collect-atstart=no --toggle-collect='*Restore*poll*'`). A third argument `scattered`
//! makes the rows' ids in no order, as random UUIDs are.

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    native::main();
}

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::rc::Rc;
    use std::time::Instant;

    use simplysync::engine::schema::{ColumnDef, ColumnType, SchemaDef, TableDef};
    use simplysync::engine::{Engine, EngineConfig, Env, Op, Request, SyncTrigger};
    use simplysync::native::{HttpTransport, SystemClock};
    use simplysync::protocol::entropy::OsEntropy;
    use simplysync::protocol::Json;

    fn schema() -> SchemaDef {
        SchemaDef {
            schema_version: 1,
            tables: vec![TableDef {
                name: "todos".into(),
                columns: vec![
                    ColumnDef::new("title", ColumnType::Text),
                    ColumnDef::new("done", ColumnType::Boolean),
                    ColumnDef::new("position", ColumnType::Integer),
                ],
                merge: Default::default(),
                indexes: Vec::new(),
            }],
        }
    }

    fn engine(relay: &str) -> Engine {
        let env = Env {
            transport: Rc::new(HttpTransport::new().unwrap()),
            clock: Rc::new(SystemClock),
            entropy: Box::new(OsEntropy),
        };
        let secret = "sf1_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8".to_string();
        Engine::open(
            simplysync::store::open_memory().unwrap(),
            EngineConfig::new(secret, vec![relay.into()], schema()),
            env,
        )
        .unwrap()
    }

    /// The fresh device's restore, polled through a function of its own: callgrind counts it
    /// alone with `--collect-atstart=no --toggle-collect='*Restore*poll*'`.
    async fn restore(b: &Engine) -> simplysync::engine::SyncReport {
        Restore(Box::pin(b.sync(SyncTrigger::Manual))).await.unwrap()
    }

    struct Restore<F>(std::pin::Pin<Box<F>>);

    impl<F: std::future::Future> std::future::Future for Restore<F> {
        type Output = F::Output;
        #[inline(never)]
        fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<F::Output> {
            self.0.as_mut().poll(cx)
        }
    }

    /// The writing device's pass (seal, push, and the pull of its own events back), polled the
    /// same way: `--toggle-collect='*PushPass*poll*'`.
    struct PushPass<F>(std::pin::Pin<Box<F>>);

    impl<F: std::future::Future> std::future::Future for PushPass<F> {
        type Output = F::Output;
        #[inline(never)]
        fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<F::Output> {
            self.0.as_mut().poll(cx)
        }
    }

    /// SplitMix64's finalizer: `i` in no order, the same every run.
    fn mix(i: u64) -> u64 {
        let mut x = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }

    #[tokio::main(flavor = "current_thread")]
    pub async fn main() {
        let n: u32 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(50_000);
        let dir = std::env::temp_dir().join(format!("simplysync-hot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let relay = format!("http://{}", listener.local_addr().unwrap());
        let db = dir.join("relay.sqlite");
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
            rt.block_on(async move {
                let config = simplysync_relay::config::Config::from_lookup(|k| match k {
                    "DB_PATH" => Some(db.display().to_string()),
                    "COMPACTION_INTERVAL_MS" => Some("0".into()),
                    _ => None,
                })
                .unwrap();
                let l = tokio::net::TcpListener::from_std(listener).unwrap();
                simplysync_relay::serve_on(l, None, config, std::future::pending()).await.unwrap();
            });
        });
        let a = engine(&relay);
        // `scattered` (third argument): ids in no order, as random UUIDs are.
        let scattered = std::env::args().nth(3).as_deref() == Some("scattered");
        let id = |i: u32| if scattered { format!("{:016x}", mix(u64::from(i))) } else { format!("row-{i:08}") };
        let ops: Vec<Op> = (0..n)
            .map(|i| Op::Insert {
                table: "todos".into(),
                row: Json::object([
                    ("id", Json::from(id(i))),
                    ("title", Json::from(format!("todo number {i} with a realistic title"))),
                    ("done", Json::Bool(i % 3 == 0)),
                    ("position", Json::from(i)),
                ]),
            })
            .collect();
        let mode = std::env::args().nth(2);
        let t = Instant::now();
        if matches!(mode.as_deref(), Some("bulk-once" | "once-after-bulk")) {
            // The package's path: every call from a tab carries a request id (at most once), sent
            // for the first time.
            a.write_rows(&ops, Some(Request::first("bench-request"))).unwrap();
        } else {
            a.transaction(&ops).unwrap();
        }
        let bulk = t.elapsed();
        if mode.as_deref() == Some("upsert-after-bulk") {
            // The same rows again, as upserts of rows that are all there (`upsert-after-bulk`).
            let upserts: Vec<Op> = ops
                .iter()
                .map(|op| match op {
                    Op::Insert { table, row } => Op::Upsert { table: table.clone(), row: row.clone() },
                    other => other.clone(),
                })
                .collect();
            let t = Instant::now();
            a.write_rows(&upserts, Some(Request::first("bench-upserts"))).unwrap();
            println!("upserts of rows there {:>8.0} rows/s", n as f64 / t.elapsed().as_secs_f64());
            return;
        }
        if mode.as_deref() == Some("once-after-bulk") {
            // Single writes with request ids (the package's path) once the bulk's record is there.
            let t = Instant::now();
            for i in 0..1000 {
                let row = Json::object([("id", Json::from(format!("single-{i}"))), ("title", Json::from("one"))]);
                let request = format!("single:{i}");
                a.write_rows(&[Op::Insert { table: "todos".into(), row }], Some(Request::first(&request))).unwrap();
            }
            println!("single writes after a recorded bulk {:>8.0} writes/s", 1000.0 / t.elapsed().as_secs_f64());
            return;
        }
        if mode.as_deref().is_some_and(|m| m.starts_with("bulk")) {
            println!("bulk    {:>10.0} rows/s", n as f64 / bulk.as_secs_f64());
            return;
        }
        let t = Instant::now();
        a.seal_pending_outbox().unwrap();
        let seal = t.elapsed();
        let t = Instant::now();
        // (In a block of its own: a `sync` future as is would make this poll the restore's twin,
        // and the linker folds the two into one symbol.)
        let pass = PushPass(Box::pin(async { a.sync(SyncTrigger::Manual).await })).await.unwrap();
        let push = t.elapsed();
        let b = engine(&relay);
        let t = Instant::now();
        let report = restore(&b).await;
        let restore = t.elapsed();
        let rate = |d: std::time::Duration| n as f64 / d.as_secs_f64();
        println!("bulk    {:>10.0} rows/s", rate(bulk));
        println!("seal    {:>10.0} events/s", rate(seal));
        println!(
            "push    {:>10.0} events/s  (own events back: {} received, {} recognized)",
            rate(push),
            pass.relays[0].received,
            pass.relays[0].own_echoes
        );
        println!("restore {:>10.0} events/s  {:?}", rate(restore), report.relays[0].timings);
        let _ = std::fs::remove_dir_all(dir);
    }
}
