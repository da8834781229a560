#!/usr/bin/env bash
# restore-drill.sh — proves the relay's Litestream backup restores, without touching the live
# relay: restores the newest replica into a scratch directory, checks the copy (SQLite's
# integrity_check, the relay's counters against its tables), starts a relay on it on a free
# loopback port with a copy of the live high-water mark, checks /health, and says what a real
# restore of this replica would do to devices. Any problem fails the drill (exit 1).
#
#   docker compose -f deploy/compose.sqlite.yaml run --rm drill       # in the compose deploy
#   LITESTREAM_CONFIG=/etc/litestream.yml bash deploy/restore-drill.sh  # on a host (systemd)
#
# Settings (environment):
#   LITESTREAM_CONFIG  Litestream's config (deploy/litestream.yml); default /etc/litestream.yml.
#                      It reads its own variables (LITESTREAM_*, DB_PATH) from the environment.
#   DB_PATH            the live database's path as the config names it (the replica's key);
#                      default /var/lib/simplysync/relay.sqlite. Only read by Litestream.
#   LIVE_HWM_PATH      the live relay's high-water mark, copied (never written); default
#                      $HWM_PATH, else /var/lib/simplysync-hwm/relay.sqlite.hwm. Set it empty
#                      to drill where there is no mark (another machine): the drill then says
#                      a restore there needs `simplysync-relay rotate-epoch`.
#   DRILL_TIMESTAMP    restore the state at this time instead of the newest
#                      (RFC 3339, e.g. 2026-01-31T12:00:00Z; Litestream's -timestamp).
#   DRILL_DIR          scratch directory (default: a new one under $TMPDIR); removed at the end
#                      unless DRILL_KEEP=1.
#   DRILL_PORT         port of the drill's relay on 127.0.0.1 (default 0: any free port).
#   DRILL_START_TIMEOUT seconds the relay may take to start (default 120: a first start on
#                      a copy from an older relay version may convert its tables).
#   RELAY_BIN, LITESTREAM_BIN, SQLITE3_BIN   the programs (default: found on PATH).
set -Eeuo pipefail

say() { printf 'restore-drill: %s\n' "$*"; }
die() { printf 'restore-drill: FAILED: %s\n' "$*" >&2; exit 1; }
trap 'rc=$?; printf "restore-drill: FAILED (exit %s) at line %s: %s\n" "$rc" "$LINENO" "$BASH_COMMAND" >&2; exit 1' ERR

config="${LITESTREAM_CONFIG:-/etc/litestream.yml}"
db_path="${DB_PATH:-/var/lib/simplysync/relay.sqlite}"
live_hwm="${LIVE_HWM_PATH-${HWM_PATH:-/var/lib/simplysync-hwm/relay.sqlite.hwm}}"
relay_bin="${RELAY_BIN:-simplysync-relay}"
litestream_bin="${LITESTREAM_BIN:-litestream}"
sqlite3_bin="${SQLITE3_BIN:-sqlite3}"
port="${DRILL_PORT:-0}"
start_timeout="${DRILL_START_TIMEOUT:-120}"

for tool in "$relay_bin" "$litestream_bin" "$sqlite3_bin" curl; do
  command -v "$tool" >/dev/null || die "$tool not found (set RELAY_BIN, LITESTREAM_BIN or SQLITE3_BIN, or install it)"
done
[ -r "$config" ] || die "cannot read Litestream's config $config (set LITESTREAM_CONFIG)"

if [ -n "${DRILL_DIR:-}" ]; then
  dir="$DRILL_DIR"
  mkdir -p "$dir"
  [ -z "$(ls -A "$dir")" ] || die "DRILL_DIR $dir is not empty"
else
  dir="$(mktemp -d "${TMPDIR:-/tmp}/simplysync-drill.XXXXXX")"
