#!/usr/bin/env bash
# The project's test command: sets up the machine (idempotent), then runs every check CI runs.
#   bash scripts/test.sh
set -Eeuo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

stage() { echo; echo "=== $1"; }
t0=$SECONDS

stage "setup"
bash scripts/setup.sh

stage "cargo fmt --check"
cargo fmt --all --check

stage "clippy (native)"
cargo clippy --workspace --all-targets --locked -- -D warnings

stage "clippy (wasm32-unknown-unknown)"
cargo clippy -p simplysync --target wasm32-unknown-unknown --all-targets --locked -- -D warnings

stage "native tests"
cargo test --workspace --locked

stage "browser tests (headless Chromium, dedicated worker, OPFS)"
# Un-configured test binaries (the lib's unit tests) also run in a dedicated worker.
WASM_BINDGEN_USE_DEDICATED_WORKER=1 WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-180}" \
  wasm-pack test --headless --chrome --mode no-install -- --locked

echo
echo "all checks passed in $((SECONDS - t0)) s"
