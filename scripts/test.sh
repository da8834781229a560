#!/usr/bin/env bash
# The project's test command: sets up the machine (idempotent), then runs every check CI runs.
#   bash scripts/test.sh
set -Eeuo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

stage() { echo; echo "=== $1"; }
t0=$SECONDS
# Every stage that runs browsers or servers ends: past its bound it is killed (its process group
# with it) and the run fails, naming it, instead of hanging until CI's own limit.
bounded() {
  local secs=$1 rc=0
  shift
  timeout --kill-after=30 "$secs" "$@" || rc=$?
  [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || echo "TIMED OUT after ${secs} s: $*" >&2
  return "$rc"
}
# Node suites: a test that hangs fails after 5 minutes, and the runner exits once its tests are
# done even if a failed test left a server or a child process holding the event loop.
node_test=(node --test --test-force-exit --test-timeout=300000 --test-concurrency=1)

stage "setup"
bash scripts/setup.sh

# No container runtime here (nor an image registry): the container files are validated, not run.
stage "deploy kit: compose files, Dockerfile, .dockerignore, systemd unit, drill script (validated)"
bash scripts/check-deploy.sh

stage "cargo fmt --check"
cargo fmt --all --check

stage "clippy (native)"
cargo clippy --workspace --all-targets --locked -- -D warnings

stage "clippy (wasm32-unknown-unknown)"
cargo clippy -p simplysync -p simplysync-protocol -p simplysync-json -p simplysync-crypto -p simplysync-coalesce --target wasm32-unknown-unknown --all-targets --locked -- -D warnings
# The browser benchmarks' entry points (bench/, feature "bench") build too.
cargo clippy -p simplysync --target wasm32-unknown-unknown --lib --locked --features bench -- -D warnings

stage "native tests (the relay on SQLite; its PostgreSQL and S3 tests on throwaway servers)"
pg_dir="$(mktemp -d)"
chmod 755 "$pg_dir"
services_down() { bash scripts/pg-throwaway.sh stop "$pg_dir/pg"; bash scripts/s3-throwaway.sh stop "$pg_dir/s3"; rm -rf "$pg_dir"; }
trap services_down EXIT
SIMPLYSYNC_TEST_PG="$(bash scripts/pg-throwaway.sh start "$pg_dir/pg")"
SIMPLYSYNC_TEST_S3="$(bash scripts/s3-throwaway.sh start "$pg_dir/s3")"
export SIMPLYSYNC_TEST_PG SIMPLYSYNC_TEST_S3
bounded 2400 cargo test --workspace --locked

# The relay's backend-neutral suites again: one PostgreSQL-backed process, then three
# processes on one database with requests spread round-robin over them. Not with three: the
# admission, metrics and waiter-limit tests (each process has its own in-flight budget,
# counters and waiter limits) and observability (its metrics figures are one process's).
pg1_suites=(--test contract_events --test contract_blobs --test contract_owner --test contract_ops
  --test concurrency --test crash --test robustness --test admission --test observability --test live)
pg3_suites=(--test contract_events --test contract_blobs --test contract_owner --test contract_ops
  --test concurrency --test crash --test robustness --test live)
stage "relay contract suites on PostgreSQL (one process)"
SIMPLYSYNC_TEST_BACKEND=postgres bounded 1200 cargo test --locked -p simplysync-relay "${pg1_suites[@]}"
stage "relay contract suites on PostgreSQL (three processes, round-robin)"
SIMPLYSYNC_TEST_BACKEND=postgres3 bounded 1200 cargo test --locked -p simplysync-relay "${pg3_suites[@]}" \
  -- --skip metrics_count_requests --skip waiters_hold_no_place --skip a_wait_is_authenticated_before_it_takes_a_waiter_slot
stage "relay blob suites with chunks in S3-compatible storage (on SQLite, then PostgreSQL)"
SIMPLYSYNC_TEST_BLOBS=s3 bounded 1200 cargo test --locked -p simplysync-relay --test contract_blobs --test contract_owner
SIMPLYSYNC_TEST_BLOBS=s3 SIMPLYSYNC_TEST_BACKEND=postgres bounded 1200 cargo test --locked -p simplysync-relay \
  --test contract_blobs --test contract_owner --test object_store --test object_races

# The built relay and CLI (cargo test built them) and the moto and Litestream binaries setup installs.
stage "deploy kit: Litestream backs up a live SQLite relay; deploy/restore-drill.sh restores and checks it"
bounded 300 bash scripts/check-deploy.sh --drill "${CARGO_TARGET_DIR:-$ROOT/target}/debug"

stage "browser tests (headless Chromium, dedicated worker, OPFS, a real relay)"
# The browser tests sync through a real relay on a free port (no fixed port shared between
# suites), and time out on a listener that accepts connections and never answers.
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
relay_dir="$(mktemp -d)"
# Its admin token lets the browser tests run its log compaction (POST /ops/compact).
SIMPLYSYNC_TEST_ADMIN_TOKEN="test-admin-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export SIMPLYSYNC_TEST_ADMIN_TOKEN
DB_PATH="$relay_dir/relay.sqlite" PORT=0 COMPACTION_INTERVAL_MS=0 RUST_LOG=warn ADMIN_TOKEN="$SIMPLYSYNC_TEST_ADMIN_TOKEN" \
  "$TARGET/debug/simplysync-relay" >"$relay_dir/out.log" 2>"$relay_dir/err.log" &
relay_pid=$!
# A second relay registers new owners only with a token its operator signed (REGISTRATION=token):
# the package sends the app's token from a real browser (CORS included).
registration_key="$("$TARGET/debug/simplysync-relay" registration-key)"
python3 -c 'import json,sys; print(json.loads(sys.argv[1])["signingKey"])' "$registration_key" >"$relay_dir/signing.key"
DB_PATH="$relay_dir/token-relay.sqlite" PORT=0 COMPACTION_INTERVAL_MS=0 RUST_LOG=warn REGISTRATION=token \
  REGISTRATION_KEYS="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["publicKey"])' "$registration_key")" \
  "$TARGET/debug/simplysync-relay" >"$relay_dir/token-out.log" 2>"$relay_dir/token-err.log" &
token_relay_pid=$!
python3 -c '
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(128)
print(s.getsockname()[1], flush=True)
held = []
while True:
    held.append(s.accept()[0])
' >"$relay_dir/stalled.port" &
stalled_pid=$!
trap 'kill "$relay_pid" "$token_relay_pid" "$stalled_pid" 2>/dev/null || true; rm -rf "$relay_dir"; services_down' EXIT
for _ in $(seq 1 100); do
  grep -q "listening on" "$relay_dir/out.log" 2>/dev/null && grep -q "listening on" "$relay_dir/token-out.log" 2>/dev/null \
    && [ -s "$relay_dir/stalled.port" ] && break
  kill -0 "$relay_pid" 2>/dev/null || { cat "$relay_dir/err.log"; echo "the test relay failed to start"; exit 1; }
  kill -0 "$token_relay_pid" 2>/dev/null || { cat "$relay_dir/token-err.log"; echo "the token relay failed to start"; exit 1; }
  sleep 0.1
done
SIMPLYSYNC_TEST_RELAY="$(grep -o 'http://[0-9.:]*' "$relay_dir/out.log" | head -1)"
SIMPLYSYNC_TEST_STALLED="http://127.0.0.1:$(cat "$relay_dir/stalled.port")"
SIMPLYSYNC_TEST_TOKEN_RELAY="$(grep -o 'http://[0-9.:]*' "$relay_dir/token-out.log" | head -1)"
SIMPLYSYNC_TEST_REGISTRATION_TOKEN="$("$TARGET/debug/simplysync-relay" registration-token --signing-key-file "$relay_dir/signing.key" --ttl-secs 21600)"
export SIMPLYSYNC_TEST_RELAY SIMPLYSYNC_TEST_STALLED SIMPLYSYNC_TEST_TOKEN_RELAY SIMPLYSYNC_TEST_REGISTRATION_TOKEN
echo "test relay: $SIMPLYSYNC_TEST_RELAY, stalled listener: $SIMPLYSYNC_TEST_STALLED"
# Un-configured test binaries (the lib's unit tests) also run in a dedicated worker.
WASM_BINDGEN_USE_DEDICATED_WORKER=1 WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-180}" \
  bounded 2400 wasm-pack test --headless --chrome --mode no-install -- --locked