fi
relay_pid=""
cleanup() {
  if [ -n "$relay_pid" ] && kill -0 "$relay_pid" 2>/dev/null; then
    kill -TERM "$relay_pid" 2>/dev/null || true
    wait "$relay_pid" 2>/dev/null || true
  fi
  if [ "${DRILL_KEEP:-0}" = 1 ]; then say "kept $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT

copy="$dir/relay.sqlite"
mark="$dir/relay.sqlite.hwm"
sql() { "$sqlite3_bin" -batch -noheader "$copy" "$@"; }

# 1. Restore the newest replica (or the one at DRILL_TIMESTAMP) into the scratch directory.
say "restoring the replica of $db_path (config $config) into $dir"
restore=(restore -config "$config" -o "$copy")
[ -z "${DRILL_TIMESTAMP:-}" ] || restore+=(-timestamp "$DRILL_TIMESTAMP")
t0=$SECONDS
"$litestream_bin" "${restore[@]}" "$db_path" >"$dir/restore.log" 2>&1 \
  || { cat "$dir/restore.log" >&2; die "litestream restore failed (no replica at the configured place, or the store refused)"; }
[ -s "$copy" ] || { cat "$dir/restore.log" >&2; die "litestream restore wrote no database"; }
say "restored $(wc -c <"$copy") bytes in $((SECONDS - t0)) s"

# 2. Check the copy: SQLite's own check, then the relay's maintained counters against its tables.
integrity="$(sql 'PRAGMA integrity_check;')"
[ "$integrity" = ok ] || die "PRAGMA integrity_check: $integrity"
say "integrity_check: ok"
meta() { sql "SELECT value FROM relay_meta WHERE key = '$1';"; }
epoch="$(meta epoch)" || die "no relay_meta table: not a relay database"
[ -n "$epoch" ] || die "no epoch in relay_meta: not a relay database"
seq="$(meta seq)"
owners="$(sql 'SELECT count(*) FROM owners;')"
closed="$(sql 'SELECT count(*) FROM owners WHERE closed_at IS NOT NULL;')"
events="$(sql 'SELECT count(*) FROM events;')"
blobs="$(sql 'SELECT count(*) FROM blobs;')"
blob_bytes="$(sql 'SELECT coalesce(sum(bytes), 0) FROM blobs;')"
say "rows: $owners owners ($closed closed), $events events, $blobs blob chunks ($blob_bytes bytes in the database)"
say "epoch $epoch, seq $seq, created $(meta created_at)"
for counter in owners events blobs; do
  kept="$(meta "$counter")"
  [ -z "$kept" ] || [ "$kept" = "${!counter}" ] \
    || die "the relay's $counter counter says $kept, its table holds ${!counter}"
done

# 3. The live high-water mark: how far the live relay got, against the copy.
rotate=no
if [ -z "$live_hwm" ]; then
  say "no live mark given: restoring this copy where the mark is lost needs \`simplysync-relay rotate-epoch\` before the relay starts (devices then re-seed)"
else
  [ -r "$live_hwm" ] || die "cannot read the live mark $live_hwm (set LIVE_HWM_PATH, or set it empty to drill without one)"
  text="$(cat "$live_hwm")"
  re='^\{"epoch":"([A-Za-z0-9_-]+)","seq":([0-9]+)\}$'
  [[ "$text" =~ $re ]] || die "the live mark $live_hwm does not parse: $text"
  mark_epoch="${BASH_REMATCH[1]}"
  mark_seq="${BASH_REMATCH[2]}"
  cp "$live_hwm" "$mark"
  say "live mark: epoch $mark_epoch, seq $mark_seq"
  [ "$mark_epoch" = "$epoch" ] \
    || die "the replica's epoch ($epoch) is not the live relay's ($mark_epoch): the replica is not of the live database (another bucket or path?), or stopped before the live relay's last epoch rotation"
  if [ "$mark_seq" -gt "$seq" ]; then
    rotate=yes
    say "the copy is $((mark_seq - seq)) seq(s) behind what the live relay acknowledged"
  else
    say "the copy is level with the live relay's mark"
  fi
fi

# 4. A relay on the copy, on loopback, with nothing of the live environment (no DATABASE_URL,
# no object store, no tokens): only the copy and the copied mark.
say "starting $relay_bin on the copy"
env -i PATH="$PATH" HOST=127.0.0.1 PORT="$port" DB_PATH="$copy" HWM_PATH="$mark" REGISTRATION=closed \
  COMPACTION_INTERVAL_MS=0 RUST_LOG=warn "$relay_bin" serve >"$dir/relay.out" 2>"$dir/relay.err" &
relay_pid=$!
url=""
for _ in $(seq 1 $((start_timeout * 10))); do
  url="$(grep -o 'http://[0-9.:]*' "$dir/relay.out" 2>/dev/null | head -1)" || true
  [ -z "$url" ] || break
  kill -0 "$relay_pid" 2>/dev/null || { cat "$dir/relay.err" >&2; die "the relay exited at start on the restored copy"; }
  sleep 0.1
done
[ -n "$url" ] || { cat "$dir/relay.err" >&2; die "the relay did not start within $start_timeout s"; }
health="$(curl -fsS --max-time 10 "$url/health")" || die "GET $url/health failed"
[[ "$health" == *'"ok":true'* ]] || die "GET /health: $health"
served_epoch="$(printf '%s' "$health" | sed -n 's/.*"epoch":"\([^"]*\)".*/\1/p')"
version="$(printf '%s' "$health" | sed -n 's/.*"version":"\([^"]*\)".*/\1/p')"
say "relay $version on the copy: $url/health ok, epoch $served_epoch"

# 5. What a restore of this replica does to devices — and the relay must agree.
if [ "$rotate" = yes ]; then
  [ "$served_epoch" != "$epoch" ] \
    || die "the copy is behind the live mark, yet the relay kept epoch $epoch: the rollback went unnoticed"
  grep -q 'new epoch' "$dir/relay.err" || die "the relay gave the copy a new epoch without logging it"
  say "a restore of this replica: the relay sees the older copy and gives it a new epoch ($served_epoch);"
  say "  every device re-seeds it (pulls from the start, then uploads what it holds), so the events"
  say "  acknowledged after the replica's last sync come back from the devices that hold them"
else
  [ "$served_epoch" = "$epoch" ] || die "the relay changed the epoch ($epoch -> $served_epoch) of a copy that is not behind the mark"
  if [ -n "$live_hwm" ]; then
    say "a restore of this replica keeps the epoch: devices go on from their cursors"
  fi
fi

kill -TERM "$relay_pid"
rc=0
wait "$relay_pid" || rc=$?
relay_pid=""
[ "$rc" -eq 0 ] || { cat "$dir/relay.err" >&2; die "the relay on the copy exited with $rc on SIGTERM"; }
say "OK: the replica restores, checks clean and serves (the live database and mark were not touched)"
