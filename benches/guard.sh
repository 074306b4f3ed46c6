#!/bin/sh
# CI guard for issue 12's ratio targets: a short criterion run of the JWT
# ratio benchmarks, failing when a guarded ratio misses its target by more
# than the noise margin. Ratios, not absolute times, so a slower or busier
# machine moves numerator and floor together.
#
#   benches/guard.sh            # from the repository root
#   MARGIN=0.25 benches/guard.sh
#
# A `le` target t fails above t*(1+MARGIN); a `ge` target fails below
# t/(1+MARGIN). `info` ratios are printed, never enforced.
set -eu
cd "$(dirname "$0")/.."
MARGIN="${MARGIN:-0.25}"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
cargo bench --bench core -- hs256 \
    --warm-up-time 0.5 --measurement-time 1 --noplot >"$out" 2>/dev/null
grep -E '^(RATIO|TIME)' "$out"
awk -v margin="$MARGIN" '
    $1 == "RATIO" { seen++ }
    $1 == "RATIO" && $4 == "le" && $3 > $5 * (1 + margin) { printf "guard: %s = %s, target <= %s (+%d%% margin)\n", $2, $3, $5, margin * 100; bad++ }
    $1 == "RATIO" && $4 == "ge" && $3 < $5 / (1 + margin) { printf "guard: %s = %s, target >= %s (-%d%% margin)\n", $2, $3, $5, margin * 100; bad++ }
    END {
        if (seen < 4) { print "guard: expected at least 4 RATIO lines, got " seen + 0; exit 1 }
        if (bad) exit 1
        print "guard: every ratio within its target and margin"
    }' "$out"
