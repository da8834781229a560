#!/usr/bin/env bash
# The project's main command: sets up the machine (idempotent), builds the npm package and the
# relay, starts the relay on its embedded SQLite (data in ./data/), and serves the example todo
# page (and its React twin at /react/). Prints the URL to open; Ctrl-C stops both.
#   bash scripts/run.sh        (RELAY_PORT=8787 EXAMPLE_PORT=8080 HOST=127.0.0.1 to change)
set -Eeuo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
HOST="${HOST:-127.0.0.1}"
RELAY_PORT="${RELAY_PORT:-8787}"
EXAMPLE_PORT="${EXAMPLE_PORT:-8080}"

bash scripts/setup.sh
echo "==> building the relay and the npm package"
cargo build --release --locked -p simplysync-relay
TGZ="$(bash scripts/build-pkg.sh)"
echo "==> building the React example (example-web/react) against the package"
(cd example-web/react && npm install --no-save --no-audit --no-fund --silent "$TGZ" && node_modules/.bin/vite build)
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"

mkdir -p data
HOST="$HOST" PORT="$RELAY_PORT" DB_PATH="$ROOT/data/relay.sqlite" "$TARGET/release/simplysync-relay" &
relay_pid=$!
node example-web/serve.mjs --host "$HOST" --port "$EXAMPLE_PORT" --relay "http://$HOST:$RELAY_PORT" &
web_pid=$!
trap 'kill "$relay_pid" "$web_pid" 2>/dev/null || true; wait 2>/dev/null || true' EXIT INT TERM
sleep 1
echo
echo "SimplySync is running:"
echo "  relay    http://$HOST:$RELAY_PORT   (data in $ROOT/data/relay.sqlite)"
echo "  example  http://$HOST:$EXAMPLE_PORT/   <- open this (a second browser profile = a second device)"
echo "  React    http://$HOST:$EXAMPLE_PORT/react/   (the same todos as a React app on simplysync/react)"
echo "Press Ctrl-C to stop."
wait -n "$relay_pid" "$web_pid"
