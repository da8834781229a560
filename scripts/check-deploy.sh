#!/usr/bin/env bash
# check-deploy.sh — the deploy kit (deploy/, .dockerignore) checked without a container runtime:
# CI machines have none and reach no image registry, so the images are never built or run here.
#   bash scripts/check-deploy.sh                # the static checks (about a second)
#   bash scripts/check-deploy.sh --drill DIR    # the SQLite backup + restore drill, for real, with
#                                               # DIR/simplysync-relay and DIR/simplysync (~10 s)
# scripts/test.sh runs the first right after setup, the second once `cargo test` has built the
# binaries.
# Static: the kit's rules (scripts/check-deploy.py: images pinned, the bucket created before the
# relay, no password in a URL, HWM_PATH off the database's volume, .dockerignore), `docker
# compose config` on both compose files (Docker Compose v2 needs no daemon for it), shellcheck
# on the drill script and on the compose files' shell snippets, systemd-analyze on the unit.
# Drill: a throwaway S3-compatible server (moto), a relay on SQLite, Litestream replicating it
# with deploy/litestream.yml, writes from devices (the CLI), then deploy/restore-drill.sh: with
# the replica level with the live relay (the epoch is kept), behind it (the restored copy gets
# a new epoch), without a mark, and against an empty replica path (it must fail).
# Tools come from scripts/setup.sh (shellcheck, sqlite3, python3-yaml; Litestream and Docker
# Compose in $TOOLS/bin).
set -Eeuo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TOOLS="${SIMPLYSYNC_TOOLS:-/opt/simplysync-tools}"
export PATH="$TOOLS/bin:$PATH"

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok    $*"; }
fail() { failed=$((failed + 1)); echo "FAIL  $*"; }
work="$(mktemp -d)"
chmod 755 "$work"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  [ ! -d "$work/s3" ] || bash scripts/s3-throwaway.sh stop "$work/s3"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "check-deploy: stopped at line $LINENO: $BASH_COMMAND" >&2' ERR

py=""
for candidate in /usr/bin/python3 python3; do
  if "$candidate" -c 'import yaml, tomllib' 2>/dev/null; then py="$candidate"; break; fi
done

