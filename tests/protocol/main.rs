//! The protocol conformance suite. The same tests run natively (`cargo test`) and in a
//! dedicated worker in Chromium (`wasm-pack test --headless --chrome`).

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_dedicated_worker);

#[cfg(target_arch = "wasm32")]
pub(crate) use wasm_bindgen_test::wasm_bindgen_test as test;

#[cfg(not(target_arch = "wasm32"))]
pub(crate) use std::prelude::v1::test;

mod blob;
mod canonical;
mod envelope;
mod hlc;
mod identity;
mod locked_vectors;
mod numbers;
mod payload;
