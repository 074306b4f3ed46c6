#!/usr/bin/env bash
# benches/peers/scale.sh: the HTTP path at 10 000 and at 1 000 000 grants
# (issue 42, item 3: rotation and the bearer-checked call within 1.5×).
#
#   bash benches/peers/scale.sh                 # 3 alternating rounds, 5 s per load
#   SCALE_LARGE=200000 bash benches/peers/scale.sh --secs 2
#
# 1. Builds `portcullis serve` (release, unless PORTCULLIS_BIN names one),
#    the harness (benches/peers/harness) and portcullis-axum's
#    `seed_grants` example.
# 2. Seeds two redb databases once, by the real flow (consent, code,
#    exchange per grant): SCALE_SMALL grants (default 10 000) and
#    SCALE_LARGE (default 1 000 000), under <target>/peers-work/seed-<n>/
#    (kept for the next run: about 2.2 KB per grant on disk).
# 3. Alternates the two sizes for SCALE_ROUNDS rounds (default 3): each
#    round starts `portcullis serve` on a fresh copy of each database (on
#    disk, durable commits) and runs the harness's `rotate32` and `bearer`
#    loads against it; the loads' own 32 users are made over HTTP beside
#    the population.
# 4. Prints each round's figures, the medians, and one
#    `RATIO scale_http_<load>_large_over_small <x>` line per load and
#    figure (server CPU per request; requests per second as small ÷ large),
#    where at most 1.5 is the target.
#
# Options after the command go to the harness (e.g. `--secs 2`).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
mkdir -p "$target"
target="$(cd "$target" && pwd)"
small="${SCALE_SMALL:-10000}"
large="${SCALE_LARGE:-1000000}"
rounds="${SCALE_ROUNDS:-3}"
work="$target/peers-work"

step() { printf '==> %s\n' "$*" >&2; }

if [ -z "${PORTCULLIS_BIN:-}" ]; then
  step "cargo build --release -p portcullis-server"
  (cd "$root" && cargo build --release -p portcullis-server --target-dir "$target" >&2)
  PORTCULLIS_BIN="$target/release/portcullis"
fi
step "cargo build --release -p portcullis-axum --example seed_grants"
(cd "$root" && cargo build --release -p portcullis-axum --example seed_grants --target-dir "$target" >&2)
step "cargo build --release --locked (benches/peers/harness)"
cargo build --release --locked --manifest-path "$here/harness/Cargo.toml" --target-dir "$target" >&2

# A database per size, seeded once: the stamp names the count it holds.
seed() {
  local n=$1 dir="$work/seed-$1"
  if [ "$(cat "$dir/count" 2>/dev/null)" != "$n" ]; then
    step "seeding $n grants"
    rm -rf "$dir" && mkdir -p "$dir"
    "$target/release/examples/seed_grants" "$dir/portcullis.redb" "$n" >&2
    echo "$n" > "$dir/count"
  fi
  echo "$dir/portcullis.redb"
}
small_db="$(seed "$small")"
large_db="$(seed "$large")"

out="$work/scale-$$.txt"
: > "$out"
for round in $(seq 1 "$rounds"); do
  for size in small large; do
    db="$small_db"; [ "$size" = large ] && db="$large_db"
    step "round $round of $rounds: $size (${db%/portcullis.redb})"
    "$target/release/peers" \
      --portcullis "$PORTCULLIS_BIN" --floor "$target/release/floor" \
      --node "${NODE:-node}" --peers-dir "$here" --work "$work" \
      --runs 1 --loads rotate32,bearer --targets pc-disk --seed-db "$db" "$@" 2>&1 |
      awk -v size="$size" -v round="$round" \
        '$2 == "pc-disk" && $4 == "req/s" { print size, round, $1, $3, $5, $8; fflush() }' |
      tee -a "$out"
  done
done

# Medians per size and load, then the ratios.
awk -v small="$small" -v large="$large" '
  function median(list,   n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  { rps[$1, $3] = rps[$1, $3] " " $4; cpu[$1, $3] = cpu[$1, $3] " " $5; sw[$1, $3] = sw[$1, $3] " " $6; loads[$3] = 1 }
  END {
    printf "\n| load | grants | req/s | server CPU µs/req | context switches/req |\n|---|---:|---:|---:|---:|\n"
    for (l in loads) for (s = 0; s < 2; s++) {
      size = s ? "large" : "small"; n = s ? large : small
      printf "| %s | %d | %.0f | %.1f | %.2f |\n", l, n, median(rps[size, l]), median(cpu[size, l]), median(sw[size, l])
    }
    print ""
    for (l in loads) {
      printf "RATIO scale_http_%s_cpu_large_over_small %.2f\n", l, median(cpu["large", l]) / median(cpu["small", l])
      printf "RATIO scale_http_%s_rps_small_over_large %.2f\n", l, median(rps["small", l]) / median(rps["large", l])
    }
  }' "$out"