static_checks() {
  # --- The kit's rules, read off its files. ------------------------------------------------------
  if [ -z "$py" ]; then
    fail "no python3 with PyYAML and tomllib (run scripts/setup.sh: python3-yaml)"
  elif "$py" scripts/check-deploy.py "$ROOT" >"$work/static.txt"; then
    sed '$d' "$work/static.txt"
    ok "scripts/check-deploy.py: $(tail -1 "$work/static.txt")"
  else
    sed '$d' "$work/static.txt" | grep -v '^ok' || true
    fail "scripts/check-deploy.py: $(tail -1 "$work/static.txt")"
  fi

  # --- docker compose config: both files as Compose itself reads them. -----------------------------
  compose=()
  if docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
  elif command -v docker-compose >/dev/null && docker-compose version --short 2>/dev/null | grep -q '^2\.'; then
    compose=(docker-compose)
  fi
  if [ "${#compose[@]}" -eq 0 ]; then
    fail "Docker Compose v2 not found (run scripts/setup.sh)"
  else
    # A copy of deploy/ with the files an operator creates: relay.env from its example, and a
    # database password full of characters a URL would need escaped.
    mkdir -p "$work/ctx"
    cp -r deploy "$work/ctx/deploy"
    rm -rf "$work/ctx/deploy/relay.env" "$work/ctx/deploy/.env" "$work/ctx/deploy/secrets"
    cp deploy/relay.env.example "$work/ctx/deploy/relay.env"
    mkdir "$work/ctx/deploy/secrets"
    password="p@ss:w/rd#%41 'q' \"d\" \$x"
    printf '%s\n' "$password" >"$work/ctx/deploy/secrets/postgres-password"
    dc() { (cd "$work/ctx" && env -i PATH="$PATH" HOME="$work" "$@" "${compose[@]}" "${dc_args[@]}"); }
    dc_args=(-f deploy/compose.yaml config --format json)
    if dc S3_SECRET=s3-secret >"$work/compose.json" 2>"$work/compose.err"; then
      ok "docker compose config: deploy/compose.yaml"
      if grep -qF 'p@ss' "$work/compose.json"; then fail "the database password appears in the rendered compose.yaml"; else ok "the database password stays in its file (not in the rendered config)"; fi
    else
      fail "docker compose config: deploy/compose.yaml: $(cat "$work/compose.err")"
    fi
    dc_args=(-f deploy/compose.yaml config --quiet)
    if dc >/dev/null 2>&1; then fail "compose.yaml starts without S3_SECRET"; else ok "compose.yaml refuses to start without S3_SECRET"; fi
    for profiles in "" "local-backups,drill"; do
      dc_args=(-f deploy/compose.sqlite.yaml config --quiet)
      if dc BACKUP_S3_SECRET=backup-secret COMPOSE_PROFILES="$profiles" 2>"$work/compose.err"; then
        ok "docker compose config: deploy/compose.sqlite.yaml (profiles: ${profiles:-none})"
      else
        fail "docker compose config: deploy/compose.sqlite.yaml (profiles: ${profiles:-none}): $(cat "$work/compose.err")"
      fi
    done
    dc_args=(-f deploy/compose.sqlite.yaml config --quiet)
    if dc >/dev/null 2>&1; then fail "compose.sqlite.yaml starts without BACKUP_S3_SECRET"; else ok "compose.sqlite.yaml refuses to start without BACKUP_S3_SECRET"; fi
  fi

  # --- Shell: the drill, this script, and the snippets compose runs with /bin/sh. ------------------
  if ! command -v shellcheck >/dev/null; then
    fail "shellcheck not found (run scripts/setup.sh)"
  else
    for f in deploy/restore-drill.sh scripts/check-deploy.sh; do
      if out="$(shellcheck "$f" 2>&1)"; then ok "shellcheck $f"; else fail "shellcheck $f"; echo "$out"; fi
    done
    if [ -n "$py" ]; then
      mkdir -p "$work/snippets"
      "$py" - "$work/snippets" <<'PY'
import sys, yaml
out = sys.argv[1]
for path in ("deploy/compose.yaml", "deploy/compose.sqlite.yaml"):
    for name, svc in yaml.safe_load(open(path))["services"].items():
        if svc.get("entrypoint", [None])[0] == "/bin/sh" and svc.get("command"):
            # Compose turns $$ into $ before the shell sees it.
            text = svc["command"][0].replace("$$", "$")
            with open(f"{out}/{path.split('/')[1]}.{name}.sh", "w") as f:
                f.write("#!/bin/sh\n" + text)
PY
      for f in "$work"/snippets/*.sh; do
        name="$(basename "$f" .sh)"
        if sh -n "$f" && out="$(shellcheck -s sh "$f" 2>&1)"; then ok "sh -n + shellcheck: $name's command"; else fail "shell snippet $name"; echo "${out:-}"; fi
      done
    fi
  fi

  # --- The systemd unit. ------------------------------------------------------------------------------
  if command -v systemd-analyze >/dev/null; then
    # The binary is not installed here: verify the unit with a stand-in.
    sed 's#/usr/local/bin/simplysync-relay#/bin/true#' deploy/simplysync-relay.service >"$work/simplysync-relay.service"
    out="$(systemd-analyze verify --man=no "$work/simplysync-relay.service" 2>&1 | grep -F 'simplysync-relay.service' || true)"
    if [ -z "$out" ]; then ok "systemd-analyze verify deploy/simplysync-relay.service"; else fail "systemd-analyze verify: $out"; fi
  else
    echo "skip  systemd-analyze not installed: the unit is not verified"
  fi
}

# --- The drill: Litestream's backup of a live relay, restored by deploy/restore-drill.sh. ----------
drill_checks() {
  local bin=$1
  relay="$bin/simplysync-relay"
  cli="$bin/simplysync"
  for tool in "$relay" "$cli" litestream sqlite3 curl; do
    command -v "$tool" >/dev/null || { fail "$tool not found"; exit 1; }
  done
  s3="$(bash scripts/s3-throwaway.sh start "$work/s3")"
  curl -fsS -X PUT "$s3/drill-backups" >/dev/null
  live="$work/live/relay.sqlite"
  mark="$work/live-hwm/relay.sqlite.hwm"
  mkdir -p "$work/live-hwm" "$work/devices"   # the mark's directory, as the image and the unit make it
  DB_PATH="$live" HWM_PATH="$mark" HOST=127.0.0.1 PORT=0 COMPACTION_INTERVAL_MS=0 RUST_LOG=warn \
    "$relay" >"$work/relay.out" 2>"$work/relay.err" &
  pids+=("$!")
  for _ in $(seq 1 100); do grep -q 'listening on' "$work/relay.out" 2>/dev/null && break; sleep 0.1; done
  url="$(grep -o 'http://[0-9.:]*' "$work/relay.out" | head -1)" || { cat "$work/relay.err"; fail "the live relay did not start"; exit 1; }

  # Litestream with the kit's config. AWS_CA_BUNDLE (set on some machines) makes Litestream
  # 0.5.17 refuse to start ("unable to add custom RootCAs"); the test store is plain HTTP.
  export DB_PATH="$live" LITESTREAM_ENDPOINT="$s3" LITESTREAM_BUCKET=drill-backups LITESTREAM_PATH=relay \
    LITESTREAM_REGION=us-east-1 LITESTREAM_FORCE_PATH_STYLE=true LITESTREAM_ACCESS_KEY_ID=test LITESTREAM_SECRET_ACCESS_KEY=test
  unset AWS_CA_BUNDLE
  litestream replicate -config deploy/litestream.yml >"$work/litestream.log" 2>&1 &
  litestream_pid=$!
  pids+=("$litestream_pid")

  # Devices write through the relay: two owners, five rows.
  echo '{"schemaVersion":1,"tables":[{"name":"todos","columns":[{"name":"title","type":"text"}]}]}' >"$work/devices/schema.json"
  write() {  # write DEVICE ROW…: inserts the rows on the device, then syncs it once
    local db="$work/devices/$1.sqlite" secret="$work/devices/$1.secret" row
    shift
    [ -f "$secret" ] || "$cli" new-phrase >"$secret"
    for row in "$@"; do
      SIMPLYSYNC_SECRET="$(cat "$secret")" \
        "$cli" insert --db "$db" --schema "$work/devices/schema.json" todos "{\"id\":\"$row\",\"title\":\"$row\"}" >/dev/null
    done
    SIMPLYSYNC_SECRET="$(cat "$secret")" "$cli" sync --once --db "$db" --relay "$url" >/dev/null
  }
  live_seq() { sqlite3 "$live" "SELECT value FROM relay_meta WHERE key = 'seq';"; }
  mark_at() { [ "$(sed -n 's/.*"seq":\([0-9]*\).*/\1/p' "$mark" 2>/dev/null)" = "$1" ]; }
  wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND…
    local secs=$1 what=$2
    shift 2
    for _ in $(seq 1 $((secs * 5))); do "$@" && return 0; sleep 0.2; done
    fail "timed out after $secs s: $what"
    return 1
  }
  write phone a1 a2 a3
  write laptop b1 b2
  seq="$(live_seq)"
  if [ "$seq" = 5 ]; then ok "devices wrote 5 events to the live relay"; else fail "the live relay's seq is $seq, not 5"; fi
  replica_at() {
    rm -f "$work/probe.sqlite"
    litestream restore -config deploy/litestream.yml -o "$work/probe.sqlite" "$live" >/dev/null 2>&1 \
      && [ "$(sqlite3 "$work/probe.sqlite" "SELECT value FROM relay_meta WHERE key = 'seq';")" = "$1" ]
  }
  if wait_for 30 "Litestream's replica reaching seq $seq" replica_at "$seq"; then ok "Litestream replicated the live database (seq $seq)"; fi
  wait_for 5 "the live mark reaching seq $seq" mark_at "$seq" || true

  drill() {  # drill NAME EXPECTED-TEXT [VAR=VALUE…]: runs restore-drill.sh, which must pass and say it
    local name=$1 expect=$2
    shift 2
    cp "$mark" "$work/mark.before"
    if env LITESTREAM_CONFIG=deploy/litestream.yml LIVE_HWM_PATH="$mark" RELAY_BIN="$relay" "$@" \
      bash deploy/restore-drill.sh >"$work/drill.out" 2>&1 && grep -qF "$expect" "$work/drill.out"; then
      ok "restore drill, $name: \"$expect\""
    else
      fail "restore drill, $name (expected \"$expect\"):"
      cat "$work/drill.out"
    fi
    if cmp -s "$mark" "$work/mark.before"; then ok "the drill left the live mark as it was"; else fail "the drill changed the live mark"; fi
  }
  drill "replica level with the live relay" "keeps the epoch: devices go on from their cursors"
  sed 's/^/      /' "$work/drill.out"
  drill "without a live mark" "needs \`simplysync-relay rotate-epoch\`" LIVE_HWM_PATH=

  # Litestream stops; devices go on writing: the replica is now behind what the relay acknowledged.
  kill -TERM "$litestream_pid"
  wait "$litestream_pid" || true
  write phone a4
  seq="$(live_seq)"
  wait_for 5 "the live mark reaching seq $seq" mark_at "$seq" || true
  drill "replica behind the live relay" "gives it a new epoch"
  sed 's/^/      /' "$work/drill.out"
  epoch_now="$(curl -fsS "$url/health" | sed -n 's/.*"epoch":"\([^"]*\)".*/\1/p')"
  if [ -n "$epoch_now" ] && [ "$epoch_now" = "$(sqlite3 "$live" "SELECT value FROM relay_meta WHERE key = 'epoch';")" ]; then
    ok "the live relay kept its epoch through the drills"
  else
    fail "the live relay's epoch changed"
  fi

  if env LITESTREAM_CONFIG=deploy/litestream.yml LIVE_HWM_PATH="$mark" RELAY_BIN="$relay" LITESTREAM_PATH=nothing-here \
    bash deploy/restore-drill.sh >"$work/drill.out" 2>&1; then
    fail "the drill passed with no replica at the configured path"
  else
    if grep -q 'FAILED' "$work/drill.out"; then ok "the drill fails loudly when there is no replica"; else fail "the drill failed without saying so"; fi
  fi
}

case "${1:-}" in
"") static_checks ;;
--drill) drill_checks "${2:?--drill DIR (the directory of simplysync-relay and simplysync)}" ;;
*) echo "usage: $0 [--drill DIR]" >&2; exit 2 ;;
esac

echo "check-deploy: $passed passed, $failed failed"
if [ "$failed" -ne 0 ]; then exit 1; fi
