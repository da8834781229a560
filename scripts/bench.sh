#!/usr/bin/env bash
# Every benchmark in one run (the machine is noisy: compare numbers from the same run).
#   bash scripts/bench.sh            (about 20 minutes on the 2-core machine)
# Prints markdown tables: browser (headless Chromium, OPFS), relay throughput, compaction of
# 1M events, live sync latency, package size. Raw browser samples land in target/bench-results.json.
set -Eeuo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
bash scripts/setup.sh >/dev/null
echo "## Browser"; node bench/run.mjs --runs "${RUNS:-5}"
echo; echo "## Relay throughput"; cargo bench -q -p simplysync-relay --bench throughput 2>/dev/null | grep '^|'
echo; echo "## Relay compaction"; cargo bench -q -p simplysync-relay --bench compaction 2>/dev/null | grep '^|'
echo; echo "## Live sync latency"; node bench/live.mjs 2>/dev/null
echo; echo "## Package size"; bash scripts/build-pkg.sh 2>&1 >/dev/null | grep -E 'bytes'
