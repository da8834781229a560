#!/usr/bin/env bash
# The project's main command: sets up the machine (idempotent), builds, and runs the demo.
#   bash scripts/run.sh
# Until the relay and the example page exist, the demo mints a recovery phrase and shows the
# identity it derives, with the native CLI built from the same core the browser runs.
set -Eeuo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

bash scripts/setup.sh
cargo build --release --locked --bin simplysync
CLI="${CARGO_TARGET_DIR:-$ROOT/target}/release/simplysync"

phrase="$("$CLI" new-phrase)"
echo "A new recovery phrase (12 words, 128 bits):"
echo "  $phrase"
echo
echo "The identity it derives (ownerId is public; relayAuth is the relay bearer token):"
SIMPLYSYNC_SECRET="$phrase" "$CLI" identity
