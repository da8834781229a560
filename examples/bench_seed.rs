//! Fills a relay with `N` real events for a fresh owner (for the restore benchmark) and prints
//! `{"secret": …, "events": N}`. `cargo run --release --example bench_seed -- RELAY_URL N`

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    native::main();
}

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::rc::Rc;

    use simplysync::engine::schema::{ColumnDef, ColumnType, SchemaDef, TableDef};
    use simplysync::engine::{Engine, EngineConfig, Env, Op, SyncTrigger};
    use simplysync::native::{HttpTransport, SystemClock};
    use simplysync::protocol::entropy::OsEntropy;
    use simplysync::protocol::{create_recovery_key, Json};

    #[tokio::main(flavor = "current_thread")]
    pub async fn main() {
        let args: Vec<String> = std::env::args().collect();
        let relay = args.get(1).expect("usage: bench_seed RELAY_URL N").clone();
        let n: u32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100_000);
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
            }],
        };
        let env = Env {
            transport: Rc::new(HttpTransport::new().unwrap()),
            clock: Rc::new(SystemClock),
            entropy: Box::new(OsEntropy),
        };
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
        let report = engine.sync(SyncTrigger::Manual).await.unwrap();
        let r = &report.relays[0];
        assert!(r.error.is_none(), "seeding failed: {:?}", r.error);
        println!("{}", serde_json::json!({ "secret": secret, "events": r.pushed }));
    }
}
