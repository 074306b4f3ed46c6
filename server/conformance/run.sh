#!/usr/bin/env bash
# The official MCP conformance suite (@modelcontextprotocol/conformance,
# pinned in package.json with the Node 22 it needs) against `portcullis
# serve`: the server scenarios of protocol 2026-07-28 for the methods the
# server implements (SCENARIOS below; the others test a reference server's
# fixed tools, prompts and resources, or extensions it does not offer).
# Each check must pass, or fail exactly where expected-failures.json says
# why (judge.mjs); anything else fails this script.
#
# The server runs with a stdio source (../e2e-node/test/source.mjs, on the
# TypeScript SDK: run `npm ci` in ../e2e-node first) so that it has
# resources to list and read. The suite cannot authenticate, so it talks to
# bearer-proxy.mjs, which adds a minted agent token (`portcullis tokens
# mint`, read scope) to every request.
#
# PORTCULLIS_BIN names the server binary (default: the workspace's debug
# build).
set -euo pipefail
cd "$(dirname "$0")"
BIN="${PORTCULLIS_BIN:-$PWD/../../target/debug/portcullis}"
SCENARIOS="${SCENARIOS:-tools-list resources-list sep-2164-resource-not-found caching server-stateless}"

npm ci --no-audit --no-fund >/dev/null
NODE="$PWD/node_modules/.bin/node"
SUITE="$PWD/node_modules/@modelcontextprotocol/conformance/dist/index.js"

dir="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

# Waits until FILE has a line matching PATTERN; prints the first match.
await_line() {
  for _ in $(seq 200); do
    if grep -q -m1 "$2" "$1" 2>/dev/null; then grep -m1 "$2" "$1"; return; fi
    sleep 0.1
  done
  echo "timed out waiting for $2 in $1" >&2
  cat "$1" >&2
  return 1
}

# A first start creates the database and the site; the token is minted
# while no server holds the redb file. Both starts use one port: the token's
# audience is the MCP URL, port included.
addr="127.0.0.1:$("$NODE" -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })')"
"$BIN" serve --db "$dir/p.redb" --addr "$addr" >"$dir/first.out" 2>"$dir/first.err" &
first=$!
await_line "$dir/first.out" "MCP URL" >/dev/null
kill "$first"
wait "$first" || true
token="$("$BIN" tokens mint --db "$dir/p.redb" --subject conformance |
  "$NODE" -e 'process.stdout.write(JSON.parse(require("fs").readFileSync(0, "utf8")).token)')"

source_cmd="$(command -v node) $PWD/../e2e-node/test/source.mjs ctl=conf_ resources=plain"
"$BIN" serve --db "$dir/p.redb" --addr "$addr" --source "conf=cmd:$source_cmd" \
  >"$dir/serve.out" 2>"$dir/serve.err" &
pids+=($!)
mcp="$(await_line "$dir/serve.out" "MCP URL" | awk '{print $3}')"
"$NODE" bearer-proxy.mjs "$mcp" "$token" >"$dir/proxy.out" &
pids+=($!)
port="$(await_line "$dir/proxy.out" "listening" | awk '{print $2}')"

# The suite's exit status says only whether a scenario had a failing check;
# judge.mjs weighs each check against expected-failures.json.
for scenario in $SCENARIOS; do
  "$NODE" "$SUITE" server --url "http://localhost:$port/mcp" --spec-version 2026-07-28 \
    --scenario "$scenario" --output-dir "$dir/results" || true
done
if ! "$NODE" judge.mjs "$dir/results"; then
  tail -n 40 "$dir/serve.err" >&2
  exit 1
fi
