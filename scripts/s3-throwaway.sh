#!/usr/bin/env bash
# A throwaway S3-compatible server for tests (moto's server mode) on a free loopback port.
#   bash scripts/s3-throwaway.sh start DIR   # prints http://127.0.0.1:PORT
#   bash scripts/s3-throwaway.sh stop DIR
# moto comes from PyPI (scripts/setup.sh installs it into a virtualenv when python3 lacks it).
set -Eeuo pipefail
cmd="${1:?start or stop}"
dir="${2:?a directory}"
TOOLS="${SIMPLYSYNC_TOOLS:-/opt/simplysync-tools}"
case "$cmd" in
start)
  mkdir -p "$dir"
  if python3 -c 'import moto.server' 2>/dev/null; then py=python3; else py="$TOOLS/moto-venv/bin/python"; fi
  "$py" -c 'import moto.server' 2>/dev/null || { echo "moto is not installed (run scripts/setup.sh)" >&2; exit 1; }
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  nohup "$py" -m moto.server -H 127.0.0.1 -p "$port" >"$dir/moto.log" 2>&1 &
  echo $! >"$dir/moto.pid"
  up=""
  for _ in $(seq 1 150); do
    if python3 - "$port" <<'PY' 2>/dev/null; then up=1; break; fi
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=1)
PY
    kill -0 "$(cat "$dir/moto.pid")" 2>/dev/null || { cat "$dir/moto.log" >&2; exit 1; }
    sleep 0.1
  done
  [ -n "$up" ] || { echo "moto did not answer on port $port within 15 s" >&2; cat "$dir/moto.log" >&2; exit 1; }
  echo "http://127.0.0.1:$port"
  ;;
stop)
  [ -f "$dir/moto.pid" ] && kill "$(cat "$dir/moto.pid")" 2>/dev/null || true
  rm -rf "$dir"
  ;;
*)
  echo "usage: $0 start|stop DIR" >&2
  exit 2
  ;;
esac
