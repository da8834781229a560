//! Fills a relay with `N` real events for a fresh owner (for the restore benchmark) and prints
//! `{"secret": …, "events": N, "syncMs": …}`.
//! `cargo run --release --example bench_seed -- RELAY_URL N [RTT_MS]`: with `RTT_MS`, every
//! request waits that long before it is sent, as a device that far from its relay would.

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    native::main();
}

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::rc::Rc;

    use simplysync::engine::io::{HttpRequest, HttpResponse, LocalFuture, Transport, TransportError};
    use simplysync::engine::schema::{ColumnDef, ColumnType, SchemaDef, TableDef};
    use simplysync::engine::{Engine, EngineConfig, Env, Op, SyncTrigger};
    use simplysync::native::{HttpTransport, SystemClock};
    use simplysync::protocol::entropy::OsEntropy;
    use simplysync::protocol::{create_recovery_key, Json};

    /// The real transport, each request held back by a round trip's time. As in the real
    /// transport, each request (its wait included) runs as a task of its own, so requests in
    /// flight wait at the same time, as they would on a network (unlike there, a dropped one is
    /// not aborted: the seeding drops none).
    struct Distant {
        inner: HttpTransport,
        rtt_ms: u64,
    }

    impl Transport for Distant {
        fn send(&self, req: HttpRequest) -> LocalFuture<'_, Result<HttpResponse, TransportError>> {
            let (request, rtt) = (self.inner.clone().request(req), std::time::Duration::from_millis(self.rtt_ms));
            let task = tokio::spawn(async move {
                tokio::time::sleep(rtt).await;
                request.await
            });
            Box::pin(async move { task.await.unwrap_or_else(|e| Err(TransportError(e.to_string()))) })
        }
    }

    #[tokio::main(flavor = "current_thread")]
    pub async fn main() {
        let args: Vec<String> = std::env::args().collect();
        let relay = args.get(1).expect("usage: bench_seed RELAY_URL N").clone();
        let n: u32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100_000);
        let rtt_ms: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(0);
        let secret = create_recovery_key(&mut OsEntropy).unwrap();
        let schema = SchemaDef {
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
        };
        let transport: Rc<dyn Transport> = if rtt_ms == 0 {
            Rc::new(HttpTransport::new().unwrap())
        } else {
            Rc::new(Distant { inner: HttpTransport::new().unwrap(), rtt_ms })
        };
        let env = Env { transport, clock: Rc::new(SystemClock), entropy: Box::new(OsEntropy) };
        let conn = simplysync::store::open_memory().unwrap();
        let engine = Engine::open(conn, EngineConfig::new(secret.clone(), vec![relay], schema), env).unwrap();
        for start in (0..n).step_by(10_000) {
            let ops: Vec<Op> = (start..(start + 10_000).min(n))
                .map(|i| Op::Insert {
                    table: "todos".into(),
                    row: Json::object([
                        ("id", Json::from(format!("row-{i:08}"))),
                        ("title", Json::from(format!("todo number {i} with a realistic title"))),
                        ("done", Json::Bool(i % 3 == 0)),
                        ("position", Json::from(i)),
                    ]),
                })
                .collect();
            engine.transaction(&ops).unwrap();
        }
        // The sync seals the events and pushes them (BENCHMARKS.md reports its time as the
        // native engine's push of a backlog).
        let started = std::time::Instant::now();
        let report = engine.sync(SyncTrigger::Manual).await.unwrap();
        let sync_ms = started.elapsed().as_secs_f64() * 1000.0;
        let r = &report.relays[0];
        assert!(r.error.is_none(), "seeding failed: {:?}", r.error);
        println!("{}", serde_json::json!({ "secret": secret, "events": r.pushed, "syncMs": sync_ms.round() }));
    }
}
