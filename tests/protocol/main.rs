//! The protocol conformance suite. The same tests run natively (`cargo test`) and in a
//! dedicated worker in Chromium (`wasm-pack test --headless --chrome`).

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_dedicated_worker);

#[cfg(target_arch = "wasm32")]
pub(crate) use wasm_bindgen_test::wasm_bindgen_test as test;

#[cfg(not(target_arch = "wasm32"))]
pub(crate) use std::prelude::v1::test;

/// A small deterministic generator (xorshift64*), so a failure names a literal that reproduces.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

mod blob;
mod canonical;
mod envelope;
mod fuzz;
mod hlc;
mod identity;
mod locked_vectors;
mod numbers;
mod payload;
