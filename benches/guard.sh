#!/bin/sh
# CI guard for issue 12's ratio targets: a short criterion run of the JWT
# ratio benchmarks, failing when a guarded ratio misses its target by more
# than the noise margin. Ratios, not absolute times, so a slower or busier
# machine moves numerator and floor together.
#
#   benches/guard.sh            # from the repository root
#   MARGIN=0.25 benches/guard.sh   # default 0.5: see the loop at the end
#
# Each guarded ratio is held at its issue target or, while the target is not
# met yet, at the figure measured when the figures table was made (HELD
# below; raise the bar as the code improves, never lower it): a `le` bound b
# fails above b*(1+MARGIN), a `ge` bound below b/(1+MARGIN). Every line says
# whether the target itself is met. `info` ratios are printed, never enforced.
set -eu
cd "$(dirname "$0")/.."
MARGIN="${MARGIN:-0.5}"
# name and level pairs ("sign_over_floor 2.28 ..."). Empty: every guarded
# target is met by the median of the three runs in benches/runs/
# (docs/figures.md), so each ratio is held at its target itself.
HELD=""
out="$(mktemp)"
trap 'rm -f "$out"' EXIT

# One short run, judged: exit status 0 when no guarded ratio regressed.
judge() {
cargo bench --bench core -- hs256 \
    --warm-up-time 0.5 --measurement-time 2 --noplot >"$out" 2>/dev/null
grep -E '^(RATIO|TIME)' "$out"
awk -v margin="$MARGIN" -v held="$HELD" '
    BEGIN { n = split(held, h, " "); for (i = 1; i < n; i += 2) level[h[i]] = h[i + 1] + 0 }
    $1 == "RATIO" && ($4 == "le" || $4 == "ge") {
        seen++
        name = $2; value = $3 + 0; target = $5 + 0; bound = target
        if ($4 == "le") {
            met = value <= target
            if ((name in level) && level[name] > bound) bound = level[name]
            bad_now = value > bound * (1 + margin)
        } else {
            met = value >= target
            if ((name in level) && level[name] < bound) bound = level[name]
            bad_now = value < bound / (1 + margin)
        }
        printf "guard: %s = %s (target %s %s: %s; held at %s, margin %d%%)\n", name, value, $4, target, met ? "met" : "NOT met", bound, margin * 100
        if (bad_now) { printf "guard: %s regressed past its held bound\n", name; bad++ }
    }
    END {
        if (seen < 4) { print "guard: expected at least 4 guarded RATIO lines, got " seen + 0; exit 1 }
        if (bad) exit 1
        print "guard: no guarded ratio regressed"
    }' "$out"
}

# A short run on a shared machine is noisy (sign over its floor moved
# between 2.3 and 3.4 in back-to-back runs): a real regression fails every
# attempt, noise rarely fails three.
for attempt in 1 2 3; do
    if judge; then
        exit 0
    fi
    echo "guard: attempt $attempt failed"
done
exit 1
