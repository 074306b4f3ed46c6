#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the store-postgres tests and benchmarks.
#
#   store-postgres/test-cluster.sh start [--durable]   # prints the URL
#   store-postgres/test-cluster.sh stop
#   store-postgres/test-cluster.sh restart   # pg_ctl restart -m fast: every connection ends
#   store-postgres/test-cluster.sh down      # the server stops; the cluster stays
#   store-postgres/test-cluster.sh up        # and starts again
#   store-postgres/test-cluster.sh dir       # prints the cluster's directory (its CA: <dir>/ca.crt)
#
# The cluster lives in $PORTCULLIS_PG_DIR, listens on 127.0.0.1:$PORTCULLIS_PG_PORT
# only, and runs as an unprivileged user (`portcullis-pg`, created if needed)
# when started by root. By default each checkout has a cluster of its own: the
# port is 55432 plus a slot (0-499) drawn from the checkout's path, the
# directory /tmp/portcullis-pg-<port>, so two checkouts' runs on one machine
# never stop or reuse each other's cluster (`dir` prints this checkout's).
# Authentication is scram-sha-256 with a fresh random password, so the URL
# carries a secret as a real deployment's would. Without --durable the cluster
# skips fsync (the tests are about transaction semantics, not crash safety);
# benchmarks pass --durable to measure real commits.
#
# The cluster also serves TLS with a certificate for 127.0.0.1 from a
# throwaway CA at $PORTCULLIS_PG_DIR/ca.crt (see tls_files).
#
#   export PORTCULLIS_TEST_POSTGRES_URL="$(store-postgres/test-cluster.sh start)"
#   cargo test -p portcullis --test main postgres
#   store-postgres/test-cluster.sh stop
set -euo pipefail

checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
slot=$(( $(printf %s "$checkout" | cksum | cut -d' ' -f1) % 500 ))
port="${PORTCULLIS_PG_PORT:-$((55432 + slot))}"
dir="${PORTCULLIS_PG_DIR:-/tmp/portcullis-pg-$port}"
os_user="${PORTCULLIS_PG_OS_USER:-portcullis-pg}"

bin="${PORTCULLIS_PG_BIN:-}"
if [[ -z "$bin" ]]; then
    if command -v pg_config >/dev/null && [[ -x "$(pg_config --bindir)/initdb" ]]; then
        bin="$(pg_config --bindir)"
    else
        bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
    fi
fi
if [[ -z "$bin" || ! -x "$bin/initdb" ]]; then
    echo "test-cluster.sh: no PostgreSQL server binaries found (apt-get install postgresql)" >&2
    exit 1
fi

# Runs a command as the cluster's owner.
as_owner() {
    if [[ "$(id -u)" -eq 0 ]]; then
        setpriv --reuid="$os_user" --regid="$os_user" --init-groups --reset-env -- "$@"
    else
        "$@"
    fi
}

# A throwaway certificate authority and a server certificate for 127.0.0.1
# and localhost signed by it, so that TLS (sslmode=require|verify-full) can be
# tested: the CA is $dir/ca.crt, the server's key and certificate go where
# PostgreSQL looks for them (server.key, server.crt in the data directory).
# Plain connections keep working (ssl=on allows TLS, it does not force it).
tls_files() {
    local t="$dir/tls"
    mkdir -p "$t"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 7 \
        -subj "/CN=portcullis test CA" -keyout "$t/ca.key" -out "$dir/ca.crt" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -subj "/CN=127.0.0.1" -keyout "$t/server.key" -out "$t/server.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n' >"$t/ext"
    openssl x509 -req -in "$t/server.csr" -CA "$dir/ca.crt" -CAkey "$t/ca.key" \
        -CAserial "$t/ca.srl" -CAcreateserial -days 7 -extfile "$t/ext" \
        -out "$t/server.crt" 2>/dev/null
    install -m 600 "$t/server.key" "$dir/data/server.key"
    install -m 644 "$t/server.crt" "$dir/data/server.crt"
    [[ "$(id -u)" -eq 0 ]] && chown "$os_user:$os_user" "$dir/data/server.key" "$dir/data/server.crt"
    rm -rf "$t"
    chmod 644 "$dir/ca.crt"
}

start() {
    local pg_opts="-c listen_addresses=127.0.0.1 -c port=$port -c max_connections=300"
    pg_opts+=" -c unix_socket_directories=$dir -c shared_buffers=128MB"
    if [[ "${1:-}" != "--durable" ]]; then
        pg_opts+=" -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    fi
    if [[ "$(id -u)" -eq 0 ]] && ! id "$os_user" >/dev/null 2>&1; then
        useradd --system --no-create-home --shell /usr/sbin/nologin "$os_user"
    fi
    if [[ -e "$dir" ]]; then
        echo "test-cluster.sh: $dir exists; run '$0 stop' first" >&2
        exit 1
    fi
    mkdir -p "$dir"
    chmod 700 "$dir"
    [[ "$(id -u)" -eq 0 ]] && chown "$os_user:$os_user" "$dir"
    local password
    password="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
    local pwfile="$dir/pwfile"
    as_owner bash -c "umask 077; printf '%s\n' '$password' > '$pwfile'"
    as_owner "$bin/initdb" -D "$dir/data" -U portcullis --pwfile="$pwfile" \
        --auth=scram-sha-256 -E UTF8 --locale=C >"$dir/initdb.log" 2>&1
    rm -f "$pwfile"
    if command -v openssl >/dev/null; then
        tls_files
        pg_opts+=" -c ssl=on"
    fi
    printf '%s\n' "$pg_opts" >"$dir/pg_opts"
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -o "$pg_opts" -w -t 60 start \
        >/dev/null
    as_owner env PGPASSWORD="$password" "$bin/psql" -h 127.0.0.1 -p "$port" -U portcullis \
        -d postgres -qAt -c 'CREATE DATABASE portcullis' >/dev/null
    echo "postgres://portcullis:$password@127.0.0.1:$port/portcullis"
}

stop() {
    if [[ -d "$dir/data" ]]; then
        as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
    fi
    rm -rf "$dir"
}

# The server of a started cluster: down (fast shutdown, data kept), up
# again with the options it started with, or both (a restart).
down() {
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
}

up() {
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -o "$(cat "$dir/pg_opts")" \
        -w -t 60 start >/dev/null
}

case "${1:-}" in
    start) start "${2:-}" ;;
    stop) stop ;;
    restart)
        as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -o "$(cat "$dir/pg_opts")" \
            -m fast -w -t 60 restart >/dev/null
        ;;
    down) down ;;
    up) up ;;
    dir) echo "$dir" ;;
    *)
        echo "usage: $0 start [--durable] | stop | restart | down | up | dir" >&2
        exit 2
        ;;
esac
