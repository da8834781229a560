//! The engine's local conformance suite (schema, mutations + outbox, reads, subscriptions,
//! persistence). The same tests run natively on SQLite files and in a dedicated worker in
//! Chromium on OPFS (`wasm-pack test --headless --chrome`).

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_dedicated_worker);

#[cfg(target_arch = "wasm32")]
pub(crate) use wasm_bindgen_test::wasm_bindgen_test as test;

#[cfg(not(target_arch = "wasm32"))]
pub(crate) use tokio::test;

mod bulk_writes;
mod device;
mod local_api;
#[cfg(not(target_arch = "wasm32"))]
#[path = "../support/sweep.rs"]
mod sweep;
