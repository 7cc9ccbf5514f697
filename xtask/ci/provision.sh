#!/usr/bin/env bash
# What `cargo xtask ci` needs, provisioned when missing, then the command it is
# given (`provision.sh CMD ARGS...`), run in that environment. The servers it
# starts are stopped, and their directories removed, when it exits.
#
# Installs use Debian's packages (apt-get, as root) and crates.io (cargo
# install --locked, pinned versions). Without root, a missing package is one
# line naming the command that installs it. EFFECT_CI_PG_PORT,
# EFFECT_CI_PGBOUNCER_PORT and EFFECT_CI_PYTHON_VENV move the servers and the
# venv on a shared machine.
set -euo pipefail
cd "$(dirname "$0")/../.."

# What to provision: a comma-separated list of parts (EFFECT_CI_PROVISION,
# default all): tools (cargo-deny, cargo-hack), postgres (the server with TLS
# and PgBouncer), python, fiu, browser (chromium for the console's tests),
# promtool, multihost (iproute2, iptables). A part left out is not installed,
# started or required, so its tests skip.
PARTS=${EFFECT_CI_PROVISION:-tools,postgres,python,fiu,browser,promtool,multihost}
wants() { case ",$PARTS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# Cleanups run in reverse order on exit, whatever the exit status.
CLEANUPS=()
cleanup() {
    local i
    for ((i = ${#CLEANUPS[@]} - 1; i >= 0; i--)); do
        eval "${CLEANUPS[$i]}" || true
    done
}
trap cleanup EXIT

# Installs Debian packages; without root, says which command would.
apt_install() {
    if [ "$(id -u)" != 0 ]; then
        echo "ci: missing $*; install it with: sudo apt-get install -y --no-install-recommends $*" >&2
        exit 1
    fi
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
}

# --- cargo-deny for `cargo xtask deny` ----------------------------------------
# Licenses, bans, sources and advisories are checked on every landing, so the
# tool must be there: `cargo xtask deny` fails without it. Installed from
# crates.io with its own lock file, pinned so a new release cannot change what
# CI accepts; bump the version in its own commit.
# cargo-hack (`cargo xtask hack`) checks each published crate's features.
CARGO_DENY_VERSION=0.20.2
CARGO_HACK_VERSION=0.6.46
if wants tools; then
    if ! cargo deny --version >/dev/null 2>&1; then
        echo "ci: cargo-deny not found; installing cargo-deny $CARGO_DENY_VERSION from crates.io"
        cargo install cargo-deny --locked --version "$CARGO_DENY_VERSION"
    fi
    echo "ci: using $(cargo deny --version)"
    if ! cargo hack --version >/dev/null 2>&1; then
        echo "ci: cargo-hack not found; installing cargo-hack $CARGO_HACK_VERSION from crates.io"
        cargo install cargo-hack --locked --version "$CARGO_HACK_VERSION"
    fi
    echo "ci: using $(cargo hack --version)"
fi

# --- PostgreSQL for effect-ledger-postgres -----------------------------------
# The Postgres ledger's tests need a server. Start a throwaway cluster in a
# temporary directory on a loopback port, point the tests at it, and require
# them to run (EFFECT_REQUIRE_POSTGRES=1 turns "skipped" into a failure).
# EFFECT_CI_PG_PORT moves it when 55439 is taken on a shared machine.
PG_PORT=${EFFECT_CI_PG_PORT:-55439}
if wants postgres; then

# The directory holding initdb and pg_ctl: on PATH, or Debian's versioned one.
find_pg_bin() {
    local dir
    if command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
        dirname "$(command -v pg_ctl)"
        return 0
    fi
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$dir/pg_ctl" ] && [ -x "$dir/initdb" ]; then
            echo "$dir"
            return 0
        fi
    done
    return 1
}

if ! PG_BIN=$(find_pg_bin); then
    echo "ci: PostgreSQL not found; installing Debian's postgresql package"
    apt_install postgresql
    PG_BIN=$(find_pg_bin) || { echo "ci: initdb/pg_ctl still missing after installing postgresql" >&2; exit 1; }
fi
echo "ci: using PostgreSQL from $PG_BIN ($("$PG_BIN/pg_ctl" --version))"

# initdb and postgres refuse to run as root: run them as an unprivileged user.
# The cluster lives under /tmp (not $TMPDIR, which that user may not reach).
PG_DIR=$(mktemp -d /tmp/effect-ci-postgres.XXXXXX)
if [ "$(id -u)" = 0 ]; then
    PG_OS_USER=postgres
    if ! id "$PG_OS_USER" >/dev/null 2>&1; then
        useradd --system --no-create-home --shell /bin/sh "$PG_OS_USER"
    fi
    chown "$PG_OS_USER" "$PG_DIR"
    if command -v runuser >/dev/null 2>&1; then
        as_pg() { (cd "$PG_DIR" && runuser -u "$PG_OS_USER" -- "$@"); }
    else
        as_pg() { (cd "$PG_DIR" && su -s /bin/sh "$PG_OS_USER" -c "$(printf '%q ' "$@")"); }
    fi
else
    as_pg() { (cd "$PG_DIR" && "$@"); }
fi

stop_postgres() {
    as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$PG_DIR"
}
CLEANUPS+=(stop_postgres)

# Superuser "postgres", trust authentication: the cluster listens on loopback
# only and lives for this run alone.
as_pg "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres --auth=trust \
    --encoding=UTF8 --locale=C >"$PG_DIR/initdb.log" 2>&1 ||
    { cat "$PG_DIR/initdb.log" >&2; exit 1; }

# TLS: a throwaway CA signs the server's certificate (for 127.0.0.1 and
# localhost), so the TLS tests can verify it (EFFECT_TEST_POSTGRES_TLS_CA).
# The server refuses a key file that others can read or that it does not own.
if ! command -v openssl >/dev/null 2>&1; then
    echo "ci: openssl not found; installing Debian's openssl package"
    apt_install openssl
fi
PG_TLS=$PG_DIR/tls
mkdir -p "$PG_TLS"
{
    openssl req -x509 -new -nodes -newkey rsa:2048 -days 2 -sha256 \
        -subj "/CN=effect-ledger CI test CA" \
        -keyout "$PG_TLS/ca.key" -out "$PG_TLS/ca.crt"
    openssl req -new -nodes -newkey rsa:2048 -sha256 -subj "/CN=127.0.0.1" \
        -keyout "$PG_TLS/server.key" -out "$PG_TLS/server.csr"
    printf '%s\n' "subjectAltName = IP:127.0.0.1, DNS:localhost" \
        "basicConstraints = critical, CA:FALSE" \
        "keyUsage = critical, digitalSignature, keyEncipherment" \
        "extendedKeyUsage = serverAuth" >"$PG_TLS/server.ext"
    openssl x509 -req -in "$PG_TLS/server.csr" -CA "$PG_TLS/ca.crt" -CAkey "$PG_TLS/ca.key" \
        -set_serial "0x$(openssl rand -hex 16)" -days 2 -sha256 \
        -extfile "$PG_TLS/server.ext" -out "$PG_TLS/server.crt"
} >"$PG_TLS/openssl.log" 2>&1 || { cat "$PG_TLS/openssl.log" >&2; exit 1; }
chmod 600 "$PG_TLS/server.key"
if [ "$(id -u)" = 0 ]; then
    chown "$PG_OS_USER" "$PG_TLS/server.key"
fi
cat >>"$PG_DIR/data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_DIR'
max_connections = 200
# A throwaway cluster: durability across a machine crash buys nothing here.
fsync = off
synchronous_commit = off
full_page_writes = off
ssl = on
ssl_cert_file = '$PG_TLS/server.crt'
ssl_key_file = '$PG_TLS/server.key'
EOF
if ! as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 start >/dev/null; then
    echo "ci: PostgreSQL did not start on 127.0.0.1:$PG_PORT; its log:" >&2
    cat "$PG_DIR/server.log" >&2 || true
    exit 1
fi
echo "ci: PostgreSQL listening on 127.0.0.1:$PG_PORT with TLS (data in $PG_DIR)"
export EFFECT_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
export EFFECT_TEST_POSTGRES_TLS_CA="$PG_TLS/ca.crt"
export EFFECT_REQUIRE_POSTGRES=1
# -----------------------------------------------------------------------------

# --- PgBouncer in transaction mode, for the PostgreSQL ledger ----------------
# crates/effect-ledger-postgres/tests/it/pgbouncer.rs runs the ledger through
# PgBouncer with `pool_mode = transaction` and fewer server connections than
# clients, so transactions move between server sessions.
# EFFECT_REQUIRE_PGBOUNCER=1 turns "skipped" into a failure.
# EFFECT_CI_PGBOUNCER_PORT moves it when 55449 is taken.
BOUNCER_PORT=${EFFECT_CI_PGBOUNCER_PORT:-55449}
if ! command -v pgbouncer >/dev/null 2>&1; then
    echo "ci: pgbouncer not found; installing Debian's pgbouncer package"
    apt_install pgbouncer
fi
BOUNCER_DIR=$PG_DIR/pgbouncer
mkdir -p "$BOUNCER_DIR"
printf '"postgres" ""\n' >"$BOUNCER_DIR/userlist.txt"
cat >"$BOUNCER_DIR/pgbouncer.ini" <<EOF
[databases]
* = host=127.0.0.1 port=$PG_PORT
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BOUNCER_PORT
unix_socket_dir =
auth_type = trust
auth_file = $BOUNCER_DIR/userlist.txt
pool_mode = transaction
default_pool_size = 2
max_client_conn = 200
logfile = $BOUNCER_DIR/pgbouncer.log
pidfile = $BOUNCER_DIR/pgbouncer.pid
EOF
if [ "$(id -u)" = 0 ]; then
    chown -R "$PG_OS_USER" "$BOUNCER_DIR"
fi
stop_pgbouncer() {
    if [ -f "$BOUNCER_DIR/pgbouncer.pid" ]; then
        kill "$(cat "$BOUNCER_DIR/pgbouncer.pid")" 2>/dev/null || true
    fi
}
CLEANUPS+=(stop_pgbouncer)
# PgBouncer refuses to run as root, as the server does.
if ! as_pg pgbouncer -d "$BOUNCER_DIR/pgbouncer.ini"; then
    echo "ci: PgBouncer did not start on 127.0.0.1:$BOUNCER_PORT; its log:" >&2
    cat "$BOUNCER_DIR/pgbouncer.log" >&2 || true
    exit 1
fi
echo "ci: PgBouncer (transaction pooling) listening on 127.0.0.1:$BOUNCER_PORT"
export EFFECT_TEST_PGBOUNCER_URL="postgres://postgres@127.0.0.1:$BOUNCER_PORT/postgres?sslmode=disable"
export EFFECT_REQUIRE_PGBOUNCER=1
fi
# -----------------------------------------------------------------------------

# --- Python peer for the mixed-fleet test -------------------------------------
# crates/production-agent-systems/tests/it/mixed_fleet.rs runs the Python
# package (production-agent-systems 1.0.1 from PyPI) beside a Rust worker on one
# ledger. EFFECT_REQUIRE_PYTHON=1 turns "skipped" into a failure.
# EFFECT_CI_PYTHON_VENV moves the venv (default: a fresh temporary directory).
if wants python; then
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    echo "ci: python3 with venv not found; installing Debian's python3-venv package"
    apt_install python3 python3-venv
fi
if [ -n "${EFFECT_CI_PYTHON_VENV:-}" ]; then
    PY_VENV=$EFFECT_CI_PYTHON_VENV
else
    PY_DIR=$(mktemp -d /tmp/effect-ci-python.XXXXXX)
    PY_VENV=$PY_DIR/venv
    CLEANUPS+=('rm -rf "$PY_DIR"')
fi
python3 -m venv "$PY_VENV"
"$PY_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    "production-agent-systems==1.0.1"
echo "ci: Python peer in $PY_VENV ($("$PY_VENV/bin/python" --version))"
export EFFECT_TEST_PYTHON="$PY_VENV/bin/python"
export EFFECT_REQUIRE_PYTHON=1
fi
# -----------------------------------------------------------------------------

# --- libfiu for the SQLite I/O-fault tests -----------------------------------
# crates/effect-ledger-sqlite/tests/it/io_faults.rs runs the ledger in child
# processes under `fiu-run -x` (libfiu's POSIX preload) and fails their
# open/read/write/fsync calls at seeded random points.
# EFFECT_REQUIRE_FIU=1 turns "skipped" into a failure.
if wants fiu; then
if ! command -v fiu-run >/dev/null 2>&1 || ! command -v fiu-ctrl >/dev/null 2>&1; then
    echo "ci: fiu-run not found; installing Debian's fiu-utils package"
    apt_install fiu-utils
fi
echo "ci: using libfiu's fiu-run from $(command -v fiu-run)"
export EFFECT_REQUIRE_FIU=1
fi
# -----------------------------------------------------------------------------

# --- Chromium for the operator console's browser tests ------------------------
# EFFECT_REQUIRE_BROWSER=1 turns "skipped" into a failure.
if wants browser; then
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    echo "ci: chromium or chromedriver not found; installing Debian's chromium and chromium-driver packages"
    apt_install chromium chromium-driver
fi
echo "ci: using $(chromium --version 2>/dev/null || echo chromium)"
export EFFECT_REQUIRE_BROWSER=1
fi
# -----------------------------------------------------------------------------

# --- promtool for the metrics rules and exposition checks --------------------
# EFFECT_REQUIRE_PROMTOOL=1 turns "skipped" into a failure.
if wants promtool; then
if ! command -v promtool >/dev/null 2>&1; then
    echo "ci: promtool not found; installing Debian's prometheus package"
    apt_install prometheus
fi
echo "ci: using promtool from $(command -v promtool)"
export EFFECT_REQUIRE_PROMTOOL=1
fi
# -----------------------------------------------------------------------------

# --- iproute2 and iptables for the multi-host step ---------------------------
# EFFECT_REQUIRE_MULTIHOST=1 turns "skipped" into a failure.
if wants multihost; then
if ! command -v ip >/dev/null 2>&1 || ! command -v iptables >/dev/null 2>&1; then
    echo "ci: ip or iptables not found; installing Debian's iproute2 and iptables packages"
    apt_install iproute2 iptables
fi
export EFFECT_REQUIRE_MULTIHOST=1
fi
# -----------------------------------------------------------------------------

# The command, in this environment; the cleanups run when it ends.
"$@"
