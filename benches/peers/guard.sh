#!/usr/bin/env bash
# CI guard for issue 42: a short run of the peer comparison
# (benches/peers/run.sh --quick on the rotation, bearer and metadata loads),
# failing only when Portcullis loses a wide margin over node-oidc-provider
# or the request hand-offs come back. Ratios, measured side by side in the
# same run, not absolute rates: a slower or busier machine moves both
# servers together. (benches/guard.sh does the same for the core in
# process.)
#
#   bash benches/peers/guard.sh        # from anywhere; about 2 min on 2 cores
#
# Each guarded line: the name printed by the harness, `ge` or `le`, the
# bound it fails past, and the issue's target (`-`: none). The bounds are
# wide on purpose, for a 1-second run on a shared machine: about half of
# each ratio measured when this guard was written (docs/figures.md,
# "Portcullis against its peers over HTTP": full and quick runs on a loaded
# 2-core machine agree within about 20 %), and about twice each switch
# count. The rate on one grant, a chain of round trips, swings most on a
# busy machine (3.4 to 13.9 against node-oidc-provider) and is held at 1.5
# only. Raise the bounds as the work of issue 42 lands; never lower them to
# make a change pass (rotate1.pc-tmpfs switches: 16 until a lone write
# committed on the request's own thread, 5.05 before and 1.98 after in the
# same loaded-machine conditions, now held at 4). Every line also says whether the issue's target
# itself is met: the quick mode is too short to judge that, the full runs
# of docs/figures.md do.
set -euo pipefail
cd "$(dirname "$0")/../.."

GUARDED="
RATIO    rotate32.pc-disk.rps_vs_oidc   ge 3    5
RATIO    rotate32.pc-disk.cpu_vs_oidc   ge 3    -
RATIO    rotate1.pc-tmpfs.rps_vs_oidc   ge 1.5  5
RATIO    rotate1.pc-tmpfs.cpu_vs_oidc   ge 2.5  -
RATIO    bearer.pc-disk.cpu_vs_oidc     ge 2.5  10
RATIO    bearer.pc-disk.rps_vs_oidc     ge 1.5  -
RATIO    metadata.pc-disk.cpu_vs_oidc   ge 2.5  8
SWITCHES rotate32.pc-disk               le 15   2
SWITCHES rotate1.pc-tmpfs               le 4    2
SWITCHES bearer.pc-disk                 le 1.5  -
"
# Printed beside them, never enforced (issue 42's floor targets).
INFO="
RATIO    bearer.pc-disk.cpu_over_floor   le 2.5
RATIO    metadata.pc-disk.cpu_over_floor le 1.5
"

out="$(mktemp)"
err="$(mktemp)"
trap 'rm -f "$out" "$err"' EXIT

# One short run, judged: exit status 0 when no guarded line failed.
judge() {
  # The SDK is left out: nothing here is guarded against it.
  if ! bash benches/peers/run.sh --quick --loads rotate1,rotate32,bearer,metadata \
    --targets pc-disk,pc-tmpfs,oidc,floor >"$out" 2>"$err"; then
    tail -n 40 "$err"
    echo "guard: the peer run failed"
    return 1
  fi
  awk -v guarded="$GUARDED" -v info="$INFO" '
    BEGIN {
      n = split(guarded, lines, "\n")
      for (i = 1; i <= n; i++) {
        if (split(lines[i], f, " ") < 5) continue
        key = f[1] " " f[2]; want[key] = 1; op[key] = f[3]; bound[key] = f[4] + 0; target[key] = f[5]
      }
      n = split(info, lines, "\n")
      for (i = 1; i <= n; i++) {
        if (split(lines[i], f, " ") < 4) continue
        key = f[1] " " f[2]; shown[key] = 1; op[key] = f[3]; target[key] = f[4]
      }
    }
    ($1 == "RATIO" || $1 == "SWITCHES") {
      key = $1 " " $2; value = $3 + 0
      if (key in shown) {
        met = op[key] == "le" ? value <= target[key] + 0 : value >= target[key] + 0
        printf "guard: %s = %s (info; target %s %s: %s)\n", $2, value, op[key], target[key], met ? "met" : "NOT met"
      }
      if (!(key in want)) next
      seen[key] = 1
      bad = op[key] == "le" ? value > bound[key] : value < bound[key]
      tgt = "no target"
      if (target[key] != "-") {
        met = op[key] == "le" ? value <= target[key] + 0 : value >= target[key] + 0
        tgt = "target " op[key] " " target[key] ": " (met ? "met" : "NOT met")
      }
      printf "guard: %s %s = %s (fails %s %s; %s)%s\n", $1, $2, value, op[key] == "le" ? "above" : "below", bound[key], tgt, bad ? "  <-- FAILED" : ""
      if (bad) failed++
    }
    END {
      for (key in want) if (!(key in seen)) { printf "guard: %s missing from the run\n", key; failed++ }
      if (failed) exit 1
      print "guard: no guarded line failed"
    }' "$out"
}

# A short run on a shared machine is noisy: a real regression fails every
# attempt, noise rarely fails three.
for attempt in 1 2 3; do
  if judge; then
    exit 0
  fi
  echo "guard: attempt $attempt failed"
done
exit 1