stage "browser tests again in Firefox ESR (geckodriver)"
WASM_BINDGEN_USE_DEDICATED_WORKER=1 WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-180}" \
  bounded 2400 wasm-pack test --headless --firefox --geckodriver "${CARGO_HOME:-$HOME/.cargo}/bin/geckodriver" --mode no-install -- --locked

stage "npm package: build and pack, publint and attw, then apps against the tarball in Chromium (Vite build and dev server, webpack 5, Next.js, the README's quick starts)"
bash scripts/build-pkg.sh >/dev/null
(cd tests/browser-js && bounded 120 "${node_test[@]}" units.test.mjs packaging.test.mjs && bounded 1200 "${node_test[@]}" package.test.mjs tabs.test.mjs live-queries.test.mjs bundlers.test.mjs crash.test.mjs quickstart.test.mjs)
echo "TypeScript: the declarations type a strict app using the whole API; typed rows and hooks refuse wrong names and types"
(cd tests/browser-js/app && ../node_modules/.bin/tsc -p tsconfig.json)

stage "React: the React example (simplysync/react) type-checked, built from the tarball and run on two devices in Chromium"
(cd tests/browser-js && bounded 900 "${node_test[@]}" react.test.mjs)

stage "example-web end to end (devices, offline, restore, tabs; screenshots in test-results/example/)"
(cd tests/browser-js && bounded 900 "${node_test[@]}" example.test.mjs)

stage "every engine: the packed package and the example page in Firefox ESR and WebKitGTK (two ways)"
(cd tests/browser-js && bounded 1200 "${node_test[@]}" engines.test.mjs)

echo
echo "all checks passed in $((SECONDS - t0)) s"
