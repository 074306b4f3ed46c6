#!/usr/bin/env bash
# benches/peers: Portcullis over HTTP against the peers kept in the
# repository (issue 42), in one command from a fresh clone:
#
#   bash benches/peers/run.sh            # 3 runs, 2 s warm-up + 5 s per load (~10 min)
#   bash benches/peers/run.sh --quick    # 1 run, 1 s + 1 s per load (~50 s after the builds)
#   bash benches/peers/run.sh --loads rotate32,bearer --runs 5
#
# 1. Installs the peers at the versions package-lock.json pins (`npm ci`):
#    node-oidc-provider (oidc.mjs) and the MCP TypeScript SDK's auth router
#    (sdk.mjs), with jose and express.
# 2. Builds `portcullis serve` (release), unless PORTCULLIS_BIN names a build.
# 3. Builds the load generator and the bare hyper floor (harness/, its own
#    small workspace with its own Cargo.lock, outside the repository's build).
# 4. Runs every load against Portcullis (redb on disk, and on tmpfs where the
#    load writes), node-oidc-provider, the SDK and the floor, each server in
#    turn within a run; prints the medians, the ratios, and `RATIO` and
#    `SWITCHES` lines (benches/peers/guard.sh reads them). The servers' logs
#    and the disk database go to <target>/peers-work.
#
# Needs node (20 or later) with npm, and cargo. Options after the command go
# to the harness (see benches/peers/harness/src/main.rs). Environment:
#   PORTCULLIS_BIN        a built `portcullis` to measure instead
#   CARGO_TARGET_DIR      where to build (default <repository>/target)
#   NODE                  the node binary (default `node`)
#   PEERS_PORTCULLIS_LOG  RUST_LOG of the measured server (default `warn`:
#                         no line per request, as the peers write none)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
mkdir -p "$target"
target="$(cd "$target" && pwd)"
node="${NODE:-node}"

for tool in "$node" npm cargo; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "benches/peers: $tool not found (node with npm, and cargo, are needed)" >&2
    exit 1
  fi
done

step() { printf '==> %s\n' "$*" >&2; }

# 1. The peers. `npm ci` installs exactly the lock file (and wipes
# node_modules first); skipped when the last install was of this same lock.
stamp="$here/node_modules/.bench-peers-lock"
if ! cmp -s "$here/package-lock.json" "$stamp" 2>/dev/null; then
  step "npm ci (benches/peers)"
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error >&2)
  cp "$here/package-lock.json" "$stamp"
fi

# 2. The server under test.
if [ -z "${PORTCULLIS_BIN:-}" ]; then
  step "cargo build --release -p portcullis-server"
  (cd "$root" && cargo build --release -p portcullis-server --target-dir "$target" >&2)
  PORTCULLIS_BIN="$target/release/portcullis"
fi

# 3. The load generator and the floor.
step "cargo build --release --locked (benches/peers/harness)"
cargo build --release --locked --manifest-path "$here/harness/Cargo.toml" --target-dir "$target" >&2

# 4. The run.
step "running"
exec "$target/release/peers" \
  --portcullis "$PORTCULLIS_BIN" \
  --floor "$target/release/floor" \
  --node "$node" \
  --peers-dir "$here" \
  --work "$target/peers-work" \
  "$@"
