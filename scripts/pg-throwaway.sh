#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests, on a free loopback port, in a directory of its own.
#   bash scripts/pg-throwaway.sh start DIR   # prints postgres://postgres@127.0.0.1:PORT/postgres
#   bash scripts/pg-throwaway.sh stop DIR    # stops it and removes DIR
# Trust authentication on loopback only; fsync stays on (tests check durability, not speed).
set -Eeuo pipefail
cmd="${1:?start or stop}"
dir="${2:?a directory}"
bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
[ -x "$bin/pg_ctl" ] || { echo "PostgreSQL server binaries not found (run scripts/setup.sh)" >&2; exit 1; }
# initdb refuses to run as root: run the server as the 'postgres' system user then.
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

case "$cmd" in
start)
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then
    chown postgres "$dir"
    runuser -u postgres -- test -w "$dir" \
      || { echo "the postgres user cannot reach $dir: give it a world-traversable parent (chmod 755)" >&2; exit 1; }
  fi
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  as_pg "$bin/initdb" -D "$dir/data" --auth=trust -U postgres -E UTF8 >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
    -o "-p $port -k $dir -h 127.0.0.1 -c max_connections=300 -c shared_buffers=64MB" start >/dev/null \
    || { cat "$dir/server.log" >&2; exit 1; }
  echo "postgres://postgres@127.0.0.1:$port/postgres"
  ;;
stop)
  if [ -d "$dir/data" ]; then
    as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
  ;;
*)
  echo "usage: $0 start|stop DIR" >&2
  exit 2
  ;;
esac
