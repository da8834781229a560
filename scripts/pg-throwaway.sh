#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests, on a free loopback port, in a directory of its own.
#   bash scripts/pg-throwaway.sh start DIR       # prints postgres://postgres@127.0.0.1:PORT/postgres
#   bash scripts/pg-throwaway.sh start-tls DIR   # prints postgres://postgres@localhost:PORT/postgres
#   bash scripts/pg-throwaway.sh stop DIR        # stops either kind and removes DIR
# Trust authentication on loopback only; fsync stays on (tests check durability, not speed).
#
# start-tls: the server speaks TLS only (managed PostgreSQL services require it). It gets a
# certificate for localhost, 127.0.0.1 and ::1 from a CA made for it, with openssl, on the spot:
#   DIR/ca.pem        that CA's certificate: sslmode=verify-full&sslrootcert=DIR/ca.pem verifies
#   DIR/other-ca.pem  a CA that signed nothing here: verification against it must fail
# pg_hba.conf refuses TCP connections without TLS (hostnossl … reject); the Unix socket in DIR
# stays open, without TLS, for administration (psql -h DIR -p PORT -U postgres).
set -Eeuo pipefail
cmd="${1:?start, start-tls or stop}"
dir="${2:?a directory}"
bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
[ -x "$bin/pg_ctl" ] || { echo "PostgreSQL server binaries not found (run scripts/setup.sh)" >&2; exit 1; }
# initdb refuses to run as root: run the server as the 'postgres' system user then.
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

# Creates the cluster in DIR/data; sets $port.
init_cluster() {
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then
    chown postgres "$dir"
    runuser -u postgres -- test -w "$dir" \
      || { echo "the postgres user cannot reach $dir: give it a world-traversable parent (chmod 755)" >&2; exit 1; }
  fi
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  as_pg "$bin/initdb" -D "$dir/data" --auth=trust -U postgres -E UTF8 >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
}

start_cluster() {
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
    -o "-p $port -k $dir -h 127.0.0.1 -c max_connections=300 -c shared_buffers=64MB" start >/dev/null \
    || { cat "$dir/server.log" >&2; exit 1; }
}

# A self-signed CA: make_ca NAME writes DIR/tls/NAME.key and DIR/tls/NAME.pem.
make_ca() {
  local t="$dir/tls"
  cat >"$t/$1.cnf" <<CNF
[req]
distinguished_name = dn
prompt = no
x509_extensions = ca
[dn]
CN = SimplySync throwaway test CA ($1)
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
CNF
  openssl req -x509 -new -nodes -config "$t/$1.cnf" -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$t/$1.key" -out "$t/$1.pem" -days 30 2>>"$t/openssl.log" \
    || { cat "$t/openssl.log" >&2; exit 1; }
}

# The CA, a second CA, and the server's key and certificate (signed by the first).
make_certificates() {
  command -v openssl >/dev/null || { echo "openssl not found (apt-get install openssl)" >&2; exit 1; }
  local t="$dir/tls"
  mkdir -p "$t"
  chmod 755 "$t"
  make_ca ca
  make_ca other-ca
  cat >"$t/server.ext" <<EXT
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1, IP:::1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
EXT
  openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -subj "/CN=localhost" \
    -keyout "$t/server.key" -out "$t/server.csr" 2>>"$t/openssl.log" \
    || { cat "$t/openssl.log" >&2; exit 1; }
  openssl x509 -req -in "$t/server.csr" -CA "$t/ca.pem" -CAkey "$t/ca.key" -CAcreateserial \
    -CAserial "$t/ca.srl" -days 30 -extfile "$t/server.ext" -out "$t/server.crt" 2>>"$t/openssl.log" \
    || { cat "$t/openssl.log" >&2; exit 1; }
  # PostgreSQL refuses a key that others can read; it must belong to the server's user.
  chmod 600 "$t/server.key" "$t/ca.key" "$t/other-ca.key"
  if [ "$(id -u)" = 0 ]; then chown postgres "$t/server.key" "$t/server.crt"; fi
  cp "$t/ca.pem" "$dir/ca.pem"
  cp "$t/other-ca.pem" "$dir/other-ca.pem"
  chmod 644 "$dir/ca.pem" "$dir/other-ca.pem" "$t/server.crt"
}

case "$cmd" in
start)
  init_cluster
  start_cluster
  echo "postgres://postgres@127.0.0.1:$port/postgres"
  ;;
start-tls)
  init_cluster
  make_certificates
  # Appending and truncating keep the files' owner (the server's user).
  cat >>"$dir/data/postgresql.conf" <<CONF

# pg-throwaway.sh start-tls
ssl = on
ssl_cert_file = '$dir/tls/server.crt'
ssl_key_file = '$dir/tls/server.key'
CONF
  cat >"$dir/data/pg_hba.conf" <<HBA
# pg-throwaway.sh start-tls: TLS on TCP or nothing; the Unix socket for administration.
local     all all              trust
hostssl   all all 127.0.0.1/32 trust
hostssl   all all ::1/128      trust
hostnossl all all 127.0.0.1/32 reject
hostnossl all all ::1/128      reject
HBA
  start_cluster
  echo "postgres://postgres@localhost:$port/postgres"
  ;;
stop)
  if [ -d "$dir/data" ]; then
    as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
  ;;
*)
  echo "usage: $0 start|start-tls|stop DIR" >&2
  exit 2
  ;;
esac
